"""Each rule and fallback on small hand-built traces (times in us)."""

import pytest

from tests.analysis.builders import US, host, kernel, launch, profile, table
from traceinsight.analysis import analyze
from traceinsight.analysis.input_pipeline import input_pipeline, verdict_for
from traceinsight.analysis.steps import find_steps
from traceinsight.events import DeviceInfo
from traceinsight.findings import find_bottlenecks


def test_sync_and_annotations_on_the_device_are_not_work():
    a = analyze(
        profile(
            [
                kernel(0, 10),
                {"kind": "sync", "ts": 10, "dur": 80, "device": "GPU:0", "stream": 7, "name": "Stream Wait Event"},
                {"kind": "annotation", "ts": 0, "dur": 100, "device": "GPU:0", "stream": 7, "name": "fwd"},
                kernel(90, 10),
            ]
        )
    )
    (usage,) = a.devices
    assert (usage.busy_ns, usage.idle_ns) == (20 * US, 80 * US)
    assert a.gaps[0].by_cause["sync"] == 80 * US  # the device recorded the wait


def test_launch_bound_when_most_kernels_are_small():
    rows = []
    for i in range(100):  # 3 us kernels, each launched 2 us after the previous ended
        t = i * 10
        rows += [launch(t + 5, 4, i), kernel(t + 10, 3, i)]
    found = find_bottlenecks(analyze(profile(rows)))
    assert found[0].id == "launch_bound"
    assert found[0].evidence["small_kernel_count"] == 100
    assert any("torch.compile" in r for r in found[0].recommendations)


def test_healthy_trace_has_no_high_severity():
    rows = [kernel(i * 100, 99, i) for i in range(100)]  # 1 us gaps, launches long before
    rows += [launch(i * 100 - 50, 5, i) for i in range(100)]
    a = analyze(profile(rows))
    assert a.devices[0].idle_fraction == pytest.approx(99 / 9999)
    assert all(b.severity != "high" for b in find_bottlenecks(a))


def test_fp32_rule_respects_compute_capability():
    rows = [kernel(0, 1000, 1, name="volta_sgemm_128x64_nn"), kernel(1000, 1000, 2, name="elementwise")]
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", compute_capability="7.0")}
    assert [b.id for b in find_bottlenecks(analyze(p))] == ["fp32_compute"]
    p.devices = {"GPU:0": DeviceInfo("GPU:0", compute_capability="6.1")}
    assert find_bottlenecks(analyze(p)) == []
    rows[0] = kernel(0, 1000, 1, name="sm80_xmma_gemm_f16f16_f16f32")
    assert find_bottlenecks(analyze(profile(rows))) == []


@pytest.mark.parametrize(
    ("framework", "vendor", "cc", "first_fix", "absent"),
    [
        ("pytorch", "Nvidia", "7.0", "dtype=torch.float16", ("bfloat16", "allow_tf32")),  # V100: fp16 + scaler
        ("pytorch", "Nvidia", "8.0", "dtype=torch.bfloat16", ("torch.float16", "GradScaler")),  # A100: bf16, TF32 too
        ("tensorflow", "Nvidia", "7.5", '"mixed_float16"', ("bfloat16",)),
        ("tensorflow", "Nvidia", "9.0", '"mixed_bfloat16"', ('"mixed_float16"',)),
    ],
)
def test_mixed_precision_advice_fits_the_gpu(framework, vendor, cc, first_fix, absent):
    rows = [kernel(0, 1000, 1, name="volta_sgemm_128x64_nn"), kernel(1000, 1000, 2, name="elementwise")]
    p = profile(rows, framework=framework)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", vendor=vendor, compute_capability=cc)}
    (found,) = find_bottlenecks(analyze(p))
    fixes = found.recommendations
    assert first_fix in fixes[0] and not any(word in fix for word in absent for fix in fixes), fixes
    assert any("allow_tf32" in fix for fix in fixes) == (framework == "pytorch" and cc != "7.0")


def test_an_amd_gpu_is_not_read_as_an_nvidia_compute_capability():
    """ROCm traces put the gfx version where CUDA puts the compute capability (MI250 = gfx90a = "9.0"): the
    H100 peak table must not price mixed precision on it."""
    rows = [kernel(0, 1000, 1, name="volta_sgemm_128x64_nn"), kernel(1000, 1000, 2, name="elementwise")]
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0", vendor="AMD", compute_capability="9.0")}
    assert find_bottlenecks(analyze(p)) == []


