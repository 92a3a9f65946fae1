"""Finding runs under a path: files, run folders, logdirs with several runs and hosts, rank folders."""

import os
from pathlib import Path

import pytest

from traceinsight.discover import discover, find_runs
from traceinsight.model import TraceError


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
