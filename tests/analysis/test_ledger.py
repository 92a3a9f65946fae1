"""The ledger: every nanosecond of each step on each device in exactly one part, every per-step figure read from it,
and findings that never claim the same time twice (issue 34).

A hand-built step with an answer worked out by hand, then properties checked on every run of `../shared/traces`
and `sample_traces`, on the analysis, on the JSON and on the rendered terminal and HTML."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.analysis.builders import US, host, kernel, launch, profile
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES
from traceinsight.analysis import analyze
from traceinsight.analysis.ledger import IDLE_PARTS, KERNEL_PARTS
from traceinsight.assemble import report_of
from traceinsight.discover import choose_run, find_runs
from traceinsight.findings import _claimable, _found
from traceinsight.load import load_run
from traceinsight.render.format import fmt_pct
from traceinsight.render.terminal import render_terminal

TOLERANCE_NS = 1_000  # 1 us


def _step(ts: float, dur: float, step_id: int) -> dict:
    return {"kind": "step", "ts": ts, "dur": dur, "name": f"ProfilerStep#{step_id}", "step_id": step_id}


def test_hand_built_step_in_parts():
    """One 100 us step: a kernel 0-20, an all-reduce 20-30, an H2D copy 25-35 (5 us of it alone), the host waits for
    input 40-60 inside the gap 35-70 (whose rest, 15 us, the host spends launching), a kernel 70-80 and nothing
    after it: compute 30, collective 10, H2D 5, input wait 20, host launch 15, unexplained 20."""
    rows = [
        _step(0, 100, 1),
        launch(0, 1, 1),
        kernel(0, 20, corr=1, name="volta_sgemm"),
        launch(1, 1, 2),
        kernel(20, 10, corr=2, name="ncclKernel_AllReduce_RING_LL_Sum_float"),
        {"kind": "memcpy", "ts": 25, "dur": 10, "device": "GPU:0", "copy_kind": "h2d", "name": "Memcpy HtoD"},
        host("input_wait", 40, 20, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
        launch(65, 7, 3),
        kernel(70, 10, corr=3, name="elementwise_kernel"),
    ]
    a = analyze(profile(rows))
    (device,) = a.ledger.devices
    got = {part: int(v.sum()) // US for part, v in device.parts.items() if v.sum()}
    assert got == {
        "compute": 30,
        "collective_transfer": 10,
        "copy_h2d": 5,
        "input_wait": 20,
        "host_launch": 15,
        "unexplained": 20,
    }
    report = report_of(a)
    assert report.totals.gpu_util == pytest.approx(0.40)
    assert report.totals.idle_fraction == pytest.approx(0.55)
    assert report.devices[0].gpu_util == report.totals.gpu_util
    assert report.steps.items[0].breakdown["input_wait"] == 20 * US


@pytest.fixture(scope="module")
def every_run() -> list[tuple[str, object, object]]:
    """(name, analysis, report) of every run of ../shared/traces and sample_traces."""
    out = []
    for root in (r for r in (SHARED_TRACES, SAMPLE_TRACES) if r.is_dir()):
        for run in find_runs(root):
            analysis = analyze(load_run(run, root))
            out.append((f"{root.name}/{run.name}", analysis, report_of(analysis)))
    if not out:
        pytest.skip("no traces")
    return out


def test_every_ledger_sums_to_its_steps(every_run):
    """Per step and device, the parts sum to the step window within 1 us, and none is negative."""
    checked = 0
    for name, analysis, _ in every_run:
        for device in analysis.device_ledgers:
            total = sum(device.parts.values())
            assert np.abs(total - device.step_ns).max() <= TOLERANCE_NS, (name, device.device)
            assert min(v.min() for v in device.parts.values()) >= 0, (name, device.device)
            checked += 1
    assert checked >= 20


def test_one_figure_for_one_word(every_run):
    """GPU-Util and idle are the ledger's, in the JSON, the device table, the step table, the idle causes, and the
    rendered terminal; the step table's input wait is the input verdict's."""
    for name, analysis, report in every_run:
        if not report.ledger.devices:
            continue
        util = analysis.ledger.share(KERNEL_PARTS)
        idle = analysis.ledger.share(IDLE_PARTS)
        assert report.totals.gpu_util == pytest.approx(util, abs=1e-4), name
        assert report.totals.idle_fraction == pytest.approx(idle, abs=1e-4), name
        assert report.totals.gpu_util + report.totals.idle_fraction <= 1.0001, name
        for device in report.devices:
            row = report.ledger.device(device.id)
            if row is not None:
                assert device.idle_fraction == row.idle_fraction, (name, device.id)
        total = report.steps.breakdown_total
        step_total = sum(s.dur_ns for s in report.steps.items)
        assert abs(sum(total.values()) - step_total) <= TOLERANCE_NS * len(report.steps.items) * 13, name
        if report.input_pipeline.wait_ns and len(analysis.ledger.devices) == 1:
            assert total["input_wait"] == pytest.approx(report.input_pipeline.wait_ns, abs=TOLERANCE_NS), name
        text = render_terminal(report)
        headline = re.search(r"(?:GPU|TPU)-Util ([\d.]+ %) of step time \(devices idle ([\d.]+ %)", text)
        if headline:
            assert headline.group(1) == fmt_pct(report.totals.gpu_util), name
            assert headline.group(2) == fmt_pct(report.totals.idle_fraction), name
            for device in report.devices:
                if device.idle_fraction is not None and len(device.id) < 22:
                    assert re.search(rf"{re.escape(device.id)}\s+{re.escape(fmt_pct(device.idle_fraction))}", text)


def _claims_are_disjoint(analysis, name: str) -> bool:
    """No ledger part is claimed past its size, and a step's claims do not add up past the step; whether any
    finding claimed anything."""
    claimable = _claimable(analysis)
    claimed: dict[str, np.ndarray] = {}
    for _, finding, *_ in _found(analysis):
        for part, ns in finding.claims.items():
            claimed[part] = claimed.get(part, 0) + ns
    for part, ns in claimed.items():
        assert (ns <= claimable[part] + 1).all(), (name, part)
    if claimed:
        assert (sum(claimed.values()) <= analysis.step_model.step_ns + 1).all(), name
    return bool(claimed)


def test_findings_claim_disjoint_time(every_run):
    """No ledger part is claimed past its size, and the claims of a step never add up past the step."""
    checked = sum(_claims_are_disjoint(analysis, name) for name, analysis, _ in every_run)
    assert checked >= 10


def test_projections_keep_what_their_fixes_cannot_remove(every_run):
    """A measured stall fix keeps every kernel and copy: the projected step is at least the device's busy time
    less what the fix removes of it, and never below the host's own work it does not remove."""
    for name, analysis, _ in every_run:
        m = analysis.step_model
        for rule, finding, projection, *_ in _found(analysis):
            if not rule.projects or finding.assumption is not None:
                continue
            kept_busy = np.clip(m.device_busy_ns - finding.fix.device_ns, 0, None)
            floor = np.clip(m.host_floor_ns - finding.fix.host_ns, 0, None)
            least = float(np.mean(np.maximum(kept_busy, np.minimum(floor, m.step_ns))))
            assert projection.step_ns_after >= least - TOLERANCE_NS, (name, rule.id)


