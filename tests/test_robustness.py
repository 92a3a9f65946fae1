"""Bad input never crashes: broken files exit 2 with one line, damaged events are skipped and counted,
reports are written atomically and inputs are never touched.

Broken files come from `tests.corpus` (derived at test time from sample_traces/). Event-level
damage is injected into a clean trace, so the expected table is the clean trace's own and each
warning count is the number of damaged events put in.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests import corpus
from tests.conftest import REPO, SAMPLE_TRACES
from traceinsight import cli, workflow
from traceinsight.cli import main
from traceinsight.errors import TraceError
from traceinsight.events import TraceRead
from traceinsight.readers import read_trace, xplane_schema, xspace
from traceinsight.readers._repair import MAX_DURATION_NS
from traceinsight.render import output

XSPACE_RUN = SAMPLE_TRACES / "synthetic_gpu_xspace" / "healthy"
KINETO_RUN = SAMPLE_TRACES / "synthetic_gpu" / "healthy"
BROKEN = corpus.broken_files()


def _report(tmp_path: Path, path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    """Run `traceinsight report` writing into tmp_path/out; (exit code, stdout, stderr)."""
    out = tmp_path / "out"
    code = main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(err: str, *fragments: str) -> None:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("traceinsight: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


# --------------------------------------------------------------------------- broken files


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_file_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, name):
    content, reason = BROKEN[name]
    path = tmp_path / "in" / name
    path.parent.mkdir()
    path.write_bytes(content)
    code, out, err = _report(tmp_path, path, capsys)
    assert code == 2
    _assert_one_line_error(err, str(path), reason)
    assert out == ""
    assert not (tmp_path / "out").exists()  # no report, no temp file, not even the folder
    assert path.read_bytes() == content


def test_directory_of_broken_files_exits_2(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("cut-10.pt.trace.json.gz", "nul.pt.trace.json", "random.pt.trace.json"):
        (run / name).write_bytes(BROKEN[name][0])
    code, _, err = _report(tmp_path, run, capsys)
    assert code == 2
    _assert_one_line_error(err, str(run))
    assert not (tmp_path / "out").exists()


def test_directory_without_traces_exits_2(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "notes.txt").write_text("no traces here")
    code, _, err = _report(tmp_path, tmp_path / "logs", capsys)
    assert code == 2
    _assert_one_line_error(err, "no trace files found")


def test_broken_files_through_the_real_command(tmp_path):
    """The installed entry point, in a fresh interpreter: exit 2, one line, nothing written."""
    cases = ["cut-10.pt.trace.json.gz", "cut-half.xplane.pb", "nul.pt.trace.json", "events-numbers.trace.json"]
    for name in cases:
        path = tmp_path / name
        path.write_bytes(BROKEN[name][0])
        result = subprocess.run(
            [sys.executable, "-m", "traceinsight", "report", str(path), "-o", str(tmp_path / "out" / "r.html")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert result.returncode == 2, result.stderr
        _assert_one_line_error(result.stderr, name, BROKEN[name][1])
        assert result.stdout == "" and not (tmp_path / "out").exists()


def _nobody() -> list[str] | None:
    """A command prefix that runs as an unprivileged user, when this test runs as root and can switch."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return None
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


@contextlib.contextmanager
def _nobody_folder(prefix: str) -> Iterator[tuple[Path, Path]]:
    """A folder under /tmp that `nobody` can enter (but not write), and in it the matplotlib cache folder it can."""
    shared = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        shared.chmod(0o755)
        config = shared / "mpl"  # matplotlib's cache, which `nobody` must be able to write
        config.mkdir(mode=0o777)
        config.chmod(0o777)
        yield shared, config
    finally:
        shutil.rmtree(shared)


