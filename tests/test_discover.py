"""Finding runs under a path: files, run folders, logdirs with several runs and hosts, rank folders; traces told
by content, the graph capture pass never the default run, and what the report says of the runs it found."""

import gzip
import json
import os
from pathlib import Path

import pytest

from tests.conftest import shared_trace
from tests.corpus import kineto_doc
from traceinsight.cli import main
from traceinsight.discover import (
    BY_CAPTURE_TIME,
    NAMED_RUN,
    NEWEST_NOT_CAPTURE,
    NEWEST_RUN,
    ONLY_RUN,
    choose_run,
    discover,
    find_runs,
)
from traceinsight.errors import TraceError


def _touch(path: Path, mtime: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def logdir(tmp_path):
    profile = tmp_path / "logs" / "plugins" / "profile"
    _touch(profile / "2026_01_01_00_00_00" / "host-a.xplane.pb", 1000)
    _touch(profile / "2026_01_02_00_00_00" / "host-a.xplane.pb", 2000)
    _touch(profile / "2026_01_02_00_00_00" / "host-b.xplane.pb", 2000)
    _touch(profile / "2026_01_02_00_00_00" / "run_info.json", 2000)
    return tmp_path / "logs"


def test_newest_run_with_all_its_hosts(logdir):
    run = discover(logdir)
    assert run.name == "logs/2026_01_02_00_00_00"
    assert [f.name for f in run.files] == ["host-a.xplane.pb", "host-b.xplane.pb"]


def test_run_chosen_by_name(logdir):
    assert [f.name for f in discover(logdir, run="2026_01_01_00_00_00").files] == ["host-a.xplane.pb"]
    with pytest.raises(TraceError, match="no run named 'nope'.*2026_01_01_00_00_00"):
        discover(logdir, run="nope")


def test_a_run_folder_and_a_single_file(logdir):
    folder = logdir / "plugins" / "profile" / "2026_01_01_00_00_00"
    assert discover(folder).name == "2026_01_01_00_00_00"
    one = folder / "host-a.xplane.pb"
    assert discover(one).files == (one,)


def _trace(path: Path, mtime: float = 10, capture: bool = False, doc: dict | None = None) -> Path:
    """A small valid Kineto trace at `path` (gzipped for .gz), modified at `mtime` and, unless `doc` is given,
    captured then too (its ts after a `baseTimeNanoseconds` of `mtime` s past 2023-11-14); `capture`: with a
    `cudaStreamBeginCapture` runtime call, as a CUDA-graph capture pass has."""
    if doc is None:
        doc = {**kineto_doc(), "baseTimeNanoseconds": CLOCK_NS + int(mtime * 1e9)}
    if capture:
        call = {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamBeginCapture",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
        }
        doc = {**doc, "traceEvents": [*doc["traceEvents"], call]}
    text = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    os.utime(path, (mtime, mtime))
    return path


TINY: dict[str, list] = {"traceEvents": []}  # enough for discovery, which never parses a trace (and no clock)
CLOCK_NS = 1_700_000_000 * 10**9


def test_rank_files_of_one_folder_are_one_run(tmp_path):
    for rank in range(3):
        _trace(tmp_path / "tb" / f"worker{rank}.1700000000{rank}.pt.trace.json.gz", doc=TINY)
    _touch(tmp_path / "tb" / "notes.json", 10)  # plain JSON beside traces is not a trace: skipped and counted
    (run,) = find_runs(tmp_path / "tb")
    assert len(run.files) == 3 and run.not_traces == 1


def test_nothing_found(tmp_path):
    _touch(tmp_path / "readme.txt", 1)
    with pytest.raises(TraceError, match="no trace files found"):
        discover(tmp_path)
    with pytest.raises(TraceError, match="no such file"):
        discover(tmp_path / "missing")


# --------------------------------------------------------------------------- symlinks, big trees, unreadable folders


def test_symlink_loops_end_and_each_real_folder_is_walked_once(logdir, tmp_path):
    (logdir / "plugins" / "back").symlink_to(logdir)  # a loop to the top
    (logdir / "plugins" / "profile" / "self").symlink_to(".")  # a loop onto itself
    elsewhere = tmp_path / "elsewhere" / "2026_01_03_00_00_00"
    _touch(elsewhere / "host-c.xplane.pb", 3000)
    (logdir / "linked").symlink_to(elsewhere, target_is_directory=True)  # a run kept elsewhere is followed
    runs = find_runs(logdir)
    assert [r.name for r in runs] == ["logs/2026_01_01_00_00_00", "logs/2026_01_02_00_00_00", "logs/linked"]
    assert sum(len(r.files) for r in runs) == 4  # each file once, though the loops reach them again


def test_a_symlink_loop_in_a_real_logdir_gives_a_report_in_seconds(tmp_path, capsys):
    import time

    from tests.conftest import SAMPLE_TRACES
    from traceinsight.cli import main

    logdir = tmp_path / "logs"
    run = logdir / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for trace in (SAMPLE_TRACES / "synthetic_gpu" / "healthy").glob("*.pt.trace.json*"):
        (run / trace.name).write_bytes(trace.read_bytes())
    (run / "loop").symlink_to(logdir, target_is_directory=True)
    (logdir / "loop").symlink_to(logdir, target_is_directory=True)
    start = time.monotonic()
    assert main(["report", str(logdir), "-o", str(tmp_path / "r.html"), "--jobs", "1", "-q"]) == 0
    assert time.monotonic() - start < 30
    assert capsys.readouterr().err == ""


def test_ten_thousand_files_are_walked_fast(tmp_path):
    import time

    for i in range(100):
        folder = tmp_path / "logs" / f"dir{i:03d}"
        folder.mkdir(parents=True)
        for j in range(100):
            (folder / f"events.out.tfevents.{j}").write_bytes(b"")
    _touch(tmp_path / "logs" / "dir050" / "plugins" / "profile" / "r" / "host.xplane.pb", 10)
    start = time.monotonic()
    (run,) = find_runs(tmp_path / "logs")
    assert run.name == "logs/dir050/r" and time.monotonic() - start < 5


def _refuse_listing(monkeypatch: pytest.MonkeyPatch, locked: Path) -> None:
    """`locked` cannot be listed, as for a user without its permission (root lists any folder)."""
    import traceinsight.discover as discover_module

    real_scandir = os.scandir

    def scandir(path: str | os.PathLike[str]) -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(discover_module.os, "scandir", scandir)


def test_unreadable_subfolder_is_a_warning_when_others_are_readable(logdir, monkeypatch):
    """Root lists any folder, so the refusal is simulated where discovery lists folders."""
    locked = logdir / "plugins" / "profile" / "2026_01_01_00_00_00"
    _refuse_listing(monkeypatch, locked)
    run = discover(logdir)
    assert run.name == "logs/2026_01_02_00_00_00" and run.unreadable == (locked,)
    with pytest.raises(TraceError, match="cannot list this folder"):
        discover(locked)  # nothing readable at all: still an error, naming the folder


def test_unreadable_subfolder_is_counted_in_the_report(tmp_path, monkeypatch, capsys):
    import json

    from tests.conftest import SAMPLE_TRACES
    from traceinsight.cli import main

    run = tmp_path / "logs" / "run1"
    run.mkdir(parents=True)
    for trace in (SAMPLE_TRACES / "synthetic_gpu" / "healthy").glob("*.pt.trace.json*"):
        (run / trace.name).write_bytes(trace.read_bytes())
    locked = tmp_path / "logs" / "locked"
    locked.mkdir()
    _refuse_listing(monkeypatch, locked)
    out = tmp_path / "r.json"
    assert main(["report", str(tmp_path / "logs"), "-o", str(tmp_path / "r.html"), "--json", str(out), "-q"]) == 0
    assert json.loads(out.read_text())["warnings"]["unreadable_folders"] == 1
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------- traces told by content


def test_a_trace_of_any_name_is_found_beside_named_ones(tmp_path):
    replay = _trace(tmp_path / "logs" / "replay" / "graph_execution.json.gz", doc=TINY)
    ranks = _trace(tmp_path / "logs" / "ranks" / "worker0.1.pt.trace.json.gz", doc=TINY)
    plain = _trace(tmp_path / "logs" / "plain" / "anything.json", doc=TINY)
    runs = find_runs(tmp_path / "logs")
    assert sorted(f for r in runs for f in r.files) == sorted([replay, ranks, plain])
    assert all(r.not_traces == 0 for r in runs)


def test_what_is_not_a_trace(tmp_path):
    folder = tmp_path / "run"
    _trace(folder / "trace.json", doc=TINY)
    (folder / "execution_details.json").write_text('[{"file": "trace.json", "batch_size": 32}]')
    (folder / "numbers.json").write_text("[1, 2, 3]")
    (folder / "ours.json").write_text('{"schema": "traceinsight.report/1", "traceEvents": []}')  # a report of ours
    (folder / "empty.json.gz").write_bytes(gzip.compress(b""))
    (folder / ".hidden.json").write_text(json.dumps(TINY))  # hidden: never a candidate
    (folder / "run_info.json").write_text('{"torch": "2.5.0"}')  # our sample metadata: neither
    (run,) = find_runs(folder)
    assert [f.name for f in run.files] == ["trace.json"] and run.not_traces == 4


def test_the_array_form_is_a_trace(tmp_path):
    """The Trace Event Format's array form (the events alone, the closing bracket optional) is a trace; an array of
    anything else is not."""
    folder = tmp_path / "run"
    _trace(folder / "trace.json", doc=TINY)
    (folder / "bare_array.json").write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]')
    (folder / "open_array.json.gz").write_bytes(gzip.compress(b' [\n {"name": "a", "ph": "X", "ts": 1, "dur": 2},\n'))
    (folder / "rows.json").write_text('[{"file": "trace.json", "ts": 3}]')  # no phase: rows of something else
    (run,) = find_runs(folder)
    assert [f.name for f in run.files] == ["bare_array.json", "open_array.json.gz", "trace.json"]
    assert run.not_traces == 1