def _run_analysis(path):
    (run,) = find_runs(path)
    return analyze(load_run(run, path))


def test_a_straggler_wait_is_not_claimed_again_by_small_batch():
    """sleep_rank1 (rank 1 sleeps 30 ms in its data step): rank 0's 31.4 ms a step of waiting is the straggler's;
    small_batch may only claim the rest of the 41.7 ms step, so together they stay inside the step."""
    a = _run_analysis(SAMPLE_TRACES / "distributed" / "sleep_rank1")
    found = {rule.id: (finding, cost) for rule, finding, _, _, cost in _found(a)}
    wait = found["straggler"][1]
    assert wait == pytest.approx(31.4e6, rel=0.01)
    step = a.step_model.mean(a.step_model.step_ns)
    claimed = sum(cost for _, cost in found.values())
    assert claimed <= step
    if "small_batch" in found:
        assert found["small_batch"][1] <= step - wait


def test_a_waiting_cpu_rank_is_reported(shared_traces):
    """hta/cpu_only: one gloo rank of a pair, one 210 ms step; the time its all-reduces take beyond the shortest of
    the same size is waiting for the rank not in the trace: collective_wait, with its cost and no projection (it used
    to say "no bottleneck"); the collectives' figures a step fit in the step (they used to be 538 ms and 1.6 s)."""
    a = _run_analysis(shared_traces / "hta" / "cpu_only")
    report = report_of(a)
    (top,) = [b for b in report.bottlenecks if b.id == "collective_wait"]
    assert top.projection.basis == "none" and top.time_ns > 0
    c = report.collectives
    assert c.wait_per_step_ns + c.transfer_per_step_ns <= report.steps.mean_ns
    assert top.time_ns == c.wait_per_step_ns * report.steps.count