def _report_as(prefix: list[str], config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`traceinsight report ARGS` behind `prefix` (the unprivileged user); skips when that user cannot run it."""
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "traceinsight", "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "MPLCONFIGDIR": str(config)},
        cwd=config.parent,
    )
    if "traceinsight" not in result.stderr:
        pytest.skip(f"the unprivileged user cannot run this checkout: {result.stderr[-300:]}")
    return result


def test_unreadable_file_exits_2(tmp_path):
    """Without read permission: exit 2 naming the file (root reads anything, so run as `nobody` there)."""
    prefix = _nobody() if os.geteuid() == 0 else []
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    with _nobody_folder("traceinsight-locked-") as (shared, config):
        for suffix, source in ((".pt.trace.json.gz", corpus.KINETO_SEED), (".xplane.pb", corpus.XSPACE_SEED)):
            trace = shared / f"locked{suffix}"
            shutil.copyfile(source, trace)
            trace.chmod(0)
            result = _report_as(prefix, config, str(trace), "-o", str(config / "r.html"))
            assert result.returncode == 2, result.stderr
            _assert_one_line_error(result.stderr, str(trace), "ermission denied")
            assert not (config / "r.html").exists()


# --------------------------------------------------------------------------- the CLI's own handling


def test_internal_error_is_one_line_exit_3_and_debug_shows_it(tmp_path, capsys, monkeypatch):
    def broken_analysis(*args: Any, **kwargs: Any) -> None:
        raise ZeroDivisionError("a bug\nover two lines")

    monkeypatch.setattr(workflow, "analyze", broken_analysis)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    code, out, err = _report(tmp_path, KINETO_RUN, capsys)
    assert code == cli.EXIT_INTERNAL == 3
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert err.startswith("traceinsight: internal error while running 'report' on ")
    assert "ZeroDivisionError: a bug\\x0aover two lines" in err and "TRACEINSIGHT_DEBUG=1" in err
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(ZeroDivisionError):
        _report(tmp_path, KINETO_RUN, capsys)


def test_control_characters_in_a_file_name_stay_on_one_line(tmp_path, capsys):
    path = tmp_path / "evil\n\x1b[31mred\r.pt.trace.json"
    path.write_bytes(b"")
    code, _, err = _report(tmp_path, path, capsys)
    assert code == 2
    _assert_one_line_error(err, "evil\\x0a\\x1b[31mred\\x0d.pt.trace.json", "empty file")
    assert "\x1b" not in err and "\r" not in err


def test_python_warnings_are_not_silenced(tmp_path, capsys, monkeypatch):
    """A warning is a bug to hear about (the tests turn this package's own into failures): the CLI lets it through
    and the run still succeeds."""
    real = workflow.analyze

    def noisy(*args: Any, **kwargs: Any) -> Any:
        warnings.warn("numpy said something", RuntimeWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(workflow, "analyze", noisy)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    with pytest.warns(RuntimeWarning, match="numpy said something"):
        code, _, _ = _report(tmp_path, KINETO_RUN, capsys)
    assert code == 0


def test_closed_stdout_is_quiet(tmp_path):
    """`traceinsight report ... | head` closing the pipe early: reports written, nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "traceinsight", "report", str(KINETO_RUN), "-o", str(tmp_path / "r.html")],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (cli.EXIT_BROKEN_PIPE, "")
    assert (tmp_path / "r.html").stat().st_size > 0


# --------------------------------------------------------------------------- damaged events: XSpace

_XEvent = xplane_schema.message_class("XEvent")


def _xevent(**fields: Any) -> bytes:
    return _XEvent(**fields).SerializeToString()


def _damaged_xspace() -> tuple[bytes, Counter[str]]:
    """The healthy synthetic XSpace with damaged events added to one GPU stream, and the warnings they earn.

    Every damaged event is either skipped, or repaired into an exact copy of a clean
    event and then dropped as a duplicate, so the expected table is the clean one.
    """
    space = xspace._space_class()()
    space.ParseFromString(corpus.XSPACE_SEED.read_bytes())
    gpu = next(p for p in space.planes if p.name.startswith("/device:GPU:"))
    line = next(li for li in gpu.lines if li.name.startswith("Stream #"))
    first = bytes(line.events[0])
    md = _XEvent.FromString(first).metadata_id
    wrong_wire_offset = bytes([2 << 3 | 2, 1, 0])  # offset_ps as a length-delimited field: not the offset
    corrupt_stat = bytes([4 << 3 | 2, 2, 0x0F, 0x01])  # a stats entry with wire type 7 inside
    line.events.extend(
        [
            b"\x08",  # a tag whose varint never comes: corrupt
            b"\x0f\x01",  # wire type 7: corrupt
            _xevent(metadata_id=md, offset_ps=1_000, duration_ps=(MAX_DURATION_NS + 1) * 1000),  # 7 days + 1 ns
            _xevent(metadata_id=md, offset_ps=10**15),  # 1000 s after a profile of milliseconds
            first,  # an exact duplicate
            first + wrong_wire_offset,  # the same event plus a mistyped field (ignored): a duplicate
            first + corrupt_stat,  # the same event plus a corrupt stat (ignored): a duplicate
        ]
    )
    stamped = gpu.lines.add(id=99, name="Stream #99(Compute)", timestamp_ns=2**62 + 1)  # no clock gives this
    stamped.events.append(_xevent(metadata_id=md, offset_ps=0, duration_ps=1000))
    expected = Counter(
        {
            "xspace: corrupt events (bad protobuf wire data) skipped": 2,
            "xspace: events with an impossible duration (over 7 days: counter overflow) skipped": 1,
            "xspace: events far outside the profiling window skipped": 1,
            "xspace: exact duplicate events skipped": 3,
            "xspace: events with fields of the wrong wire type (fields ignored)": 1,
            "xspace: corrupt event stats (bad protobuf wire data) ignored": 1,
            "xspace: events with an impossible timestamp skipped": 1,
        }
    )
    return space.SerializeToString(), expected


def _same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Equal tables, ignoring category sets (damaged events may add unused names)."""
    pd.testing.assert_frame_equal(got.astype(object), want.astype(object))


def test_xspace_damaged_events_are_skipped_and_counted():
    clean = xspace.read_xspace(corpus.XSPACE_SEED)
    data, expected = _damaged_xspace()
    damaged = xspace.read_xspace(Path("damaged.xplane.pb"), data)
    _same_rows(damaged.events, clean.events)
    assert damaged.warnings == clean.warnings + expected
    assert damaged.input.events == clean.input.events


def test_xspace_negative_duration_becomes_zero_and_bad_device_properties_are_unknown():
    space = xspace._space_class()()
    space.ParseFromString(corpus.XSPACE_SEED.read_bytes())
    gpu = next(p for p in space.planes if p.name.startswith("/device:GPU:"))
    line = next(li for li in gpu.lines if li.name.startswith("Stream #"))
    md = _XEvent.FromString(bytes(line.events[0])).metadata_id
    line.events.append(_xevent(metadata_id=md, offset_ps=7_000, duration_ps=-5_000))
    names = {m.name: k for k, m in gpu.stat_metadata.items()}
    for plane_stat in gpu.stats:  # the SM count as a NaN double, the name as bytes
        if plane_stat.metadata_id == names["core_count"]:
            plane_stat.double_value = float("nan")
        elif plane_stat.metadata_id == names["gpu_device_name"]:
            plane_stat.bytes_value = b"\xff"
    read = xspace.read_xspace(Path("odd.xplane.pb"), space.SerializeToString())
    clean = xspace.read_xspace(corpus.XSPACE_SEED)
    assert read.warnings["xspace: negative durations set to 0"] == 1
    assert len(read.events) == len(clean.events) + 1
    added = read.events[(read.events["dur_ns"] == 0) & (read.events["stream"] == line.id)]
    assert len(added) == 1 and added["ts_ns"].iloc[0] == line.timestamp_ns + 7 + corpus_start(read)
    device = next(iter(read.devices.values()))
    assert (device.sm_count, device.name) == (None, None)
    assert read.events["blocks_per_sm"].isna().all()  # no SM count, no blocks per SM


def corpus_start(read: TraceRead) -> int:
    """The epoch ns the XSpace's lines are relative to."""
    return int(read.metadata["profile_start_time_ns"])


def test_xspace_odd_step_names_and_stat_values_do_not_crash():
    """A Steps line event named '²' (str.isdigit, not int()), a 30-digit step, ref ids past int64."""
    space = xplane_schema.XSpace()
    gpu = space.planes.add(name="/device:GPU:0")
    for key, name in enumerate(("²", "9" * 30, "12"), start=1):
        gpu.event_metadata[key].name = name
    gpu.stat_metadata[1].name = "kernel_details"
    gpu.stat_metadata[2].name = "theoretical_occupancy_pct"
    gpu.stat_metadata[3].name = "core_count"
    gpu.stats.add(metadata_id=3, int64_value=10)
    steps = gpu.lines.add(id=1, name="Steps", timestamp_ns=1000)
    for key in (1, 2, 3):
        steps.events.add(metadata_id=key, offset_ps=key * 10_000, duration_ps=5_000)
    stream = gpu.lines.add(id=2, name="Stream #2(Compute)", timestamp_ns=1000)
    first = stream.events.add(metadata_id=3, offset_ps=0, duration_ps=1_000)
    first.stats.add(metadata_id=1, ref_value=2**64 - 1)  # an interned string id no int64 map key can be
    first.stats.add(metadata_id=2, double_value=float("inf"))
    second = stream.events.add(metadata_id=3, offset_ps=2_000_000, duration_ps=1_000)
    second.stats.add(metadata_id=1, str_value="grid:" + "9" * 400 + ",1,1 occ_pct:1e999")
    read = xspace.read_xspace(Path("odd.xplane.pb"), space.SerializeToString())
    steps_read = read.events[read.events["kind"] == "step"].sort_values("ts_ns")
    assert steps_read["step_id"].tolist() == [-1, -1, 12]
    kernels = read.events[read.events["kind"] == "kernel"]
    assert len(kernels) == 2 and kernels["occupancy_pct"].isna().all() and kernels["blocks_per_sm"].isna().all()
    assert read.warnings["xspace: occupancy values outside 0-100 % ignored"] == 2  # inf, and 1e999 -> inf


# --------------------------------------------------------------------------- damaged events: XProf Chrome JSON


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_bytes(json.dumps(doc).encode())
    return path


def test_chrome_damaged_events_are_skipped_and_counted(tmp_path):
    clean_doc = corpus.chrome_export()
    clean = read_trace(_write(tmp_path, "clean.trace.json", clean_doc))
    doc = corpus.chrome_export()
    kernel = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 7)
    damaged = [
        {**kernel, "ts": 1e300},  # no int64 ns holds it
        {**kernel, "ts": 10**40},  # an int beyond int64 and beyond 2**62 ns
        {**kernel, "dur": 8 * 86400 * 1e6},  # 8 days in µs
        {**kernel, "dur": 1e300},
        {**kernel, "ts": "soon"},  # wrong type: the loader skips it
        {**kernel, "args": [1, 2]},  # wrong type
        dict(kernel),  # exact duplicates
        dict(kernel),
        # An impossible occupancy stat is dropped, kernel_details' 50 % stands: then a duplicate too.
        {**kernel, "args": {**kernel["args"], "theoretical_occupancy_pct": "250"}},
    ]
    doc["traceEvents"] += damaged
    read = read_trace(_write(tmp_path, "damaged.trace.json", doc))
    _same_rows(read.events, clean.events)
    added = read.warnings - clean.warnings
    loader = Counter({k: v for k, v in added.items() if "damaged event" in k})  # the JSON loader's words
    assert added - loader == Counter(
        {
            "chrome: events with an impossible timestamp skipped": 2,
            "chrome: events with an impossible duration (over 7 days: counter overflow) skipped": 2,
            "chrome: occupancy values outside 0-100 % ignored": 1,
            "chrome: exact duplicate events skipped": 3,
        }
    )
    assert loader.total() == 2


