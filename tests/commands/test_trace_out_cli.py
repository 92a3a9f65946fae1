"""`traceinsight report --trace-out FILE [--steps A:B]`: the annotated timeline from the CLI, and bad step ranges
as bad input (one line, exit 2, nothing written)."""

import gzip
import json

from tests.conftest import SAMPLE_TRACES
from traceinsight.cli import main

RUN = SAMPLE_TRACES / "synthetic_gpu" / "input_bound"


def test_trace_out_writes_a_chrome_trace_beside_the_report(tmp_path):
    out = tmp_path / "timeline.json.gz"
    assert main(["report", str(RUN), "-o", str(tmp_path / "r.html"), "--trace-out", str(out), "-q"]) == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(n.startswith("idle gaps") for n in names) and "bottlenecks" in names
    assert (tmp_path / "r.html").exists()


def test_steps_the_run_does_not_have_are_bad_input(tmp_path, capsys):
    out = tmp_path / "timeline.json"
    code = main(["report", str(RUN), "-o", str(tmp_path / "r.html"), "--trace-out", str(out), "--steps", "900:901"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no step has an id in 900..901" in err[0]
    assert not out.exists() and not (tmp_path / "r.html").exists()
