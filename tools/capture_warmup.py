"""Real CPU profiles of one-time warm-up (compilation inside the profiled window) against a steady state.

Why: a profile that starts before the first call of a compiled function spends most of its window compiling
(Dynamo + AOTAutograd + Inductor for `torch.compile`, XLA for `tf.function(jit_compile=True)`), and a report
that reads that window as the job's steady state misjudges it. The rules that spot warm-up need real traces
whose story is known: the same small training step profiled from its first call (`*_first_call`; torch writes
`ProfilerStep#N` markers only under a schedule, so `torch_compile_first_call_steps` repeats it under
`schedule(wait=0, warmup=0, active=5)`) and profiled once compiled (`torch_compile_scheduled`: the compile
happens in the schedule's `wait` step, outside the recorded window; `tf_jit_after_steps`: three calls before
the profiler starts). A micro-benchmark (one `layer_norm` called 200 times, no steps at all) is the other
shape a rule must not take for a training job.

Each capture is a folder in the profiler's own layout (torch: one `*.pt.trace.json.gz` from
`tensorboard_trace_handler`, renamed to `sample.pt.trace.json.gz`; TF:
`plugins/profile/<run>/sample.xplane.pb`) plus `run_info.json` (the format `tools.capture_pairs` writes)
with the ground truth measured with `time.perf_counter` around every call: `compile_s` (wall time of the
first call, compilation included), `step_s` (median of the later calls), `steps_profiled`.

The JAX scenarios (`jax_jit_first_call`: `jax.profiler.start_trace` before the first call of a `jax.jit` train
step, so jaxpr tracing, lowering and XLA compilation lie inside the window; `jax_jit_after_steps`: three calls
first) write `plugins/profile/<run>/sample.xplane.pb` like TF, each step in
`jax.profiler.StepTraceAnnotation("train", step_num=N)`. They need `pip install jax` (CPU jaxlib), best in
a venv of their own without TF or torch; JAX is imported only inside them, so the other scenarios run
without it:

    /tmp/jaxvenv/bin/python -m tools.capture_warmup jax_jit_first_call jax_jit_after_steps

Every scenario runs in its own interpreter when several are asked for, torch ones with an empty Inductor
cache (`TORCHINDUCTOR_CACHE_DIR` in a temporary folder), so the first call really compiles every time.

    python -m tools.capture_warmup                            # all -> sample_traces/{warmup,microbenchmark}/
    python -m tools.capture_warmup torch_compile_first_call   # only that one
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.capture_pairs import _ms_since, _torch_mlp, profile_tf_steps, side_dir, train_step, write_run_info
from tools.make_tf_samples import FEATURES, HOST, REPO, SAMPLES

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is first imported

BATCH = 64
WIDTH = 256
TORCH_THREADS = 2
TORCH_TRACE = f"{HOST}.pt.trace.json.gz"  # the fixed name the single Kineto file is renamed to
FIRST_CALL_STEPS = 5  # (a), (c): profiled from the first call on
WAIT, WARMUP, ACTIVE = 1, 1, 3  # (b): the compile happens in the `wait` step
SCHEDULED_STEPS = WAIT + WARMUP + ACTIVE + 1  # one more, so the last active step is closed by prof.step()
TF_STEPS_BEFORE = 3  # (d): calls before the profiler starts
JAX_STEPS_BEFORE = 3  # (g): calls before the profiler starts
JAX_LR = 0.01
# The Python tracer (level 1, JAX's default) records every Python call of JAX's tracing: ~125,000 events, 2 MB
# for the first call. Off, the window keeps JAX's own TraceMe annotations (`trace_to_jaxpr_dynamic`,
# `lower_sharding_computation`, `backend_compile_and_load`) and XLA's compiler passes.
JAX_PYTHON_TRACER_LEVEL = 0
LAYER_NORM_SHAPE, LAYER_NORM_CALLS = (256, 1024), 200


# --- shared bits ------------------------------------------------------------------------------------------


def ground_truth(wall_ms: list[float], profiled: list[int]) -> dict[str, Any]:
    """`compile_s` (the first call, compilation included), `step_s` (median of the later calls), the profiled
    step numbers, and every call's wall ms; the one-time cost is `compile_s - step_s`."""
    step_s = statistics.median(wall_ms[1:]) / 1000
    return {
        "compile_s": round(wall_ms[0] / 1000, 6),
        "step_s": round(step_s, 6),
        "one_time_s": round(wall_ms[0] / 1000 - step_s, 6),
        "steps_run": len(wall_ms),
        "steps_profiled": len(profiled),
        "step_nums": profiled,
        "all_step_wall_ms": wall_ms,
    }


