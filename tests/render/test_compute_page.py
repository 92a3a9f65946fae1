"""The page's "Compute efficiency" section: MFU and its factors, the kernel classes and the top ops with the JSON's
figures, the roofline with a hover per op it places; a trace without FLOPs says how to get them and claims
nothing; a device the hardware table does not know gets rates without a peak; names from a trace stay text."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markupsafe import Markup, escape

from tests.conftest import SAMPLE_TRACES, shared_trace, typed_report
from tests.render.test_readable_page import table_rows, visible_text
from traceinsight.cli import main
from traceinsight.render import svg_charts
from traceinsight.render.format import fmt_count, fmt_ns, fmt_pct, plural
from traceinsight.render.html import environment, fmt_flop, fmt_rate, inline_code, without_empty_columns
from traceinsight.result import RunReport

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
SCRIPT = "<script>document.title='pwned'</script>"


def render(trace: Path, out: Path) -> tuple[str, dict[str, Any]]:
    """The page and the JSON of `traceinsight report` on `trace`."""
    page, report = out / "r.html", out / "r.json"
    assert main(["report", str(trace), "-o", str(page), "--json", str(report), "-q"]) == 0
    return page.read_text(), json.loads(report.read_text())


def section(page: str) -> str | None:
    match = re.search(r'<section id="compute">.*?</section>', page, flags=re.S)
    return match.group(0) if match else None


def chart(fragment: str, name: str) -> str | None:
    match = re.search(rf'id="chart-{name}">(<svg.*?</svg>)', fragment, flags=re.S)
    return match.group(1) if match else None


def titles(svg: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<title>(.*?)</title>", svg, flags=re.S)]


def text(fragment: str) -> str:
    """The section's visible text, charts left out, on one line."""
    return " ".join(visible_text(re.sub(r"<svg.*?</svg>", "", fragment, flags=re.S)).split())


def table_html(fragment: str, table_id: str) -> str:
    match = re.search(rf'<table id="{table_id}">.*?</table>', fragment, flags=re.S)
    assert match, table_id
    return match.group(0)


def table(fragment: str, table_id: str) -> list[list[str]]:
    return table_rows(table_html(fragment, table_id))


def rates(row: dict[str, Any]) -> list[str]:
    """The roofline columns of a class or op row, as the page prints them."""
    achieved = [fmt_rate(row[k]) for k in ("tflops", "tbps", "intensity")]
    return [*achieved, row["bound"] or "-", fmt_pct(row["roofline_fraction"])]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    page, report = render(shared_trace(QWEN), tmp_path_factory.mktemp("qwen"))
    found = section(page)
    assert found
    return found, report["compute"]


def test_mfu_and_its_three_factors_are_the_json_figures(qwen: tuple[str, dict[str, Any]]) -> None:
    found, c = qwen
    said = text(found)
    window = plural(len(c["steps"]), "device-side step window")
    assert (
        f"MFU {fmt_pct(c['mfu'])} of the {c['device']}'s dense {c['dtype']} peak ({fmt_rate(c['peak_tflops'])} "
        f"TFLOP/s, {c['peak_source']}), over the {window}: {fmt_flop(c['flops'])} counted in "
        f"{plural(c['counted_ops'], 'op call')}, from the ops' shapes." in said
    )
    factors = [fmt_pct(c[k]) for k in ("gpu_util", "compute_share", "compute_efficiency")]
    assert "MFU = GPU-Util {} \u00d7 compute share {} \u00d7 their efficiency {}".format(*factors) in said
    svg = chart(found, "mfu")
    assert svg and svg.startswith("<svg")
    shown = titles(svg)
    assert [t.split(":")[0] for t in shown[:3]] == [
        f"{name} {f}" for name, f in zip(("GPU-Util", "compute share", "their efficiency"), factors, strict=True)
    ]
    assert shown[3] == "MFU {} = {} x {} x {}".format(fmt_pct(c["mfu"]), *factors)


def test_class_and_op_tables_are_the_json_figures(qwen: tuple[str, dict[str, Any]]) -> None:
    found, c = qwen
    classes = [
        [k["name"], fmt_count(k["count"]), fmt_ns(k["time_ns"]), fmt_pct(k["share"])]
        + [fmt_ns(k["counted_ns"]) if k["counted_ns"] else "-", *rates(k)]
        for k in c["classes"]
    ]
    shown = table(found, "compute-classes")
    assert shown == classes
    matmul = next(k for k in c["classes"] if k["name"] == "matmul")
    assert matmul["share"] > 0.2 and next(r for r in shown if r[0] == "matmul")[3] == fmt_pct(matmul["share"])
    ops = [
        [op["name"], op["op_class"], op["dtype"] or "-", fmt_count(op["calls"]), fmt_ns(op["time_ns"]), *rates(op)]
        for op in c["ops"]
    ]
    assert ops and table(found, "compute-ops") == ops


