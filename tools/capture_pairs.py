"""Real before/after CPU profiles of one change each, in pairs, made with the real profilers.

Why: `traceinsight diff` and the rules it reports need pairs of real captures whose story is known: the same
small job profiled before and after one fix (parallel `map`, `prefetch`, parallel `interleave`, DataLoader
workers, `tf.function`, a bigger batch). Each side is a folder in the profiler's own layout (TF:
`plugins/profile/<run>/sample.xplane.pb`; torch: one `*.pt.trace.json.gz` from `tensorboard_trace_handler`)
plus `run_info.json` with the wall time of every profiled step, measured with `time.perf_counter` around the
very steps the profiler marks (`train` step_num N for TF, `ProfilerStep#N` for torch), after warm-up steps.

TF steps follow `tools.make_tf_samples`: `tf.profiler.experimental.start/stop`, each step inside
`Trace("train", step_num=N, _r=1)` and the step itself calls `next(iterator)`, so the input wait
(`IteratorGetNextOp`) lies inside the step. torch steps follow `tools.make_torch_sample`: `schedule` +
`tensorboard_trace_handler`, record_shapes/with_stack off, the DataLoader iterated inside the profiled loop.
tf.data injects a `prefetch` at the end of a pipeline by default; the sides that claim "no prefetch" turn that
off (`inject_prefetch=False`, noted in run_info) so the pipeline is what it says.

Each pair runs in its own interpreter when several are asked for: TF and torch never share a process, and no
DataLoader worker is forked from a process that holds TF's thread pools.

    python -m tools.capture_pairs                       # every pair -> sample_traces/pairs/, then README.md
    python -m tools.capture_pairs tf_interleave ...     # only those (README.md is rebuilt from every run_info)
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.make_tf_samples import FEATURES, HOST, REPO, SAMPLES, seeded_mlp

PAIRS_DIR = SAMPLES / "pairs"
TF_WARMUP = 8  # unprofiled steps first (tracing, AUTOTUNE ramp-up, DataLoader workers starting)
TF_STEPS = 8
TORCH_SKIP, TORCH_ACTIVE = 8, 8  # schedule: skip_first=8, wait=1, warmup=1, then 8 active steps
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is first imported


# --- shared bits ------------------------------------------------------------------------------------------


def side_dir(pair: str, side: str, root: Path = PAIRS_DIR) -> Path:
    """`root/<pair>/<side>/`, emptied."""
    out = root / pair / side
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def write_run_info(
    out: Path, trace: Path, wall_ms: list[float], info: dict[str, Any], scenario: str | None = None
) -> None:
    """`run_info.json` of `<pair>/<side>/`: the scenario (this module's `PAIRS` by default), the caller's
    details, step wall times, the trace."""
    pair, side = out.parent.name, out.name
    info = {
        "scenario": f"{pair}/{side}: {scenario or getattr(PAIRS[pair], side)}",
        **info,
        "profiled_step_wall_ms": wall_ms,
        "mean_step_ms": round(statistics.fmean(wall_ms), 3),
        **(
            {"samples_per_s": round(info["batch_size"] * 1000 / statistics.fmean(wall_ms), 1)}
            if "batch_size" in info
            else {}
        ),
        "trace_file": trace.relative_to(out).as_posix(),
        "trace_bytes": trace.stat().st_size,
    }
    (out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"{trace.relative_to(out.parents[1])}: {trace.stat().st_size:,} bytes, mean step {info['mean_step_ms']} ms")


def _ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


# --- TensorFlow ---------------------------------------------------------------------------------------------


def _decode(index: Any, sleep_s: float) -> tuple[np.ndarray, np.int32]:
    """The slow per-element work: a sleep (releases the GIL, like I/O) plus a little numpy."""
    time.sleep(sleep_s)
    rng = np.random.default_rng(int(index))
    x = rng.standard_normal(FEATURES).astype(np.float32)
    return np.tanh(x) * 2.0, np.int32(int(index) % 10)


def _slow_map(sleep_s: float) -> Callable[[Any], tuple[Any, Any]]:
    """A tf.data map function running `_decode` through `tf.py_function` (stateful: never auto-parallelised)."""
    import tensorflow as tf

    def slow_map(index: Any) -> tuple[Any, Any]:
        x, y = tf.py_function(lambda i: _decode(i, sleep_s), [index], [tf.float32, tf.int32])
        x.set_shape([FEATURES])
        y.set_shape([])
        return x, y

    return slow_map


def _no_injected_prefetch(ds: Any) -> Any:
    """Turn off tf.data's default `inject_prefetch`, so a pipeline without `prefetch` really has none."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def _tf_train_step(compiled: bool = True, width: int = 128) -> Callable[[Any], Any]:
    """A seeded MLP 64-`width`-`width`-10 and its train step `step(iterator) -> loss`; `next(iterator)` is inside."""
    import keras
    import tensorflow as tf

    model = seeded_mlp(width)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(1e-3)

    def train_step(iterator: Any) -> Any:
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return tf.function(train_step) if compiled else train_step


def _tf_versions() -> dict[str, str]:
    import keras
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "keras": keras.__version__}


