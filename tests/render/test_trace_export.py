"""The annotated timeline (`render/trace_export.py`): exact on a hand-built run, valid Chrome-trace JSON for a real
trace of each format, its gap slices equal to the report's, and read back by `traceinsight report` with the same
device activity."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.analysis import builders as b
from tests.conftest import SAMPLE_TRACES, shared_trace
from tests.readers.test_chrome import XSPACE
from tests.readers.test_chrome import export as xprof_export  # noqa: F401  (a fixture: the XProf export of XSPACE)
from traceinsight.analysis import Analysis, analyze
from traceinsight.assemble import assemble
from traceinsight.cli import main
from traceinsight.events import InputInfo, TraceRead, merge_reads
from traceinsight.findings import evaluate
from traceinsight.render.trace_export import (
    BOTTLENECKS_TRACK,
    FINDINGS_PROCESS,
    PATH_TRACK,
    STEPS_TRACK,
    UTIL_COUNTER,
    gap_track_name,
    parse_steps,
    trace_ts,
    wait_track_name,
    write_annotated_trace,
)
from traceinsight.result import to_document
from traceinsight.workflow import load_path

# An epoch in ns that is no whole µs: a float would lose its last digits.
EPOCH_NS = 1_623_142_623_529_248_123
US = b.US


def _rows() -> list[dict[str, Any]]:
    """Two steps: 1 (100 µs) with a launch-late gap and an input wait, 2 (200 µs) with a long kernel and a copy."""
    return [
        b.host("cpu_op", 0, 100, "ProfilerStep#1"),
        b.host("cpu_op", 100, 200, "ProfilerStep#2"),
        b.host("cpu_op", 1, 3, "aten::add"),  # a framework op: not exported
        b.launch(0, 5, 1),
        b.kernel(10, 20, 1, name='gemm "a"'),
        b.launch(40, 5, 2),
        b.kernel(50, 10, 2),
        b.host("cpu_op", 60, 30, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
        b.launch(91, 2, 3),
        b.kernel(95, 5, 3),
        b.launch(100, 5, 4),
        b.kernel(110, 100, 4),
        b.launch(215, 2, 5, "cudaMemcpyAsync"),
        {
            "kind": "memcpy",
            "ts": 220,
            "dur": 10,
            "device": "GPU:0",
            "stream": 8,
            "name": "Memcpy HtoD (Pageable -> Device)",
            "bytes": 4096,
            "copy_kind": "h2d",
            "src_memory": "pageable",
            "correlation": 5,
        },
    ]


def _analyzed(rows: list[dict[str, Any]]) -> tuple[Analysis, dict[str, Any]]:
    profile = b.profile(rows)
    profile.events["ts_ns"] += EPOCH_NS
    analysis = analyze(profile)
    return analysis, evaluate(analysis)


@pytest.fixture(scope="module")
def hand_built() -> tuple[Analysis, dict[str, Any]]:
    return _analyzed(_rows())


def _load(path: Path) -> dict[str, Any]:
    """The file as JSON, numbers with a fraction as Decimal (exactly as written)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, parse_float=Decimal)


@dataclass
class Tracks:
    """An exported document by track: process and thread names, ``X`` events per (process, thread) name."""

    doc: dict[str, Any]

    def __post_init__(self) -> None:
        events = self.doc["traceEvents"]
        self.processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        self.threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
        self.slices: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        self.counters: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in events:
            if e["ph"] == "X":
                self.slices[(self.processes[e["pid"]], self.threads[(e["pid"], e["tid"])])].append(e)
            elif e["ph"] == "C":
                self.counters[self.processes[e["pid"]]].append(e)

    def track(self, thread: str) -> list[dict[str, Any]]:
        """The slices of the one thread named `thread`, in time order."""
        (found,) = [events for (_, name), events in self.slices.items() if name == thread]
        return sorted(found, key=lambda e: e["ts"])


def _ns(value: Decimal | int) -> int:
    ns = Decimal(value) * 1000
    assert ns == int(ns), f"{value} is not a whole number of ns"
    return int(ns)


def _check_chrome_trace(doc: dict[str, Any]) -> None:
    """The Trace Event Format's rules the file must keep (every process and line named by ``M`` events)."""
    assert doc["displayTimeUnit"] == "ns"
    tracks = Tracks(doc)
    for e in doc["traceEvents"]:
        assert {"ph", "ts", "pid", "tid", "name"} <= e.keys(), e
        assert 0 <= e["pid"] < 2**32 and 0 <= e["tid"] < 2**32, e  # Perfetto reads them as uint32
        assert e["ph"] in ("X", "C", "M"), e
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["args"], dict)
            assert e["pid"] in tracks.processes and (e["pid"], e["tid"]) in tracks.threads
        if e["ph"] == "C":
            assert e["pid"] in tracks.processes and all(isinstance(v, Decimal | int) for v in e["args"].values())


