"""The input section names the slow user code (issue 19 item 4): XProf's framework-op stats show slow_decode
(a tf.py_function, 319 calls, 1.54 s) on tf_cpu/a_input_bound, and so must our page."""

import re

from tests.conftest import shared_trace
from traceinsight.cli import main


def _page(run: str, tmp_path) -> str:
    out = tmp_path / "r.html"
    assert main(["report", str(shared_trace(run)), "-o", str(out), "-q"]) in (0, 1)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", out.read_text()))


def test_slow_decode_is_named_with_its_calls_and_the_gil(tmp_path):
    text = _page("tf_cpu/a_input_bound", tmp_path)
    assert "Slowest user function of the pipeline: slow_decode, 319 calls, 1.54 s" in text
    assert "holds Python's GIL" in text
    assert "Host framework ops" in text


def test_unknown_verdict_says_why(tmp_path):
    text = _page("tracelens/b200", tmp_path)
    assert "Verdict: unknown: the trace has no input-pipeline events" in text


def test_kernel_table_names_the_op_that_launched_each_kernel(tmp_path):
    text = _page("kineto/resnet50_num_workers_0", tmp_path)
    assert "launched by" in text
    assert "int)aten::cudnn_convolution_backward_input" in text  # the top kernel (its full name folded), then its op
