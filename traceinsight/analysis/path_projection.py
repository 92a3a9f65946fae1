"""A fix's projected step on the critical path: each step's path less what the fix removes of the path's own
stretches, and no shorter than what the fix leaves of the device's busy time and the host's floor.

Why: the step model takes a fix's whole saving off the step. A fix saves only what of its time lies on the
critical path: an input load hidden behind device work, or a wait beside the path, costs the step nothing, and
once a fix empties the path's stretches it removes, the rest of the path (or the device's own work) is what the step
takes. The walk keeps each node's last arrival, not every edge, so the graph is not laid out again: each edit is
a removal from the path's stretches of the parts it names (`rules.PATH_EDITS`), and the projection is the longest of
the chains the trace holds after it (the edited path, the device's busy time, the host's floor). So it is never
below the step model's projection; its saving is at most the step model's.
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceinsight.analysis.critical_path import CriticalPath
from traceinsight.analysis.step_model import Fix, StepModel, bounded_step, kernel_time_kept
from traceinsight.rules import (
    PATH_EDIT_OTHER_RANKS,
    PATH_EDITS,
    PATH_PROJECTION_MIN_KNOWN,
    PATH_SEEN_WHEREVER_THEY_ARE,
)


class PathEdit(msgspec.Struct, frozen=True):
    """One fix as an edit of the path: the ns a step it removes (`Fix`), from which of the path's parts."""

    fix: Fix
    parts: tuple[str, ...]


def path_edit(rule_id: str, fix: Fix) -> PathEdit | None:
    """The rule's fix as an edit of the path (`rules.PATH_EDITS`); None for a rule with no edit there."""
    parts = PATH_EDITS.get(rule_id)
    return PathEdit(fix, parts) if parts else None


def _stretches(path: CriticalPath, part: str, step_input: int) -> np.ndarray:
    """ns per step of the path in `part`, or, for `PATH_EDIT_OTHER_RANKS`, on ranks other than the step input's."""
    if part != PATH_EDIT_OTHER_RANKS:
        return path.parts[part].astype(np.float64)
    seg = path.segments
    other = seg["input_id"].to_numpy() != step_input
    per_step = np.zeros(len(path.step_ns), np.float64)
    dur = (seg["end_ns"].to_numpy() - seg["start_ns"].to_numpy())[other]
    np.add.at(per_step, seg["step"].to_numpy()[other], dur)
    return per_step


def _unseen(edit: PathEdit, left: dict[str, np.ndarray]) -> bool:
    """The edit removes time from host stretches the path never passed (`rules.PATH_SEEN_WHEREVER_THEY_ARE`): the
    walk visits the threads that end last, so it cannot tell whether that time would have been on the path."""
    removes = float((edit.fix.idle_ns + edit.fix.device_ns).sum()) > 0
    seen_anyway = any(part in PATH_SEEN_WHEREVER_THEY_ARE for part in edit.parts)
    return removes and not seen_anyway and not any(left[part].any() for part in edit.parts)


def known_share(path: CriticalPath) -> float:
    """Of the steps' path, the share in stretches the trace holds (not `idle`: nothing the trace holds runs)."""
    total = float(path.step_ns.sum())
    return 1.0 - float(path.parts["idle"].sum()) / total if total > 0 else 0.0


def project_on_path(path: CriticalPath, model: StepModel, edits: list[PathEdit], step_input: int) -> int | None:
    """The mean step once every edit is applied, one after another, on each step's path (ns); None where the path
    cannot say: no path for these steps, an edit the path cannot make, or a path that holds under
    `PATH_PROJECTION_MIN_KNOWN` of its steps' time (the rest is time the trace does not hold), or an edit of host
    stretches the path never passed (`_unseen`)."""
    steps = len(path.step_ns)
    same_steps = steps == model.count and np.array_equal(path.step_ns, model.step_ns)
    if not edits or not steps or not same_steps or known_share(path) < PATH_PROJECTION_MIN_KNOWN:
        return None
    left = {part: _stretches(path, part, step_input) for edit in edits for part in edit.parts}
    if any(_unseen(edit, left) for edit in edits):
        return None
    saved = np.zeros(steps)
    device = np.zeros(steps)
    host = np.zeros(steps)
    kept = np.ones(steps)
    for edit in edits:
        f = edit.fix
        if f.shrinks:  # faster kernels: each of the path's kernels by the share of kernel time the fix takes
            kept *= kernel_time_kept(model, f)
            continue
        want = f.idle_ns + f.device_ns
        for part in edit.parts:  # the fix's time, taken from its parts on the path while they last
            take = np.minimum(want, left[part])
            left[part] = left[part] - take
            want = want - take
            saved += take
        device += f.device_ns
        host += f.host_ns
    saved += left.get("compute", path.parts["compute"]) * (1.0 - kept)
    device += model.kernel_busy_ns * (1.0 - kept)
    after = bounded_step(model, model.step_ns - saved, device, host)
    return int(round(float(after.sum()) / steps))
