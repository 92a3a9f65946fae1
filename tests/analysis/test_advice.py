"""Advice that reads what the run already does (issue 18): never recommend a setting the trace shows in place,
say what is there, and give the next fix in order. On real CPU captures (tools/capture_pairs.py) whose
run_info.json says what each pipeline did, and on ../shared/traces. Advice that fits the run (issue 34): the tip
table keyed by rule, framework and workload; no torch tip for TensorFlow, no training or DDP tip for a server."""

import re
from pathlib import Path

import pytest

from tests.analysis.builders import host, kernel, launch, profile
from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.advice import TABLE
from traceinsight.analysis import analyze
from traceinsight.discover import discover
from traceinsight.findings import RULES, find_bottlenecks
from traceinsight.load import load_run
from traceinsight.render.html import render_html
from traceinsight.render.markdown import render_markdown
from traceinsight.render.terminal import render_terminal
from traceinsight.workflow import analyze_path

PAIRS = SAMPLE_TRACES / "pairs"


def _found(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    analysis = analyze(load_run(discover(path), path))
    return analysis, {b.id: b for b in find_bottlenecks(analysis)}


def _pair(name: str):
    return _found(PAIRS / name)


def test_prefetch_present_slow_sequential_map():
    analysis, found = _pair("tf_prefetch_slow_map/before")
    b = found["input_bound"]
    assert b.evidence["seen"]["prefetch"] is True and b.evidence["seen"]["map_parallel"] is False
    assert b.recommendations[0].startswith("Parallelise the map")
    assert not any(".prefetch(" in r for r in b.recommendations)
    assert "Already in place: prefetch" in b.evidence["in_place"]
    assert analysis.settings.input == {**analysis.settings.input, "prefetch": True}


def test_py_function_is_named_as_holding_the_gil():
    _, found = _found(shared_trace("tf_cpu/a_input_bound"))
    recs = found["input_bound"].recommendations
    assert recs[0].startswith("Parallelise the map")
    assert any(r.startswith("`slow_decode` is a `tf.py_function`") and "GIL" in r for r in recs)


@pytest.mark.parametrize("run", ["pairs/tf_tuned/after", "shared:tf_cpu/b_input_tuned"])
def test_fully_tuned_pipeline_has_no_input_bottleneck(run):
    path = shared_trace(run[7:]) if run.startswith("shared:") else SAMPLE_TRACES / run
    analysis, found = _found(path)
    assert "input_bound" not in found
    assert analysis.settings.input["cache"] is True and analysis.settings.input["prefetch"] is True


def test_sequential_interleave_gets_parallel_interleave_first():
    _, found = _pair("tf_interleave/before")
    b = found["input_bound"]
    assert b.evidence["seen"]["interleave_parallel"] is False
    assert b.recommendations[0].startswith("Read files in parallel") and "interleave" in b.recommendations[0]


@pytest.mark.parametrize(
    "run", ["pairs/torch_dataloader_2workers_bound/before", "shared:kineto/resnet50_num_workers_4"]
)
def test_dataloader_with_workers_is_never_told_to_use_workers(run):
    path = shared_trace(run[7:]) if run.startswith("shared:") else SAMPLE_TRACES / run
    analysis, found = _found(path)
    assert analysis.settings.input["dataloader"] == "multiprocess"
    for b in found.values():
        assert not any(r.startswith("Load batches in worker processes") for r in b.recommendations)
    if "input_bound" in found:  # 2 workers, still 98 % of the step waiting
        assert found["input_bound"].recommendations[0].startswith("Raise `num_workers`")


def test_single_process_dataloader_is_told_to_use_workers():
    _, found = _pair("torch_dataloader_workers/before")
    assert found["input_bound"].evidence["seen"]["dataloader"] == "single_process"
    assert found["input_bound"].recommendations[0].startswith("Load batches in worker processes")


def test_eager_against_tf_function():
    eager, before = _pair("tf_eager_vs_function/before")
    graph, after = _pair("tf_eager_vs_function/after")
    assert (eager.settings.run["graph"], graph.settings.run["graph"]) == (False, True)
    assert before["host_bound"].recommendations[0].startswith("Run the step as a graph: `@tf.function`")
    assert before["host_bound"].projection.basis == "estimated"
    if "host_bound" in after:  # graph mode already: the next step up
        assert not any(r.startswith("Run the step as a graph") for r in after["host_bound"].recommendations)
        assert after["host_bound"].recommendations[0].startswith("Compile the step with XLA")


def test_pinned_copies_are_not_told_to_pin():
    """A hand-built step whose only H2D copy is pinned and exposed (300 of 1,000 us busy: not transfer-bound):
    h2d_copy fires, without "pin memory"."""
    copy = {
        "kind": "memcpy",
        "ts": 0,
        "dur": 300,
        "device": "GPU:0",
        "stream": 8,
        "copy_kind": "h2d",
        "src_memory": "pinned",
        "bytes": 1 << 20,
        "name": "Memcpy HtoD (Pinned -> Device)",
    }
    rows = [host("annotation", 0, 1000, "ProfilerStep#1"), copy, launch(290, 5, 1), kernel(300, 700, 1)]
    (b,) = [b for b in find_bottlenecks(analyze(profile(rows))) if b.id == "h2d_copy"]
    assert b.evidence["seen"] == {"pin_memory": True}
    assert b.recommendations and not any("pin_memory=True" in r for r in b.recommendations)
    assert b.evidence["in_place"] == "Already in place: pinned memory."


def test_pageable_copies_are_told_to_pin():
    _, found = _found(shared_trace("kineto/resnet50_num_workers_0"))
    b = found["h2d_copy"]
    assert b.evidence["seen"] == {"pin_memory": False}  # pageable copies: pinning is the fix
    assert b.recommendations[0].startswith("Pin host memory")


# ------------------------------------------------------------------------------- advice fits the run (issue 34)


def test_the_tip_table_has_one_row_per_key_and_only_known_rules_frameworks_and_workloads():
    keys = [row.key for row in TABLE]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert {row.rule for row in TABLE} == {rule.id for rule in RULES}
    assert {row.framework for row in TABLE} <= {"pytorch", "tensorflow", "jax", "any"}
    assert {row.workload for row in TABLE} <= {"training", "inference", "server", "any"}
    assert all((row.server is not None) <= (row.workload == "server") for row in TABLE)
    # Only a Tip's text is filled in ({function}, {batch_factor}); a plain string would show the braces.
    assert [t for row in TABLE for t in row.tips if isinstance(t, str) and re.search(r"\{\w+\}", t)] == []


def _text(tip) -> str:
    return tip if isinstance(tip, str) else tip.text


@pytest.mark.parametrize(
    ("framework", "foreign"),
    [("tensorflow", ("torch", "jax.")), ("jax", ("torch", "tf.", "keras")), ("any", ("torch", "tf.", "jax."))],
)
def test_no_row_names_another_frameworks_api(framework, foreign):
    texts = [_text(t) for row in TABLE if row.framework == framework for t in row.tips]
    assert texts and not [t for t in texts if any(word in t for word in foreign)]


# Words only a training run needs: its optimizer, its gradients, DDP's gradient buckets.
TRAINING_WORDS = re.compile(r"gradient accumulation|learning rate|no_sync|bucket_cap_mb|DDP|backward", re.I)


def test_training_words_only_in_training_rows():
    found = [(row.key, _text(t)) for row in TABLE if row.workload != "training" for t in row.tips]
    assert [hit for hit in found if TRAINING_WORDS.search(hit[1])] == []


# How a tip spells turning a setting on (`analysis/settings.py` keys): such a tip must be dropped where the trace
# shows that setting in place.
SPELLINGS = {
    "pin_memory": ("pin_memory=True", ".pin_memory()"),
    "torch_compile": ("torch.compile(model)`",),
    "xla": ("jit_compile=True",),
    "graph": ("`@tf.function`",),
    "cuda_graphs": ('mode="reduce-overhead"', "make_graphed_callables"),
}


@pytest.mark.parametrize("key", sorted(SPELLINGS))
def test_every_tip_that_turns_a_setting_on_is_dropped_where_it_is_in_place(key):
    spelled = [t for row in TABLE for t in row.tips if any(s in _text(t) for s in SPELLINGS[key])]
    assert spelled
    assert [t for t in spelled if isinstance(t, str) or (key, True) not in t.skip_if] == []


def test_a_vllm_server_gets_no_training_or_ddp_tip():
    """tracelens/b200 is vLLM inference (its own frames): no DDP bucket, gradient accumulation or learning-rate
    tip, in any finding; its collectives get the server's parallelism knobs."""
    analysis, found = _found(shared_trace("tracelens/b200"))
    assert (analysis.capture.workload, analysis.capture.server) == ("server", "vLLM")
    words = " ".join(r for b in found.values() for r in b.recommendations)
    assert found and not TRAINING_WORDS.search(words), words
    assert "torch.compile" not in words
    if "communication" in found:
        assert "--tensor-parallel-size" in " ".join(found["communication"].recommendations)


def _pages(path: Path) -> dict[str, str]:
    analyzed = analyze_path(path)
    report = analyzed.report
    return {
        "html": render_html(report, analyzed.analysis),
        "markdown": render_markdown(report),
        "terminal": render_terminal(report),
    }


@pytest.mark.parametrize(
    "run",
    [
        "shared:tf_cpu/a_input_bound",
        "shared:tf_cpu/b_input_tuned",
        "pairs/tf_eager_vs_function/before",
        "pairs/tf_tuned/after",
        "tf_input_bound",
        "synthetic_gpu_xspace/h2d_pageable",
    ],
)
def test_a_tensorflow_run_never_reads_a_torch_tip(run):
    path = shared_trace(run[7:]) if run.startswith("shared:") else SAMPLE_TRACES / run
    analysis, found = _found(path)
    assert analysis.profile.framework == "tensorflow" and found
    for kind, text in _pages(path).items():
        assert "torch." not in text, (kind, text[max(0, text.find("torch.") - 200) : text.find("torch.") + 100])


def test_pinned_memory_in_place_is_never_told_to_pin_on_the_page():
    """The quick start's run: every H2D copy is pinned (settings `pin_memory` True, counted from the copies' source
    memory below), and its DataLoader runs in the main process: the worker tip comes without `pin_memory=True`."""
    path = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"
    analysis, found = _found(path)
    h2d = analysis.profile.events
    h2d = h2d[h2d["copy_kind"].astype(str) == "h2d"]
    assert len(h2d) and set(h2d["src_memory"].astype(str)) == {"pinned"}
    assert analysis.settings.input["pin_memory"] is True
    first = found["input_bound"].recommendations[0]
    assert first.startswith("Load batches in worker processes") and "num_workers=8" in first
    assert "pinned memory" in found["input_bound"].evidence["in_place"]
    for kind, text in _pages(path).items():
        assert "pin_memory=True" not in text and ".pin_memory()" not in text, kind


NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _data_parallel_steps(ddp: bool):
    """Four 1 ms training steps (a backward op in each): a 500 us GEMM, then a 300 us all-reduce after it, exposed;
    with `ddp`, DDP's forward range and reducer op are in the trace too."""
    rows = []
    for i in range(4):
        t = i * 1_000
        rows += [{**host("annotation", t, 1_000, f"ProfilerStep#{i}"), "step_id": i}]
        rows += [host("cpu_op", t + 5, 100, "DistributedDataParallel.forward" if ddp else "forward")]
        rows += [host("cpu_op", t + 200, 300, "autograd::engine::evaluate_function: AddmmBackward0")]
        if ddp:
            rows += [host("cpu_op", t + 520, 10, "torch.distributed.ddp.reducer::copy_bucket_to_grad")]
        rows += [launch(t + 10, 5, 2 * i + 1), kernel(t + 20, 500, 2 * i + 1, name="sm80_xmma_gemm_bf16bf16_bf16f32")]
        rows += [launch(t + 515, 5, 2 * i + 2), kernel(t + 530, 300, 2 * i + 2, name=NCCL, stream=9)]
    analysis = analyze(profile(rows))
    (b,) = [b for b in find_bottlenecks(analysis) if b.id == "communication"]
    return analysis, b


def test_ddp_tips_only_where_ddps_reducer_is_in_the_trace():
    with_ddp, b = _data_parallel_steps(ddp=True)
    without, plain = _data_parallel_steps(ddp=False)
    assert with_ddp.capture.workload == without.capture.workload == "training"
    assert b.fraction == plain.fraction == 0.3  # 300 us of each 1 ms step exposed, either way
    assert with_ddp.settings.run["ddp"] is True and "ddp" not in without.settings.run
    ddp_words = ("bucket_cap_mb", "no_sync")
    assert all(any(w in r for r in b.recommendations) for w in ddp_words), b.recommendations
    assert not any(w in r for w in (*ddp_words, "DDP") for r in plain.recommendations), plain.recommendations
    assert any("async_op=True" in r for r in plain.recommendations)


@pytest.mark.parametrize(
    "run", ["distributed/balanced", "shared:hta/nccl_parser_config", "shared:hta/trace_diff/control"]
)
def test_real_ddp_runs_show_ddps_reducer(run):
    path = shared_trace(run[7:]) if run.startswith("shared:") else SAMPLE_TRACES / run
    analysis, _ = _found(path)
    assert analysis.settings.run["ddp"] is True, analysis.settings.evidence
    assert (
        "reducer" in analysis.settings.evidence["ddp"] or "DistributedDataParallel" in analysis.settings.evidence["ddp"]
    )


def test_an_unknown_framework_gets_each_frameworks_first_tip_named():
    """100 kernels of 3 us, each launched 2 us after the previous ended (launch-bound), framework unknown: no
    neutral row for launch_bound, so each framework's first tip, named; small_batch's filled in (4x: no memory
    events)."""
    rows = []
    for i in range(100):
        rows += [launch(i * 10 + 5, 4, i), kernel(i * 10 + 10, 3, i)]
    found = {b.id: b for b in find_bottlenecks(analyze(profile(rows, framework="unknown")))}
    assert [r.split(":")[0] for r in found["launch_bound"].recommendations] == ["pytorch", "tensorflow", "jax"]
    assert found["small_batch"].recommendations[2].startswith("jax: Raise the per-device batch about 4x")