def test_a_cut_trace_is_not_called_cpu_only(tmp_path, shared_traces):
    """The ResNet trace cut at 500 kB (`head -c 500000`) keeps host ops only, though its header lists the GPUs: the
    headline says the device events are missing, and no CPU-only verdict or finding is given."""
    import gzip

    source = next((shared_traces / "kineto" / "resnet50_num_workers_0").glob("*.json.gz"))
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "worker0.pt.trace.json").write_bytes(gzip.decompress(source.read_bytes())[:500_000])
    a = _run_analysis(cut)
    report = report_of(a)
    text = render_terminal(report)
    assert "The device events are missing" in text
    assert "No accelerator activity" not in text
    assert report.bottlenecks == []
    from traceinsight.render.html import render_html

    assert "CPU-only run: the host is the device" not in render_html(report, a)


def test_tpu_host_offload_copies_are_transfers_not_compute(shared_traces):
    """xprof/test_xplanes (TPU v6e, JAX): most of the XLA Ops line is `copy-start` / `copy-done` of host offloading
    (shapes in memory space S(5)). They are copies: TPU-Util counts only the other ops, which is the share of the
    step their union covers (computed here from the event rows by name), and the top finding says the device is
    busy moving data."""
    from traceinsight.intervals import union

    (run,) = find_runs(shared_traces / "xprof" / "test_xplanes")
    profile = load_run(run, shared_traces / "xprof" / "test_xplanes")
    events = profile.events
    names = events["name"].astype(str)
    on_ops = events["device"].notna().to_numpy() & events["kind"].isin(["kernel", "memcpy"]).to_numpy()
    copies = on_ops & names.str.match(r"%?copy-(?:start|done)\b").to_numpy()
    assert copies.sum() > 0 and (events["kind"].to_numpy()[copies] == "memcpy").all()
    a = analyze(profile)
    report = report_of(a)
    starts, ends = a.steps.bounds()
    for device in a.ledger.devices:
        mine = on_ops & ~copies & (events["device"] == device.device).to_numpy()
        ts = events["ts_ns"].to_numpy()[mine]
        compute = union(ts, ts + events["dur_ns"].to_numpy()[mine]).covered_between(starts, ends)
        assert int(device.parts["compute"].sum()) == int(compute.sum()), device.device
    assert report.bottlenecks[0].id == "transfer_bound"
    assert "TPU-Util" in render_terminal(report) and "GPU-Util" not in render_terminal(report)


def test_each_xspace_gpu_is_judged_over_its_own_steps(shared_traces):
    """xprof/GPU-multi-worker: GPU:4 and GPU:6 each have a Steps line on their own clock (the run's steps are
    GPU:4's). Each device's idle share is taken over its own step, computed here from its rows: GPU:6 used to be
    reported 100 % idle over GPU:4's window, and the headline was the mean of that."""
    from traceinsight.intervals import union

    path = shared_traces / "xprof" / "GPU-multi-worker"
    (run,) = find_runs(path)
    profile = load_run(run, path)
    events = profile.events
    report = report_of(analyze(profile))
    for device in ("GPU:4", "GPU:6"):
        mine = (events["device"] == device).to_numpy()
        step = events[mine & (events["kind"] == "step").to_numpy()].iloc[0]
        work = events[mine & events["kind"].isin(["kernel", "memcpy", "memset"]).to_numpy()]
        ts = work["ts_ns"].to_numpy()
        start, end = np.array([step["ts_ns"]]), np.array([step["ts_ns"] + step["dur_ns"]])
        busy = union(ts, ts + work["dur_ns"].to_numpy()).covered_between(start, end)[0]
        (row,) = [d for d in report.devices if d.id == device]
        assert row.idle_fraction == pytest.approx(1 - busy / step["dur_ns"], abs=1e-4), device
    assert max(d.idle_fraction for d in report.devices if d.idle_fraction is not None) < 0.5


@pytest.mark.parametrize(
    "relative",
    ["kineto/resnet50_num_workers_0", "xprof/GPU-multi-worker", "xprof/test_xplanes", "inference/vllm_decode_full"],
)
def test_the_page_gives_one_figure_for_one_word(shared_traces, relative):
    """On the rendered page, the headline's GPU-Util and idle are the totals, and each device row of the device
    table and of the idle-causes table shows the device's ledger shares."""
    from traceinsight.render.html import render_html
    from traceinsight.render.wording import util_label

    path = shared_traces / relative
    a = analyze(load_run(choose_run(path).run, path))
    report = report_of(a)
    page = render_html(report, a)
    word = util_label(report)
    util, idle = fmt_pct(report.totals.gpu_util), fmt_pct(report.totals.idle_fraction)
    assert f"{word} {util} of step time (devices idle {idle} of it)" in page
    devices = page[
        page.index('<section id="devices">') : page.index("</section>", page.index('<section id="devices">'))
    ]
    causes = page[page.index('<table id="idle-causes">') :]
    for d in report.devices:
        if d.idle_fraction is None:
            continue
        cells = f'<td class="num">{fmt_pct(d.gpu_util)}</td><td class="num">{fmt_pct(d.idle_fraction)}</td>'
        assert cells in devices, d.id
        assert f'<td>{d.id}</td><td class="num">{fmt_pct(d.idle_fraction)}</td>' in causes, d.id


