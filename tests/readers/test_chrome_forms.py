"""Every form of Chrome-trace JSON: the array form (closing bracket optional), events without cats whose device
lines are told by their names, and legacy `torch.autograd.profiler` exports (pids written as names).

Expected figures come from the raw JSON (json.load and plain Python: device intervals merged per device, events
counted by pid and name), never from the tool; the samples are sample_traces/legacy_autograd/ (a real
`profiler_legacy` export, and the use_cuda form torch 1.7 wrote) and sample_traces/named_lines/ (a home-grown
tracer's open array).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight.cli import main
from traceinsight.errors import TraceError
from traceinsight.readers import looks_like_trace, read_trace
from traceinsight.readers.json_stream import TraceStream
from traceinsight.readers.kineto import read_kineto

LEGACY_CPU = SAMPLE_TRACES / "legacy_autograd" / "cpu_mlp" / "trace.json"
LEGACY_CUDA = SAMPLE_TRACES / "legacy_autograd" / "use_cuda_mlp" / "trace.json"
NAMED_LINES = SAMPLE_TRACES / "named_lines" / "trainer" / "trace.json"
KINETO = SAMPLE_TRACES / "synthetic_gpu" / "healthy"


def _raw_events(path: Path) -> list[dict[str, Any]]:
    """The events of an array-form file, read with json (an open array closed first)."""
    text = path.read_text().rstrip().rstrip(",")
    return json.loads(text if text.endswith("]") else text + "]")


def _report(tmp_path: Path, path: Path) -> dict[str, Any]:
    out = tmp_path / "report.json"
    assert main(["report", str(path), "-o", str(tmp_path / "report.html"), "--json", str(out), "-q"]) == 0
    return json.loads(out.read_text())


def _union_ns(intervals: list[tuple[float, float]]) -> int:
    """Total ns covered by (ts µs, dur µs) intervals, overlaps counted once."""
    total, end = 0, None
    for start, stop in sorted((round(ts * 1000), round(ts * 1000) + round(dur * 1000)) for ts, dur in intervals):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def _device_intervals_legacy(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Legacy autograd: the "CUDA functions" X events, by device (their tid)."""
    devices: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e["pid"] == "CUDA functions":
            devices[f"GPU:{e['tid']}"].append(e)
    return devices