# --------------------------------------------------------------------------- a hand-built run, exact


def test_hand_built_run_exact(hand_built: tuple[Analysis, dict[str, Any]], tmp_path: Path) -> None:
    analysis, findings = hand_built
    path = tmp_path / "t.json"
    assert write_annotated_trace(analysis, findings, path, util_bin_ns=10 * US) == []
    doc = _load(path)
    _check_chrome_trace(doc)
    tracks = Tracks(doc)
    assert sorted(set(tracks.processes.values())) == ["/device:GPU:0", "/host:CPU", "traceinsight"]

    gaps = tracks.track(gap_track_name("GPU:0"))
    # The gaps as the ledger splits them: the 35 us gap at 60 us is 30 us of input wait, then 5 us of the host
    # getting to the next launch.
    assert [(g["name"], _ns(g["ts"]) - EPOCH_NS, _ns(g["dur"])) for g in gaps] == [
        ("host_launch", 30 * US, 20 * US),
        ("input_wait", 60 * US, 30 * US),
        ("host_launch", 90 * US, 5 * US),
        ("host_launch", 100 * US, 10 * US),
        ("host_launch", 210 * US, 10 * US),
    ]
    assert str(gaps[0]["ts"]) == "1623142623529278.123" == trace_ts(EPOCH_NS + 30 * US)
    assert gaps[1]["args"]["length_ns"] == 30 * US and gaps[1]["args"]["part"] == "input_wait"
    assert gaps[1]["args"]["host_activity"][0].startswith("enumerate(DataLoader)")

    steps = tracks.track(STEPS_TRACK)
    assert [(s["name"], _ns(s["ts"]) - EPOCH_NS, _ns(s["dur"])) for s in steps] == [
        ("step 1", 0, 100 * US),
        ("step 2", 100 * US, 200 * US),
    ]
    assert steps[0]["args"]["breakdown"]["input_wait"] == 30 * US

    # Per step, what each finding costs it (STEP_COST), costliest first so the slices nest.
    bottlenecks = [(e["name"], _ns(e["ts"]) - EPOCH_NS, _ns(e["dur"])) for e in tracks.track(BOTTLENECKS_TRACK)]
    # Step 1's host_bound: the 20 us gap at 30 us, and the 5 us of the input-wait gap (60-95 us) the host spent
    # outside its 30 us input wait, launching (the ledger's host_launch part); its idle_other: [0,10), before the
    # device's first kernel. Step 2's idle_other: [230,300), after the device's last work, in the step. (Its 10 us
    # exposed H2D copy is a low finding whose fix the critical path says removes nothing: not reported.)
    assert bottlenecks == [
        ("input_bound", 0, 30 * US),
        ("host_bound", 0, 25 * US),
        ("idle_other", 0, 10 * US),
        ("idle_other", 100 * US, 70 * US),
        ("host_bound", 100 * US, 20 * US),
    ]
    first = tracks.track(BOTTLENECKS_TRACK)[0]["args"]
    assert (first["id"], first["severity"], first["saving_ns"], first["step"]) == ("input_bound", "medium", 30 * US, 1)

    # GPU-Util per 10 µs bin, a sample where it changes, 0 after the device's last bin.
    util = [(_ns(c["ts"]) - EPOCH_NS, c["args"]["%"]) for c in tracks.counters["/device:GPU:0"]]
    assert all(c["name"] == UTIL_COUNTER for c in tracks.counters["/device:GPU:0"])
    assert util == [(t * US, Decimal(v)) for t, v in ((10, "100.0"), (30, "0.0"), (50, "100.0"), (60, "0.0"))] + [
        (t * US, Decimal(v)) for t, v in ((90, "50.0"), (100, "0.0"), (110, "100.0"), (210, "0.0"), (230, "0.0"))
    ]

    kernels = tracks.track("Stream #7")
    assert [k["name"] for k in kernels] == ['gemm "a"', "k", "k", "k"]  # names verbatim (escaped)
    assert [k["args"]["correlation_id"] for k in kernels] == [1, 2, 3, 4]
    (copy,) = tracks.track("Stream #8")
    assert copy["args"] == {"kind": "memcpy", "correlation_id": 5, "memcpy_details": "kind_src:pageable size:4096"}
    (host_thread,) = [name for (process, name) in tracks.slices if process == "/host:CPU"]
    host = tracks.track(host_thread)
    assert sorted(e["args"]["kind"] for e in host) == ["input_wait", *["runtime"] * 5, "step", "step"]
    assert [e["args"].get("step_num") for e in host if e["args"]["kind"] == "step"] == [1, 2]


