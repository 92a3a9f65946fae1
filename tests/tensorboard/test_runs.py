"""Which runs the tab offers and how it names them (as `traceinsight runs` does); which names it refuses (no
TensorBoard needed)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from traceinsight import listing
from traceinsight.discover import discover
from traceinsight.tensorboard import runs as runs_module
from traceinsight.tensorboard.runs import RunIndex, has_profiles, is_run_name, list_runs

XSPACE_SESSION = "plugins/profile/2026_12_02_18_12_53"


def make_logdir(root: Path) -> Path:
    """A logdir with an XSpace session, a PyTorch trace-handler folder, one at the root, and a hidden one."""
    logdir = root / "logs"
    shutil.copytree(SAMPLE_TRACES / "tf_input_bound", logdir / "a_input_bound")
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / "torch" / "cpu")
    shutil.copy(
        next((SAMPLE_TRACES / "torch_cpu_dataloader").glob("*.pt.trace.json.gz")), logdir / "root.pt.trace.json.gz"
    )
    (logdir / ".hidden").mkdir()
    shutil.copy(logdir / "root.pt.trace.json.gz", logdir / ".hidden" / "x.pt.trace.json.gz")
    for age, path in enumerate(
        [
            logdir / "root.pt.trace.json.gz",
            next((logdir / "torch" / "cpu").glob("*.gz")),
            next(logdir.rglob("*.xplane.pb")),
        ]
    ):
        os.utime(path, (1_800_000_000 - age * 100, 1_800_000_000 - age * 100))
    return logdir


def test_runs_are_the_listings_newest_first_named_as_run_takes_them(tmp_path):
    logdir = make_logdir(tmp_path)
    found = list_runs(logdir)
    # Newest first by capture time, whatever the files' modification times: two copies of one PyTorch capture
    # (2026-12-02 18:16:52 UTC; names break the tie), then the XSpace session (18:12:51).
    assert [r.name for r in found] == ["logs/torch/cpu", "logs", "logs/a_input_bound/2026_12_02_18_12_53"]
    assert [r.run for r in found] == listing.list_runs(logdir)  # `traceinsight runs LOGDIR`: same runs, same order
    assert all(r.name == r.run.name for r in found)


def test_a_run_that_links_outside_the_logdir_is_not_offered(tmp_path):
    logdir = make_logdir(tmp_path)
    outside = tmp_path / "secret"
    shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", outside)
    (logdir / "leak").mkdir()
    (logdir / "leak" / "x.pt.trace.json.gz").symlink_to(next(outside.glob("*.gz")))
    (logdir / "torch" / "cpu" / "run_info.json").unlink()
    (logdir / "torch" / "cpu" / "run_info.json").symlink_to(outside / "run_info.json")
    inside_link = logdir / "linked"
    inside_link.mkdir()
    (inside_link / "y.pt.trace.json.gz").symlink_to(next((logdir / "torch" / "cpu").glob("*.gz")))
    names = [r.name for r in list_runs(logdir)]
    assert "logs/leak" not in names and "logs/torch/cpu" not in names
    assert "logs/linked" in names


def test_of_runs_sharing_a_name_the_one_run_opens_is_offered(tmp_path):
    logdir = tmp_path / "logs"
    for folder, mtime in (("a/plugins/profile/x", 1_800_000_000), ("a/x", 1_700_000_000)):
        shutil.copytree(SAMPLE_TRACES / "torch_cpu_dataloader", logdir / folder)
        for trace in (logdir / folder).glob("*.gz"):
            os.utime(trace, (mtime, mtime))
    assert [r.name for r in listing.list_runs(logdir)] == ["logs/a/x", "logs/a/x"]
    (offered,) = list_runs(logdir)
    assert offered.run == discover(logdir, "logs/a/x")  # what `traceinsight report LOGDIR --run logs/a/x` opens


def test_an_empty_or_missing_logdir_has_no_runs(tmp_path):
    assert list_runs(tmp_path) == []
    assert list_runs(tmp_path / "missing") == []
    assert RunIndex(None).runs() == [] and not RunIndex(None).is_active()


def test_is_active_walks_a_bounded_number_of_entries_and_remembers(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    for i in range(30):
        (logdir / f"d{i:02}").mkdir(parents=True)
    (logdir / "d28" / "w.pt.trace.json.gz").write_bytes(b"")  # named like a trace, holds none
    assert not has_profiles(logdir)
    (logdir / "d29" / "graph_execution.json").write_text('{"traceEvents": []}')  # a trace by content, any name
    assert has_profiles(logdir)
    assert not has_profiles(logdir, limit=5)
    index = RunIndex(logdir)
    walks: list[Path] = []

    def walk(path: Path) -> bool:
        walks.append(path)
        return True

    monkeypatch.setattr(runs_module, "has_profiles", walk)
    assert index.is_active() and index.is_active()
    assert len(walks) == 1


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../x", "a/../b", "/etc/passwd", "a//b", "a/", "./a", "a\\..\\b", "C:/x", "x\x00", "." * 5000],
)
def test_path_tricks_are_not_run_names(name):
    assert not is_run_name(name)


@pytest.mark.parametrize("name", ["logs", "logs/torch/cpu", "logs/a_input_bound/2026_12_02_18_12_53", "..x", "a b/ü"])
def test_run_names(name):
    assert is_run_name(name)