def _device_intervals_named(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The home-grown trace: X events of the processes named "GPU n", by n."""
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    devices: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X" and names[e["pid"]].startswith("GPU "):
            devices[f"GPU:{names[e['pid']].split()[1]}"].append(e)
    return devices


@pytest.mark.parametrize(
    ("path", "device_events"), [(LEGACY_CUDA, _device_intervals_legacy), (NAMED_LINES, _device_intervals_named)]
)
def test_device_busy_time_and_kernels_match_the_raw_events(tmp_path, path, device_events):
    events = _raw_events(path)
    expected = device_events(events)
    report = _report(tmp_path, path.parent)
    devices = {d["id"]: d for d in report["devices"]}
    assert sorted(devices) == sorted(expected)
    for device, rows in expected.items():
        assert devices[device]["busy_ns"] == _union_ns([(e["ts"], e["dur"]) for e in rows])
        kernels = [e for e in rows if not e["name"].startswith("Memcpy")]
        assert devices[device]["kernels"]["count"] == len(kernels)
    assert report["totals"]["h2d_count"] == sum(e["name"] == "MemcpyHtoD" for rows in expected.values() for e in rows)


def test_named_lines_figures(tmp_path):
    """The home-grown trace's own arithmetic, spelled out: two GPUs, kernels and copies overlapping on one."""
    events = _raw_events(NAMED_LINES)
    gpu0 = _device_intervals_named(events)["GPU:0"]
    assert len(gpu0) == 4 * 6  # 4 steps x (5 kernels + 1 copy)
    assert _union_ns([(e["ts"], e["dur"]) for e in gpu0]) < round(sum(e["dur"] for e in gpu0) * 1000)  # overlap
    read = read_trace(NAMED_LINES)
    assert read.metadata["chrome_form"] == "named lines" and read.metadata["json_form"] == "array"
    assert read.warnings == Counter()  # the open array is the format's own, not a file cut short
    steps = read.events[read.events["kind"] == "step"]
    markers = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(steps["dur_ns"]) == sorted(round(e["dur"] * 1000) for e in markers)
    assert (read.events["kind"] == "sync").sum() == sum(e["name"] == "cudaDeviceSynchronize" for e in events)


def test_legacy_cpu_ops_and_steps(tmp_path):
    """A real `profiler_legacy` export (CPU only): every "CPU functions" event is a host op, the ProfilerStep
    markers the steps; no device."""
    events = [e for e in _raw_events(LEGACY_CPU) if e["ph"] == "X"]
    assert {e["pid"] for e in events} == {"CPU functions"}
    markers = {int(e["name"].split("#")[1]): round(e["dur"] * 1000) for e in events if e["name"].startswith("Profil")}
    read = read_trace(LEGACY_CPU)
    assert read.framework == "pytorch" and read.metadata["chrome_form"] == "legacy autograd" and not read.devices
    assert (read.events["kind"] == "cpu_op").sum() == len(events) - len(markers)
    report = _report(tmp_path, LEGACY_CPU.parent)
    assert {s["id"]: s["dur_ns"] for s in report["steps"]["items"]} == markers
    calls = Counter(e["name"] for e in events)
    for op in report["host_ops"]["top"]:
        assert op["calls"] == calls[op["name"]], op["name"]
    assert report["devices"] == [] and report["totals"]["kernel_count"] == 0


def test_legacy_use_cuda_ops_are_host_ops_and_device_work(tmp_path):
    events = [e for e in _raw_events(LEGACY_CUDA) if e["ph"] == "X"]
    read = read_trace(LEGACY_CUDA)
    host = read.events[read.events["device"].isna()]
    cpu = [e for e in events if e["pid"] == "CPU functions"]
    assert len(host) == len(cpu) and (read.events["kind"] == "kernel").sum() == len(events) - len(cpu)
    assert sorted(host["thread"].unique()) == sorted({e["tid"] for e in cpu})


def _rewritten(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("sample", [LEGACY_CUDA, NAMED_LINES])
def test_object_and_array_forms_give_the_same_table(tmp_path, sample):
    events = _raw_events(sample)
    body = ",\n".join(json.dumps(e) for e in events)
    forms = {
        "object.json": json.dumps({"traceEvents": events}),
        "closed.json": "[" + body + "]",
        "open.json": " [\n" + body + "\n",
        "open-comma.json": "[" + body + ",\n",
    }
    reads = {name: read_trace(_rewritten(tmp_path, name, text)) for name, text in forms.items()}
    for name, read in reads.items():
        pd.testing.assert_frame_equal(read.events, reads["object.json"].events, obj=name)
        assert read.devices.keys() == reads["object.json"].devices.keys() and read.warnings == Counter()
    assert reads["object.json"].metadata["json_form"] == "object"


def test_kineto_events_in_the_array_form_are_streamed_like_the_object_form(tmp_path):
    """A Kineto trace's events written as an array are streamed in chunks, in worker processes too, and read
    as the same events written as an object (of no other key: the array form has none)."""
    kineto = next(KINETO.glob("*.pt.trace.json*"))
    events = json.loads(gzip.decompress(kineto.read_bytes()) if kineto.suffix == ".gz" else kineto.read_bytes())[
        "traceEvents"
    ]
    obj = _rewritten(tmp_path, "obj.json", json.dumps({"traceEvents": events}))
    arr = _rewritten(tmp_path, "arr.json", json.dumps(events, indent=1)[:-1])  # without its "]"
    want = read_kineto(obj).events
    stream = TraceStream(arr, 4096)
    assert sum(len(chunk) for chunk, _ in stream) == len(events) and stream.array_form  # streamed, not decoded whole
    for jobs in (1, 2):
        got = read_kineto(arr, chunk_bytes=4096, jobs=jobs)
        pd.testing.assert_frame_equal(got.events, want)
        assert got.warnings == Counter()


def test_array_cut_inside_an_event_keeps_the_events_before_it(tmp_path):
    events = _raw_events(NAMED_LINES)
    text = "[" + ",".join(json.dumps(e) for e in events) + "]"
    cut = text.index(json.dumps(events[30])) + 20  # inside event 30
    path = _rewritten(tmp_path, "cut.json", text[:cut])
    read = read_trace(path)
    expected = [e for e in events[:30] if e["ph"] == "X"]
    assert len(read.events) == len(expected) and any(w.startswith("truncated") for w in read.warnings)


@pytest.mark.parametrize("text", ["[]", "[1, 2, 3]", '[{"foo": 1}]', '[{"foo": 1},\n', "  [  "])
def test_an_array_of_no_events_is_one_clear_error(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=r"nor an array of trace events") as info:
        read_trace(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_discovery_takes_the_samples():
    assert looks_like_trace(LEGACY_CPU) and looks_like_trace(LEGACY_CUDA) and looks_like_trace(NAMED_LINES)


# --------------------------------------------------------------------------- spans written as begin and end


def _spans(read) -> list[tuple[str, int, int]]:
    rows = read.events.sort_values(["ts_ns", "name"])
    return [(str(n), int(t), int(d)) for n, t, d in zip(rows["name"], rows["ts_ns"], rows["dur_ns"], strict=True)]


def test_begin_and_end_events_pair_by_nesting(tmp_path):
    """Duration events nest per thread; a stray end (a trace that starts inside a span) and a begin the trace ends
    inside are skipped and counted. Async events nest per process, category and name."""
    events = [
        {"name": "outer", "ph": "B", "ts": 0, "pid": 1, "tid": 1},
        {"name": "inner", "ph": "B", "ts": 10, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 20, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 50, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 5, "pid": 1, "tid": 2},  # stray: its begin is before the trace
        {"name": "later", "ph": "B", "ts": 10, "pid": 1, "tid": 2},
        {"ph": "E", "ts": 30, "pid": 1, "tid": 2},
        {"name": "open", "ph": "B", "ts": 60, "pid": 1, "tid": 2},  # the trace ends inside it
        {"name": "req1", "cat": "r", "id": 1, "ph": "b", "ts": 0, "pid": 2},
        {"name": "req2", "cat": "r", "id": 2, "ph": "b", "ts": 5, "pid": 2},
        {"name": "req1", "cat": "r", "id": 1, "ph": "e", "ts": 40, "pid": 2},
        {"name": "req2", "cat": "r", "id": 2, "ph": "e", "ts": 45, "pid": 2},
    ]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(events))
    read = read_trace(path)
    assert _spans(read) == [
        ("outer", 0, 50_000),
        ("req1", 0, 40_000),
        ("req2", 5_000, 40_000),
        ("inner", 10_000, 10_000),
        ("later", 10_000, 20_000),
    ]
    assert read.warnings["chrome: begin/end events without their other half skipped"] == 2


def _raw_pairs(events: list[dict[str, Any]]) -> list[float]:
    """The durations of begin/end pairs, by a stack per line (thread for B/E; process, category, name for b/e)."""
    stacks: dict[tuple, list[float]] = defaultdict(list)
    durations = []
    for e in sorted(events, key=lambda e: e["ts"]):
        if e.get("ph") not in ("B", "E", "b", "e"):
            continue
        line = (e.get("pid"), e.get("tid")) if e["ph"] in "BE" else (e.get("pid"), e.get("cat"), e.get("name"))
        if e["ph"] in "Bb":
            stacks[line].append(e["ts"])
        elif stacks[line]:
            durations.append(e["ts"] - stacks[line].pop())
    return durations


@pytest.mark.parametrize("trace_id", ["triton_resnet50_requests_nocat", "triton_resnet50_requests_async"])
def test_a_servers_request_spans_are_read(trace_id, tmp_path):
    """Triton's Chrome traces (cmpark0126/ml-serving-system-building, in the corpus): request spans as B/E and as
    async b/e events, no cat, no device: every span is read, with its length."""
    source = Path(__file__).resolve().parents[2] / "corpus" / "data" / f"{trace_id}.json"
    if not source.exists():
        pytest.skip(f"{source.name} not present (python -m tools.corpus --dest corpus/data re-creates it)")
    durations = _raw_pairs(json.loads(source.read_text()))
    read = read_trace(source)
    assert len(read.events) == len(durations) >= 50
    assert read.events["device"].isna().all()
    assert read.events["dur_ns"].sum() == pytest.approx(sum(durations) * 1000, rel=1e-9)
    report = _report(tmp_path, source)
    assert report["bottlenecks"] == [] and report["devices"] == []
    assert report["warnings"]["device_not_recorded"] == len(durations)  # requests alone: no CPU-only verdict


def test_host_spans_alone_are_not_called_a_cpu_only_run(tmp_path):
    """Spans with no framework op and no device call do not say whether an accelerator ran: no CPU-only verdict
    and no finding, and the report says why; a framework's CPU ops (the legacy CPU export) are a CPU-only run."""
    spans = [{"name": f"request {i}", "ph": "X", "ts": 100 * i, "dur": 60, "pid": 7, "tid": 1} for i in range(20)]
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(spans))
    report = _report(tmp_path, path)
    assert report["warnings"]["device_not_recorded"] == 20 and report["bottlenecks"] == []
    page = (tmp_path / "report.html").read_text()
    assert "CPU-only run" not in page and "No device activity recorded" in page
    legacy = _report(tmp_path, LEGACY_CPU)
    assert "device_not_recorded" not in legacy["warnings"] and "CPU-only run" in (tmp_path / "report.html").read_text()
