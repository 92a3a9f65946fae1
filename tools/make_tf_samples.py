"""Real TensorFlow CPU profiles of an input-bound tf.data job and of its fix.

Why: the XSpace reader and the input-pipeline analysis need real `.xplane.pb` files whose
story is known: (a) a sequential `map` with a slow `py_function` (3 ms sleep per element,
no parallelism, no prefetch) starves the model, (b) the same pipeline with
`num_parallel_calls=AUTOTUNE`, `cache` and `prefetch` does not.

Uses `tf.profiler.experimental.start/stop` (Keras' TensorBoard callback needs the
`tensorboard` package) and wraps each step in `Trace("train", step_num=N, _r=1)`, the
explicit step marker xprof groups by. Output layout is the profiler's own:
`<logdir>/plugins/profile/<run>/<host>.xplane.pb`, the host part renamed to `sample`.

    python -m tools.make_tf_samples            # writes sample_traces/tf_input_{bound,tuned}/
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
HOST = "sample"
SLEEP_S = 0.003
BATCH = 32
FEATURES = 64
FIRST_STEP = 4  # step_num of the first profiled step (warm-up steps come before)


def seeded_mlp(width: int = 128) -> Any:
    """The seeded MLP 64-`width`-`width`-10 that the TF sample scripts train (same weights every run)."""
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def _load(index: Any) -> tuple[np.ndarray, np.int32]:
    """The slow per-element work: 3 ms of "decoding" plus a little numpy."""
    time.sleep(SLEEP_S)
    rng = np.random.default_rng(int(index))
    return rng.standard_normal(FEATURES).astype(np.float32), np.int32(int(index) % 10)


def _dataset(tuned: bool) -> Any:
    import tensorflow as tf

    def slow_map(index: Any) -> tuple[Any, Any]:
        x, y = tf.py_function(_load, [index], [tf.float32, tf.int32])
        x.set_shape([FEATURES])
        y.set_shape([])
        return x, y

    ds = tf.data.Dataset.range(BATCH * 8)
    if tuned:
        ds = ds.map(slow_map, num_parallel_calls=tf.data.AUTOTUNE).cache().repeat()
        return ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return ds.map(slow_map).repeat().batch(BATCH, drop_remainder=True)


def profile_tf_input_pipeline(logdir: Path, tuned: bool, steps: int = 10) -> Path:
    """Profile `steps` training steps of the (un)tuned pipeline into `logdir`; return the .xplane.pb.

    Also writes `<logdir>/run_info.json` (pipeline, step numbers, wall ms of each step).
    For the tuned pipeline one pass over the data fills the cache before profiling.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    model = seeded_mlp()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(iterator: Any) -> Any:
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        return loss

    iterator = iter(_dataset(tuned))
    for _ in range(8 if tuned else FIRST_STEP):  # trace the function (and fill the cache)
        train_step(iterator)
    logdir.mkdir(parents=True, exist_ok=True)
    wall_ms = []
    tf.profiler.experimental.start(str(logdir))
    try:
        for step in range(FIRST_STEP, FIRST_STEP + steps):
            t0 = time.perf_counter()
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                train_step(iterator).numpy()
            wall_ms.append(round((time.perf_counter() - t0) * 1000, 3))
    finally:
        tf.profiler.experimental.stop()
    written = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if len(written) != 1:
        raise RuntimeError(f"expected one .xplane.pb under {logdir}, found {written}")
    xplane = written[0].rename(written[0].with_name(f"{HOST}.xplane.pb"))
    run_info = {
        "pipeline": (
            "range->map(py_function, AUTOTUNE)->cache->repeat->batch(32)->prefetch(AUTOTUNE)"
            if tuned
            else "range->map(py_function, sequential)->repeat->batch(32)"
        ),
        "per_element_sleep_s": SLEEP_S,
        "batch_size": BATCH,
        "model": "MLP 64-128-128-10, Adam, custom tf.function train step (GetNext inside)",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "profiled_steps": steps,
        "step_nums": list(range(FIRST_STEP, FIRST_STEP + steps)),
        "profiled_step_wall_ms": wall_ms,
        "xplane_file": xplane.relative_to(logdir).as_posix(),
        "xplane_bytes": xplane.stat().st_size,
    }
    (logdir / "run_info.json").write_text(json.dumps(run_info, indent=1) + "\n")
    return xplane


def main() -> None:
    for name, tuned in (("tf_input_bound", False), ("tf_input_tuned", True)):
        out = SAMPLES / name
        shutil.rmtree(out, ignore_errors=True)
        path = profile_tf_input_pipeline(out, tuned=tuned, steps=10)
        print(f"{path.relative_to(REPO)}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
