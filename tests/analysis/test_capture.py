"""What kind of capture a trace is (issue 26): warm-up, graph capture passes, micro-benchmarks, servers.

The warm-up captures are our own (`tools/capture_warmup.py`, real torch.compile and TF XLA on the CPU); their
run_info.json holds the first call's wall time measured in the script, the ground truth for the one-time costs.
"""

import json

import pytest

from tests.analysis.builders import US, host, kernel, launch, profile
from tests.conftest import REPO, SAMPLE_TRACES, shared_trace
from traceinsight.analysis import analyze
from traceinsight.analysis.capture import CAPTURE_KINDS
from traceinsight.findings import find_bottlenecks, headline_projection
from traceinsight.workflow import analyze_path

WARMUP = SAMPLE_TRACES / "warmup"


def _run_info(folder):
    return json.loads((folder / "run_info.json").read_text())


@pytest.mark.parametrize(
    "run", ["torch_compile_first_call", "torch_compile_first_call_steps", "tf_jit_first_call", "jax_jit_first_call"]
)
def test_compilation_in_the_window_is_warmup(run):
    folder = WARMUP / run
    a = analyze_path(folder).analysis
    assert a.capture.kind == "warmup"
    # The one-time costs the trace names lie inside the first call, and are most of it.
    first_call_ns = _run_info(folder)["compile_s"] * 1e9
    assert 0.7 * first_call_ns <= a.capture.one_time_ns <= 1.01 * first_call_ns
    found = find_bottlenecks(a)
    assert found[0].id == "warmup_in_window" and found[0].projection.basis == "none"
    words = " ".join(found[0].recommendations)
    assert ("schedule(wait=1, warmup=1, active=3)" in words) == run.startswith("torch")
    assert ("profile_batch=(10, 15)" in words) == run.startswith("tf")
    assert ("jax.profiler.start_trace" in words) == run.startswith("jax")


@pytest.mark.parametrize(
    ("run", "steps_after"),
    [("torch_compile_first_call_steps", 4), ("tf_jit_first_call", 4), ("jax_jit_first_call", 4)],
)
def test_steps_after_the_warmup_are_analyzed_alone(run, steps_after):
    """With step markers after the compilation, those steps are the report's: their mean is the measured one."""
    folder = WARMUP / run
    a = analyze_path(folder).analysis
    assert a.capture.steady_steps == steps_after == a.steps.count
    later_ms = _run_info(folder)["profiled_step_wall_ms"][1:]
    assert a.steps.mean_ns == pytest.approx(sum(later_ms) / len(later_ms) * 1e6, rel=0.25)


def test_without_steps_after_it_a_warmup_projects_nothing():
    a = analyze_path(WARMUP / "torch_compile_first_call").analysis
    assert a.capture.steady_steps == 0 and not a.capture.projects
    assert [b.id for b in find_bottlenecks(a)] == ["warmup_in_window"]
    assert headline_projection(a) is None


@pytest.mark.parametrize("run", ["torch_compile_scheduled", "tf_jit_after_steps", "jax_jit_after_steps"])
def test_profiled_after_warmup_is_not_warmup(run):
    a = analyze_path(WARMUP / run).analysis
    assert a.capture.kind != "warmup"
    assert a.capture.one_time_share < 0.05
    assert "warmup_in_window" not in {b.id for b in find_bottlenecks(a)}


def test_scheduled_torch_compile_loop_is_training():
    assert analyze_path(WARMUP / "torch_compile_scheduled").analysis.capture.kind == "training"


def test_microbenchmark_reports_figures_but_no_step_claim():
    a = analyze_path(SAMPLE_TRACES / "microbenchmark" / "torch_layer_norm").analysis
    assert a.capture.kind == "microbenchmark"
    assert "aten::layer_norm x200" in a.capture.evidence[0]
    assert find_bottlenecks(a) == [] and headline_projection(a) is None
    assert a.host_ops.top  # its figures are still reported


def test_context_creation_in_the_first_allocation_is_warmup_and_the_steps_after_it_are_analyzed():
    # The first aten::empty_strided takes 30 s (CUDA context creation inside it); later ones 5 us. Then three
    # marked 10 ms steps of one 4 ms kernel each follow.
    rows = [host("cpu_op", 0, 30_000_000, "aten::empty_strided")]
    t = 30_000_100
    for i in range(3):
        start = t + i * 10_000
        rows += [{**host("step", start, 10_000, f"ProfilerStep#{i}"), "step_id": i}]
        rows += [host("cpu_op", start + 10, 5, "aten::empty_strided"), launch(start + 20, 10, i + 1)]
        rows += [kernel(start + 100, 4_000, corr=i + 1)]
    a = analyze(profile(rows))
    assert a.capture.kind == "warmup"
    assert a.capture.one_time_ns == 30_000_000 * US
    assert a.capture.steady_steps == 3 and a.steps.count == 3
    assert a.steps.mean_ns == 10_000 * US
    assert a.devices[0].busy_ns == 3 * 4_000 * US


