"""One rule, one place (issue 27): every rule fires on a hand-built trace, and a rule added as one `Rule` entry and
its check function reaches every output with nothing else edited."""

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.analysis.builders import host, kernel, launch, profile
from tests.conftest import REPO, SAMPLE_TRACES, shared_trace
from traceinsight import advice, findings
from traceinsight.analysis import Analysis, analyze
from traceinsight.analysis.step_model import Stall, fix
from traceinsight.events import DeviceInfo, Profile, make_op_table
from traceinsight.findings import RULES, STALL, Finding, Rule, find_bottlenecks
from traceinsight.render.format import markdown_text
from traceinsight.render.html import render_html
from traceinsight.render.markdown import render_markdown
from traceinsight.render.terminal import render_terminal
from traceinsight.render.trace_export import write_annotated_trace
from traceinsight.workflow import analyze_path, load_path


def _marked(i: int, t: float, dur: float) -> dict:
    return {**host("step", t, dur, f"ProfilerStep#{i}"), "step_id": i}


def _input_bound() -> Profile:
    # Two 1 ms steps: a 500 us DataLoader wait, then a 400 us kernel.
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [
            _marked(i, t, 1_000),
            host("cpu_op", t, 500, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
        ]
        rows += [launch(t + 510, 5, i + 1), kernel(t + 520, 400, corr=i + 1)]
    return profile(rows)


def _launch_bound() -> Profile:
    # Two steps of 50 kernels of 3 us, each launched by a 6 us call ending 1 us before it starts: the host sets the
    # pace, the queue is drained.
    rows = []
    for i in range(2):
        t = i * 1_000
        rows.append(_marked(i, t, 1_000))
        for j in range(50):
            start = t + 10 + 10 * j
            corr = i * 100 + j + 1
            rows += [launch(start, 6, corr), kernel(start + 7, 3, corr=corr)]
    return profile(rows)


def _host_bound() -> Profile:
    # Four 1 ms steps: 600 us of Python, then a 300 us kernel.
    rows = []
    for i in range(4):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), host("python", t, 600, "train.py(10): step")]
        rows += [launch(t + 600, 50, i + 1), kernel(t + 650, 300, corr=i + 1)]
    return profile(rows)


def _h2d_copy() -> Profile:
    rows = []
    for i in range(2):
        t = i * 1_000
        copy = {"kind": "memcpy", "ts": t + 10, "dur": 100, "device": "GPU:0", "stream": 7, "correlation": 10 + i}
        rows += [_marked(i, t, 1_000), launch(t + 5, 5, 10 + i, "cudaMemcpyAsync")]
        rows += [{**copy, "name": "Memcpy HtoD (Pageable -> Device)", "copy_kind": "h2d", "src_memory": "pageable"}]
        rows += [launch(t + 110, 5, i + 1), kernel(t + 120, 800, i + 1)]
    return profile(rows)


def _transfer_bound() -> Profile:
    # Two 1 ms steps: a 600 us H2D copy then a 100 us kernel each: copies hold 600 / 700 of the busy time.
    rows = []
    for i in range(2):
        t = i * 1_000
        copy = {"kind": "memcpy", "ts": t + 10, "dur": 600, "device": "GPU:0", "stream": 7, "correlation": 10 + i}
        rows += [_marked(i, t, 1_000), launch(t + 5, 5, 10 + i, "cudaMemcpyAsync")]
        rows += [{**copy, "name": "Memcpy HtoD (Pinned -> Device)", "copy_kind": "h2d", "src_memory": "pinned"}]
        rows += [launch(t + 610, 5, i + 1), kernel(t + 620, 100, i + 1)]
    return profile(rows)


def _d2h_sync() -> Profile:
    # Two steps: a 500 us kernel the host syncs on, then 300 us of Python before the next launch.
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 500, corr=i + 1)]
        rows += [{"kind": "sync", "ts": t + 10, "dur": 510, "name": "cudaStreamSynchronize"}]
        rows += [
            host("python", t + 520, 300, "train.py(20): log"),
            launch(t + 820, 5, 50 + i),
            kernel(t + 830, 100, 50 + i),
        ]
    return profile(rows)