def test_a_trace_named_deep_in_its_head_is_not_one(tmp_path):
    """Only the head is read: a key past the first 64 KiB does not count (no reader here streams such a file)."""
    (tmp_path / "late.json").write_text('{"pad": "' + "x" * (70 << 10) + '", "traceEvents": []}')
    _trace(tmp_path / "t.json", doc=TINY)
    (run,) = find_runs(tmp_path)
    assert [f.name for f in run.files] == ["t.json"] and run.not_traces == 1


def test_non_trace_json_beside_traces_is_skipped_and_counted_in_the_report(tmp_path, capsys):
    folder = tmp_path / "capture_traces"
    _trace(folder / "bs_32_rank0.json.gz")
    (folder / "execution_details.json").write_text('[{"file": "bs_32_rank0.json.gz"}]')
    (folder / "run_info.json").write_text('{"torch": "2.5.0"}')
    out = tmp_path / "r.json"
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html"), "--json", str(out), "-q"]) == 0
    report = json.loads(out.read_text())
    assert report["warnings"]["not_a_trace"] == 1
    assert report["meta"]["runs"] == [
        {
            "name": "capture_traces",
            "files": 1,
            "bytes": (folder / "bs_32_rank0.json.gz").stat().st_size,
            "selected": True,
            "capture_pass": None,
            "captured": None,  # a lone file's clock is not read: nothing to order or group
            "grouping": None,
        }
    ]
    assert report["meta"]["run_choice"] == ONLY_RUN
    assert capsys.readouterr().err == ""