def _single_kineto(out: Path) -> Path:
    """Rename the one `*.pt.trace.json.gz` the handler wrote (`<worker>.<time_ns>.pt.trace.json.gz`) to a fixed
    name, so a rerun replaces the file instead of adding one."""
    (trace,) = out.glob("*.pt.trace.json.gz")
    return trace.rename(out / TORCH_TRACE)


def _torch_setup() -> Any:
    """Seeded torch with TORCH_THREADS intra-op threads (the Inductor cache folder is set by `main`); return torch."""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        raise RuntimeError("run through main(): it points TORCHINDUCTOR_CACHE_DIR at an empty folder")
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(TORCH_THREADS)
    return torch


# --- torch.compile ------------------------------------------------------------------------------------------


def _compiled_step(torch: Any) -> tuple[Callable[[], None], dict[str, Any]]:
    """`torch.compile` (Inductor) of the MLP of `tools.capture_pairs` and the standard train step on one fixed
    seeded batch; return (step, run_info details)."""
    model, optimizer = _torch_mlp(WIDTH, FEATURES)
    step = train_step(torch.compile(model), optimizer)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(BATCH, FEATURES, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)
    info = {
        "torch": torch.__version__,
        "model": f"MLP {FEATURES}-{WIDTH}-{WIDTH}-10 in torch.compile (backend inductor, CPU), SGD",
        "pipeline": f"one in-memory batch of {BATCH}, reused every step (no DataLoader)",
        "settings": {"batch_size": BATCH, "torch_threads": TORCH_THREADS, "inductor_cache": "empty at start"},
        "batch_size": BATCH,
        "step_marker": "ProfilerStep#N (only under a schedule)",
    }
    return (lambda: step(x, y)), info


def _profile_compiled(out: Path, steps: int, sched: Any | None) -> tuple[Path, list[float], dict[str, Any]]:
    """Run the compiled step `steps` times under the profiler (CPU only, `prof.step()` after each), the
    profiler started before the first call; return (trace, wall ms of every step, run_info details)."""
    torch = _torch_setup()
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    step, info = _compiled_step(torch)
    wall_ms = []
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name=HOST, use_gzip=True),
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
    ) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            wall_ms.append(_ms_since(t0))  # the span of ProfilerStep#N
            prof.step()
    return _single_kineto(out), wall_ms, info


def torch_compile_first_call() -> None:
    """(a) No schedule: all 5 steps recorded, Dynamo/AOTAutograd/Inductor compilation in the first; no
    `ProfilerStep#N` markers (torch.profiler writes them only under a schedule)."""
    out = side_dir("warmup", "torch_compile_first_call", root=SAMPLES)
    trace, wall_ms, info = _profile_compiled(out, FIRST_CALL_STEPS, sched=None)
    profiled = list(range(FIRST_CALL_STEPS))
    info = {**info, "schedule": None, "step_marker": None, **ground_truth(wall_ms, profiled)}  # none without one
    scenario = "torch.compile MLP train step profiled from its first call (no schedule): compile inside the window"
    write_run_info(out, trace, wall_ms, info, scenario)


def torch_compile_first_call_steps() -> None:
    """(a') Like (a), but under schedule(wait=0, warmup=0, active=5): without a schedule torch.profiler writes
    no `ProfilerStep#N` markers at all (`record_steps` is off), with one the compile lies in ProfilerStep#0."""
    from torch.profiler import schedule

    out = side_dir("warmup", "torch_compile_first_call_steps", root=SAMPLES)
    with warnings.catch_warnings():  # "won't be using warmup": wanted, the first call is what this shows
        warnings.simplefilter("ignore", UserWarning)
        sched = schedule(wait=0, warmup=0, active=FIRST_CALL_STEPS, repeat=1)
    trace, wall_ms, info = _profile_compiled(out, FIRST_CALL_STEPS, sched)
    profiled = list(range(FIRST_CALL_STEPS))
    info = {
        **info,
        "schedule": {"wait": 0, "warmup": 0, "active": FIRST_CALL_STEPS, "repeat": 1},
        **ground_truth(wall_ms, profiled),
    }
    scenario = "the torch.compile step under schedule(wait=0, warmup=0, active=5): compile in ProfilerStep#0"
    write_run_info(out, trace, wall_ms, info, scenario)