@pytest.mark.parametrize("fmt", ["synthetic_gpu", "synthetic_gpu_xspace"])
@pytest.mark.parametrize("scenario", ["healthy", "input_bound", "launch_bound", "sync_heavy", "h2d_pageable"])
def test_ledger_equals_the_synthetic_ground_truth(fmt, scenario):
    """The synthetic scenarios' ground truth (`tools/synth.py`, plain interval arithmetic on the spec): the busy
    parts are the device's busy time inside the steps, and the input wait is the host waiting for input with no
    runtime call or sync running and the device idle."""
    import json

    folder = SAMPLE_TRACES / fmt / scenario
    truth = json.loads((folder / "ground_truth.json").read_text())["devices"]["GPU:0"]
    (run,) = find_runs(folder)
    (device,) = analyze(load_run(run, folder)).ledger.devices
    busy = sum(int(device.parts[p].sum()) for p in device.parts if p not in IDLE_PARTS)
    assert busy == truth["busy_in_steps_ns"]
    assert int(device.parts["input_wait"].sum()) == truth["input_wait_in_steps_ns"]


@pytest.mark.parametrize(("runtime", "missing"), [(False, 0), (True, 3)])
def test_gpu_calls_without_device_events_are_not_cpu_only(runtime, missing):
    """A machine with a GPU (the trace lists it) running a CPU model is CPU-only; a process that called the GPU
    (three launches) but whose trace holds no device event is not: its device events are missing."""
    from traceinsight.events import DeviceInfo
    from traceinsight.rules import DEVICE_EVENTS_CUT

    rows = [_step(0, 1000, 1), host("cpu_op", 10, 900, "aten::mm")]
    rows += [launch(100 + 200 * i, 5, i + 1) for i in range(3)] if runtime else []
    p = profile(rows)
    p.devices = {"GPU:0": DeviceInfo("GPU:0")}
    report = report_of(analyze(p))
    assert report.warnings.get(DEVICE_EVENTS_CUT, 0) == missing
    assert ("No accelerator activity" in render_terminal(report)) is not runtime


# What PyTorch calls on a machine with a GPU as it starts, whatever the model runs on (particle_transformer's CPU
# activities trace: these five, the sync 43 µs): they give the device no work.
_SET_UP_CALLS = [
    host("runtime", 2, 400, "cudaGetDeviceCount"),
    host("runtime", 410, 8, "cudaDeviceGetStreamPriorityRange"),
    host("runtime", 420, 1, "cudaStreamIsCapturing"),
    host("runtime", 430, 1290, "cudaGetDeviceProperties"),
    host("sync", 1730, 43, "cudaDeviceSynchronize"),
]


@pytest.mark.parametrize(
    ("used", "missing", "free"),
    [
        ([], 0, 25),
        ([host("sync", 1800, 2_000, "cudaDeviceSynchronize")], 1, 25),  # waited 2 ms for work the trace lacks
        ([launch(1800, 5, 1, "hipLaunchKernel")], 1, 24),  # inside the first op
        ([launch(1800, 5, 1, "cuLaunchKernel"), launch(1810, 5, 2, "cudaGraphLaunch")], 2, 24),
        ([host("runtime", 1800, 90, "cudaMemcpyAsync"), host("runtime", 1900, 9, "cudaMemsetAsync")], 2, 24),
    ],
)
def test_set_up_calls_alone_leave_a_cpu_run_cpu_only(used, missing, free):
    """A process that only asked the GPU what it is (`_SET_UP_CALLS`) ran on the CPU: judged CPU-only, its op named.
    One that gave the device work (a launch, a copy, a memset) or waited for it (a sync of a millisecond or more)
    used it: its device events are missing, and only its ops that gave the device nothing are judged."""
    from traceinsight.rules import DEVICE_EVENTS_CUT

    rows = [*_SET_UP_CALLS, _step(1_800, 8_200, 1), *used]
    rows += [host("cpu_op", 1_800 + 328 * i, 328, "aten::mkldnn_convolution") for i in range(25)]  # to the step's end
    report = report_of(analyze(profile(rows)))
    assert report.warnings.get(DEVICE_EVENTS_CUT, 0) == missing
    assert ("No accelerator activity" in render_terminal(report)) is not bool(missing)
    (top,) = report.bottlenecks
    assert top.id == "host_bound" and top.culprit is not None
    if missing:  # an op with a call inside it (the first) gave the device work: the others gave it nothing
        assert top.title.endswith("in ops that gave the device nothing to do")
    else:
        assert top.title.endswith("and no accelerator ran")
    assert (top.culprit.name, top.culprit.count, top.culprit.ns) == ("aten::mkldnn_convolution", free, free * 328 * US)