def _one_line_error(capsys: pytest.CaptureFixture[str], *fragments: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("traceinsight: error: "), err
    assert all(fragment in err for fragment in fragments), err


def test_a_folder_of_non_trace_json_is_exit_2(tmp_path, capsys):
    folder = tmp_path / "details"
    folder.mkdir()
    (folder / "execution_details.json").write_text('[{"file": "x"}]')
    (folder / "notes.json.gz").write_bytes(gzip.compress(b'{"notes": []}'))
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html"), "-q"]) == 2
    _one_line_error(capsys, str(folder), "no trace files found", "skipped 2 JSON files holding none")
    assert not (tmp_path / "r.html").exists()


def test_a_non_trace_json_given_by_name_is_exit_2(tmp_path, capsys):
    path = tmp_path / "execution_details.json"
    path.write_text('[{"file": "x"}]')
    _trace(tmp_path / "beside.json", doc=TINY)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html"), "-q"]) == 2
    _one_line_error(capsys, str(path))


# --------------------------------------------------------------------------- several runs: the capture pass


def test_capture_pass_is_told_across_read_blocks(tmp_path, monkeypatch):
    import traceinsight.discover as discover_module
    from traceinsight.discover import Run, is_capture_pass

    capture = _trace(tmp_path / "c.json.gz", capture=True, doc=TINY)
    plain = _trace(tmp_path / "p.json", capture=True, doc=TINY)
    replay = _trace(tmp_path / "r.json.gz", doc=TINY)
    for block in (7, 9, 4 << 20):  # the name falls across blocks, or within one
        monkeypatch.setattr(discover_module, "CHUNK_BYTES", block)
        assert is_capture_pass(Run("c", tmp_path, (capture,))) and is_capture_pass(Run("p", tmp_path, (plain,)))
        assert not is_capture_pass(Run("r", tmp_path, (replay,)))
    xspace = _touch(tmp_path / "host.xplane.pb", 10)
    xspace.write_bytes(b"cudaStreamBeginCapture")
    assert not is_capture_pass(Run("x", tmp_path, (xspace,)))  # an XSpace file never is one


@pytest.fixture
def replay_and_capture(tmp_path: Path) -> Path:
    """A replay and, in a folder below it, the newer capture pass of the same server (as vLLM's tools leave them)."""
    top = tmp_path / "decode"
    _trace(top / "graph_execution.json.gz", mtime=1000)
    _trace(top / "capture_traces" / "graph_capture_rank_0.1.pt.trace.json.gz", mtime=2000, capture=True)
    (top / "capture_traces" / "execution_details.json").write_text('[{"mode": "FULL"}]')
    return top


def test_a_newer_capture_pass_is_not_the_default(replay_and_capture):
    choice = choose_run(replay_and_capture)
    assert choice.run.name == "decode" and choice.reason == f"{NEWEST_NOT_CAPTURE} {BY_CAPTURE_TIME}"
    assert [r.name for r in choice.runs] == ["decode/capture_traces", "decode"]  # newest first
    assert choice.capture_pass == (True, False)
    assert discover(replay_and_capture).name == "decode"
    for name in ("capture_traces", "decode/capture_traces"):
        named = choose_run(replay_and_capture, name)
        assert named.run.name == "decode/capture_traces" and named.reason == NAMED_RUN
        assert named.capture_pass == (None, None)  # nothing looked at


def test_the_newest_run_is_not_scanned_further(tmp_path, monkeypatch):
    import traceinsight.discover as discover_module

    _trace(tmp_path / "a" / "t.json", mtime=1000, capture=True, doc=TINY)
    _trace(tmp_path / "b" / "t.json", mtime=2000, doc=TINY)
    scanned: list[str] = []
    real = discover_module.is_capture_pass

    def counted(run):
        scanned.append(run.name)
        return real(run)

    monkeypatch.setattr(discover_module, "is_capture_pass", counted)
    choice = choose_run(tmp_path)
    by_file_time = f"{BY_CAPTURE_TIME} (then, by modification time, {tmp_path.name}/b, {tmp_path.name}/a: no wall"
    assert choice.reason.startswith(f"{NEWEST_RUN} {by_file_time}")  # no clock in TINY: ordered by file time
    assert choice.run.root.name == "b" and choice.capture_pass == (False, None)
    assert len(scanned) == 1
    _trace(tmp_path / "b" / "t.json", mtime=3000, capture=True, doc=TINY)
    (tmp_path / "a" / "t.json").unlink()
    _trace(tmp_path / "a" / "t.json", mtime=1000, capture=True, doc=TINY)
    assert choose_run(tmp_path).reason.startswith(f"{NEWEST_RUN} {BY_CAPTURE_TIME}")  # capture passes only
    assert choose_run(tmp_path / "a").reason == ONLY_RUN


def test_the_report_says_which_run_and_lists_the_others(replay_and_capture, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["report", str(replay_and_capture), "-o", str(out / "r.html"), "--json", str(out / "r.json")]
    assert main([*args, "--markdown", str(out / "r.md")]) == 0
    terminal = capsys.readouterr().out
    report = json.loads((out / "r.json").read_text())
    assert report["run"] == "decode" and report["meta"]["run_choice"] == f"{NEWEST_NOT_CAPTURE} {BY_CAPTURE_TIME}"
    assert [(r["name"], r["selected"], r["capture_pass"], r["files"]) for r in report["meta"]["runs"]] == [
        ("decode/capture_traces", False, True, 1),
        ("decode", True, False, 1),
    ]
    assert report["warnings"]["not_a_trace"] == 1
    line = f"run 2 of 2 ({NEWEST_NOT_CAPTURE} {BY_CAPTURE_TIME}); others: --run decode/capture_traces"
    assert terminal.splitlines()[1] == f"  {line}"
    assert "others: `--run decode/capture_traces`" in (out / "r.md").read_text()
    page = (out / "r.html").read_text()
    assert 'id="runs"' in page and "decode/capture_traces" in page and "graph capture pass" in page
    assert main([*args, "--run", "capture_traces", "-q"]) == 0
    report = json.loads((out / "r.json").read_text())
    assert report["run"] == "decode/capture_traces" and report["meta"]["run_choice"] == NAMED_RUN


def test_run_names_in_the_page_are_escaped(tmp_path):
    _trace(tmp_path / "logs" / "a" / "t.json", mtime=1000, doc=TINY)
    _trace(tmp_path / "logs" / "<em>&x" / "t.json.gz", mtime=500)
    out = tmp_path / "out"
    logdir = tmp_path / "logs"
    assert main(["report", str(logdir), "--run", "<em>&x", "-o", str(out / "r.html"), "-q"]) == 0
    page = (out / "r.html").read_text()
    assert "<em>&x" not in page and "&lt;em&gt;&amp;x" in page


# --------------------------------------------------------------------------- the real inference traces


@pytest.mark.parametrize("name", ["vllm_decode_full", "vllm_prefilldecode_piecewise"])
def test_real_replay_is_analyzed_rather_than_its_capture_pass(name, tmp_path, capsys):
    folder = shared_trace(f"inference/{name}")
    choice = choose_run(folder)
    assert sorted(r.name for r in choice.runs) == [name, f"{name}/capture_traces"]
    assert choice.run.name == name and choice.run.files == (folder / "graph_execution.json.gz",)
    for picked in ("capture_traces", f"{name}/capture_traces"):
        assert choose_run(folder, picked).run.root == folder / "capture_traces"
    out = tmp_path / "r.json"
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html"), "--json", str(out), "-q"]) == 0
    report = json.loads(out.read_text())
    assert report["run"] == name
    assert {r["name"]: r["selected"] for r in report["meta"]["runs"]} == {name: True, f"{name}/capture_traces": False}
    assert report["meta"]["run_choice"] in (
        f"{NEWEST_RUN} {BY_CAPTURE_TIME}",
        f"{NEWEST_NOT_CAPTURE} {BY_CAPTURE_TIME}",
    )
    assert capsys.readouterr().err == ""


def test_real_capture_traces_folder_reports_with_its_details_skipped(tmp_path, capsys):
    folder = shared_trace("inference/sglang_decode/capture_traces")
    out = tmp_path / "r.json"
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html"), "--json", str(out), "-q"]) == 0
    assert json.loads(out.read_text())["warnings"]["not_a_trace"] == 1
    assert capsys.readouterr().err == ""