def test_roofline_has_one_hover_per_op_it_places(qwen: tuple[str, dict[str, Any]]) -> None:
    found, c = qwen
    svg = chart(found, "roofline")
    assert svg and svg.startswith("<svg")
    placed = [op for op in c["ops"] if op["flops"] > 0 and op["bytes"]]
    shown = titles(svg)
    for op in placed:
        title = f"{op['name']} ({op['op_class']}, {op['dtype']}): {fmt_rate(op['tflops'])} TFLOP/s, "
        assert sum(t.startswith(title) for t in shown) == 1, title
        assert f"{fmt_pct(op['roofline_fraction'])} of its roofline" in next(t for t in shown if t.startswith(title))
    roof = [t for t in shown if t.startswith(f"{c['device']} roofline, {c['dtype']}: ")]
    assert len(roof) == 1 and len(shown) == len(placed) + 1


@pytest.mark.parametrize("where", ["sample:synthetic_gpu/input_bound", "shared:kineto/gpu_metrics"])
def test_without_flops_the_note_and_the_classes_only(where: str, tmp_path: Path) -> None:
    kind, relative = where.split(":")
    trace = SAMPLE_TRACES / relative if kind == "sample" else shared_trace(relative)
    page, report = render(trace, tmp_path)
    c = report["compute"]
    found = section(page)
    assert c["note"] and c["mfu"] is None and found
    said = text(found)
    assert f'<p class="verdict" id="compute-note">{inline_code(c["note"])}</p>' in found  # its code as code
    assert "MFU" not in said.replace("no MFU", "") and "<svg" not in found and "TFLOP/s" not in said
    shares = [[k["name"], fmt_pct(k["share"])] for k in c["classes"]]
    assert [[row[0], row[-1]] for row in table(found, "compute-classes")] == shares


def _render_section(report: RunReport) -> str:
    drawn = {"mfu": svg_charts.mfu_chart(report), "roofline": svg_charts.roofline(report)}
    page = (
        environment()
        .get_template("_compute.html")
        .render(report=report, charts={name: Markup(svg) if svg else None for name, svg in drawn.items()})
    )
    page = without_empty_columns(page)  # as the page is
    found = section(page)
    assert found
    return found


def _op(name: str, **figures: Any) -> dict[str, Any]:
    return {
        "name": name,
        "op_class": "matmul",
        "dtype": "bf16",
        "calls": 3,
        "time_ns": 2_000_000,
        "flops": 4e11,
        "bytes": 1e9,
        "tflops": 200.0,
        "tbps": 0.5,
        "intensity": 400.0,
        "bound": None,
        "roofline_fraction": None,
        **figures,
    }


def _hand_made(device: str | None, op_name: str) -> RunReport:
    """One device, two ops (one without bytes), counted FLOPs; the peaks only where `device` is given."""
    peaks: dict[str, Any] = {"device": device, "peak_source": "data sheet", "peak_tflops": 989.5, "memory_tbps": 3.35}
    known = device is not None
    cls = {"name": "matmul", "count": 3, "time_ns": 2_000_000, "share": 0.5, "counted_ns": 2_000_000, "flops": 4e11}
    cls |= {"bytes": 1e9, "tflops": 200.0, "tbps": 0.5, "intensity": 400.0}
    cls |= {"bound": "compute" if known else None, "roofline_fraction": 0.2 if known else None}
    compute = {
        "flops_source": "shapes",
        "dtype": "bf16",
        **(peaks if known else {}),
        "counted_ops": 4,
        "not_counted": {"shapes not recorded": 2},
        "flops": 4.1e11,
        "classes": [cls],
        "ops": [
            _op(op_name, bound=cls["bound"], roofline_fraction=cls["roofline_fraction"]),
            _op("aten::conv2d", op_class="conv", bytes=None, tbps=None, intensity=None, calls=1),
        ],
        "window": "step",
        "steps": [{"id": 1, "start_ns": 0, "dur_ns": 4_000_000, "flops": 4.1e11, "mfu": 0.1 if known else None}],
        "gpu_util": 0.8,
        "compute_share": 0.625,
        **({"mfu": 0.1, "compute_efficiency": 0.2} if known else {}),
    }
    return typed_report(devices=[{"id": "GPU:0", "kernels": {"count": 3}}], compute=compute)


def test_unknown_device_gets_rates_and_no_peak_ratio() -> None:
    found = _render_section(_hand_made(None, "aten::mm"))
    said = text(found)
    assert "The device is not in the hardware table" in said and "MFU =" not in said
    assert "GPU-Util 80.0 % \u00d7 compute share 62.5 %" in said
    assert table(found, "compute-classes") == [["matmul", "3", "2 ms", "50.0 %", "2 ms", "200.0", "0.5", "400.0"]]
    assert chart(found, "mfu") is None
    roofline = chart(found, "roofline")
    assert roofline and "no roofline" in roofline and " roofline, bf16: " not in roofline
    assert len(titles(roofline)) == 1 and "1 op without bytes not placed" in roofline  # the conv has no bytes
    assert "2 op calls: shapes not recorded" in said


def test_a_hostile_op_name_is_text_in_the_table_and_the_chart() -> None:
    found = _render_section(_hand_made("H100 SXM", SCRIPT))
    assert "<script" not in found
    assert str(escape(SCRIPT)) in table_html(found, "compute-ops")
    roofline = chart(found, "roofline")
    assert roofline and any(t.startswith(f"{SCRIPT} (matmul, bf16): ") for t in titles(roofline))
    assert "MFU 10.0 % of the H100 SXM's dense bf16 peak" in text(found)
