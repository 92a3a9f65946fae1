"""A fresh real TensorFlow CPU profile: the file the profiler writes, and what traceinsight reads from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceinsight.readers.xplane_schema import XSpace

STEPS = 3


@pytest.fixture(scope="module")
def xplane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.make_tf_samples import profile_tf_input_pipeline

    return profile_tf_input_pipeline(tmp_path_factory.mktemp("tf"), tuned=False, steps=STEPS)


@pytest.mark.slow
def test_profiler_writes_xspace_with_step_markers(xplane: Path) -> None:
    assert xplane.name == "sample.xplane.pb"
    assert xplane.parent.parent.name == "profile" and xplane.parent.parent.parent.name == "plugins"
    space = XSpace()
    space.ParseFromString(xplane.read_bytes())
    planes = {p.name: p for p in space.planes}
    cpu = planes["/host:CPU"]
    steps, waits = {}, []
    for line in cpu.lines:
        for ev in line.events:
            name = cpu.event_metadata[ev.metadata_id].name
            stats = {cpu.stat_metadata[s.metadata_id].name: s.int64_value for s in ev.stats}
            if name == "train":
                steps[stats["step_num"]] = (line.timestamp_ns * 1000 + ev.offset_ps, ev.duration_ps)
            elif name == "IteratorGetNextOp::DoCompute":
                waits.append((line.timestamp_ns * 1000 + ev.offset_ps, ev.duration_ps))
    run_info = json.loads((xplane.parents[3] / "run_info.json").read_text())
    assert sorted(steps) == run_info["step_nums"] and len(steps) == STEPS
    assert len(run_info["profiled_step_wall_ms"]) == STEPS
    # Input-bound: the GetNext waits inside the steps fill most of the step time.
    inside = sum(d for s, d in waits if any(t <= s < t + dur for t, dur in steps.values()))
    assert inside > 0.8 * sum(dur for _, dur in steps.values())
    assert "profile_start_time" in {
        planes["Task Environment"].stat_metadata[s.metadata_id].name for s in planes["Task Environment"].stats
    }


@pytest.mark.slow
def test_reader_finds_steps_and_input_waits(xplane: Path) -> None:
    from traceinsight.readers.xspace import read_xspace

    events = read_xspace(xplane).events
    steps = events[events["kind"] == "step"]
    assert sorted(steps["step_id"]) == json.loads((xplane.parents[3] / "run_info.json").read_text())["step_nums"]
    assert (events["kind"] == "input_wait").sum() >= STEPS