def _profile_tf(
    out: Path, step: Callable[[Any], Any], iterator: Iterator[Any], warmup: int = TF_WARMUP, first: int = 0
) -> tuple[Path, list[float], list[int]]:
    """`warmup` unprofiled steps, then TF_STEPS profiled ones into `out`; return (xplane, wall ms, step nums).

    Steps are numbered from `first` (the steps already run), so the first profiled one is `first + warmup`.
    """
    for _ in range(warmup):
        step(iterator).numpy()
    step_nums = list(range(first + warmup, first + warmup + TF_STEPS))
    xplane, wall_ms = profile_tf_steps(out, lambda: step(iterator), step_nums)
    return xplane, wall_ms, step_nums


def profile_tf_steps(out: Path, run_step: Callable[[], Any], step_nums: list[int]) -> tuple[Path, list[float]]:
    """Profile one call of `run_step` per step number into `out` (each in `Trace("train", step_num=N, _r=1)`,
    `.numpy()` inside, so the step's work is in it); return the one `<HOST>.xplane.pb` written and each call's
    wall ms."""
    import tensorflow as tf

    wall_ms = []
    tf.profiler.experimental.start(str(out))
    try:
        for num in step_nums:
            t0 = time.perf_counter()
            with tf.profiler.experimental.Trace("train", step_num=num, _r=1):
                run_step().numpy()
            wall_ms.append(_ms_since(t0))
    finally:
        tf.profiler.experimental.stop()
    written = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
    if len(written) != 1:
        raise RuntimeError(f"expected one .xplane.pb under {out}, found {written}")
    return written[0].rename(written[0].with_name(f"{HOST}.xplane.pb")), wall_ms


def _capture_tf(pair: str, side: str, ds: Any, info: dict[str, Any], compiled: bool = True, width: int = 128) -> None:
    """Profile the standard train step fed by `ds` into `pairs/<pair>/<side>/`."""
    out = side_dir(pair, side)
    step = _tf_train_step(compiled, width)
    xplane, wall_ms, step_nums = _profile_tf(out, step, iter(ds))
    model = f"MLP 64-{width}-{width}-10, Adam, custom train step " + ("in tf.function" if compiled else "run eagerly")
    info = {**_tf_versions(), **info, "model": model + " (GetNext inside)"}
    write_run_info(out, xplane, wall_ms, {**info, "step_marker": "train", "step_nums": step_nums})