@pytest.mark.parametrize(("slow_us", "warmup"), [(400_000, True), (90_000, False)])
def test_a_kernels_first_launch_loading_its_module_is_warmup(slow_us, warmup):
    """Two marked 600 ms steps of 20 launches each (5 us, a 1 ms kernel each); in the first, one launch lasts
    `slow_us` (CUDA's lazy module loading: 347-675 ms in public A100 traces). 400 ms is 80 000x the median launch
    and a third of the window: warm-up. 90 ms stays under the 100 ms bar: a steady step."""
    rows = []
    for i in range(2):
        t = i * 600_000
        rows += [{**host("step", t, 600_000, f"ProfilerStep#{i}"), "step_id": i}]
        for j in range(20):
            start = t + j * 2_000
            slow = i == 0 and j == 3
            rows += [launch(start, slow_us if slow else 5, 100 * i + j + 1)]
            begin = start + (slow_us if slow else 5) + 10
            rows += [kernel(begin, 1_000, corr=100 * i + j + 1)]
    a = analyze(profile(rows))
    assert (a.capture.kind == "warmup") is warmup
    lazy = [c for c in a.capture.one_time if c.what.startswith("lazy module loading")]
    assert [c.ns for c in lazy] == ([slow_us * US] if warmup else [])


@pytest.mark.parametrize("folder", ["vllm_decode_full", "vllm_prefilldecode_piecewise", "sglang_decode"])
def test_a_graph_capture_pass_gets_no_stall_finding(folder):
    a = analyze_path(shared_trace(f"inference/{folder}/capture_traces")).analysis
    assert a.capture.kind == "graph_capture"
    assert find_bottlenecks(a) == [] and headline_projection(a) is None


@pytest.mark.parametrize(("folder", "server"), [("vllm_decode_full", "vLLM"), ("vllm_prefilldecode_piecewise", "vLLM")])
def test_a_replay_is_the_servers_inference(folder, server):
    a = analyze_path(shared_trace(f"inference/{folder}")).analysis
    assert (a.capture.kind, a.capture.server, a.capture.workload) == ("inference", server, "server")


@pytest.mark.parametrize("run", ["kineto/resnet50_num_workers_0", "tf_cpu/a_input_bound", "hta/nccl_parser_config"])
def test_training_runs_are_training(run):
    assert analyze_path(shared_trace(run)).analysis.capture.kind == "training"


def test_an_eager_tf_training_step_is_training():
    """Run eagerly, TF's gradient ops (`ReluGrad`, `BiasAddGrad`) are the evidence: no gradient tape scope."""
    a = analyze_path(SAMPLE_TRACES / "pairs" / "tf_eager_vs_function" / "before").analysis
    assert a.capture.kind == "training" and "Grad" in a.capture.evidence[0]


def _server_host_bound(frame: str):
    # Four 1 ms steps of a server: one 300 us kernel each, launched 600 us into the step after Python work in the
    # server's own frames; the launch ends after the device drained: host-bound.
    rows = []
    for i in range(4):
        t = i * 1_000
        rows += [host("python", t, 600, frame), launch(t + 600, 50, i + 1), kernel(t + 650, 300, corr=i + 1)]
    return find_bottlenecks(analyze(profile(rows)))


@pytest.mark.parametrize(
    ("frame", "knobs"),
    [
        ("vllm/v1/worker/gpu_model_runner.py(2100): execute_model", ["--max-num-seqs", "cudagraph_capture_sizes"]),
        ("sglang/srt/managers/scheduler.py(900): run_batch", ["--max-running-requests", "--cuda-graph-max-bs"]),
        ("text_generation_server/models/flash_causal_lm.py(1500): generate_token", ["--max-batch-total-tokens"]),
        ("tensorrt_llm/_torch/pyexecutor/py_executor.py(900): _executor_loop", ["max_batch_size", "cuda_graph_config"]),
    ],
)
def test_a_server_gets_serving_knobs(frame, knobs):
    (b,) = [b for b in _server_host_bound(frame) if b.id == "host_bound"]
    words = " ".join(b.recommendations)
    assert all(knob in words for knob in knobs), words
    assert "DataLoader" not in words and "torch.compile" not in words