def torch_compile_scheduled() -> None:
    """(b) schedule(wait=1, warmup=1, active=3): the compile happens in step 0 (wait), outside the window."""
    from torch.profiler import schedule

    out = side_dir("warmup", "torch_compile_scheduled", root=SAMPLES)
    sched = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    trace, wall_ms, info = _profile_compiled(out, SCHEDULED_STEPS, sched)
    profiled = list(range(WAIT + WARMUP, WAIT + WARMUP + ACTIVE))
    info = {
        **info,
        "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE, "repeat": 1},
        **ground_truth(wall_ms, profiled),
    }
    scenario = "the same torch.compile step under schedule(wait=1, warmup=1, active=3): compile in the wait step"
    write_run_info(out, trace, [wall_ms[n] for n in profiled], info, scenario)


# --- TensorFlow XLA -----------------------------------------------------------------------------------------


def _tf_jit_step() -> tuple[Callable[[], Any], dict[str, Any]]:
    """A Keras-free dense model (tf.Variables, FEATURES-WIDTH-WIDTH-10) and its SGD train step in
    `tf.function(jit_compile=True)` on one fixed seeded batch; return (step -> loss, run_info details)."""
    import tensorflow as tf

    tf.random.set_seed(0)
    init = tf.random.stateless_normal
    sizes = [FEATURES, WIDTH, WIDTH, 10]
    params = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        params.append(tf.Variable(init([fan_in, fan_out], seed=[0, i]) * (2 / fan_in) ** 0.5, name=f"w{i}"))
        params.append(tf.Variable(tf.zeros([fan_out]), name=f"b{i}"))
    x = init([BATCH, FEATURES], seed=[1, 0])
    y = tf.random.stateless_uniform([BATCH], seed=[1, 1], maxval=10, dtype=tf.int32)

    @tf.function(jit_compile=True)
    def train_step() -> Any:  # its TraceMe is named after it; "train" is the step marker around it
        with tf.GradientTape() as tape:
            h = x
            for i in range(0, len(params) - 2, 2):
                h = tf.nn.relu(h @ params[i] + params[i + 1])
            logits = h @ params[-2] + params[-1]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        for var, grad in zip(params, tape.gradient(loss, params), strict=True):
            var.assign_sub(0.01 * grad)
        return loss

    info = {
        "tensorflow": tf.__version__,
        "model": f"dense {FEATURES}-{WIDTH}-{WIDTH}-10 on tf.Variables (no Keras), SGD 0.01, "
        "tf.function(jit_compile=True) train step (XLA, CPU)",
        "pipeline": f"one in-memory batch of {BATCH}, reused every step (no tf.data)",
        "settings": {"batch_size": BATCH, "jit_compile": True},
        "batch_size": BATCH,
        "step_marker": "train",
    }
    return train_step, info


def _profile_tf_jit(name: str, before: int, scenario: str) -> None:
    """Call the XLA step `before` times, then profile FIRST_CALL_STEPS calls (each in `Trace("train",
    step_num=N, _r=1)`, `.numpy()` inside) into `warmup/<name>/`."""

    out = side_dir("warmup", name, root=SAMPLES)
    step, info = _tf_jit_step()
    wall_ms = []
    for _ in range(before):
        t0 = time.perf_counter()
        step().numpy()
        wall_ms.append(_ms_since(t0))
    profiled = list(range(before, before + FIRST_CALL_STEPS))
    xplane, profiled_ms = profile_tf_steps(out, step, profiled)
    wall_ms += profiled_ms
    info = {**info, "calls_before_profiler": before, **ground_truth(wall_ms, profiled)}
    write_run_info(out, xplane, wall_ms[before:], info, scenario)


def tf_jit_first_call() -> None:
    """(c) The profiler starts before the first call: tracing and XLA compilation inside the window."""
    _profile_tf_jit("tf_jit_first_call", 0, "tf.function(jit_compile=True) step profiled from its first call")


