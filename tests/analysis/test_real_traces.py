"""Analyses on the real traces in ../shared/traces, checked against plain arithmetic over the raw
files, XProf's own figures and the expert verdicts each trace is known for."""

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.conftest import KINETO_TRACES, shared_trace
from traceinsight.analysis import analyze
from traceinsight.discover import discover
from traceinsight.findings import find_bottlenecks
from traceinsight.load import load_run
from traceinsight.readers.xplane_schema import XSpace

# The Kineto traces with GPU activity (cpu_only has none; gpu_metrics_expected is the input plus counters).
KINETO = [t for t in KINETO_TRACES if "cpu_only" not in t and "expected" not in t]
RESNET_NW0, RESNET_NW4 = KINETO_TRACES[0], KINETO_TRACES[1]
COMPUTE_BOUND = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
MULTI_WORKER = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
XSPACE = [
    "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb",
]
DEVICE_WORK_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def _union_length(intervals):
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def _plain_kineto(path: Path):
    """Per device: (idle fraction, kernel count, kernels < 10 us, GPU-Util), by loops over the raw JSON."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    per_device: dict[str, list] = {}
    kernels: dict[str, list] = {}
    kernel_iv: dict[str, list] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in DEVICE_WORK_CATS:
            continue
        dev = f"GPU:{e.get('args', {}).get('device', e.get('pid'))}"
        per_device.setdefault(dev, []).append((e["ts"], e["ts"] + e["dur"]))
        if str(e["cat"]).lower() == "kernel":
            kernels.setdefault(dev, []).append(e["dur"])
            kernel_iv.setdefault(dev, []).append((e["ts"], e["ts"] + e["dur"]))
    out = {}
    for dev, iv in per_device.items():
        span = max(e for _, e in iv) - min(s for s, _ in iv)
        ks = kernels.get(dev, [])
        util = _union_length(kernel_iv.get(dev, [])) / span
        out[dev] = (1 - _union_length(iv) / span, len(ks), sum(1 for d in ks if d < 10), util)
    return out


def _plain_xspace(path: Path):
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    out = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        iv, durs, kernel_iv = [], [], []
        for line in plane.lines:
            if not line.name.startswith("Stream #"):
                continue
            for ev in line.events:
                start = line.timestamp_ns * 1000 + ev.offset_ps
                iv.append((start, start + ev.duration_ps))
                name = plane.event_metadata[ev.metadata_id].name
                if not name.startswith(("Memcpy", "Memset")):
                    durs.append(ev.duration_ps)
                    kernel_iv.append((start, start + ev.duration_ps))
        if iv:
            span = max(e for _, e in iv) - min(s for s, _ in iv)
            out[plane.name.removeprefix("/device:")] = (
                1 - _union_length(iv) / span,
                len(durs),
                sum(1 for d in durs if d < 10_000_000),
                _union_length(kernel_iv) / span,
            )
    return out


def _analyze(path: Path):
    return analyze(load_run(discover(path), path))


@pytest.mark.parametrize("relative", KINETO + XSPACE)
def test_idle_fraction_and_small_kernels_match_plain_arithmetic(relative):
    path = shared_trace(relative)
    want = _plain_xspace(path) if relative.endswith(".pb") else _plain_kineto(path)
    analysis = _analyze(path)
    got = {
        u.id: (u.idle_fraction, k.count, k.small_count) for u, k in zip(analysis.devices, analysis.kernels, strict=True)
    }
    assert sorted(got) == sorted(want)
    for dev, (idle, count, small, _) in want.items():
        assert got[dev][0] == pytest.approx(idle, abs=0.002)
        assert got[dev][1] == count
        assert got[dev][2] == pytest.approx(small, rel=0.01)


@pytest.mark.parametrize("relative", KINETO + XSPACE)
def test_gpu_util_is_the_kernel_union_over_the_span(relative):
    """What nvidia-smi's GPU-Util shows: time some kernel runs (copies and memsets do not count) / device span."""
    path = shared_trace(relative)
    want = _plain_xspace(path) if relative.endswith(".pb") else _plain_kineto(path)
    got = {u.id: u.gpu_util for u in _analyze(path).devices}
    assert sorted(got) == sorted(want)
    for dev, (*_, util) in want.items():
        assert got[dev] == pytest.approx(util, abs=0.002), dev