def test_steps_inferred_from_repeating_host_event():
    rows = [host("cpu_op", i * 100, 90, "multi_step_on_iterator") for i in range(5)]
    rows += [host("cpu_op", i * 100 + 10, 20, "MatMul") for i in range(5)]
    steps = find_steps(table(rows))
    assert steps.source == "inferred"
    assert "multi_step_on_iterator" in steps.marker
    assert [s.start_ns // US for s in steps.items] == [0, 100, 200, 300, 400]
    assert steps.items[0].breakdown["host_compute"] == 90 * US


def test_steps_inferred_from_device_bursts():
    rows = []
    for step in range(4):  # bursts of 5 kernels, 5 ms apart
        base = step * 6000
        rows += [kernel(base + i * 20, 15) for i in range(5)]
    steps = find_steps(table(rows))
    assert (steps.source, steps.marker) == ("inferred", "device activity bursts")
    assert [s.start_ns // US for s in steps.items] == [0, 6000, 12000, 18000]
    assert steps.items[0].dur_ns == 6000 * US
    assert steps.items[-1].dur_ns == 95 * US


def test_steps_whole_window_without_pattern():
    steps = find_steps(table([kernel(0, 10), kernel(12, 10)]))
    assert steps.source == "inferred" and steps.count == 1
    assert steps.items[0].dur_ns == 22 * US


def test_tf_step_markers_and_tf_data_stages():
    rows = []
    for i in range(3):
        t = i * 1000
        rows.append({"kind": "step", "ts": t, "dur": 1000, "name": "train", "step_id": 10 + i})
        rows.append(host("cpu_op", t, 400, "IteratorGetNextOp::DoCompute"))
        rows.append(host("other", t + 1, 390, "Iterator::Root"))
        rows.append(host("other", t + 2, 380, "Iterator::Root::MapAndBatch"))
        rows.append(host("other", t + 3, 50, "Iterator::Root::MapAndBatch::Range"))
        rows.append(host("cpu_op", t + 500, 100, "MatMul:_MklMatMul"))
    events = table(rows)
    steps = find_steps(events)
    assert [s.id for s in steps.items] == [10, 11, 12]
    ip = input_pipeline(events, steps)
    assert ip.wait_ns == 1200 * US
    assert ip.fraction == pytest.approx(0.4)
    assert ip.verdict == "high"
    assert ip.source == "tf.data"
    assert (ip.stages[0].name, ip.stages[0].self_ns) == ("Iterator::Root::MapAndBatch", 3 * (380 - 50) * US)
    self_times = {s.name: s.self_ns for s in ip.stages}
    assert self_times["Iterator::Root"] == 3 * (390 - 380) * US


@pytest.mark.parametrize(
    ("fraction", "idle", "verdict"),
    [
        (0.2, 0.0, "high"),
        (0.1999, 0.0, "moderate"),
        (0.05, 0.0, "moderate"),
        (0.049, 0.03, "potential"),
        (0.049, 0.029, "none"),
        (None, None, "unknown"),
    ],
)
def test_xprof_verdict_thresholds(fraction, idle, verdict):
    assert verdict_for(fraction, idle) == verdict


def test_cpu_only_trace_has_no_devices_and_no_crash():
    a = analyze(profile([host("cpu_op", 0, 10, "aten::add"), host("cpu_op", 20, 10, "aten::mul")]))
    assert a.devices == [] and a.gaps == [] and a.kernels == []
    assert find_bottlenecks(a) == []  # no steps: time between two ops may be untraced work, not overhead


def test_cpu_only_framework_overhead_between_ops():
    # Two marked 100 us steps; in each a DataLoader wait of 10 us and ten 4 us ops from t+20 every 3 us (they
    # overlap, on two threads), covering [t+20, t+51): overhead = 100 - 10 - 31 = 59 us a step. The fix keeps ops
    # and wait: 41 us.
    rows = []
    for i, t in enumerate((0, 100)):
        rows += [
            {**host("annotation", t, 100, f"ProfilerStep#{i}"), "thread": 1},
            {**host("cpu_op", t, 10, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"), "thread": 1},
        ]
        rows += [{**host("cpu_op", t + 20 + 3 * j, 4, "aten::add"), "thread": 1 + j % 2} for j in range(10)]
    (b,) = [b for b in find_bottlenecks(analyze(profile(rows))) if b.id == "host_bound"]
    assert b.evidence["overhead_per_step_ns"] == 59 * US
    assert (b.projection.step_ns_before, b.projection.step_ns_after) == (100 * US, 41 * US)
    assert b.projection.basis == "estimated" and b.title.startswith("Framework overhead")
    assert b.recommendations[0].startswith("Compile the model: `model = torch.compile(model)`")


def _cpu_steps(ops_per_step: int, op_us: float, first_us: float, steps: int = 2, wait_us: float = 0) -> list[dict]:
    """Marked 100 us steps on one thread: a DataLoader wait of `wait_us` first, then `ops_per_step` ops back to back
    (the first, `aten::conv2d`, of `first_us`, the rest, `aten::add`, of `op_us`)."""
    rows = []
    for i in range(steps):
        t = 100 * i
        rows.append({**host("annotation", t, 100, f"ProfilerStep#{i}"), "thread": 1})
        if wait_us:
            name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
            rows.append({**host("cpu_op", t, wait_us, name), "thread": 1})
        at = t + wait_us
        for j in range(ops_per_step):
            dur = first_us if j == 0 else op_us
            rows.append({**host("cpu_op", at, dur, "aten::conv2d" if j == 0 else "aten::add"), "thread": 1})
            at += dur
    return rows


def test_cpu_only_step_of_its_own_ops_is_cpu_bound_with_no_projection():
    """Two marked 100 us steps, each 11 ops back to back from its start: conv2d 20 us, ten adds of 8 us. The ops
    fill the step (no time between them: no framework overhead), so the step is the CPU's own work: host_bound
    costs the whole step (less the 1 ns a projection always leaves) and projects nothing; the culprit is the op with
    the most self time in all: aten::add, 20 calls of 8 us."""
    (b,) = [b for b in find_bottlenecks(analyze(profile(_cpu_steps(11, 8, 20)))) if b.id == "host_bound"]
    assert b.title.startswith("CPU-bound") and b.projection.basis == "none" and b.severity == "high"
    assert b.fraction == 1.0 and b.time_ns == 2 * (100 * US - 1)
    assert (b.culprit.what, b.culprit.name, b.culprit.count, b.culprit.ns) == ("op", "aten::add", 20, 160 * US)
    assert b.recommendations[0].startswith("The step is CPU compute: run it on an accelerator")


def test_cpu_bound_without_a_traced_loop_costs_the_ops_own_time():
    """No step marker: 25 distinct ops of 3 us (no repeating pattern: one step, the whole window), one every 5 us,
    make one inferred step of 123 us, 75 us of it ops and 48 us between them. Ops and the untraced time between
    them are the host's (over half the step), so host_bound fires; its cost is the ops' own 75 us, the step table's
    host compute, not the 48 us it calls idle."""
    rows = [{**host("cpu_op", 5 * j, 3, f"aten::op{j}"), "thread": 1} for j in range(25)]
    (b,) = [b for b in find_bottlenecks(analyze(profile(rows))) if b.id == "host_bound"]
    assert b.title.startswith("CPU-bound") and b.time_ns == 75 * US and b.fraction == round(75 / 123, 4)
    assert b.evidence["between_ops_per_step_ns"] == 48 * US


def test_cpu_only_framework_overhead_wins_over_cpu_bound_where_it_is_worth_reporting():
    """Ops 16.4 + 10 x 8.2 = 98.4 us of each 100 us step: 1.6 us between them, over 1 % of the step, is framework
    overhead, which a compiled step removes: host_bound is that finding, projected."""
    (b,) = [b for b in find_bottlenecks(analyze(profile(_cpu_steps(11, 8.2, 16.4)))) if b.id == "host_bound"]
    assert b.title.startswith("Framework overhead") and b.projection.basis == "estimated"
    assert b.evidence["overhead_per_step_ns"] == pytest.approx(1.6 * US, abs=1)


def test_cpu_bound_needs_enough_ops_and_the_step_not_spent_waiting():
    """Nine ops a step in two steps (20 + 8 x 10 us) are too few, 18, to say what the window is; a step mostly
    waiting for input (64 us, then 6 + 10 x 3 us of ops) is input-bound."""
    assert not [b for b in find_bottlenecks(analyze(profile(_cpu_steps(9, 10, 20)))) if b.id == "host_bound"]
    waiting = find_bottlenecks(analyze(profile(_cpu_steps(11, 3, 6, wait_us=64))))  # 64 us waiting, 36 us of ops
    assert waiting[0].id == "input_bound"
    assert not [b for b in waiting if b.title.startswith("CPU-bound")]


def test_eager_ops_lose_the_eager_runtime_cost_a_graph_does_not_pay():
    # Two marked 1000 us steps of a TF loop run eagerly, on one thread. Each runs 15 ops, one every 60 us: an
    # `EagerLocalExecute: <op>` row around its `KernelAndDeviceFunc::Run`. Ops that compute nothing run 10 us
    # (8 ReadVariableOp), 6 and 14 us (Identity): the eager runtime's per-op cost is their median, 10 us. Five
    # MatMuls run 50 us. Per step: ops 8*10 + 6 + 14 + 5*50 = 350 us; overhead between them 1000 - 350 = 650 us;
    # eager cost min(run, 10) summed: 8*10 + 6 + 10 + 5*10 = 146 us. After a graph: 350 - 146 = 204 us.
    rows = []
    ops = [("ReadVariableOp", 10)] * 8 + [("Identity", 6), ("Identity", 14)] + [("MatMul", 50)] * 5
    for i, t in enumerate((0, 1000)):
        rows.append({**host("step", t, 1000, "train"), "thread": 1, "step_id": i})
        for j, (op, run) in enumerate(ops):
            start = t + 20 + 60 * j
            rows.append({**host("other", start, run + 4, f"EagerLocalExecute: {op}"), "thread": 1})
            rows.append({**host("other", start + 2, run, "KernelAndDeviceFunc::Run"), "thread": 1})
    (b,) = [b for b in find_bottlenecks(analyze(profile(rows, "tensorflow"))) if b.id == "host_bound"]
    assert b.evidence["op_time_per_step_ns"] == 350 * US
    assert b.evidence["overhead_per_step_ns"] == 650 * US
    assert b.evidence["eager_dispatch_per_step_ns"] == 146 * US
    assert (b.projection.step_ns_before, b.projection.step_ns_after) == (1000 * US, 204 * US)
    assert "what an op that computes nothing takes to run here" in b.projection.assumption


def test_fractions_are_relative_to_the_device_span_not_a_longer_capture():
    rows = [host("cpu_op", 0, 10, "setup")]  # the capture starts 10 ms before the GPU work
    rows += [launch(10_000 + i * 100 + 40, 5, i) for i in range(10)]
    rows += [kernel(10_000 + i * 100 + 50, 50, i) for i in range(10)]  # 50 us kernel, then a 50 us host gap
    (bottleneck,) = [b for b in find_bottlenecks(analyze(profile(rows))) if b.id == "host_bound"]
    assert bottleneck.time_ns == 9 * 50 * US
    assert bottleneck.fraction == pytest.approx(9 * 50 / 950, abs=1e-4)  # rounded to 4 places


def test_copy_bytes_unknown_is_null_not_zero():
    copy = {
        "kind": "memcpy",
        "ts": 0,
        "dur": 10,
        "device": "GPU:0",
        "stream": 0,
        "copy_kind": "h2d",
        "src_memory": "unknown",
        "name": "Memcpy HtoD (Host -> Device)",
    }  # AMD: no bytes in the trace
    a = analyze(profile([copy, kernel(20, 10)]))
    h2d = a.copies[0].copies["h2d"]
    assert (h2d.count, h2d.bytes, h2d.unknown_bytes_count, h2d.bandwidth_gbps) == (1, None, 1, None)


def test_top_kernels_name_the_framework_op_that_launched_them():
    # aten::mm (External id 7) launches kernel gemm twice (correlations 1, 2); aten::add (8) launches add once;
    # a third gemm call has no known launch. Kineto links op -> launch by External id, launch -> kernel by
    # correlation.
    def row(r, ext):
        return {**r, "external_id": ext}

    rows = [
        row(host("cpu_op", 0, 20, "aten::mm"), 7),
        row(launch(1, 2, 1), 7),
        row(launch(5, 2, 2), 7),
        row(host("cpu_op", 30, 10, "aten::add"), 8),
        row(launch(31, 2, 3), 8),
        row(kernel(10, 50, 1, name="gemm"), -1),
        row(kernel(70, 50, 2, name="gemm"), -1),
        row(kernel(130, 50, 99, name="gemm"), -1),
        row(kernel(190, 5, 3, name="add"), -1),
    ]
    (stats,) = analyze(profile(rows)).kernels
    assert {t.name: (t.count, t.op) for t in stats.top} == {"gemm": (3, "aten::mm"), "add": (1, "aten::add")}