def tf_jit_after_steps() -> None:
    """(d) Three calls first (traced and compiled), then five profiled: the steady state."""
    scenario = f"the same XLA step called {TF_STEPS_BEFORE} times, then profiled"
    _profile_tf_jit("tf_jit_after_steps", TF_STEPS_BEFORE, scenario)


# --- JAX jit ------------------------------------------------------------------------------------------------


def _jax_jit_step() -> tuple[Callable[[], Any], dict[str, Any]]:
    """A seeded MLP FEATURES-WIDTH-WIDTH-10 with its params as a pytree (a list of {"w", "b"} dicts), and its
    train step (`jax.value_and_grad` of the softmax cross-entropy, SGD JAX_LR) in `jax.jit` on one fixed
    seeded batch; return (step -> loss, the params carried from call to call, run_info details). The step
    is not called here: its first call traces, lowers and compiles."""
    import jax
    import jax.numpy as jnp
    import jaxlib

    jax.config.update("jax_enable_compilation_cache", False)  # no persistent cache: the first call compiles
    sizes = [FEATURES, WIDTH, WIDTH, 10]
    keys = jax.random.split(jax.random.PRNGKey(0), len(sizes) + 1)
    params = [
        {"w": jax.random.normal(k, (fan_in, fan_out)) * (2 / fan_in) ** 0.5, "b": jnp.zeros(fan_out)}
        for k, fan_in, fan_out in zip(keys, sizes, sizes[1:], strict=False)
    ]
    x = jax.random.normal(keys[-2], (BATCH, FEATURES))
    y = jax.random.randint(keys[-1], (BATCH,), 0, 10)
    jax.block_until_ready((params, x, y))  # the init's own small computations finish before any profiling

    def loss_fn(params: Any, x: Any, y: Any) -> Any:
        h = x
        for layer in params[:-1]:
            h = jax.nn.relu(h @ layer["w"] + layer["b"])
        logits = h @ params[-1]["w"] + params[-1]["b"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def train_step(params: Any, x: Any, y: Any) -> tuple[Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - JAX_LR * g, params, grads), loss

    state = {"params": params}

    def step() -> Any:
        state["params"], loss = train_step(state["params"], x, y)
        return jax.block_until_ready(loss)

    info = {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "model": f"MLP {FEATURES}-{WIDTH}-{WIDTH}-10, params a pytree (list of dicts), SGD {JAX_LR}, "
        "jax.value_and_grad train step in jax.jit (XLA, CPU)",
        "pipeline": f"one in-memory batch of {BATCH}, reused every step (no input pipeline)",
        "settings": {"batch_size": BATCH, "jit": True, "persistent_compilation_cache": False, "seed": 0},
        "batch_size": BATCH,
        "step_marker": "train (jax.profiler.StepTraceAnnotation)",
    }
    return step, info


def _profile_jax_jit(name: str, before: int, scenario: str) -> None:
    """Call the jitted step `before` times, then profile FIRST_CALL_STEPS calls (`jax.profiler.start_trace`
    .. `stop_trace`, each call in `StepTraceAnnotation("train", step_num=N)` with `block_until_ready` inside)
    into `warmup/<name>/`; rename the one xplane to `<HOST>.xplane.pb`."""
    import jax

    out = side_dir("warmup", name, root=SAMPLES)
    step, info = _jax_jit_step()
    wall_ms = []
    for _ in range(before):
        t0 = time.perf_counter()
        step()
        wall_ms.append(_ms_since(t0))
    profiled = list(range(before, before + FIRST_CALL_STEPS))
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = JAX_PYTHON_TRACER_LEVEL
    options.enable_hlo_proto = False  # the HLO proto metadata plane alone is ~370 KB
    jax.profiler.start_trace(str(out), profiler_options=options)
    try:
        for num in profiled:
            t0 = time.perf_counter()
            with jax.profiler.StepTraceAnnotation("train", step_num=num):
                step()
            wall_ms.append(_ms_since(t0))
    finally:
        jax.profiler.stop_trace()
    written = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
    if len(written) != 1:
        raise RuntimeError(f"expected one .xplane.pb under {out}, found {written}")
    xplane = written[0].rename(written[0].with_name(f"{HOST}.xplane.pb"))
    for extra in out.glob("plugins/profile/*/*"):  # only the xplane is kept (no trace.json.gz duplicates)
        if extra != xplane:
            extra.unlink()
    profiler = {
        "python_tracer_level": options.python_tracer_level,
        "host_tracer_level": options.host_tracer_level,
        "enable_hlo_proto": options.enable_hlo_proto,
    }
    info = {**info, "profiler_options": profiler, "calls_before_profiler": before, **ground_truth(wall_ms, profiled)}
    write_run_info(out, xplane, wall_ms[before:], info, scenario)


def jax_jit_first_call() -> None:
    """(f) `jax.profiler.start_trace` before the first call: tracing, lowering and XLA compilation inside."""
    _profile_jax_jit("jax_jit_first_call", 0, "jax.jit train step profiled from its first call")


def jax_jit_after_steps() -> None:
    """(g) Three calls first (traced and compiled), then five profiled: the steady state."""
    scenario = f"the same jax.jit step called {JAX_STEPS_BEFORE} times, then profiled"
    _profile_jax_jit("jax_jit_after_steps", JAX_STEPS_BEFORE, scenario)


# --- micro-benchmark ----------------------------------------------------------------------------------------


def torch_layer_norm() -> None:
    """(e) `layer_norm` on one tensor called LAYER_NORM_CALLS times under the profiler: no steps, no warm-up
    call before it, nothing else in the window."""
    torch = _torch_setup()
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    out = side_dir("microbenchmark", "torch_layer_norm", root=SAMPLES)
    x = torch.randn(*LAYER_NORM_SHAPE, generator=torch.Generator().manual_seed(0))
    shape = (LAYER_NORM_SHAPE[-1],)
    wall_ms = []
    with profile(
        activities=[ProfilerActivity.CPU],
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name=HOST, use_gzip=True),
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
    ):
        t_all = time.perf_counter()
        for _ in range(LAYER_NORM_CALLS):
            t0 = time.perf_counter()
            torch.nn.functional.layer_norm(x, shape)
            wall_ms.append(_ms_since(t0))
        loop_ms = _ms_since(t_all)
    trace = _single_kineto(out)
    info = {
        "torch": torch.__version__,
        "benchmark": f"torch.nn.functional.layer_norm(x {LAYER_NORM_SHAPE}, {shape}) x {LAYER_NORM_CALLS}",
        "settings": {"torch_threads": TORCH_THREADS, "calls": LAYER_NORM_CALLS, "warmup_calls_before": 0},
        "schedule": None,
        "step_marker": None,
        "note": "no steps: profiled_step_wall_ms and mean_step_ms are per layer_norm call",
        "loop_wall_ms": loop_ms,
        "first_call_ms": wall_ms[0],
        "median_call_ms": round(statistics.median(wall_ms), 4),
        "calls": LAYER_NORM_CALLS,
    }
    scenario = f"micro-benchmark: one layer_norm called {LAYER_NORM_CALLS} times under torch.profiler, no steps"
    write_run_info(out, trace, wall_ms, info, scenario)


