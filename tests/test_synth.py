"""The synthetic trace generator: its ground truth, re-derived independently from the files it writes.

Each scenario is written as Kineto JSON and as XSpace, parsed back here with json / the
XSpace schema and plain loops, and every ground-truth number is recomputed from those
raw events (union of intervals, counts, bytes, gap causes by the rule in tools/synth.py's
docstring). A hand-built timeline checks `ground_truth()` against numbers worked out by hand.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from tools import synth
from tools.synth import DeviceOp, GpuTimeline, HostEvent
from traceinsight.readers.xplane_schema import XSpace

US = 1_000
SCENARIO_NAMES = sorted(synth.SCENARIOS)


@pytest.fixture(scope="module")
def timelines() -> dict[str, GpuTimeline]:
    return {name: build() for name, build in synth.SCENARIOS.items()}


# ---------------------------------------------------------------------------- independent recomputation
def _union(intervals: list[tuple[int, int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _overlap(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(max(0, min(x[1], y[1]) - max(x[0], y[0])) for x in a for y in b)


def summarize(
    ops: list[dict], launches: dict[int, tuple[int, int]], waits: list[tuple[int, int]], syncs: list[tuple[int, int]]
) -> dict:
    """Device facts from raw ops: {kind, copy, pageable, start, end, bytes, corr}."""
    busy = _union([(o["start"], o["end"]) for o in ops])
    start, end = busy[0][0], busy[-1][1]
    by_cause = {"input_wait": 0, "sync": 0, "host_launch": 0, "other": 0}
    for (_, g0), (g1, _) in zip(busy, busy[1:], strict=False):
        corr = min(o["corr"] for o in ops if o["start"] == g1)
        launch_end = launches[corr][1] if corr in launches else None
        if launch_end is None or launch_end <= g0:
            cause = "other"
        elif any(s < g1 and e > g0 for s, e in waits):
            cause = "input_wait"
        elif any(s < g1 and e > g0 for s, e in syncs):
            cause = "sync"
        else:
            cause = "host_launch"
        by_cause[cause] += g1 - g0
    kernels = [o for o in ops if o["kind"] == "kernel"]
    kernel_union = _union([(k["start"], k["end"]) for k in kernels])
    copies = {}
    for kind in ("h2d", "d2h", "d2d"):
        sel = [o for o in ops if o["kind"] == "memcpy" and o["copy"] == kind]
        union = _union([(o["start"], o["end"]) for o in sel])
        copies[kind] = {
            "count": len(sel),
            "total_ns": sum(o["end"] - o["start"] for o in sel),
            "bytes": sum(o["bytes"] for o in sel),
            "pageable_count": sum(o["pageable"] for o in sel),
            "exposed_ns": sum(e - s for s, e in union) - _overlap(union, kernel_union),
        }
    busy_ns = sum(e - s for s, e in busy)
    return {
        "span_ns": end - start,
        "busy_ns": busy_ns,
        "idle_ns": end - start - busy_ns,
        "gap_count": len(busy) - 1,
        "by_cause": by_cause,
        "kernel_count": len(kernels),
        "kernel_ns": sum(k["end"] - k["start"] for k in kernels),
        "small_count": sum(k["end"] - k["start"] < 10_000 for k in kernels),
        "copies": copies,
        "memset_count": sum(o["kind"] == "memset" for o in ops),
    }


def expected(truth: dict) -> dict:
    dev = truth["devices"]["GPU:0"]
    return {
        "span_ns": dev["span_ns"],
        "busy_ns": dev["busy_ns"],
        "idle_ns": dev["idle_ns"],
        "gap_count": dev["gaps"]["count"],
        "by_cause": dev["gaps"]["by_cause"],
        "kernel_count": dev["kernels"]["count"],
        "kernel_ns": dev["kernels"]["total_ns"],
        "small_count": dev["kernels"]["small_count"],
        "copies": dev["copies"],
        "memset_count": dev["memset"]["count"],
    }


def kineto_facts(trace: dict, profile_start_epoch_ns: int) -> dict:
    """Facts from a Kineto dict; times back to ns since profile start via baseTimeNanoseconds."""
    base = trace["baseTimeNanoseconds"]

    def ns(us: float) -> int:
        return base + round(us * 1000) - profile_start_epoch_ns

    x = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ops = []
    for e in x:
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            copy = {"Memcpy HtoD": "h2d", "Memcpy DtoH": "d2h", "Memcpy DtoD": "d2d"}.get(e["name"][:11], "")
            ops.append(
                {
                    "kind": {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[e["cat"]],
                    "copy": copy,
                    "pageable": "Pageable" in e["name"],
                    "bytes": e["args"].get("bytes", 0),
                    "start": ns(e["ts"]),
                    "end": ns(e["ts"]) + round(e["dur"] * 1000),
                    "corr": e["args"]["correlation"],
                }
            )
    runtime = [e for e in x if e["cat"] == "cuda_runtime"]
    launches = {
        e["args"]["correlation"]: (ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000))
        for e in runtime
        if not e["name"].endswith("Synchronize")
    }
    syncs = [(ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000)) for e in runtime if e["name"].endswith("Synchronize")]
    waits = [
        (ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000))
        for e in x
        if e["cat"] == "user_annotation" and e["name"].startswith("enumerate(DataLoader)#")
    ]
    steps = [
        (int(e["name"].split("#")[1]), ns(e["ts"]), round(e["dur"] * 1000))
        for e in x
        if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    return {
        "device": summarize(ops, launches, waits, syncs),
        "steps": sorted(steps, key=lambda s: s[1]),
        "waits": waits,
        "syncs": syncs,
        "launches": len(launches),
    }


def _stats(plane, holder) -> dict:
    out = {}
    for s in holder.stats:
        kind = s.WhichOneof("value")
        value = getattr(s, kind)
        out[plane.stat_metadata[s.metadata_id].name] = plane.stat_metadata[value].name if kind == "ref_value" else value
    return out


def xspace_facts(data: bytes) -> dict:
    """Facts from XSpace bytes: times are line.timestamp_ns * 1000 + offset_ps (ps)."""
    space = XSpace()
    space.ParseFromString(data)
    planes = {p.name: p for p in space.planes}
    ops, launches, waits, syncs, steps = [], {}, [], [], []
    gpu = planes["/device:GPU:0"]
    for line in gpu.lines:
        assert line.name.startswith(f"Stream #{line.id}(")
        for ev in line.events:
            start = (line.timestamp_ns * 1000 + ev.offset_ps) // 1000
            end = start + ev.duration_ps // 1000
            name = gpu.event_metadata[ev.metadata_id].name
            st = _stats(gpu, ev)
            details = st.get("memcpy_details") or st.get("Memset_details") or ""
            size = re.search(r"(?:size|num_bytes):(\d+)", details)
            ops.append(
                {
                    "kind": "kernel"
                    if "kernel_details" in st
                    else ("memcpy" if name.startswith("Memcpy") else "memset"),
                    "copy": {"MemcpyH2D": "h2d", "MemcpyD2H": "d2h", "MemcpyD2D": "d2d"}.get(name, ""),
                    "pageable": "kind_src:pageable" in details or "kind_dst:pageable" in details,
                    "bytes": int(size.group(1)) if size else 0,
                    "start": start,
                    "end": end,
                    "corr": st["correlation_id"],
                }
            )
    cpu = planes["/host:CPU"]
    for line in cpu.lines:
        for ev in line.events:
            start = (line.timestamp_ns * 1000 + ev.offset_ps) // 1000
            end = start + ev.duration_ps // 1000
            name = cpu.event_metadata[ev.metadata_id].name
            st = _stats(cpu, ev)
            if name == "train":
                steps.append((st["step_num"], start, end - start))
            elif name == "IteratorGetNextOp::DoCompute":
                waits.append((start, end))
            elif name in ("cuStreamSynchronize", "cuEventSynchronize"):
                syncs.append((start, end))
            elif "correlation_id" in st:
                launches[st["correlation_id"]] = (start, end)
    env = _stats(planes["Task Environment"], planes["Task Environment"])
    return {
        "device": summarize(ops, launches, waits, syncs),
        "steps": sorted(steps, key=lambda s: s[1]),
        "waits": waits,
        "syncs": syncs,
        "launches": len(launches),
        "profile_start": env["profile_start_time"],
        "gpu_stats": _stats(gpu, gpu),
        "hostnames": list(space.hostnames),
    }


def _check(facts: dict, truth: dict) -> None:
    assert facts["device"] == expected(truth)
    assert facts["steps"] == [(s["id"], s["start_ns"], s["dur_ns"]) for s in truth["steps"]["items"]]
    assert len(facts["waits"]) == truth["input_wait"]["count"]
    assert sum(e - s for s, e in facts["waits"]) == truth["input_wait"]["total_ns"]
    assert sum(e - s for s, e in facts["syncs"]) == truth["sync"]["total_ns"]
    assert facts["launches"] == truth["launches"]["count"]


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_kineto_matches_ground_truth(timelines: dict[str, GpuTimeline], name: str) -> None:
    truth = timelines[name].ground_truth()
    trace = json.loads(json.dumps(timelines[name].to_kineto()))
    _check(kineto_facts(trace, truth["profile_start_epoch_ns"]), truth)


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_xspace_matches_ground_truth(timelines: dict[str, GpuTimeline], name: str) -> None:
    truth = timelines[name].ground_truth()
    facts = xspace_facts(timelines[name].to_xspace())
    _check(facts, truth)
    assert facts["profile_start"] == truth["profile_start_epoch_ns"]
    assert facts["hostnames"] == ["sample"]
    assert {"clock_rate", "core_count", "compute_cap_major", "compute_cap_minor"} <= facts["gpu_stats"].keys()


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_kineto_is_well_formed(timelines: dict[str, GpuTimeline], name: str) -> None:
    trace = timelines[name].to_kineto()
    events = trace["traceEvents"]
    for e in events:
        if isinstance(e.get("ts"), float):  # fractional µs, exact to the ns
            assert round(e["ts"], 3) == e["ts"]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    starts = {e["id"] for e in events if e["ph"] == "s" and e["cat"] == "ac2g"}
    ends = {e["id"] for e in events if e["ph"] == "f" and e["cat"] == "ac2g"}
    assert starts == ends == {e["args"]["correlation"] for e in device}
    assert {e["name"] for e in events if e["ph"] == "M"} >= {"process_name", "thread_name", "process_labels"}
    gpu_steps = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    assert [e["name"] for e in gpu_steps] == [
        e["name"] for e in events if e.get("cat") == "user_annotation" and "ProfilerStep" in e["name"]
    ]
    assert trace["deviceProperties"][0]["numSms"] == 132


def test_scenarios_show_their_story(timelines: dict[str, GpuTimeline]) -> None:
    facts = {
        name: kineto_facts(json.loads(json.dumps(tl.to_kineto())), synth.PROFILE_START_EPOCH_NS)["device"]
        for name, tl in timelines.items()
    }

    def idle(name: str) -> float:
        return facts[name]["idle_ns"] / facts[name]["span_ns"]

    assert (
        idle("input_bound") > 0.6 and facts["input_bound"]["by_cause"]["input_wait"] == facts["input_bound"]["idle_ns"]
    )
    lb = facts["launch_bound"]
    assert lb["kernel_count"] >= 1000 and lb["small_count"] == lb["kernel_count"]
    assert idle("launch_bound") > 0.5 and lb["by_cause"]["host_launch"] > 0.95 * lb["idle_ns"]
    assert 0.005 < idle("healthy") < 0.02 and facts["healthy"]["by_cause"]["other"] == facts["healthy"]["idle_ns"]
    h2d = facts["h2d_pageable"]["copies"]["h2d"]
    assert h2d["count"] == h2d["pageable_count"] == 16 and h2d["bytes"] == 16 * 8 * 2**20
    assert h2d["total_ns"] > 2 * facts["h2d_pageable"]["kernel_ns"]
    assert idle("sync_heavy") > 0.2 and facts["sync_heavy"]["by_cause"]["sync"] == facts["sync_heavy"]["idle_ns"]
    assert facts["sync_heavy"]["copies"]["d2h"]["count"] == 12


def test_hand_built_timeline() -> None:
    """Every number below was worked out by hand from the intervals."""
    ops = [
        DeviceOp("kernel", 1000 * US, 2000 * US, 1, name="a"),
        DeviceOp("kernel", 2000 * US, 3000 * US, 2, name="b", stream=8),
        DeviceOp("kernel", 8000 * US, 5 * US, 3, name="c"),
        DeviceOp("memcpy", 10000 * US, 2000 * US, 4, stream=8, copy_kind="h2d", host_memory="pageable", nbytes=100),
        DeviceOp("kernel", 11000 * US, 500 * US, 5, name="d"),
        DeviceOp("kernel", 13000 * US, 1000 * US, 6, name="e"),
        DeviceOp("kernel", 15000 * US, 100 * US, 7, name="f"),
    ]
    launch_at = {
        1: (0, 900),
        2: (100, 1900),
        3: (6000, 7000),
        4: (9000, 9500),
        5: (100, 200),
        6: (300, 400),
        7: (13800, 14900),
    }  # 7 starts before its gap (14000) but ends inside it: host_launch
    host = [HostEvent("launch", s * US, (e - s) * US, correlation=c) for c, (s, e) in launch_at.items()]
    host += [
        HostEvent("input_wait", 5500 * US, 500 * US),
        HostEvent("sync", 8000 * US, 100 * US, correlation=99, name="cudaStreamSynchronize"),
        HostEvent("step", 0, 16000 * US, step_id=3),
    ]
    truth = GpuTimeline("hand", "", ops, host, 17000 * US).ground_truth()
    dev = truth["devices"]["GPU:0"]
    assert (dev["span_ns"], dev["busy_ns"], dev["idle_ns"]) == (14100 * US, 7105 * US, 6995 * US)
    assert dev["gaps"]["by_cause"] == {
        "input_wait": 3000 * US,
        "sync": 1995 * US,
        "host_launch": 1000 * US,
        "other": 1000 * US,
    }
    assert dev["gaps"]["count"] == 4 and dev["gaps"]["max_ns"] == 3000 * US
    assert (dev["kernels"]["count"], dev["kernels"]["small_count"], dev["kernels"]["small_total_ns"]) == (6, 1, 5 * US)
    assert dev["kernels"]["shorter_than_launch_count"] == 2  # c (5 < 1000 us) and f (100 < 1100 us)
    assert dev["copies"]["h2d"] == {
        "count": 1,
        "total_ns": 2000 * US,
        "bytes": 100,
        "pageable_count": 1,
        "exposed_ns": 1500 * US,
    }
    assert truth["steps"]["items"] == [{"id": 3, "start_ns": 0, "dur_ns": 16000 * US}]
    assert truth["sync"] == {"count": 1, "total_ns": 100 * US}


def test_builder_is_deterministic() -> None:
    a, b = synth.sync_heavy(), synth.sync_heavy()
    assert a.to_xspace() == b.to_xspace()
    assert json.dumps(a.to_kineto()) == json.dumps(b.to_kineto())


def test_builder_places_work_after_launch_and_dependency() -> None:
    b = synth.TimelineBuilder(launch_ns=5 * US, latency_ns=1 * US, start_ns=0)
    copy = b.launch_copy("h2d", 1 << 20, 300 * US, host_memory="pageable")
    kernel = b.launch_kernel("k", 10 * US, after=copy)
    tl = b.build("t", "", tail_ns=0)
    launches = {h.correlation: h for h in tl.host_events if h.kind == "launch"}
    assert copy.start_ns == 6 * US  # launch end (5 us) + latency
    assert launches[copy.correlation].end_ns == copy.end_ns + 2 * US  # pageable copy blocks the host
    assert kernel.start_ns == launches[kernel.correlation].end_ns + 1 * US
    assert tl.end_ns == kernel.end_ns


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_committed_samples_are_current(timelines: dict[str, GpuTimeline], name: str) -> None:
    kineto = SAMPLE_TRACES / "synthetic_gpu" / name
    xspace = SAMPLE_TRACES / "synthetic_gpu_xspace" / name
    if not kineto.is_dir():
        pytest.skip("sample_traces not generated")
    truth = timelines[name].ground_truth()
    assert json.loads(gzip.decompress((kineto / synth.KINETO_FILE).read_bytes())) == timelines[name].to_kineto()
    pb = xspace / "plugins" / "profile" / synth.XSPACE_RUN / "sample.xplane.pb"
    assert pb.read_bytes() == timelines[name].to_xspace()
    for root in (kineto, xspace):
        assert json.loads((root / "ground_truth.json").read_text()) == truth


def test_samples_small_and_documented() -> None:
    if not SAMPLE_TRACES.is_dir():
        pytest.skip("sample_traces not present")
    files = [p for p in SAMPLE_TRACES.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_size < 1 << 20 for p in files)
    readme = (SAMPLE_TRACES / "README.md").read_text()
    for entry in sorted({p.relative_to(SAMPLE_TRACES).parts[0] for p in files} - {"README.md"}):
        assert f"`{entry}/" in readme
    for name in SCENARIO_NAMES:
        assert f"/{name}/`" in readme


def test_write_helpers_use_profiler_layout(tmp_path: Path) -> None:
    tl = synth.healthy(steps=1)
    kineto = synth.write_kineto(tl, tmp_path / "k" / "w.1.pt.trace.json.gz")
    assert json.loads(gzip.decompress(kineto.read_bytes()))["baseTimeNanoseconds"] == synth.BASE_TIME_NS
    pb = synth.write_xspace(tl, tmp_path / "x", host="h")
    assert pb.relative_to(tmp_path).parts == ("x", "plugins", "profile", synth.XSPACE_RUN, "h.xplane.pb")
