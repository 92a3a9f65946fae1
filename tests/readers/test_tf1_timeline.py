"""TensorFlow 1 timelines (`tensorflow.python.client.timeline`): the Chrome traces of `RunMetadata` step stats.

Checked against plain arithmetic on the raw JSON: a committed CPU timeline made with `tf.compat.v1`
(`tools/make_tf1_timeline.py`), and the public GPU timelines of the corpus when they are present
(`python -m tools.corpus --dest corpus/data`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_TRACES
from traceinsight.workflow import analyze_path

STREAM = re.compile(r"^/device:GPU:(\d+)/stream:\d+ Compute$")
CORPUS_GPU_TIMELINES = ["dlprof_tf1_feeddict_gpu", "dlprof_tf1_mnist_gpu", "mnistxla_tf1_gpu"]


def _raw(path: Path) -> tuple[dict[int, str], list[dict]]:
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    return names, [e for e in events if e.get("ph") == "X"]


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def test_a_cpu_timeline_is_a_tensorflow_cpu_run():
    """The ops of the CPU device's Compute process are the host's framework ops, one row each; the Tensors and
    Allocators processes are memory, not work."""
    folder = SAMPLE_TRACES / "tf1_timeline" / "cpu_mlp"
    names, complete = _raw(folder / "timeline.json")
    ops = [e for e in complete if names[e["pid"]].endswith("device:CPU:0 Compute")]
    run = analyze_path(folder)
    report = run.report
    assert report.framework == "tensorflow" and report.devices == []
    assert report.capture is not None and report.capture.kind == "training"  # ReluGrad, ApplyGradientDescent
    assert sum(i.events for i in report.inputs) == len(ops) + 1  # and the session.run step around them
    # One session.run: one step, from its first event's start to its last event's end.
    first = min(e["ts"] for e in complete)
    last = max(e["ts"] + e["dur"] for e in complete)
    assert report.steps.count == 1 and report.steps.mean_ns == round((last - first) * 1000)


@pytest.mark.parametrize("trace_id", CORPUS_GPU_TIMELINES)
def test_a_gpu_timeline_has_the_raw_device_work(trace_id, tmp_path):
    """Per GPU, the kernels and the busy time are those of the `/device:GPU:N/stream:K Compute` processes (the
    `stream:all` and `memcpy` processes repeat their rows): kernels are the rows that are not `MEMCPY*`."""
    source = REPO / "corpus" / "data" / f"{trace_id}.json"
    if not source.exists():
        pytest.skip(f"{source.name} not present (python -m tools.corpus --dest corpus/data re-creates it)")
    (tmp_path / source.name).write_bytes(source.read_bytes())
    names, complete = _raw(source)
    on_streams = [e for e in complete if STREAM.match(names.get(e["pid"], ""))]
    kernels = [e for e in on_streams if not e["name"].startswith("MEMCPY")]
    report = analyze_path(tmp_path).report
    (device,) = report.devices
    assert device.id == "GPU:0"
    assert device.kernels.count == len(kernels)
    assert device.busy_ns == round(_union_us([(e["ts"], e["ts"] + e["dur"]) for e in on_streams]) * 1000)


def test_a_tf1_input_wait_is_the_iterator_op(tmp_path):
    """mnistxla_tf1_gpu (corpus): `IteratorGetNext` runs for the first 16.9 ms of the 30.3 ms session.run before
    any convolution: input-bound, by the iterator op's own time, with no device work under it."""
    source = REPO / "corpus" / "data" / "mnistxla_tf1_gpu.json"
    if not source.exists():
        pytest.skip(f"{source.name} not present (python -m tools.corpus --dest corpus/data re-creates it)")
    (tmp_path / source.name).write_bytes(source.read_bytes())
    _, complete = _raw(source)
    (iterator,) = [e for e in complete if e["name"] == "IteratorGetNext"]
    report = analyze_path(tmp_path).report
    assert report.bottlenecks[0].id == "input_bound"
    assert report.input_pipeline.wait_ns == pytest.approx(iterator["dur"] * 1000, rel=0.01)