def test_dataloader_advice_only_where_the_trace_shows_a_dataloader():
    # Two steps, each a 100 us pageable H2D copy the device waits for, then a kernel: no DataLoader in the trace.
    rows = []
    for i in range(2):
        t = i * 1_000
        rows += [{**host("step", t, 1_000, f"ProfilerStep#{i}"), "step_id": i}]
        copy = {"kind": "memcpy", "ts": t + 10, "dur": 100, "device": "GPU:0", "stream": 7, "correlation": 10 + i}
        rows += [{**copy, "name": "Memcpy HtoD (Pageable -> Device)", "copy_kind": "h2d", "src_memory": "pageable"}]
        rows += [launch(t + 5, 5, 10 + i, "cudaMemcpyAsync"), launch(t + 110, 5, i + 1), kernel(t + 120, 800, i + 1)]
    (b,) = [b for b in find_bottlenecks(analyze(profile(rows))) if b.id == "h2d_copy"]
    assert not any("DataLoader" in r for r in b.recommendations)
    assert any("pin_memory()" in r for r in b.recommendations)


def test_an_xla_pass_named_backward_is_no_training():
    """The TPU trace moves buffers between HBM and host (no model step); XLA's `collective-pipeliner-backward`
    compiler pass is no backward op."""
    a = analyze_path(shared_trace("xprof/test_xplanes")).analysis
    assert a.capture.kind != "training"


def test_a_jax_step_annotated_train_is_jax():
    """JAX's `StepTraceAnnotation("train")` names its steps like TF's marker; its jit dispatch says JAX."""
    assert analyze_path(WARMUP / "jax_jit_after_steps").report.framework == "jax"


def test_every_capture_kind_is_documented():
    methodology = (REPO / "docs" / "methodology.md").read_text()
    assert all(f"| `{kind}` |" in methodology for kind in CAPTURE_KINDS)


FORWARD_OPS = ("aten::linear", "aten::addmm", "aten::relu", "aten::layer_norm", "aten::softmax")


def _forward_steps(extra: str | None = None):
    """Three marked 1 ms steps of a model's forward ops (5 distinct aten ops, each launching a 100 us kernel) and no
    backward op; `extra`: one more host event in each step."""
    rows = []
    for i in range(3):
        t = i * 1_000
        rows += [{**host("annotation", t, 1_000, f"ProfilerStep#{i}"), "step_id": i}]
        for j, op in enumerate(FORWARD_OPS):
            corr = 10 * i + j + 1
            rows += [host("cpu_op", t + 150 * j, 20, op), launch(t + 150 * j + 5, 5, corr)]
            rows += [kernel(t + 150 * j + 20, 100, corr)]
        if extra is not None:
            rows += [host("python", t + 900, 5, extra)]
    return analyze(profile(rows)).capture


def test_forward_ops_alone_are_no_evidence_of_inference():
    """No backward op is absence of evidence: a training run's forward pass looks the same."""
    c = _forward_steps()
    assert (c.kind, c.workload) == ("unknown", "unknown")
    assert "5 distinct host ops" in c.evidence[0]


@pytest.mark.parametrize(
    "marker",
    [
        "torch/autograd/grad_mode.py(80): __enter__",  # torch.no_grad() / inference_mode entered
        "transformers/generation/utils.py(2215): generate",
    ],
)
def test_an_inference_marker_makes_it_inference(marker):
    c = _forward_steps(marker)
    assert (c.kind, c.workload) == ("inference", "inference")
    assert marker in c.evidence[0]


def test_a_backward_op_makes_it_training():
    c = _forward_steps("autograd::engine::evaluate_function: AddmmBackward0")
    assert (c.kind, c.workload) == ("training", "training")


@pytest.mark.parametrize(
    "trace", ["Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "google_owlv2-large-patch14-ensemble__1016001.json.gz"]
)
def test_hugging_face_inference_under_no_grad_is_inference(trace):
    """TraceLens's H100 traces: Hugging Face models run under `torch.no_grad()` (with_stack frames of grad_mode.py)."""
    c = analyze_path(shared_trace(f"tracelens/h100/{trace}")).analysis.capture
    assert (c.kind, c.workload, c.server) == ("inference", "inference", None)


def test_a_warmup_keeps_its_workload():
    """A warm-up window's kind says warmup; its workload still says what the run does (torch.compile's first
    training step: backward ops)."""
    c = analyze_path(WARMUP / "torch_compile_first_call").analysis.capture
    assert (c.kind, c.workload) == ("warmup", "training")
