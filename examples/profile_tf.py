"""Profile a few training steps with the TensorFlow profiler, in the layout `traceinsight report` reads
(`LOGDIR/plugins/profile/<run>/<host>.xplane.pb`), with a step marker per step."""

from __future__ import annotations

import argparse

import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir", default="runs/profile")
    args = parser.parse_args()
    ds = tf.data.Dataset.from_tensor_slices((tf.random.normal([4096, 256]), tf.random.uniform([4096], 0, 10, tf.int32)))
    ds = ds.batch(64).prefetch(tf.data.AUTOTUNE)
    model = tf.keras.Sequential([tf.keras.layers.Dense(512, activation="relu"), tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
        )
        return loss

    iterator = iter(ds)
    for _ in range(3):  # warm up (tracing, first allocations) outside the profile
        train_step(*next(iterator))
    tf.profiler.experimental.start(args.logdir)
    for step in range(5):
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):  # the step marker traceinsight reads
            train_step(*next(iterator))
    tf.profiler.experimental.stop()


if __name__ == "__main__":
    main()