def _external_wait() -> Profile:
    # A blocking copy waits 2 ms while the device runs nothing of the trace; its own copy is 10 us.
    copy = {"kind": "memcpy", "ts": 2090, "dur": 10, "device": "GPU:0", "stream": 7, "correlation": 2}
    rows = [launch(0, 5, 1), kernel(0, 100, corr=1), launch(100, 2000, 2, "hipMemcpyWithStream")]
    rows += [{**copy, "name": "Memcpy DtoH (Device -> Pageable)", "copy_kind": "d2h"}]
    rows += [launch(2100, 5, 3), kernel(2110, 100, corr=3)]
    return profile(rows)


def _low_occupancy() -> Profile:
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 950, corr=i + 1, blocks_per_sm=0.25)]
    return profile(rows)


def _fp32_compute() -> Profile:
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [
            _marked(i, t, 1_000),
            launch(t, 5, i + 1),
            kernel(t + 10, 950, corr=i + 1, name="volta_sgemm_128x64_nn"),
        ]
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", compute_capability="7.0")}
    return p


def _low_compute_efficiency() -> Profile:
    """A device busy 95 % of each step with one bf16 1024^3 GEMM (2.1 GFLOP) taking 950 us: 2.3 TFLOP/s on an H100."""
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [
            _marked(i, t, 1_000),
            {**launch(t + 1, 5, i + 1), "external_id": 100 + i},
            kernel(t + 10, 950, corr=i + 1, name="sm90_xmma_gemm_bf16bf16_bf16f32"),
        ]
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", name="NVIDIA H100 80GB HBM3")}
    p.ops = make_op_table(
        {
            "ts_ns": [1_000, 1_001_000],
            "dur_ns": [8_000, 8_000],
            "thread": [1, 1],
            "name": ["aten::mm", "aten::mm"],
            "external_id": [100, 101],
            "input_dims": [[[1024, 1024], [1024, 1024]]] * 2,
            "input_types": [["c10::BFloat16", "c10::BFloat16"]] * 2,
        }
    )
    return p


def _straggler() -> Profile:
    """Two DDP ranks (gloo, CPU) where rank 1 sleeps 30 ms in its data step: tools/capture_distributed.py."""
    return load_path(SAMPLE_TRACES / "distributed" / "sleep_rank1")[1]


def _collective_wait() -> Profile:
    """One rank (HTA's A100 control run, NCCL) whose all-reduces last from 0.1 to 20 ms: beyond the shortest of
    each size, it waits for ranks not in the trace, exposed on the device."""
    return load_path(shared_trace("hta/trace_diff"), "trace_diff/control")[1]


def _communication() -> Profile:
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [_marked(i, t, 1_000), launch(t, 5, i + 1), kernel(t + 10, 400, corr=i + 1, name="gemm_kernel")]
        rows += [launch(t + 6, 5, 20 + i), kernel(t + 420, 500, corr=20 + i, name="ncclKernel_AllReduce_RING_LL_Sum")]
    return profile(rows)


def _idle_other() -> Profile:
    # Kernels queued ahead (every launch ends before its kernel's gap begins) with 200 us gaps between them.
    rows = [_marked(0, 0, 2_000)]
    rows += [launch(j, 1, j + 1) for j in range(5)]
    rows += [kernel(10 + 400 * j, 200, corr=j + 1) for j in range(5)]
    return profile(rows)


def _warmup() -> Profile:
    rows = [host("cpu_op", 0, 30_000_000, "aten::empty_strided")]
    for i in range(3):
        start = 30_000_100 + i * 10_000
        rows += [_marked(i, start, 10_000), host("cpu_op", start + 10, 5, "aten::empty_strided")]
        rows += [launch(start + 20, 10, i + 1), kernel(start + 100, 4_000, corr=i + 1)]
    return profile(rows)


FIRES: dict[str, Callable[[], Profile]] = {
    "input_bound": _input_bound,
    "launch_bound": _launch_bound,
    "host_bound": _host_bound,
    "h2d_copy": _h2d_copy,
    "transfer_bound": _transfer_bound,
    "d2h_sync": _d2h_sync,
    "external_wait": _external_wait,
    "low_occupancy": _low_occupancy,
    "fp32_compute": _fp32_compute,
    "low_compute_efficiency": _low_compute_efficiency,
    "communication": _communication,
    "straggler": _straggler,
    "collective_wait": _collective_wait,
    "small_batch": _launch_bound,
    "idle_other": _idle_other,
    "warmup_in_window": _warmup,
}