def test_resnet_dataloader_verdicts():
    slow = _analyze(shared_trace(RESNET_NW0))
    fixed = _analyze(shared_trace(RESNET_NW4))
    found = find_bottlenecks(slow)
    assert found[0].id == "input_bound"
    assert any("num_workers" in r for r in found[0].recommendations)
    assert fixed.input_pipeline.fraction < slow.input_pipeline.fraction / 2
    # HTA: 39.4 % vs 24.3 % idle (its figures drop the last step; ours cover the whole trace)
    assert slow.devices[0].idle_fraction == pytest.approx(0.394, abs=0.01)
    assert fixed.devices[0].idle_fraction < slow.devices[0].idle_fraction - 0.1


def _xprof_input_fraction(scenario: str) -> float:
    ref = json.loads(shared_trace(f"tf_cpu/{scenario}/xprof_reference/input_pipeline_analyzer.json").read_text())
    props = ref[1]["p"]
    return float(props["infeed_time_ms_avg"]) / float(props["steptime_ms_average"])


def test_tf_cpu_input_bound_matches_xprof():
    analysis = _analyze(shared_trace("tf_cpu/a_input_bound"))
    assert analysis.steps.source == "marker" and analysis.steps.count == 10
    assert analysis.input_pipeline.fraction == pytest.approx(_xprof_input_fraction("a_input_bound"), abs=0.03)
    assert analysis.input_pipeline.verdict == "high"
    found = find_bottlenecks(analysis)
    assert found[0].id == "input_bound"
    assert any("prefetch" in r for r in found[0].recommendations)


def test_tf_cpu_tuned_pipeline_is_not_input_bound():
    analysis = _analyze(shared_trace("tf_cpu/b_input_tuned"))
    assert analysis.input_pipeline.fraction < 0.05
    assert analysis.input_pipeline.verdict in ("potential", "none")  # XProf: "POTENTIALLY input-bound"


def test_compute_bound_trace_has_no_high_severity_bottleneck():
    analysis = _analyze(shared_trace(COMPUTE_BOUND))  # HTA: 2.6 % idle
    assert analysis.devices[0].idle_fraction < 0.03
    assert all(b.severity != "high" for b in find_bottlenecks(analysis))


@pytest.mark.parametrize("relative", ["hta/nccl_parser_config/nccl_data.json.gz", "tracelens/b200/eager_trace.json.gz"])
def test_host_launch_bound_traces(relative):
    found = find_bottlenecks(_analyze(shared_trace(relative)))
    assert found[0].id in ("launch_bound", "host_bound")
    assert found[0].severity == "high"


def test_cpu_only_trace_says_no_gpu_activity():
    analysis = _analyze(shared_trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))
    assert analysis.devices == []
    # Its gloo all-reduces wait for the rank not in the trace: reported with their cost, nothing projected.
    assert [(b.id, b.projection.basis) for b in find_bottlenecks(analysis)] == [("collective_wait", "none")]
    assert analysis.input_pipeline.verdict == "unknown"  # no DataLoader or tf.data events: nothing to judge


def test_no_launch_bound_on_a_deep_launch_queue():
    """ResNet-50 num_workers=0: kernels wait ~10 ms in the launch queue (the host is ahead of the GPU), so the
    host-launch gaps are not 'the host cannot launch fast enough' (issue 19)."""
    analysis = _analyze(shared_trace(RESNET_NW0))
    delays = [k.launch_delay_p50_ns for k in analysis.kernels]
    assert min(delays) > 1_000_000
    found = {b.id for b in find_bottlenecks(analysis)}
    assert "launch_bound" not in found and "host_bound" in found


def _plain_kernel_ops(path: Path) -> dict[tuple[str, str], Counter]:
    """Per (device, kernel name), the op types its ``level 0`` annotations name (TF: ``<name>:<type>``)."""
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    ops: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for plane in space.planes:
        stat_names = {i: m.name for i, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                stats = {stat_names[s.metadata_id]: s for s in ev.stats}
                if "kernel_details" in stats and "level 0" in stats:
                    stat = stats["level 0"]
                    text = stat_names[stat.ref_value] if stat.ref_value else stat.str_value
                    name = plane.event_metadata[ev.metadata_id].name
                    ops[plane.name.removeprefix("/device:"), name][text.rsplit(":", 1)[-1]] += 1
    return ops


def test_xspace_top_kernels_name_the_tf_op_that_ran_them():
    """XSpace kernels carry their TF op in the ``level 0`` annotation; the kernel table names its type (issue 19)."""
    path = shared_trace(MULTI_WORKER)
    truth = _plain_kernel_ops(path)
    checked = 0
    for stats in _analyze(path).kernels:
        for top in stats.top:
            assert top.op == truth[stats.device, top.name].most_common(1)[0][0]
            checked += 1
    assert checked >= 10
