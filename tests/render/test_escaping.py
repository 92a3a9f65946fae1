"""Hostile names from a trace: escaped everywhere in the HTML (charts' SVG included), verbatim in the JSON.

Kernel, op, host, device, step-marker and run names, and profiler error messages, are
set to payloads that would run script, break out of an attribute, end a CDATA section or
be evaluated by a template engine, if any of them reached the page unescaped.
"""

from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from tests.render.test_browser import CHROMIUM, open_in_chromium
from tools import synth
from traceinsight.cli import main
from traceinsight.readers.xplane_schema import XSpace

SCRIPT = "<script>document.title='pwned'</script>"
ATTRIBUTE = '"><img src=x onerror="document.title=\'pwned\'">'
CDATA = "]]><svg onload=alert(1)>"
TEMPLATE = "{{7*7}}{% raw %}"
RUN_NAME = '"><img src=x onerror=alert(1)> {{7*7}}'  # a folder name: anything but "/"


def _timeline(kernel: str, op: str) -> synth.GpuTimeline:
    """Three steps, each waiting for input and launching two kernels with hostile names."""
    b = synth.TimelineBuilder(seed=3)
    for step in range(1, 4):
        with b.step(step):
            b.input_wait(400_000)
            b.launch_kernel(kernel, 300_000, op=op)
            b.launch_kernel(SCRIPT, 20_000, op=TEMPLATE)
    return b.build("hostile", "names that must be escaped")


def _kineto_rank(host: str, kernel: str, op: str) -> dict[str, Any]:
    doc = _timeline(kernel, op).to_kineto()
    doc["host_name"] = host
    doc["deviceProperties"][0]["name"] = ATTRIBUTE
    return doc


@pytest.fixture(scope="module")
def kineto_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of two Kineto files with hostile host names: the devices become ``<host>/GPU:0`` in the charts."""
    run = tmp_path_factory.mktemp("kineto") / RUN_NAME
    run.mkdir()
    for i, (host, kernel) in enumerate(((SCRIPT, ATTRIBUTE), (CDATA, TEMPLATE))):
        doc = _kineto_rank(host, kernel, CDATA)
        (run / f"rank{i}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return run


@pytest.fixture(scope="module")
def inferred_steps_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No ProfilerStep markers: the repeating range (named with a payload) becomes the inferred step marker."""
    doc = _timeline(SCRIPT, CDATA).to_kineto()
    for event in doc["traceEvents"]:
        if str(event.get("name", "")).startswith("ProfilerStep#"):
            event["name"] = ATTRIBUTE
    path = tmp_path_factory.mktemp("inferred") / "steps.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def xspace_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XSpace whose host name and profiler error message are payloads."""
    space = XSpace()
    space.ParseFromString(_timeline(ATTRIBUTE, CDATA).to_xspace(host=SCRIPT))
    space.errors.append(TEMPLATE + CDATA)
    path = tmp_path_factory.mktemp("xspace") / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


def _render(path: Path, out: Path) -> tuple[str, dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    code = main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q"])
    assert code == 0
    return (out / "r.html").read_text(), json.loads((out / "r.json").read_text())


def _assert_no_raw_markup(page: str) -> None:
    """None of the payloads' markup survives anywhere in the page, SVG included."""
    for raw in ("<script", "<img", 'onerror="', "]]>", "<svg onload"):
        assert raw not in page, raw


def _svgs(page: str) -> str:
    return "".join(re.findall(r"<svg.*?</svg>", page, flags=re.S))


@pytest.fixture(scope="module")
def kineto_outputs(kineto_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    return _render(kineto_run, tmp_path_factory.mktemp("out"))


def test_kineto_names_are_escaped_in_html_and_verbatim_in_json(kineto_outputs):
    page, report = kineto_outputs
    _assert_no_raw_markup(page)
    assert report["run"] == RUN_NAME and str(escape(RUN_NAME)) in page
    assert sorted(i["host"] for i in report["inputs"]) == sorted([SCRIPT, CDATA])
    assert {d["name"] for d in report["device_info"]} == {ATTRIBUTE}
    for payload in (SCRIPT, ATTRIBUTE, CDATA, TEMPLATE):
        assert str(escape(payload)) in page, payload
    assert TEMPLATE in page  # as written: a template payload is data, never evaluated
    kernels = {k["name"] for d in report["devices"] for k in d["kernels"]["top"]}
    assert {SCRIPT, ATTRIBUTE, TEMPLATE} <= kernels  # verbatim: the JSON keeps names as the profiler wrote them


def test_device_labels_from_host_names_are_escaped_inside_the_charts(kineto_outputs):
    page, report = kineto_outputs
    assert sorted(d["id"] for d in report["devices"]) == sorted([f"{SCRIPT}/GPU:0", f"{CDATA}/GPU:0"])
    svg = _svgs(page)
    assert svg.count("<svg") >= 3
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;/GPU:0" in svg or (
        "&lt;script&gt;document.title='pwned'&lt;/script&gt;/GPU:0" in svg
    )
    assert "]]&gt;&lt;svg onload=alert(1)&gt;/GPU:0" in svg
    assert "<script" not in svg and "]]>" not in svg


def test_inferred_step_marker_and_xspace_host_and_errors_are_escaped(inferred_steps_trace, xspace_trace, tmp_path):
    page, report = _render(inferred_steps_trace, tmp_path / "inferred")
    assert report["steps"]["source"] == "inferred" and ATTRIBUTE in report["steps"]["marker"]
    _assert_no_raw_markup(page)
    assert str(escape(ATTRIBUTE)) in page
    page, report = _render(xspace_trace, tmp_path / "xspace")
    _assert_no_raw_markup(page)
    assert report["inputs"][0]["host"] == SCRIPT
    assert any(TEMPLATE + CDATA in k for k in report["warnings"])
    assert str(escape(SCRIPT)) in page and str(escape(TEMPLATE + CDATA)) in page


def test_dollar_signs_in_a_host_name_are_plain_text(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for i, host in enumerate(("node$x^$", "node2")):
        doc = _kineto_rank(host, "gemm", "aten::mm")
        (run / f"r{i}.pt.trace.json").write_text(json.dumps(doc))
    from traceinsight.render.html import render_html
    from traceinsight.workflow import analyze_path

    analyzed = analyze_path(run)
    assert "node$x^$/GPU:0" in render_html(analyzed.report, analyzed.analysis)


# --------------------------------------------------------------------------- in a browser


def _title(dom: str) -> str:
    match = re.search(r"<title>(.*?)</title>", dom, flags=re.S)
    assert match, dom[:500]
    return match.group(1)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_no_payload_runs_or_becomes_markup_in_a_browser(kineto_run, tmp_path):
    """The control page (the payloads pasted raw, no CSP) shows the check sees script run and markup appear."""
    page = tmp_path / "report.html"
    assert main(["report", str(kineto_run), "-o", str(page), "-q"]) == 0
    control = tmp_path / "control.html"
    control.write_text(f"<html><head><title>control</title></head><body>{ATTRIBUTE}{SCRIPT}</body></html>")
    control_dom, _ = open_in_chromium(control, tmp_path)
    assert _title(control_dom) == "pwned" and "<img" in control_dom
    dom, requests = open_in_chromium(page, tmp_path)
    assert _title(dom) == html.escape(f"traceinsight: {RUN_NAME}", quote=False)  # as the DOM serialises text
    assert "<img" not in dom and "<script" not in dom
    assert not re.search(r"<[^<>]*\bonerror\b", dom)  # no element got an onerror attribute
    assert requests == set()  # and nothing remote was fetched
