"""Saved reports whose numbers are out of range are refused with one line, exit 2 (issue 36, case 12).

`diff` of a report whose `steps.mean_ns` is -2^63 (in int64's range, but its difference to any step time is not)
exited 3 ("Integer exceeds 64-bit range"); it, and a count of 2^63 - 1, are now bad input naming the field, for
`diff` and `trend` alike. A figure at the bound still reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight.cli import main
from traceinsight.result import MAX_SAVED_INT

RUN = SAMPLE_TRACES / "synthetic_gpu" / "healthy"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("saved")
    assert main(["report", str(RUN), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q"]) == 0
    return json.loads((out / "r.json").read_text())


def _write(doc: dict, path: Path, field: str, value: int) -> Path:
    section, key = field.split(".")
    doc = {**doc, section: {**doc[section], key: value}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("field", "value"), [("steps.mean_ns", -(2**63)), ("totals.kernel_count", 2**63 - 1)])
def test_diff_and_trend_refuse_a_number_out_of_range(
    saved: dict, field: str, value: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _write(
        saved, tmp_path / "history" / "a" / "report.json", field, saved[field.split(".")[0]][field.split(".")[1]]
    )
    bad = _write(saved, tmp_path / "history" / "b" / "report.json", field, value)
    for args in (["diff", str(good), str(bad)], ["trend", str(tmp_path / "history")]):
        assert main([*args, "-o", str(tmp_path / "out.html"), "-q"]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "internal error" not in err, err
        assert f"{bad}:" in err and f"{field} = {value} is out of range" in err, err
        assert not (tmp_path / "out.html").exists()


def test_a_number_at_the_bound_reads(saved: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _write(saved, tmp_path / "a.json", "totals.h2d_bytes", MAX_SAVED_INT)
    new = _write(saved, tmp_path / "b.json", "totals.h2d_bytes", -MAX_SAVED_INT)
    assert main(["diff", str(base), str(new), "-o", str(tmp_path / "d.html"), "--json", str(tmp_path / "d.json")]) == 0
    changes = {c["metric"]: c for c in json.loads((tmp_path / "d.json").read_text())["changes"]}
    assert changes["totals.h2d_bytes"]["delta"] == -(2**63)  # the difference of two bounds still fits int64
