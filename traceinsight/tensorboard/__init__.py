"""traceinsight as a TensorBoard tab ("TraceInsight"), beside XProf's Profile tab.

`pip install 'traceinsight-report[tensorboard]'` registers `plugin.TraceInsightPlugin` under TensorBoard's
`tensorboard_plugins` entry point; `tensorboard --logdir LOGDIR` then shows the report of each profile run
(TensorFlow / JAX XSpace sessions and PyTorch `tensorboard_trace_handler` folders). This package does not
import TensorBoard itself: only `plugin` does, so the rest works (and is tested) without it.
"""