def test_chrome_nameless_stream_event_is_a_kernel_like_xspace(tmp_path):
    doc = corpus.chrome_export()
    doc["traceEvents"].append(corpus.complete(1, 7, "x", 500.0, 5.0))
    del doc["traceEvents"][-1]["name"]
    read = read_trace(_write(tmp_path, "nameless.trace.json", doc))
    assert read.events["kind"].notna().all()
    assert (read.events["kind"] == "kernel").sum() == corpus.CHROME_KERNELS + 1


def test_chrome_odd_step_names_and_details(tmp_path):
    doc = corpus.chrome_export()
    events = doc["traceEvents"]
    events += [
        corpus.complete(1, 9, "²", 400.0, 10.0),
        corpus.complete(1, 9, "9" * 30, 420.0, 10.0),
        corpus.complete(1, 7, "MemcpyH2D", 440.0, 1.0, memcpy_details="size:" + "9" * 40),
        corpus.complete(1, 7, "k2", 450.0, 1.0, kernel_details="grid:" + "9" * 400 + ",1,1 occ_pct:1-2"),
    ]
    read = read_trace(_write(tmp_path, "odd.trace.json", doc))
    steps = read.events[read.events["kind"] == "step"].sort_values("ts_ns")
    assert steps["step_id"].tolist() == [1, -1, -1]
    copy = read.events[read.events["kind"] == "memcpy"]
    assert copy["bytes"].tolist() == [-1]  # 40 digits: no int64, so no size
    assert np.isnan(read.events.loc[read.events["name"] == "k2", "occupancy_pct"].iloc[0])  # "1-2" is no number