def _slow_pipeline(parallel: bool, prefetch: bool, batch: int = 16, sleep_s: float = 0.002) -> Any:
    """range -> map(slow py_function, sequential or AUTOTUNE) -> repeat -> batch [-> prefetch(AUTOTUNE)]."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(batch * 64)
    ds = ds.map(_slow_map(sleep_s), num_parallel_calls=tf.data.AUTOTUNE if parallel else None)
    ds = ds.repeat().batch(batch, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else _no_injected_prefetch(ds)


def _slow_pipeline_info(parallel: bool, prefetch: bool, batch: int = 16, sleep_s: float = 0.002) -> dict:
    map_kind = "num_parallel_calls=AUTOTUNE" if parallel else "sequential"
    tail = "->prefetch(AUTOTUNE)" if prefetch else " (no prefetch; inject_prefetch=False)"
    return {
        "pipeline": f"range->map(py_function, {map_kind})->repeat->batch({batch}){tail}",
        "settings": {"per_element_sleep_s": sleep_s, "map_parallel": parallel, "prefetch": prefetch},
        "batch_size": batch,
    }


def tf_data_parallel() -> None:
    for side, fixed in (("before", False), ("after", True)):
        ds = _slow_pipeline(parallel=fixed, prefetch=fixed)
        _capture_tf("tf_data_parallel", side, ds, _slow_pipeline_info(parallel=fixed, prefetch=fixed))


def tf_prefetch_slow_map() -> None:
    for side, fixed in (("before", False), ("after", True)):
        ds = _slow_pipeline(parallel=fixed, prefetch=True)
        _capture_tf("tf_prefetch_slow_map", side, ds, _slow_pipeline_info(parallel=fixed, prefetch=True))


def tf_interleave() -> None:
    import tensorflow as tf

    files, per_file, batch, sleep_s = 8, 64, 16, 0.002
    slow_map = _slow_map(sleep_s)

    def read_file(i: Any) -> Any:  # one "file": per_file elements, each slow to read
        return tf.data.Dataset.range(i * per_file, (i + 1) * per_file).map(slow_map)

    for side, parallel in (("before", False), ("after", True)):
        calls = tf.data.AUTOTUNE if parallel else None
        ds = tf.data.Dataset.range(files).interleave(read_file, cycle_length=4, num_parallel_calls=calls)
        ds = ds.repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        kind = "num_parallel_calls=AUTOTUNE" if parallel else "sequential"
        info = {
            "pipeline": (
                f"range({files})->interleave(range({per_file}) per file->map(py_function, sequential), "
                f"cycle_length=4, {kind})->repeat->batch({batch})->prefetch(AUTOTUNE)"
            ),
            "settings": {"per_element_sleep_s": sleep_s, "interleave_parallel": parallel, "cycle_length": 4},
            "batch_size": batch,
        }
        _capture_tf("tf_interleave", side, ds, info)


def _in_memory_pipeline(batch: int, rows: int) -> tuple[Any, str]:
    """Seeded in-memory data (`rows` x FEATURES) -> repeat -> batch: a pipeline that never waits; its words."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    y = rng.integers(0, 10, rows).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True)
    words = f"from_tensor_slices(in-memory {rows}x{FEATURES})->repeat->batch({batch}) (tf.data injects its prefetch)"
    return ds, words


def _eager_vs_function(pair: str, batch: int, width: int) -> None:
    for side, compiled in (("before", False), ("after", True)):
        ds, pipeline = _in_memory_pipeline(batch, batch * 64)
        info = {"pipeline": pipeline, "settings": {"tf_function": compiled}, "batch_size": batch}
        _capture_tf(pair, side, ds, info, compiled=compiled, width=width)


def tf_eager_vs_function() -> None:
    _eager_vs_function("tf_eager_vs_function", batch=32, width=128)


def tf_eager_vs_function_wide() -> None:
    """A held-back pair for the eager estimate: ops with more work each (MLP 64-512-512-10, batch 128)."""
    _eager_vs_function("tf_eager_vs_function_wide", batch=128, width=512)


def tf_small_batch() -> None:
    """The same tf.function train step on batches of 2 and of 256 (issue 12: a CI-sized CPU run). The model is
    wide enough (64-1024-1024-10) that batch 256 keeps the cores computing, while batch 2 is per-step overhead."""
    for side, batch in (("before", 2), ("after", 256)):
        ds, pipeline = _in_memory_pipeline(batch, 8192)
        info = {"pipeline": pipeline, "settings": {"batch_size": batch, "tf_function": True}, "batch_size": batch}
        _capture_tf("tf_small_batch", side, ds, info, width=1024)


