"""Projections on the critical path (`analysis/path_projection.py`): hand-built paths whose step after a fix is
known, beside the step model's projection of the same fix; and on real before/after pairs, both projections."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from msgspec.structs import replace

from tests.analysis.test_projections import _model
from traceinsight.analysis.critical_path import PARTS, CriticalPath
from traceinsight.analysis.path_projection import PathEdit, path_edit, project_on_path
from traceinsight.analysis.step_model import fix, project
from traceinsight.findings import RULES
from traceinsight.rules import PATH_EDIT_OTHER_RANKS, PATH_EDITS


def _path(parts: dict[str, list[int]], other_rank_ns: list[int] | None = None) -> CriticalPath:
    """A path of the given ns per step by part (every other part 0); `other_rank_ns`: per step, that much of its
    `compute` on rank 1 (a segment of input 1)."""
    steps = len(next(iter(parts.values())))
    table = {p: np.array(parts.get(p, [0] * steps), np.int64) for p in PARTS}
    rows = [{"step": k, "start_ns": 0, "end_ns": ns, "input_id": 1} for k, ns in enumerate(other_rank_ns or []) if ns]
    segments = pd.DataFrame(rows, columns=["step", "start_ns", "end_ns", "input_id"])
    return CriticalPath(
        step_ids=list(range(steps)),
        step_ns=sum(table.values()),
        parts=table,
        segments=segments,
        crossings=np.zeros(steps, np.int64),
    )


def test_a_wait_on_the_path_is_saved_whole() -> None:
    """Step 100: 40 waiting for input, 60 of host ops; the device is busy 50. Removing the wait leaves 60, as the
    step model says too."""
    path = _path({"input_wait": [40], "cpu_op": [60]})
    model = _model([100], busy=[50], floor=[60])
    hidden = fix(model, idle_ns=np.array([40.0]))
    assert project_on_path(path, model, [PathEdit(hidden, ("input_wait",))], 0) == 60
    assert project(model, [hidden]).step_ns_after == 60


def test_faster_kernels_off_the_path_save_nothing() -> None:
    """An input-bound step: 50 waiting for input, 50 of host ops under which the kernels (40 busy) run. Kernels
    twice as fast save the step nothing, since none of them is on the path; the step model takes their 20 off."""
    path = _path({"input_wait": [50], "cpu_op": [50]})
    model = _model([100], busy=[40], floor=[50])
    faster = fix(model, device_ns=np.array([20.0]), kernel_ns=np.array([20.0]))
    faster = PathEdit(replace(faster, shrinks=True), ("compute",))
    assert project_on_path(path, model, [faster], 0) == 100
    assert project(model, [faster.fix]).step_ns_after == 80


def test_faster_kernels_on_the_path_save_their_share() -> None:
    """A GPU-bound step: 80 of compute on the path, 20 of launches. Kernels (80 busy) twice as fast: 40 off."""
    path = _path({"compute": [80], "launch": [20]})
    model = _model([100], busy=[80], floor=[20])
    faster = fix(model, device_ns=np.array([40.0]), kernel_ns=np.array([40.0]))
    faster = replace(faster, shrinks=True)
    assert project_on_path(path, model, [PathEdit(faster, ("compute",))], 0) == 60


def test_two_fixes_of_the_same_stretches_take_them_once() -> None:
    """30 of host stretches on the path; two fixes each claim 25 of them: together they save 30, not 50."""
    path = _path({"host_gap": [30], "compute": [70]})
    model = _model([100], busy=[70], floor=[0])
    one = PathEdit(fix(model, idle_ns=np.array([25.0])), ("host_gap",))
    assert project_on_path(path, model, [one], 0) == 75
    assert project_on_path(path, model, [one, one], 0) == 70


def test_a_fix_never_leaves_less_than_the_devices_own_work() -> None:
    """The wait is on the path (60 of 100), but the device is busy 70: the step after is 70, not 40."""
    path = _path({"input_wait": [60], "compute": [40]})
    model = _model([100], busy=[70], floor=[0])
    assert project_on_path(path, model, [PathEdit(fix(model, idle_ns=np.array([60.0])), ("input_wait",))], 0) == 70


def test_a_straggler_saves_at_most_the_paths_time_on_other_ranks() -> None:
    """Two steps of 100; the path spends 10 and 40 on rank 1. A straggler fix of 30 a step saves 10 and 30."""
    path = _path({"compute": [100, 100]}, other_rank_ns=[10, 40])
    model = _model([100, 100], busy=[50, 50], floor=[0, 0])
    straggler = path_edit("straggler", fix(model, idle_ns=np.array([30.0, 30.0])))
    assert straggler is not None
    assert project_on_path(path, model, [straggler], 0) == (90 + 70) // 2


def test_the_path_says_nothing_where_it_holds_too_little() -> None:
    """A path 60 % idle (nothing the trace holds runs), or of other steps than the model's, projects nothing."""
    model = _model([100], busy=[40], floor=[0])
    edit = PathEdit(fix(model, idle_ns=np.array([40.0])), ("input_wait",))
    assert project_on_path(_path({"idle": [60], "input_wait": [40]}), model, [edit], 0) is None
    assert project_on_path(_path({"input_wait": [50], "cpu_op": [40]}), model, [edit], 0) is None


def test_an_input_wait_the_path_never_passed_projects_nothing() -> None:
    """The input waits lie on a thread the walk did not enter (the path: host ops and kernels only): the path cannot
    tell whether they were on it, so it says nothing, where faster kernels off the same path save nothing."""
    path = _path({"cpu_op": [60], "compute": [40]})
    model = _model([100], busy=[40], floor=[60])
    assert project_on_path(path, model, [PathEdit(fix(model, idle_ns=np.array([20.0])), ("input_wait",))], 0) is None
    faster = replace(fix(model, device_ns=np.array([20.0]), kernel_ns=np.array([20.0])), shrinks=True)
    assert project_on_path(_path({"cpu_op": [100]}), model, [PathEdit(faster, ("compute",))], 0) == 100


def test_every_edit_names_parts_of_the_path() -> None:
    rule_ids = {rule.id for rule in RULES}
    for rule, parts in PATH_EDITS.items():
        assert rule in rule_ids and parts and set(parts) <= {*PARTS, PATH_EDIT_OTHER_RANKS}, rule


def _real(path: Path) -> list:
    from traceinsight.analysis import analyze
    from traceinsight.discover import discover
    from traceinsight.findings import find_bottlenecks
    from traceinsight.load import load_run

    return find_bottlenecks(analyze(load_run(discover(path), path)))


@pytest.mark.parametrize("pair", ["tf_data_parallel", "torch_dataloader_workers", "tf_eager_vs_function"])
def test_both_projections_are_within_10_percent_of_the_rerun(pair: str) -> None:
    """Our own before/after pairs (sample_traces/pairs/README.md): the fixed run's mean step, read from its own
    ProfilerStep / train-step events, against the step model's and the critical path's projection."""
    from tools.projection_accuracy import PAIRS, _analyze

    before = _real(PAIRS / pair / "before")
    measured = _analyze(PAIRS / pair / "after").steps.mean_ns
    assert measured
    fixed = next(b for b in before if b.id in ("input_bound", "host_bound"))
    p = fixed.projection
    assert p.path_step_ns_after is not None
    for projected in (p.step_ns_after, p.path_step_ns_after):
        assert abs(projected / measured - 1) <= 0.10, (pair, projected, measured)