def test_gzip_when_the_name_says(hand_built: tuple[Analysis, dict[str, Any]], tmp_path: Path) -> None:
    analysis, findings = hand_built
    write_annotated_trace(analysis, findings, tmp_path / "t.json.gz")
    write_annotated_trace(analysis, findings, tmp_path / "t.json")
    assert (tmp_path / "t.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert _load(tmp_path / "t.json.gz") == _load(tmp_path / "t.json")


def test_exact_timestamps() -> None:
    assert trace_ts(EPOCH_NS) == "1623142623529248.123"
    assert (trace_ts(0), trace_ts(999), trace_ts(1000), trace_ts(-1500)) == ("0.000", "0.999", "1.000", "-1.500")


def test_asked_steps_only(hand_built: tuple[Analysis, dict[str, Any]], tmp_path: Path) -> None:
    analysis, findings = hand_built
    assert write_annotated_trace(analysis, findings, tmp_path / "t.json", steps=(1, 1)) == []
    tracks = Tracks(_load(tmp_path / "t.json"))
    assert [s["name"] for s in tracks.track(STEPS_TRACK)] == ["step 1"]
    assert {e["args"]["step"] for e in tracks.track(BOTTLENECKS_TRACK)} == {1}
    ends = [_ns(e["ts"]) - EPOCH_NS for events in tracks.slices.values() for e in events]
    assert max(ends) < 100 * US  # nothing of step 2 (an event across the boundary would be kept whole)
    with pytest.raises(ValueError, match=r"no step has an id in 5\.\.6 \(the run's steps: ids 1\.\.2\)"):
        write_annotated_trace(analysis, findings, tmp_path / "u.json", steps=(5, 6))
    assert not (tmp_path / "u.json").exists()


def test_steps_option_text() -> None:
    assert (parse_steps("3:5"), parse_steps("4"), parse_steps(" 2 : 2 ")) == ((3, 5), (4, 4), (2, 2))
    for bad in ("", "a:b", "3-5", "5:3"):
        with pytest.raises(ValueError, match="--steps"):
            parse_steps(bad)


def test_big_input_keeps_the_longest_steps(hand_built: tuple[Analysis, dict[str, Any]], tmp_path: Path) -> None:
    analysis, findings = hand_built
    warnings = write_annotated_trace(analysis, findings, tmp_path / "t.json", max_events=10)
    assert len(warnings) == 1 and "limit of 10" in warnings[0] and "longest of 2 steps (ids 2)" in warnings[0]
    tracks = Tracks(_load(tmp_path / "t.json"))
    assert [s["name"] for s in tracks.track(STEPS_TRACK)] == ["step 2"]
    assert [_ns(g["ts"]) - EPOCH_NS for g in tracks.track(gap_track_name("GPU:0"))] == [100 * US, 210 * US]


def test_emptied_event_table_is_refused(hand_built: tuple[Analysis, dict[str, Any]], tmp_path: Path) -> None:
    analysis, findings = hand_built
    with pytest.raises(ValueError, match="before Analysis.without_events"):
        write_annotated_trace(analysis.without_events(), findings, tmp_path / "t.json")


def test_cpu_only_run_shows_the_framework_ops(tmp_path: Path) -> None:
    analysis, findings = _analyzed([b.host("cpu_op", 0, 100, "ProfilerStep#1"), b.host("cpu_op", 10, 50, "aten::mm")])
    write_annotated_trace(analysis, findings, tmp_path / "t.json")
    tracks = Tracks(_load(tmp_path / "t.json"))
    (thread,) = [name for (process, name) in tracks.slices if process == "/host:CPU"]
    assert [(e["name"], e["args"]["kind"]) for e in tracks.track(thread)] == [
        ("ProfilerStep#1", "step"),
        ("aten::mm", "cpu_op"),
    ]


def test_several_inputs_are_processes_of_their_own(tmp_path: Path) -> None:
    reads = [
        TraceRead(events=b.table(_rows()), input=InputInfo(path=f"r{rank}.json", format="kineto", rank=rank))
        for rank in (0, 1)
    ]
    analysis = analyze(merge_reads(reads))
    write_annotated_trace(analysis, evaluate(analysis), tmp_path / "t.json")
    doc = _load(tmp_path / "t.json")
    _check_chrome_trace(doc)
    tracks = Tracks(doc)
    assert sorted(tracks.processes.values()) == [
        "rank0/device:GPU:0",
        "rank0/host:CPU",
        "rank1/device:GPU:0",
        "rank1/host:CPU",
        "traceinsight",
    ]
    (rank1,) = [g for g in analysis.gaps if g.device == "rank1/GPU:0"]
    assert sum(_ns(g["dur"]) for g in tracks.track(gap_track_name("rank1/GPU:0"))) == rank1.total_ns


def _straggler_steps_exported(tmp_path: Path, first: int, last: int) -> tuple[Any, list[Any], Tracks]:
    """sleep_rank1's analysis, its steps [first, last) by position, and the tracks of those steps exported (a valid
    Chrome trace)."""
    _, profile = load_path(SAMPLE_TRACES / "distributed" / "sleep_rank1")
    analysis = analyze(profile)
    chosen = analysis.steps.items[first:last]
    write_annotated_trace(analysis, evaluate(analysis), tmp_path / "t.json", steps=(chosen[0].id, chosen[-1].id))
    doc = _load(tmp_path / "t.json")
    _check_chrome_trace(doc)
    return analysis, chosen, Tracks(doc)


def test_collective_waits_are_the_analysis_waits_of_the_exported_steps(tmp_path: Path) -> None:
    """Each rank's waits track holds, per rank, the waits of the analysis that overlap the steps written, a slice
    each from the arrival; overlapping waits (DDP's buckets) go on further tracks, where none overlaps another."""
    analysis, chosen, tracks = _straggler_steps_exported(tmp_path, 2, 4)
    waits = {name: e for (process, name), e in tracks.slices.items() if name.startswith("collective waits")}
    assert sorted(waits) == [wait_track_name("rank0"), wait_track_name("rank0", 1)]  # rank 1 waits for nobody
    assert {process for (process, name) in tracks.slices if name in waits} == {FINDINGS_PROCESS}
    written: dict[int, int] = defaultdict(int)
    for slices in waits.values():
        ordered = sorted(slices, key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(ordered, ordered[1:], strict=False))
        for e in slices:
            assert e["name"] == "all_reduce" and e["args"]["wait_ns"] == _ns(e["dur"]) and e["args"]["key"]
            written[e["args"]["rank"]] += _ns(e["dur"])
    expected: dict[int, int] = defaultdict(int)
    arrivals = [x for instance in analysis.collectives.instances for x in instance.arrivals if x.wait_ns]
    for x in arrivals:
        if any(x.arrival_ns < s.start_ns + s.dur_ns and x.arrival_ns + x.wait_ns > s.start_ns for s in chosen):
            expected[x.rank] += x.wait_ns
    assert written == expected and 0 < expected[0] < sum(x.wait_ns for x in arrivals)


def test_critical_path_track_tiles_each_exported_step(tmp_path: Path) -> None:
    """The critical path track covers each step written exactly (end to end, its slices' durations summing to the
    step), its slices named after the ops on it; on sleep_rank1 most of it is rank 1's `data` (it sleeps there)."""
    analysis, chosen, tracks = _straggler_steps_exported(tmp_path, 1, 4)
    slices = tracks.track(PATH_TRACK)
    assert {process for (process, name) in tracks.slices if name == PATH_TRACK} == {FINDINGS_PROCESS}
    for step in chosen:
        mine = [e for e in slices if e["args"]["step"] == step.id]
        starts = [_ns(e["ts"]) for e in mine]
        ends = [_ns(e["ts"]) + _ns(e["dur"]) for e in mine]
        assert starts[0] == step.start_ns and ends[-1] == step.start_ns + step.dur_ns
        assert starts[1:] == ends[:-1]  # end to end: no gap, no overlap
        assert sum(_ns(e["dur"]) for e in mine) == step.dur_ns
        # Merged: no two neighbours are the same op of the same input.
        keys = [(e["name"], e["args"]["part"], e["args"]["input"]) for e in mine]
        assert all(a != b for a, b in zip(keys, keys[1:], strict=False))
        data = sum(_ns(e["dur"]) for e in mine if (e["name"], e["args"]["input"]) == ("data", "rank1"))
        assert data > step.dur_ns / 2
    assert {e["args"]["step"] for e in slices} == {s.id for s in chosen}
    assert {e["args"]["group"] for e in slices} <= {"cpu", "collective", "idle"}  # a CPU-only run
    assert all(e["args"]["part"] == "collective_transfer" for e in slices if e["args"]["group"] == "collective")


# --------------------------------------------------------------------------- real traces of each format

KINETO = "kineto/resnet50_num_workers_0"


@pytest.fixture(scope="module", params=["kineto", "xspace", "chrome"])
def real(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real trace of each format: its analysis and report, the exported file, and the report read back from it."""
    source = {
        "kineto": lambda: shared_trace(KINETO),
        "xspace": lambda: shared_trace(XSPACE),
        "chrome": lambda: request.getfixturevalue("xprof_export"),
    }[request.param]()
    _, profile = load_path(source)
    assert profile.inputs[0].format == request.param
    analysis = analyze(profile)
    findings = evaluate(analysis)
    work = tmp_path_factory.mktemp(request.param)
    path = work / "annotated.json.gz"
    assert write_annotated_trace(analysis, findings, path) == []
    back = work / "back.json"
    assert main(["report", str(path), "-o", str(work / "back.html"), "--json", str(back), "-q"]) == 0
    report = to_document(assemble(analysis, findings))
    return {"analysis": analysis, "report": report, "doc": _load(path), "back": json.loads(back.read_text())}


def test_real_trace_is_valid_chrome_trace(real: dict[str, Any]) -> None:
    _check_chrome_trace(real["doc"])
    tracks = Tracks(real["doc"])
    events = real["analysis"].profile.events
    device = events[events["device"].notna() & events["kind"].isin(["kernel", "memcpy", "memset"])]
    written = [e for (process, _), slices in tracks.slices.items() if "/device:" in process for e in slices]
    assert min(_ns(e["ts"]) for e in written) == int(device["ts_ns"].min())  # exact ns, no float on the way
    assert {e["name"] for e in written} >= set(device["name"].astype(str))  # names verbatim


def test_real_trace_gap_slices_equal_the_report(real: dict[str, Any]) -> None:
    """The slices cover the report's gaps exactly, and inside the steps each part that lies in gaps (all but the
    input wait and the unexplained time, which also lie before or after the device's work) is the ledger's."""
    tracks = Tracks(real["doc"])
    ledger = real["report"]["ledger"]
    steps = [(s["start_ns"], s["start_ns"] + s["dur_ns"]) for s in real["report"]["steps"]["items"]]
    for device in real["report"]["devices"]:
        g_figures = device["gaps"]
        gaps = tracks.track(gap_track_name(device["id"])) if g_figures["count"] + g_figures["below_resolution"] else []
        # Every gap is a slice, the ledger's time; those no longer than the timestamp resolution are not counted.
        counted = [g for g in gaps if _ns(g["dur"]) > g_figures["resolution_ns"]]
        assert sum(_ns(g["dur"]) for g in counted) == g_figures["total_ns"]
        rounding = sum(_ns(g["dur"]) for g in gaps) - g_figures["total_ns"]
        assert 0 <= rounding <= g_figures["below_resolution"] * g_figures["resolution_ns"]
        mine = next((d for d in ledger["devices"] if d["id"] == device["id"]), None)
        own_steps = device["id"] in real["report"]["steps"]["per_device_mean_ns"]
        if mine is None or (own_steps and device["id"] not in real["report"]["steps"]["marker"]):
            continue  # no kernel, no ledger; or a ledger over the device's own Steps line, not these windows

        def in_steps(g: dict[str, Any]) -> int:
            start, end = _ns(g["ts"]), _ns(g["ts"]) + _ns(g["dur"])
            return sum(max(0, min(end, b) - max(start, a)) for a, b in steps)

        for part in ("graph_internal", "wait_outside_trace", "blocking_wait", "host_launch"):
            assert sum(in_steps(g) for g in gaps if g["name"] == part) == mine["parts"][part], part
        assert sum(in_steps(g) for g in gaps if g["name"] == "input_wait") <= mine["parts"]["input_wait"]


def test_real_trace_reads_back_with_the_same_device_activity(real: dict[str, Any]) -> None:
    back = real["back"]
    assert [i["format"] for i in back["inputs"]] == ["chrome"]
    original = {d["id"]: (d["busy_ns"], d["kernels"]["count"]) for d in real["report"]["devices"]}
    assert {d["id"]: (d["busy_ns"], d["kernels"]["count"]) for d in back["devices"]} == original
    assert back["steps"]["count"] == real["report"]["steps"]["count"]
    # The host's launches, waits and syncs are there too: every gap gets the same cause.
    assert [(d["gaps"]["count"], d["gaps"]["by_cause"]) for d in back["devices"]] == [
        (d["gaps"]["count"], d["gaps"]["by_cause"]) for d in real["report"]["devices"]
    ]