# --- entry point --------------------------------------------------------------------------------------------


SCENARIOS: dict[str, Callable[[], None]] = {
    "torch_compile_first_call": torch_compile_first_call,
    "torch_compile_first_call_steps": torch_compile_first_call_steps,
    "torch_compile_scheduled": torch_compile_scheduled,
    "tf_jit_first_call": tf_jit_first_call,
    "tf_jit_after_steps": tf_jit_after_steps,
    "jax_jit_first_call": jax_jit_first_call,
    "jax_jit_after_steps": jax_jit_after_steps,
    "torch_layer_norm": torch_layer_norm,
}


JAX_SCENARIOS = ("jax_jit_first_call", "jax_jit_after_steps")  # need `pip install jax`


def main(argv: list[str]) -> None:
    names = argv or list(SCENARIOS)
    if not argv and importlib.util.find_spec("jax") is None:
        names = [name for name in names if name not in JAX_SCENARIOS]
        print(f"jax not installed: skipping {list(JAX_SCENARIOS)} (run them from a venv with `pip install jax`)")
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    if len(names) == 1:
        with tempfile.TemporaryDirectory(prefix="inductor_cache_") as cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # before torch is imported: the first call compiles
            SCENARIOS[names[0]]()
        return
    for name in names:  # one interpreter each: TF and torch never share one, every Inductor cache starts empty
        subprocess.run([sys.executable, "-m", "tools.capture_warmup", name], check=True, cwd=REPO, timeout=600)


if __name__ == "__main__":
    main(sys.argv[1:])
