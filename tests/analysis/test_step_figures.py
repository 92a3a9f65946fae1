"""Headline figures over the steps, for the devices that ran work, with a warning when too few steps were
captured (issue 19: GPU-multi-worker has 1 step per GPU in a 2.65 s window)."""

import pytest

from tests.analysis.test_real_traces import _plain_xspace
from tests.conftest import shared_trace
from traceinsight.analysis import analyze
from traceinsight.analysis.ledger import IDLE_PARTS
from traceinsight.assemble import report_of
from traceinsight.discover import discover
from traceinsight.load import load_run
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.render.terminal import verdict_sentence

MULTI_WORKER = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


@pytest.fixture(scope="module")
def multi_worker():
    path = shared_trace(MULTI_WORKER).parent
    analysis = analyze(load_run(discover(path), path))
    return analysis, report_of(analysis)


def _steps_lines(path):
    """Per GPU plane, the durations (ns) of its Steps line's events, read from the raw protobuf."""
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    return {
        plane.name.removeprefix("/device:"): [ev.duration_ps / 1000 for ev in line.events]
        for plane in space.planes
        for line in plane.lines
        if plane.name.startswith("/device:GPU") and line.name == "Steps" and len(line.events)
    }


def test_few_steps_warning(multi_worker):
    _, report = multi_worker
    assert report.steps.count == 1
    assert report.warnings["few_steps"] == 1
    assert "profile at least 3 steps" in verdict_sentence(report)


def test_step_spread_across_devices(multi_worker):
    _, report = multi_worker
    lines = _steps_lines(shared_trace(MULTI_WORKER))
    assert sorted(lines) == ["GPU:4", "GPU:6"]
    want = {dev: sum(d) / len(d) for dev, d in lines.items()}
    got = report.steps.per_device_mean_ns
    assert got == {dev: pytest.approx(mean, abs=1) for dev, mean in want.items()}
    assert report.steps.device_spread_ns == pytest.approx(max(want.values()) - min(want.values()), abs=2)
    assert 1e6 < report.steps.device_spread_ns < 2e6  # GPU:4 19.9 ms, GPU:6 21.3 ms


def test_headline_figures_leave_out_devices_that_ran_no_kernel(multi_worker):
    """GPU:1 ran copies only: it is in devices[] (it has activity) but not in the step figures."""
    analysis, report = multi_worker
    plain = _plain_xspace(shared_trace(MULTI_WORKER))
    assert "GPU:1" in plain and plain["GPU:1"][1] == 0  # no kernel
    assert analysis.step_model.device_count == 2
    # GPU:1 (copies only) has no ledger of its own in the step figures: the run's idle is the two kernel devices'.
    assert {d.id for d in report.ledger.devices} >= {d.id for d in report.devices if d.kernels.count}
    assert report.totals.idle_fraction == pytest.approx(analysis.ledger.share(IDLE_PARTS), abs=1e-4)
    assert f"{report.totals.step_gpu_util * 100:.1f} %" in verdict_sentence(report)
