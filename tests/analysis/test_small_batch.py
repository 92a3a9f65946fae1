"""`small_batch` on CPU-only runs (issue 12): per-step costs a batch does not grow (tiny ops, optimizer updates,
dispatch between ops) against the ops that compute, on hand-built steps and real captures of batch 2 against a
batch that keeps the cores busy."""

from __future__ import annotations

import pytest

from tests.analysis.builders import host, profile
from tests.conftest import SAMPLE_TRACES
from traceinsight.analysis import analyze
from traceinsight.discover import discover
from traceinsight.findings import find_bottlenecks
from traceinsight.load import load_run

PAIRS = SAMPLE_TRACES / "pairs"


def _cpu_steps(compute_us: float, update_us: float, tiny_ops: int = 40, steps: int = 3, step_us: float = 1000):
    """CPU-only steps of `step_us`: one op computing `compute_us`, an Adam update of `update_us`, `tiny_ops`
    ops of 5 us; the rest of each step is dispatch between them."""
    rows = []
    for i in range(steps):
        t0 = i * step_us
        rows.append({**host("step", t0, step_us, "train"), "step_id": i})
        rows.append(host("cpu_op", t0 + 10, compute_us, "model/dense/MatMul:MatMul"))
        rows.append(host("cpu_op", t0 + 20 + compute_us, update_us, "StatefulPartitionedCall/adam/Sub:Sub"))
        rows += [
            host("cpu_op", t0 + 30 + compute_us + update_us + 6 * j, 5, "model/Identity:Identity")
            for j in range(tiny_ops)
        ]
    return profile(rows, framework="tensorflow")


def test_per_step_costs_share_is_the_step_less_its_computing_ops():
    # 1000 us steps: 200 us computing; the 300 us Adam update and the tiny ops are per-step costs -> 80 %.
    (found,) = [b for b in find_bottlenecks(analyze(_cpu_steps(200, 300))) if b.id == "small_batch"]
    assert found.evidence["per_step_cost_share"] == pytest.approx(0.8)
    assert found.evidence["batch_work_per_step_ns"] == 200_000
    assert found.projection.basis == "estimated"
    assert found.projection.step_ns_after < found.projection.step_ns_before


def test_no_small_batch_when_computing_ops_fill_the_step():
    # 700 us of 1000 computing: per-step costs are 30 %, under the 50 % bar.
    assert "small_batch" not in {b.id for b in find_bottlenecks(analyze(_cpu_steps(700, 100)))}


def test_optimizer_update_does_not_count_as_batch_work():
    # The same 700 us as an Adam update, not a matmul: it does not grow with the batch, so the step is small-batch.
    rows = _cpu_steps(10, 700)
    assert "small_batch" in {b.id for b in find_bottlenecks(analyze(rows))}


def _ids(run: str) -> list[str]:
    path = PAIRS / run
    return [b.id for b in find_bottlenecks(analyze(load_run(discover(path), path)))]


@pytest.mark.parametrize("pair", ["tf_small_batch", "torch_small_batch"])
def test_tiny_batch_gets_small_batch_and_the_big_batch_does_not(pair):
    """Real captures (tools/capture_pairs.py): batch 2 against batch 256 (TF, MLP 64-1024-1024-10) / 64 (torch)."""
    assert "small_batch" in _ids(f"{pair}/before")[:2]
    assert "small_batch" not in _ids(f"{pair}/after")


@pytest.mark.parametrize("run", ["tf_data_parallel/before", "torch_dataloader_workers/before"])
def test_cpu_only_input_bound_runs_keep_input_bound_first(run):
    assert _ids(run)[0] == "input_bound"