def test_every_rule_has_a_trace_it_fires_on():
    assert set(FIRES) == {r.id for r in RULES}


@pytest.mark.parametrize("rule_id", sorted(FIRES))
def test_the_rule_fires(rule_id):
    found = {b.id: b for b in find_bottlenecks(analyze(FIRES[rule_id]()))}
    assert rule_id in found, sorted(found)
    b = found[rule_id]
    assert b.time_ns > 0 and b.recommendations and b.evidence["basis"]


def test_every_rule_is_documented():
    """Each rule has its row in the bottleneck table of docs/methodology.md."""
    methodology = (REPO / "docs" / "methodology.md").read_text()
    assert all(f"| `{r.id}` |" in methodology for r in RULES)


def test_every_stall_has_a_figure():
    model = analyze(_input_bound()).step_model
    assert set(model.stalls) == set(Stall) and all(len(v) == model.count for v in model.stalls.values())


TOY = "toy_stall"


def _toy_check(a: Analysis) -> Finding | None:
    """Half of each step's idle time, as a measured stall."""
    m = a.step_model
    return Finding(
        {"toy_idle_per_step_ns": m.mean(m.step_ns - m.device_busy_ns)},
        fix(m, idle_ns=0.5 * (m.step_ns - m.device_busy_ns)),
    )


def test_a_toy_rule_reaches_every_output(monkeypatch, tmp_path: Path):
    toy = Rule(TOY, "A toy stall", "half the idle time (a test)", _toy_check, kind=STALL)
    monkeypatch.setattr(findings, "RULES", (*RULES, toy))
    monkeypatch.setattr(advice, "TABLE", (*advice.TABLE, advice.Row(TOY, "any", "any", ("Do the toy fix.",))))
    exported = tmp_path / "timeline.json.gz"
    analyzed = analyze_path(
        SAMPLE_TRACES / "synthetic_gpu" / "input_bound",
        on_analyzed=lambda analysis, found, report, files: write_annotated_trace(analysis, found, exported),
    )
    report = analyzed.report
    (b,) = [b for b in report.bottlenecks if b.id == TOY]
    assert b.recommendations == ["Do the toy fix."] and b.projection.saving_ns > 0
    assert TOY in render_terminal(report)
    assert markdown_text(TOY) in render_markdown(report)  # escaped as every string there: toy\\_stall
    assert TOY in render_html(report, analyzed.analysis)
    with gzip.open(exported, "rt") as f:
        slices = [e for e in json.load(f)["traceEvents"] if e.get("name") == TOY]
    idle = analyzed.analysis.step_model.step_ns - analyzed.analysis.step_model.device_busy_ns
    assert sorted(s["args"]["saving_ns"] for s in slices) == sorted(np.round(0.5 * idle).astype(int).tolist())


@pytest.mark.parametrize(
    ("severity", "path_after", "dropped"),
    [
        ("low", 100_000_000, True),  # the path says the fix removes nothing
        ("low", 120_000_000, True),  # nor when it says the step grows
        ("low", 99_000_000, False),  # some of it lies on the path
        ("low", None, False),  # no path walked: the step model's word stands
        ("medium", 100_000_000, False),  # a bigger finding stays, the two figures side by side
    ],
)
def test_a_low_finding_the_critical_path_says_saves_nothing_is_not_reported(severity, path_after, dropped):
    """deepseek's communication, overlapped with compute by design: 1.9 % of the step by the step model, 0 on the
    critical path, nothing in its corpus label. Such a line would contradict itself."""
    from traceinsight.findings import _nothing_on_path
    from traceinsight.result import BottleneckProjection

    projection = BottleneckProjection(
        step_ns_before=100_000_000,
        step_ns_after=98_000_000,
        saving_ns=2_000_000,
        speedup=1.02,
        gpu_util_before=0.99,
        gpu_util_after=0.99,
        path_step_ns_after=path_after,
        path_speedup=None if path_after is None else 100_000_000 / path_after,
        basis="measured",
        assumption=None,
    )
    assert _nothing_on_path(severity, projection) is dropped