def _device_unrecorded_run(op_rows: list[dict]) -> object:
    """Two 10 ms steps of a process that launched kernels the trace does not hold (no device row): its device
    events are missing."""
    rows = [_step(0, 10_000, 1), _step(10_000, 10_000, 2)]
    rows += [launch(9_900 + 10_000 * i, 50, i + 1) for i in range(2)]  # outside every op: dispatch of its own
    return profile(rows + op_rows)


def test_device_unrecorded_run_is_judged_by_its_own_cpu_work():
    """Device events missing, yet 7 ms of each 10 ms step is CPU ops that gave the device nothing (no call inside):
    that work bounds the step whatever the device did. The op with the most self time is named, its figures those
    of the rows: 2 x 6 ms of aten::normal_, less the 0.5 ms of aten::empty inside each."""
    ops = []
    for step in range(2):
        at = 10_000 * step
        ops += [host("cpu_op", at + 100, 6_000, "aten::normal_"), host("cpu_op", at + 200, 500, "aten::empty")]
        ops += [host("cpu_op", at + 6_200 + 50 * i, 40, "aten::add") for i in range(20)]  # 20 x 40 µs
    report = report_of(analyze(_device_unrecorded_run(ops)))
    (top,) = report.bottlenecks
    assert top.id == "host_bound" and top.culprit is not None
    assert (top.culprit.name, top.culprit.count, top.culprit.ns) == ("aten::normal_", 2, 2 * 5_500 * US)
    assert top.time_ns == 2 * (6_000 + 20 * 40) * US  # the union of the ops, over both steps
    assert "the main bottleneck is host_bound" in render_terminal(report)


def test_device_unrecorded_run_whose_ops_dispatch_is_not_judged():
    """The same ops, each (or an op it runs inside) launching a kernel: their host time is dispatch to a device the
    trace does not show, so nothing is judged."""
    ops = []
    for step in range(2):
        at = 10_000 * step
        ops += [host("cpu_op", at + 100, 6_000, "aten::linear"), host("cpu_op", at + 200, 500, "aten::addmm")]
        ops += [launch(at + 300, 20, 100 + step)]  # inside aten::addmm, two levels down from aten::linear
        ops += [host("cpu_op", at + 6_200 + 50 * i, 40, "aten::add") for i in range(20)]
        ops += [launch(at + 6_210 + 50 * i, 10, 200 + 100 * step + i) for i in range(20)]
    report = report_of(analyze(_device_unrecorded_run(ops)))
    assert report.bottlenecks == []


def _hand_built_traces() -> dict[str, object]:
    """The hand-built traces of the tests: one per rule that fires (`test_findings.FIRES`), the worked-out scenario
    and the exported run."""
    from tests.analysis.test_scenario import ROWS
    from tests.render.test_trace_export import _rows
    from tests.test_findings import FIRES

    traces = {f"fires:{rule}": make for rule, make in FIRES.items()}
    traces["scenario"] = lambda: profile(ROWS)
    traces["trace_export"] = lambda: profile(_rows())
    return traces


@pytest.mark.parametrize("name", sorted(_hand_built_traces()))
def test_the_ledger_holds_on_the_tests_own_traces(name):
    """The properties checked on the real traces, on every hand-built trace of the tests: each device's parts sum to
    its steps, no part is claimed past its size, and the claims stay inside the step."""
    a = analyze(_hand_built_traces()[name]())
    for device in a.device_ledgers:
        assert np.abs(sum(device.parts.values()) - device.step_ns).max() <= TOLERANCE_NS
        assert min(v.min() for v in device.parts.values()) >= 0
    _claims_are_disjoint(a, name)


def test_every_part_has_its_words_in_order():
    """The words for people (`result.PART_WORDS`, `PART_MEANINGS`, read by the renderers, which import no analysis)
    name exactly the ledger's parts, in its order."""
    from traceinsight.analysis.ledger import SHOWN_PARTS
    from traceinsight.result import PART_MEANINGS, PART_WORDS

    assert tuple(PART_WORDS) == SHOWN_PARTS == tuple(PART_MEANINGS)
