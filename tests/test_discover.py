"""Finding runs under a path: files, run folders, logdirs with several runs and hosts, rank folders."""

import os
from pathlib import Path

import pytest

from traceinsight.discover import discover, find_runs
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


def test_rank_files_of_one_folder_are_one_run(tmp_path):
    for rank in range(3):
        _touch(tmp_path / "tb" / f"worker{rank}.1700000000{rank}.pt.trace.json.gz", 10)
    _touch(tmp_path / "tb" / "notes.json", 10)  # plain JSON beside named traces is not a trace
    (run,) = find_runs(tmp_path / "tb")
    assert len(run.files) == 3


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
