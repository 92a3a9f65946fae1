"""A page you can find your way in (issue 38): contents with anchors, devices folded past two, time axes in a unit
chosen from the data with no scientific notation, and the devices' own words."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SAMPLE_TRACES, shared_trace, typed_report
from tests.render.test_browser import CHROMIUM, open_in_chromium
from tests.render.test_readable_page import table_rows
from traceinsight.analysis import analyze
from traceinsight.assemble import assemble
from traceinsight.cli import main
from traceinsight.events import Profile, make_event_table
from traceinsight.findings import evaluate
from traceinsight.render import svg_charts
from traceinsight.render.chart_data import chart_run
from traceinsight.render.format import fmt_tick, tick_decimals, time_unit
from traceinsight.render.html import render_html
from traceinsight.render.wording import device_words

# A number written in scientific notation: '2e+06', '1.5e-05', '3E6'.
SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")
MS = 1_000_000


def render(trace: Path, out: Path) -> str:
    page = out / f"{trace.name}.html"
    assert main(["report", str(trace), "-o", str(page), "-q"]) == 0
    return page.read_text()


@pytest.fixture(scope="module")
def shared_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The pages of the real runs the issue names: an 8-GPU JAX run on AMD, a 4-TPU JAX run, a vLLM replay on AMD."""
    out = tmp_path_factory.mktemp("pages")
    traces = {
        "jax8": "tracelens/mi300/jax_conv_minimal_08",
        "tpu": "xprof/test_xplanes",
        "vllm": "inference/vllm_decode_full/graph_execution.json.gz",
        "h100": "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    }
    return {name: render(shared_trace(relative), out) for name, relative in traces.items()}


def chart(page: str, name: str) -> str:
    found = re.search(rf'id="chart-{name}">\s*(<svg.*?</svg>)', page, flags=re.S)
    assert found, name
    return found.group(1)


def chart_texts(svg: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", t)).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S)]


def numbers(texts: list[str]) -> list[float]:
    """The texts that are plain numbers ('1,000', '0.5': tick labels), as numbers."""
    return [float(t.replace(",", "")) for t in texts if re.fullmatch(r"-?[\d,]+(\.\d+)?", t)]


# --------------------------------------------------------------------------- the unit chooser


def test_time_unit_is_the_largest_unit_the_axis_holds_one_of() -> None:
    scale, unit = time_unit(80_000 * MS)  # the TPU step chart read "time (ms)" up to 80,000
    assert (unit, 80_000 * MS / scale) == ("s", 80)
    assert time_unit(2e9) == (1_000_000_000, "s")  # the h100 axis read "2e+06 ms"... in ns, 2e9
    assert time_unit(20_000) == (1_000, "\u00b5s")  # vLLM's gap histogram: 0.020 ms at most
    assert time_unit(999_999) == (1_000, "\u00b5s") and time_unit(1_000_000) == (1_000_000, "ms")
    assert time_unit(999) == (1, "ns") and time_unit(0) == (1, "ns")


def test_tick_labels_are_plain_numbers() -> None:
    assert [tick_decimals(step) for step in (20, 1, 0.5, 0.25, 0.2 - 0.1, 0.005)] == [0, 0, 1, 2, 1, 3]
    assert fmt_tick(2e6, 0) == "2,000,000" and fmt_tick(80_000, 0) == "80,000"
    assert fmt_tick(0.015, 3) == "0.015" and fmt_tick(-1e-12, 1) == "0.0"


# --------------------------------------------------------------------------- hand-made runs of 2 and 3 devices


def devices_page(count: int) -> str:
    """`count` devices, device d running two kernels of (d + 1) ms with a gap of 3 (d + 1) ms between them: its
    kernel time is 2 (d + 1) ms and its one gap 3 (d + 1) ms long."""
    d = np.repeat(np.arange(count), 2)
    length = (d + 1) * MS
    second = np.arange(2 * count) % 2 == 1
    start = np.where(second, length + 3 * length, 0)
    events = make_event_table(
        {
            "ts_ns": start.astype(np.int64),
            "dur_ns": length.astype(np.int64),
            "kind": ["kernel"] * len(d),
            "device": [f"GPU:{i}" for i in d],
            "stream": np.full(len(d), 7),
            "name": [f"gemm_{i}_{k % 2}" for k, i in enumerate(d)],  # each device its own top kernels
        }
    )
    analysis = analyze(Profile(events=events, inputs=[]))
    return render_html(assemble(analysis, evaluate(analysis)), analysis)


def test_three_devices_are_one_summary_row_each_and_their_detail_is_folded() -> None:
    page = devices_page(3)
    summary = re.search(r'<table id="device-summary">.*?</table>', page, flags=re.S)
    assert summary and '<th class="num">kernel time</th>' in summary.group(0)
    rows = table_rows(summary.group(0))
    header = re.findall(r"<th[^>]*>(.*?)</th>", summary.group(0))
    at = header.index("kernel time")
    assert [(r[0], r[at]) for r in rows] == [("GPU:0", "2 ms"), ("GPU:1", "4 ms"), ("GPU:2", "6 ms")]
    # The longest gaps of all devices, longest first, open; each device's list folded.
    overall = re.search(r'<table id="longest-gaps-overall">.*?</table>', page, flags=re.S)
    assert overall and [(r[0], r[3]) for r in table_rows(overall.group(0))] == [
        ("GPU:2", "9 ms"),
        ("GPU:1", "6 ms"),
        ("GPU:0", "3 ms"),
    ]
    folded = re.search(r'<details class="device-detail" id="longest-gaps-detail">.*?</details>', page, flags=re.S)
    assert folded and '<table id="longest-gaps">' in folded.group(0)
    # Three top-kernel tables (each device its own kernels): the first open, the others folded.
    kernels = re.search(r'<section id="kernels">.*?</section>', page, flags=re.S)
    assert kernels and kernels.group(0).count("<h3>Top kernels on") == 3
    assert kernels.group(0).count('<details class="device-detail"') == 2


def test_two_devices_are_as_before() -> None:
    page = devices_page(2)
    assert '<details class="device-detail"' not in page and "longest-gaps-overall" not in page
    summary = re.search(r'<table id="device-summary">.*?</table>', page, flags=re.S)
    assert summary and "kernel time" not in summary.group(0) and "span (capture)" in summary.group(0)
    assert len(table_rows(summary.group(0))) == 2


# --------------------------------------------------------------------------- contents and anchors


def assert_contents_resolve(page: str) -> list[str]:
    """Every contents link finds one element of its id, and the contents list every section, in page order."""
    nav = re.search(r'<nav id="contents"[^>]*>.*?</nav>', page, flags=re.S)
    assert nav, "no contents"
    targets = re.findall(r'<a href="#([\w-]+)">', nav.group(0))
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert targets and all(ids.count(t) == 1 for t in targets), [t for t in targets if ids.count(t) != 1]
    assert targets == re.findall(r'<section id="([\w-]+)">', page)
    ours = re.findall(r'\sid="([^"]+)"', re.sub(r"<svg.*?</svg>", "", page, flags=re.S))  # matplotlib's aside
    assert len(ours) == len(set(ours))  # every id of the page's own is unique
    assert page.index('<nav id="contents"') < page.index('<section id="bottlenecks">')  # at the top
    return targets


@pytest.mark.parametrize("sample", ["synthetic_gpu/input_bound", "torch_cpu_dataloader", "distributed/sleep_rank1"])
def test_contents_link_to_the_sections_present(sample: str, tmp_path: Path) -> None:
    targets = assert_contents_resolve(render(SAMPLE_TRACES / sample, tmp_path))
    assert targets[0] == "bottlenecks" and targets[-1] == "glossary"
    gpu = sample.startswith("synthetic_gpu")
    assert ("devices" in targets) == gpu and ("gaps" in targets) == gpu  # a CPU run has no device sections
    assert ("ranks" in targets) == (sample == "distributed/sleep_rank1")


def test_hand_made_pages_have_their_contents() -> None:
    assert "devices" in assert_contents_resolve(devices_page(3))


# --------------------------------------------------------------------------- real pages


def test_real_pages_contents_and_folded_devices(shared_pages: dict[str, str]) -> None:
    for page in shared_pages.values():
        assert_contents_resolve(page)
    jax8 = shared_pages["jax8"]
    memory = re.search(r'<section id="memory">.*?</section>', jax8, flags=re.S)
    assert memory
    folded = re.findall(r'<details class="device-detail" id="memory-detail-\d+"><summary><b>(GPU:\d)</b>', jax8)
    assert folded == [f"GPU:{i}" for i in range(8)]  # each device's memory tables folded, one each
    assert re.search(r'<details class="device-detail" id="memory-chart-detail">.*?id="chart-memory"', jax8, re.S)
    summary = re.search(r'<table id="device-summary">.*?</table>', jax8, flags=re.S)
    assert summary and len(table_rows(summary.group(0))) == 8


def test_no_scientific_notation_on_any_chart(shared_pages: dict[str, str]) -> None:
    for name, page in shared_pages.items():
        for svg in re.findall(r'<div class="chart" id="chart-[\w-]+">\s*(<svg.*?</svg>)', page, flags=re.S):
            texts = chart_texts(svg)
            assert texts and not [t for t in texts if SCIENTIFIC.search(t)], name


def test_time_axes_read_in_the_unit_of_their_data(shared_pages: dict[str, str]) -> None:
    tpu = shared_pages["tpu"]
    steps = chart_texts(chart(tpu, "steps"))
    assert "time (s)" in steps  # one step of 92.5 s: 0 to about 100 s, not 0 to 80,000 ms
    assert 60 <= max(numbers(steps)) < 1000
    assert "s after window start (the gap table's clock)" in chart_texts(chart(tpu, "timeline"))
    assert "time on the critical path (s)" in chart_texts(chart(tpu, "critical-path"))
    gaps = chart_texts(chart(shared_pages["vllm"], "gaps"))
    assert "idle time (\u00b5s)" in gaps  # 20 us of idle at most: not 0.000 - 0.020 ms
    assert all(float(v).is_integer() for v in numbers([t for t in gaps if "gap" not in t]))


def test_the_devices_own_words(shared_pages: dict[str, str]) -> None:
    tpu = shared_pages["tpu"]
    assert "TPU-Util" in chart_texts(chart(tpu, "mfu")) and "GPU-Util" not in tpu
    devices = re.search(r'<section id="devices">.*?</section>', tpu, flags=re.S)
    assert devices and "<th" in devices.group(0) and ">TPU-Util</th>" in devices.group(0)
    for name in ("jax8", "vllm"):  # AMD MI300X: by the trace's vendor (jax8), by the matched part alone (vllm)
        kernels = re.search(r'<section id="kernels">.*?</section>', shared_pages[name], flags=re.S)
        assert kernels and "<th>Matrix Cores</th>" in kernels.group(0) and "Tensor Core" not in kernels.group(0)
    kernels = re.search(r'<section id="kernels">.*?</section>', shared_pages["h100"], flags=re.S)
    assert kernels and "<th>Tensor Cores</th>" in kernels.group(0)


def test_device_words_from_what_the_trace_says() -> None:
    tpus = typed_report(devices=[{"id": "TPU:0"}, {"id": "TPU:1"}])
    assert (device_words(tpus).util, device_words(tpus).matrix_units) == ("TPU-Util", "MXUs")
    by_vendor = typed_report(devices=[{"id": "GPU:0"}], device_info=[{"id": "GPU:0", "vendor": "AMD"}])
    by_name = typed_report(devices=[{"id": "GPU:0"}], device_info=[{"id": "GPU:0", "name": "AMD Radeon Graphics"}])
    by_part = typed_report(devices=[{"id": "GPU:0"}], compute={"device": "MI250 GCD"})
    for report in (by_vendor, by_name, by_part):
        assert (device_words(report).util, device_words(report).matrix_units) == ("GPU-Util", "Matrix Cores")
    nvidia = typed_report(devices=[{"id": "GPU:0"}], device_info=[{"id": "GPU:0", "name": "NVIDIA H100 80GB HBM3"}])
    assert device_words(nvidia).matrix_units == "Tensor Cores" == device_words(typed_report()).matrix_units


def test_a_long_window_reads_in_seconds_not_2e6_ms() -> None:
    """Two 1 ms kernels 2,000 s apart: the timeline runs 0 to 2,000 s, where '{:,g}' wrote '2e+06' ms."""
    events = make_event_table(
        {
            "ts_ns": np.array([0, 2_000 * 1_000 * MS], np.int64),
            "dur_ns": np.full(2, MS, np.int64),
            "kind": ["kernel"] * 2,
            "device": ["GPU:0"] * 2,
            "stream": np.full(2, 7),
            "name": ["gemm"] * 2,
        }
    )
    svg = svg_charts.utilisation_timeline(chart_run(analyze(Profile(events=events, inputs=[]))))
    assert svg
    texts = chart_texts(svg)
    assert not [t for t in texts if SCIENTIFIC.search(t)]
    assert "s after window start (the gap table's clock)" in texts and max(numbers(texts)) == 2_000


# What overflows its box: each element of these whose content is wider than it, by its id or class.
_OVERFLOWS = (
    "<script>document.title = JSON.stringify([...document.querySelectorAll('.verdict, .card, .kv, td.name')]"
    ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.className));</script>"
)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_long_names_wrap_inside_their_box(tmp_path: Path) -> None:
    """The capture box of a TF run names ops 90 characters long without a space: it and
    every card, evidence list and name cell hold their text in the browser (a copy of the page runs a script that
    measures; the page itself runs none)."""
    page = render(shared_trace("xprof/GPU-multi-worker"), tmp_path)
    assert re.search(r'id="capture">[^<]*\S{90}', page)  # the long names are there
    measured = tmp_path / "measured.html"
    csp = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')
    measured.write_text(csp.sub("", page).replace("</body>", _OVERFLOWS + "</body>"))
    dom, _ = open_in_chromium(measured, tmp_path)
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title and json.loads(html.unescape(title.group(1))) == []