def tf_tuned() -> None:
    """Parallel map + cache + prefetch; the first epoch fills the cache, the second is profiled."""
    import tensorflow as tf

    batch, epoch_steps, sleep_s = 16, 24, 0.002
    ds = tf.data.Dataset.range(batch * epoch_steps).map(_slow_map(sleep_s), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.cache().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    out = side_dir("tf_tuned", "after")
    step = _tf_train_step()
    first = iter(ds)
    for _ in range(epoch_steps):  # epoch 1: trains while filling the cache
        step(first)
    for _ in first:  # reach the end so the cache is complete
        pass
    xplane, wall_ms, nums = _profile_tf(out, step, iter(ds), warmup=4, first=epoch_steps)  # epoch 2: cached
    info = {
        **_tf_versions(),
        "pipeline": (
            f"range({batch * epoch_steps})->map(py_function, AUTOTUNE)->cache->batch({batch})->prefetch(AUTOTUNE)"
        ),
        "settings": {"per_element_sleep_s": sleep_s, "epoch_steps": epoch_steps, "profiled_epoch": 2},
        "batch_size": batch,
        "model": "MLP 64-128-128-10, Adam, custom train step in tf.function (GetNext inside)",
        "step_marker": "train",
        "step_nums": nums,
    }
    write_run_info(out, xplane, wall_ms, info)


# --- PyTorch ----------------------------------------------------------------------------------------------


class SlowerItems:
    """Wraps a map-style dataset and sleeps `extra_s` more per item (plain class: DataLoader needs only these)."""

    def __init__(self, base: Any, extra_s: float) -> None:
        self.base, self.extra_s = base, extra_s

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> Any:
        time.sleep(self.extra_s)
        return self.base[index]


def _torch_mlp(width: int = 256, features: int = FEATURES) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    )
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(model: Any, optimizer: Any) -> Callable[[Any, Any], None]:
    """The standard step: cross-entropy, backward, optimizer step (nothing read back to the host)."""
    import torch

    def step(x: Any, y: Any) -> None:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def profile_torch(
    out: Path,
    batches: Callable[[], Iterator[tuple[Any, Any]]],
    step: Callable[[Any, Any], None],
    cuda: bool = False,
    finish: Callable[[], None] | None = None,
) -> tuple[Path, list[float], list[int]]:
    """Run `step` on `batches()` (iterated inside the profiler) under schedule(skip_first, wait 1, warmup 1,
    active), CUDA activity traced too with `cuda`; return (trace, wall ms of the active steps, their
    ProfilerStep numbers). `finish()` ends the last step (a device synchronisation, so that the steps' time
    includes the device's)."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    total = TORCH_SKIP + 2 + TORCH_ACTIVE
    wall_ms = []
    with profile(
        activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])],
        schedule=schedule(skip_first=TORCH_SKIP, wait=1, warmup=1, active=TORCH_ACTIVE, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name=HOST, use_gzip=True),
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
    ) as prof:
        t0 = time.perf_counter()
        for number, (x, y) in enumerate(batches()):
            if number == total:
                break
            step(x, y)
            if finish is not None and number == total - 1:
                finish()
            wall_ms.append(_ms_since(t0))  # batch fetch + training, the span of ProfilerStep#step
            prof.step()
            t0 = time.perf_counter()
    (trace,) = out.glob("*.pt.trace.json.gz")
    return trace, wall_ms[total - TORCH_ACTIVE :], list(range(total - TORCH_ACTIVE, total))


def _capture_torch_loader(pair: str, side: str, dataset: Any, workers: int, info: dict[str, Any]) -> None:
    import torch
    from torch.utils.data import DataLoader

    # One intra-op thread: on 2 cores the second OpenMP thread's spin-wait after each op starves the sleeping
    # workers of wake-ups and halves the loader's throughput at random (OMP_WAIT_POLICY=PASSIVE does the same).
    torch.set_num_threads(1)
    out = side_dir(pair, side)
    model, optimizer = _torch_mlp()
    loader = DataLoader(dataset, batch_size=16, num_workers=workers, persistent_workers=workers > 0)
    trace, wall_ms, nums = profile_torch(out, lambda: iter(loader), train_step(model, optimizer))
    info = {
        "torch": torch.__version__,
        **info,
        "settings": {**info["settings"], "num_workers": workers, "persistent_workers": workers > 0, "torch_threads": 1},
        "batch_size": 16,
        "model": "MLP 64-256-256-10, SGD",
        "schedule": {"skip_first": TORCH_SKIP, "wait": 1, "warmup": 1, "active": TORCH_ACTIVE},
        "step_marker": "ProfilerStep#N",
        "step_nums": nums,
    }
    write_run_info(out, trace, wall_ms, info)


def torch_dataloader_workers() -> None:
    from tools.make_torch_sample import SlowDataset

    for side, workers in (("before", 0), ("after", 4)):
        info = {
            "pipeline": f"DataLoader(SlowDataset: 2 ms sleep per item, batch 16, num_workers={workers})",
            "settings": {"per_item_sleep_s": 0.002},
        }
        _capture_torch_loader("torch_dataloader_workers", side, SlowDataset(), workers, info)


def torch_dataloader_2workers_bound() -> None:
    from tools.make_torch_sample import SlowDataset

    for side, workers in (("before", 2), ("after", 8)):
        info = {
            "pipeline": f"DataLoader(SlowDataset + 6 ms: 8 ms sleep per item, batch 16, num_workers={workers})",
            "settings": {"per_item_sleep_s": 0.008},
        }
        dataset = SlowerItems(SlowDataset(), extra_s=0.006)
        _capture_torch_loader("torch_dataloader_2workers_bound", side, dataset, workers, info)


def torch_small_batch() -> None:
    import torch

    features, width = 128, 512
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(8192, features, generator=gen), torch.randint(0, 10, (8192,), generator=gen)
    for side, batch in (("before", 2), ("after", 64)):
        out = side_dir("torch_small_batch", side)
        model, optimizer = _torch_mlp(width, features)

        def batches(b: int = batch) -> Iterator[tuple[Any, Any]]:
            return ((x[i : i + b], y[i : i + b]) for i in range(0, len(x) - b + 1, b))

        trace, wall_ms, nums = profile_torch(out, batches, train_step(model, optimizer))
        info = {
            "torch": torch.__version__,
            "pipeline": f"in-memory tensors {tuple(x.shape)}, sliced batches of {batch} (no DataLoader)",
            "settings": {"batch_size": batch, "torch_threads": torch.get_num_threads()},
            "batch_size": batch,
            "model": f"MLP {features}-{width}-{width}-10, SGD",
            "schedule": {"skip_first": TORCH_SKIP, "wait": 1, "warmup": 1, "active": TORCH_ACTIVE},
            "step_marker": "ProfilerStep#N",
            "step_nums": nums,
        }
        write_run_info(out, trace, wall_ms, info)


# --- the pairs and README -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    capture: Callable[[], None]
    before: str
    after: str


PAIRS: dict[str, Pair] = {
    "tf_data_parallel": Pair(
        tf_data_parallel,
        "`map(py_function 2 ms)` sequential, batch 16, no prefetch",
        "same map with `num_parallel_calls=AUTOTUNE` + `prefetch(AUTOTUNE)` (no cache)",
    ),
    "torch_dataloader_workers": Pair(
        torch_dataloader_workers,
        "DataLoader, 2 ms per item, batch 16, `num_workers=0`",
        "`num_workers=4`, `persistent_workers=True`",
    ),
    "tf_prefetch_slow_map": Pair(
        tf_prefetch_slow_map,
        "sequential slow map, already ends in `prefetch(AUTOTUNE)`",
        "map with `num_parallel_calls=AUTOTUNE` too",
    ),
    "tf_interleave": Pair(
        tf_interleave,
        "`range(8).interleave(slow per-file dataset, cycle_length=4)` sequential, batch 16, prefetch",
        "interleave with `num_parallel_calls=AUTOTUNE`",
    ),
    "torch_dataloader_2workers_bound": Pair(
        torch_dataloader_2workers_bound,
        "DataLoader, 8 ms per item, batch 16, `num_workers=2` (still input-bound)",
        "`num_workers=8`",
    ),
    "tf_eager_vs_function": Pair(
        tf_eager_vs_function,
        "in-memory data, batch 32, custom train step run eagerly",
        "the same step under `tf.function`",
    ),
    "tf_eager_vs_function_wide": Pair(
        tf_eager_vs_function_wide,
        "in-memory data, batch 128, MLP 64-512-512-10, custom train step run eagerly (held back: checks the estimate)",
        "the same step under `tf.function`",
    ),
    "tf_small_batch": Pair(
        tf_small_batch,
        "in-memory MLP 64-1024-1024-10 training in `tf.function`, batch 2",
        "batch 256 (same model)",
    ),
    "torch_small_batch": Pair(
        torch_small_batch,
        "in-memory MLP 128-512-512-10 training, batch 2",
        "batch 64 (same model)",
    ),
    "tf_tuned": Pair(
        tf_tuned,
        "—",
        "parallel map + cache + prefetch on the 2 ms map, profiled in epoch 2 (cache warm)",
    ),
}


def _mean_ms(pair: str, side: str) -> str:
    path = PAIRS_DIR / pair / side / "run_info.json"
    if not path.exists():
        return "—"
    info = json.loads(path.read_text())
    rate = f", {info['samples_per_s']:,.0f} samples/s" if "samples_per_s" in info else ""
    return f"{info['mean_step_ms']:.1f} ms{rate}"


def write_readme() -> None:
    """`pairs/README.md`: one row per pair with the measured mean step of each side (from run_info.json)."""
    rows = [
        f"| `{name}` | {pair.before} | {pair.after} | {_mean_ms(name, 'before')} | {_mean_ms(name, 'after')} |"
        for name, pair in PAIRS.items()
    ]
    text = "\n".join(
        [
            "# Before/after pairs",
            "",
            "Real CPU profiles made by `tools/capture_pairs.py` (TF 2.21 `tf.profiler.experimental`, torch 2.13",
            "`torch.profiler` + `tensorboard_trace_handler`) on a 2-core machine, each pair the same small job",
            "before and after one change. Each `<pair>/<side>/` is the profiler's own layout (TF",
            "`plugins/profile/<run>/sample.xplane.pb`, torch one `*.pt.trace.json.gz`) plus `run_info.json`",
            "(scenario, versions, pipeline and settings, batch size, `profiled_step_wall_ms` of the very steps",
            "the profiler marks, measured with `time.perf_counter`, and their `mean_step_ms`); `run_info.json` is",
            "not a trace. TF steps are `train` step markers (step_num N) with `next(iterator)` inside the step,",
            "so `IteratorGetNextOp` waits are in it; torch steps are `ProfilerStep#N` with the DataLoader iterated",
            "inside the profiled loop. Warm-up steps run before the 8 profiled ones. Timings differ run to run.",
            "",
            "Worth knowing when reading them:",
            "",
            "- The parallel TF fixes give about 2x, not more: besides its 2 ms sleep each element costs 0.7-0.9",
            "  ms of GIL-held `py_function` and numpy work, which no parallelism spreads (an explicit",
            "  `num_parallel_calls=8` measured no faster than AUTOTUNE on this machine).",
            "- tf.data injects a `prefetch` at the end of a pipeline by default; the `tf_data_parallel` before",
            "  side turns that off (`inject_prefetch=False`) so it really has none.",
            "- The DataLoader pairs run torch with 1 intra-op thread: on 2 cores the second OpenMP thread's",
            "  spin-wait starved the sleeping workers and halved the loader's throughput at random.",
            "- Several workers finishing in lockstep make the worker sides bursty (one long wait, then fast",
            "  steps); the mean over the 8 profiled steps is the figure to compare.",
            "",
            "| pair | before | after | before: mean step | after: mean step |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Regenerate (a minute or two; each pair runs in its own process):",
            "",
            "    python -m tools.capture_pairs                  # all pairs, then this README",
            "    python -m tools.capture_pairs tf_interleave    # one pair (README rebuilt from every run_info.json)",
            "",
        ]
    )
    (PAIRS_DIR / "README.md").write_text(text)


def main(argv: list[str]) -> None:
    names = argv or list(PAIRS)
    unknown = [name for name in names if name not in PAIRS]
    if unknown:
        raise SystemExit(f"unknown pair(s) {unknown}; choose from {list(PAIRS)}")
    if len(names) == 1:
        PAIRS[names[0]].capture()
    else:  # one interpreter per pair: TF and torch (and forked DataLoader workers) never share one
        for name in names:
            # timeout: a TF process can hang at exit with py_function work in flight; fail, don't wait forever
            subprocess.run([sys.executable, "-m", "tools.capture_pairs", name], check=True, cwd=REPO, timeout=600)
    write_readme()


if __name__ == "__main__":
    main(sys.argv[1:])