def test_damaged_event_warnings_are_one_line_in_the_terminal(tmp_path, capsys):
    doc = corpus.chrome_export()
    kernel = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1)
    doc["traceEvents"] += [{**kernel, "dur": 1e300}] * 500 + [dict(kernel)] * 300
    path = _write(tmp_path, "many.trace.json", doc)
    code = main(["report", str(path), "-o", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json")])
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    lines = [line for line in captured.out.splitlines() if line.lstrip().startswith("warnings")]
    assert len(lines) == 1
    assert "over 7 days: counter overflow) skipped x500" in lines[0] and "duplicate events skipped x300" in lines[0]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["warnings"]["chrome: exact duplicate events skipped"] == 300
    (device,) = report["devices"]
    assert device["kernels"]["count"] == corpus.CHROME_KERNELS  # the damage did not reach the figures


def test_out_of_order_and_overlapping_events_give_the_same_figures(tmp_path):
    """Events shuffled, and overlapping copies on one stream: busy is the union, so nothing changes."""
    doc = corpus.chrome_export()
    head, body = doc["traceEvents"][:5], doc["traceEvents"][5:]
    np.random.default_rng(7).shuffle(body)
    shuffled = {**doc, "traceEvents": head + body}
    reports = []
    for name, d in (("sorted.trace.json", doc), ("shuffled.trace.json", shuffled)):
        assert main(["report", str(_write(tmp_path, name, d)), "-o", str(tmp_path / "r.html"), "-q",
                     "--json", str(tmp_path / f"{name}.out.json")]) == 0  # fmt: skip
        reports.append(json.loads((tmp_path / f"{name}.out.json").read_text()))
    assert reports[0]["devices"] == reports[1]["devices"]
    (device,) = reports[0]["devices"]
    # 30 kernels of 5 µs starting every 10 µs: busy 150 µs of a span from 0 to 295 µs.
    assert (device["busy_ns"], device["span_ns"]) == (150_000, 295_000)
    overlapping = corpus.chrome_export()
    overlapping["traceEvents"] += [corpus.complete(1, 7, "long", 0.0, 100.0)]  # covers the first 10 kernels
    assert main(["report", str(_write(tmp_path, "o.trace.json", overlapping)), "-o", str(tmp_path / "r.html"),
                 "-q", "--json", str(tmp_path / "o.json")]) == 0  # fmt: skip
    (device,) = json.loads((tmp_path / "o.json").read_text())["devices"]
    assert device["busy_ns"] == 100_000 + 20 * 5_000  # the union: [0, 100) plus the 20 later kernels


# --------------------------------------------------------------------------- the Kineto path, end to end


def _kineto(tmp_path: Path, doc: dict[str, Any], name: str = "k.pt.trace.json") -> TraceRead:
    return read_trace(_write(tmp_path, name, doc))


def _first_kernel(doc: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")


def test_kineto_handles_wrong_types_and_negative_durations(tmp_path):
    """What the Kineto path already tolerates: wrong-typed fields, negative durations, missing ts."""
    clean = _kineto(tmp_path, corpus.kineto_doc(), "clean.pt.trace.json")
    doc = corpus.kineto_doc()
    kernel = _first_kernel(doc)
    doc["traceEvents"] += [
        {**kernel, "ts": "soon"},
        {**kernel, "args": "none"},
        {k: v for k, v in kernel.items() if k != "ts"},
        {**kernel, "dur": -1.5},
    ]
    read = _kineto(tmp_path, doc)
    assert sum(v for k, v in read.warnings.items() if k.startswith("skipped damaged event")) == 2
    assert read.warnings["complete events without ts skipped"] == 1
    assert read.warnings["negative durations set to 0"] == 1
    assert len(read.events) == len(clean.events) + 1 and (read.events["dur_ns"] >= 0).all()


def test_kineto_huge_float_timestamp_is_skipped(tmp_path):
    doc = corpus.kineto_doc()
    doc["traceEvents"].append({**_first_kernel(doc), "ts": 1e300})
    read = _kineto(tmp_path, doc)
    _same_rows(read.events, _kineto(tmp_path, corpus.kineto_doc(), "c.pt.trace.json").events)


def test_kineto_huge_integer_timestamp_is_skipped(tmp_path):
    doc = corpus.kineto_doc()
    doc["traceEvents"].append({**_first_kernel(doc), "ts": 10**22})
    read = _kineto(tmp_path, doc)
    _same_rows(read.events, _kineto(tmp_path, corpus.kineto_doc(), "c.pt.trace.json").events)


def test_kineto_absurd_durations_and_duplicates_are_skipped(tmp_path):
    clean = _kineto(tmp_path, corpus.kineto_doc(), "clean.pt.trace.json")
    doc = corpus.kineto_doc()
    kernel = _first_kernel(doc)
    doc["traceEvents"] += [{**kernel, "dur": 8 * 86400 * 1e6}, dict(kernel)]
    read = _kineto(tmp_path, doc)
    _same_rows(read.events, clean.events)


def test_kineto_impossible_occupancy_is_dropped(tmp_path):
    doc = corpus.kineto_doc()
    kernel = _first_kernel(doc)
    kernel["args"].update({"est. achieved occupancy %": 250, "blocks per SM": -3})
    table = _kineto(tmp_path, doc).events
    assert not (table["occupancy_pct"] > 100).any() and not (table["blocks_per_sm"] < 0).any()


def test_kineto_integer_beyond_a_double_in_an_id_is_tolerated(tmp_path):
    """A kernel copied with a thread id no int64 holds: read (a kernel's row has no thread), so it is the
    kernel's exact duplicate, skipped and counted; every other row is as in the clean trace."""
    clean = _kineto(tmp_path, corpus.kineto_doc(), "clean.pt.trace.json")
    doc = corpus.kineto_doc()
    doc["traceEvents"].append({**_first_kernel(doc), "tid": 10**400})
    read = _kineto(tmp_path, doc)
    _same_rows(read.events, clean.events)
    assert read.warnings == clean.warnings + Counter({"kineto: exact duplicate events skipped": 1})


def test_chrome_integer_beyond_a_double_in_a_stat_is_tolerated(tmp_path):
    """A stat the reader does not use, holding an integer no double holds: the same table and warnings."""
    clean = read_trace(_write(tmp_path, "clean.trace.json", corpus.chrome_export()))
    doc = corpus.chrome_export()
    kernel = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1)
    kernel["args"]["theoretical_occupancy_pct"] = 10**400
    read = read_trace(_write(tmp_path, "big.trace.json", doc))
    _same_rows(read.events, clean.events)
    assert read.warnings == clean.warnings


def test_syntax_error_after_a_damaged_event_is_a_trace_error(tmp_path, capsys):
    """A type error in event 0 sends the loader to its event-by-event fallback, which meets the syntax error."""
    path = tmp_path / "broken.trace.json"
    path.write_bytes(b'{"traceEvents": [{"ph": 1}, {"ph" "X"}]}')
    with pytest.raises(TraceError, match="invalid JSON at byte 34"):
        read_trace(path)


def test_deeply_nested_json_is_a_trace_error(tmp_path):
    path = tmp_path / "deep.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [{"args": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}")
    with pytest.raises(TraceError):
        read_trace(path)


def test_damaged_event_warnings_are_a_few_keys(tmp_path):
    doc = corpus.kineto_doc()
    kernel = _first_kernel(doc)
    for field in ("ts", "dur", "name", "pid", "tid", "cat", "args"):
        for bad in ([1], {"a": 1}, True):
            doc["traceEvents"].append({**kernel, field: bad})
    read = _kineto(tmp_path, doc)
    damaged = [k for k in read.warnings if "damaged" in k]
    assert len(damaged) <= 3, damaged


def test_huge_profiler_step_number_is_no_step_id(tmp_path):
    doc = corpus.kineto_doc()
    step = next(e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    step["name"] = "ProfilerStep#" + "9" * 20
    read = _kineto(tmp_path, doc)
    assert read.events["step_id"].min() >= -1


# --------------------------------------------------------------------------- writing reports


def _fingerprint(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under `root`: sha256, mtime (ns) and mode, by relative path."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("run", [XSPACE_RUN, KINETO_RUN], ids=["xspace", "kineto"])
def test_inputs_are_never_modified_and_nothing_is_added_beside_them(tmp_path, capsys, run):
    """XProf's converter writes cache files next to an XSpace; we never write into the input folder."""
    copy = tmp_path / "input"
    shutil.copytree(run, copy)
    for path in copy.rglob("*"):
        os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))  # mtimes a rewrite would change
    before = _fingerprint(copy)
    code, _, err = _report(tmp_path, copy, capsys, "--markdown", str(tmp_path / "out" / "r.md"))
    assert (code, err) == (0, "")
    assert _fingerprint(copy) == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.html", "r.json", "r.md"]


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_output_over_an_input_is_refused(tmp_path, capsys, how):
    trace = tmp_path / "run" / "t.pt.trace.json.gz"
    trace.parent.mkdir()
    shutil.copyfile(corpus.KINETO_SEED, trace)
    before = _fingerprint(trace.parent)
    target = {"same path": trace, "symlink": tmp_path / "link.html", "hard link": tmp_path / "hard.html"}[how]
    if how == "symlink":
        target.symlink_to(trace)
    elif how == "hard link":
        os.link(trace, target)
    code = main(["report", str(trace), "-o", str(target), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    _assert_one_line_error(err, "refusing to overwrite an input trace")
    assert _fingerprint(trace.parent) == before
    assert not [p for p in tmp_path.rglob(".*.tmp")]


def test_json_over_an_input_is_refused_and_the_input_kept(tmp_path, capsys):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copyfile(corpus.KINETO_SEED, trace)
    before = trace.read_bytes()
    assert main(["report", str(trace), "-o", str(tmp_path / "r.html"), "--json", str(trace), "-q"]) == 2
    _assert_one_line_error(capsys.readouterr().err, "refusing to overwrite")
    assert trace.read_bytes() == before


def test_failed_write_leaves_neither_report_nor_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "reports" / "r.html"

    real_fdopen = os.fdopen

    class DiskFull:
        """The temp file's writer: writes half, then the disk is full."""

        def __init__(self, fd: int, *args: Any, **kwargs: Any) -> None:
            self.file = real_fdopen(fd, *args, **kwargs)

        def __enter__(self) -> DiskFull:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def fileno(self) -> int:
            return self.file.fileno()

        def write(self, text: str) -> int:
            self.file.write(text[: len(text) // 2])
            self.file.flush()
            raise OSError(28, "No space left on device")

    for content in ("<html>" + "x" * 10_000, "<html>new</html>"):
        monkeypatch.setattr(output.os, "fdopen", DiskFull)
        with pytest.raises(TraceError, match="No space left") as raised:
            output.write_atomic(target, content)
        assert raised.value.path == str(target)  # the path the user gave, not the temp file
        monkeypatch.undo()
        if not target.exists():
            assert not target.parent.exists() or list(target.parent.iterdir()) == []
            target.parent.mkdir(exist_ok=True)
            target.write_text("old report")
        else:
            assert target.read_text() == "old report"
            assert sorted(p.name for p in target.parent.iterdir()) == ["r.html"]


def test_interrupted_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def interrupted(src: Any, dst: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(output.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        output.write_atomic(tmp_path / "r.html", "<html></html>")
    assert list(tmp_path.iterdir()) == []


def test_report_to_dev_null_leaves_the_device_alone(capsys):
    """Renaming a temp file over /dev/null would replace the device with a regular file (as root)."""
    assert main(["report", str(KINETO_RUN), "-o", os.devnull, "--json", os.devnull, "-q"]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert capsys.readouterr().err == ""


def test_report_into_a_directory_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    assert main(["report", str(KINETO_RUN), "-o", str(tmp_path / "taken"), "-q"]) == 2
    _assert_one_line_error(capsys.readouterr().err, "taken", "is a directory")
    assert list((tmp_path / "taken").iterdir()) == []


@pytest.mark.parametrize("option", ["-o", "--json", "--markdown", "--trace-out"])
def test_output_under_a_file_is_refused_before_the_analysis(tmp_path, capsys, monkeypatch, option):
    """Every output is checked before any trace is read: a long analysis never fails at its end."""
    (tmp_path / "plain").write_text("a file, not a folder")
    bad = tmp_path / "plain" / "sub" / "r.out"
    analyzed: list[object] = []
    monkeypatch.setattr("traceinsight.api.analyze", lambda *a, **k: analyzed.append(a))
    args = ["report", str(KINETO_RUN), "-o", str(tmp_path / "r.html"), "-q", option, str(bad)]
    assert main(args) == 2
    _assert_one_line_error(capsys.readouterr().err, str(bad), "Not a directory")
    assert analyzed == [] and sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_diff_output_checked_before_the_analysis(tmp_path, capsys, monkeypatch):
    (tmp_path / "plain").write_text("")
    monkeypatch.setattr("traceinsight.api.analyze", lambda *a, **k: pytest.fail("analyzed"))
    bad = tmp_path / "plain" / "d.json"
    assert main(["diff", str(KINETO_RUN), str(KINETO_RUN), "-o", str(tmp_path / "d.html"), "--json", str(bad)]) == 2
    _assert_one_line_error(capsys.readouterr().err, str(bad))
    assert not (tmp_path / "d.html").exists()


def test_output_in_a_read_only_folder_names_the_path(tmp_path):
    """As an unprivileged user (root writes anywhere): exit 2 before the analysis, the line names the output as
    given (never a temp file), nothing written."""
    prefix = _nobody() if os.geteuid() == 0 else []
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot make a folder unwritable")
    with _nobody_folder("traceinsight-readonly-") as (shared, config):
        locked = shared / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        for option in ("-o", "--json", "--markdown", "--trace-out"):
            target = locked / f"r{option.strip('-')}"
            writable = config / "r.html"
            result = _report_as(prefix, config, str(KINETO_RUN), "-o", str(writable), option, str(target), "-q")
            assert result.returncode == 2, result.stderr
            _assert_one_line_error(result.stderr, str(target), "ermission denied")
            assert ".tmp" not in result.stderr
            assert list(locked.iterdir()) == [] and not writable.exists()


def test_gzip_member_after_a_truncated_one_is_still_truncated(tmp_path, capsys):
    """A .gz made of a whole member followed by a cut one: the cut is reported, not half the data read."""
    data = gzip.compress(b'{"traceEvents": [') + gzip.compress(b"]}")[:-4]
    path = tmp_path / "two.pt.trace.json.gz"
    path.write_bytes(data)
    code, _, err = _report(tmp_path, path, capsys)
    assert code == 2
    _assert_one_line_error(err, "gzip")
