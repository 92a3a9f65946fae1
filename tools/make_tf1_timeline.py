"""A real TF1 timeline (`tensorflow.python.client.timeline`): a small MLP trained for a few `session.run` steps on
the CPU with `RunOptions(trace_level=FULL_TRACE)`, the last step's step stats written as a Chrome trace, as TF1
codebases write them. `python -m tools.make_tf1_timeline` rewrites sample_traces/tf1_timeline/."""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "sample_traces" / "tf1_timeline" / "cpu_mlp"


def main() -> None:
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.client import timeline

    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.reset_default_graph()
    x = tf.compat.v1.placeholder(tf.float32, [64, 128])
    y = tf.compat.v1.placeholder(tf.int32, [64])
    w1 = tf.compat.v1.Variable(tf.random.normal([128, 256], stddev=0.05, seed=1))
    w2 = tf.compat.v1.Variable(tf.random.normal([256, 10], stddev=0.05, seed=2))
    hidden = tf.nn.relu(tf.matmul(x, w1))
    logits = tf.matmul(hidden, w2)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
    rng = np.random.default_rng(0)
    feed = {x: rng.normal(size=(64, 128)).astype(np.float32), y: rng.integers(0, 10, 64)}
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for _ in range(3):
            metadata = tf.compat.v1.RunMetadata()
            session.run(train, feed_dict=feed, options=options, run_metadata=metadata)
    OUT.mkdir(parents=True, exist_ok=True)
    trace = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()
    (OUT / "timeline.json").write_text(trace)
    print(OUT / "timeline.json", len(trace), "bytes")


if __name__ == "__main__":
    main()
