"""Host framework ops: self time by nesting, and the input pipeline's slowest user function by name."""

import re

import numpy as np
import pandas as pd
import pytest

from tests.analysis.builders import US, host, profile
from tests.conftest import shared_trace
from traceinsight.analysis import analyze
from traceinsight.discover import discover
from traceinsight.events import names_matching
from traceinsight.load import load_run
from traceinsight.readers.xplane_schema import XSpace
from traceinsight.rules import OPTIMIZER_UPDATE_PATTERN


def _row(ts, dur, name, thread):
    return {**host("cpu_op", ts, dur, name), "thread": thread}


def test_self_time_subtracts_direct_children_on_the_same_thread():
    # Thread 1: outer [0,100) holds a [10,40) (which holds b [20,30)) and c [50,60); thread 2: d [15,95) overlaps
    # outer in time but is not its child. Self: outer 100-30-10 = 60, a 30-10 = 20, b 10, c 10, d 80.
    rows = [
        _row(0, 100, "outer", 1),
        _row(10, 30, "a", 1),
        _row(20, 10, "b", 1),
        _row(50, 10, "c", 1),
        _row(15, 80, "d", 2),
    ]
    ops = {o.name: (o.calls, o.total_ns // US, o.self_ns // US) for o in analyze(profile(rows)).host_ops.top}
    assert ops == {"outer": (1, 100, 60), "a": (1, 30, 20), "b": (1, 10, 10), "c": (1, 10, 10), "d": (1, 80, 80)}


def test_input_functions_are_the_ops_inside_input_waits():
    rows = [
        {**host("input_wait", 0, 100, "IteratorGetNextOp::DoCompute"), "thread": 1},
        _row(5, 90, "decode:EagerPyFunc", 2),  # inside the wait: input pipeline work, under the GIL
        _row(100, 50, "model/dense/MatMul:MatMul", 3),
    ]
    ip = analyze(profile(rows, framework="tensorflow")).host_ops.input_functions
    assert [(o.function, o.holds_gil) for o in ip] == [("decode", True)]


def test_slow_decode_named_on_the_input_bound_tf_run():
    """XProf's framework-op stats on this run: slow_decode (a tf.py_function), 319 calls, 1.54 s."""
    folder = shared_trace("tf_cpu/a_input_bound")
    (pb,) = folder.glob("plugins/profile/*/*.xplane.pb")
    space = XSpace()
    space.ParseFromString(pb.read_bytes())
    durations = [
        ev.duration_ps
        for plane in space.planes
        for line in plane.lines
        for ev in line.events
        if plane.event_metadata[ev.metadata_id].name == "slow_decode:EagerPyFunc"
    ]
    (top, *_) = analyze(load_run(discover(folder), folder)).host_ops.input_functions
    assert (top.function, top.calls, top.holds_gil) == ("slow_decode", len(durations), True)
    assert top.total_ns == pytest.approx(sum(durations) / 1000, abs=len(durations))
    assert top.total_ns == pytest.approx(1.54e9, rel=0.01)


def test_names_matched_only_among_the_rows_asked_about():
    """The step model matches name patterns among a few rows' names (a big trace has thousands): rows outside
    `where`, and rows without a name, never match; the others as `re.search` says."""
    names = ["model/adam/update", "MatMul", None, "SGD/apply", "Adam_1/x", "aten::_foreach_add_", "MatMul"]
    rows = pd.DataFrame({"name": pd.Categorical(names, categories=["unused/adam/", *sorted(set(names) - {None})])})
    where = np.array([True, True, True, False, True, True, True])
    pairs = zip(names, where, strict=True)
    searched = [bool(w and n is not None and re.search(OPTIMIZER_UPDATE_PATTERN, n)) for n, w in pairs]
    assert searched == [True, False, False, False, True, True, False]
    assert names_matching(rows, OPTIMIZER_UPDATE_PATTERN, where).tolist() == searched
