"""Outputs as one set, pipes written in place, and stale temp files of ours removed (issue 36, cases 14 and 15).

* ``--json /dev/stdout`` into a pipe writes the report into the pipe (it resolved to no file and gave exit 2).
* Every output is staged to a temporary file and all are renamed together (`output.commit`), with SIGINT and
  SIGTERM held back meanwhile: a SIGTERM that lands at the first rename ends the run after the last one, so
  the new set is whole; a failure while staging leaves the previous set and no temp file.
* A temp file of ours whose writer is dead (``kill -9`` at the rename) is removed by the next run writing there;
  one of a live writer, and the user's own hidden files, are not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_TRACES
from traceinsight.cli import main
from traceinsight.errors import TraceError
from traceinsight.render import output

RUN = SAMPLE_TRACES / "synthetic_gpu" / "healthy"


def test_json_to_dev_stdout_in_a_pipe(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "traceinsight", "report", str(RUN), "-o", str(tmp_path / "r.html")]
    proc = subprocess.run(
        [*command, "--json", "/dev/stdout", "-q"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    report = json.loads(proc.stdout)
    assert report["run"] == "healthy" and report["schema"].startswith("traceinsight.report/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # and no temp file beside the page


def _previous_set(folder: Path) -> dict[Path, str]:
    folder.mkdir(exist_ok=True)
    files = {folder / "r.html": "old page", folder / "r.json": "{}", folder / "r.md": "old summary"}
    for path, text in files.items():
        path.write_text(text)
    return files


def test_a_failure_while_staging_leaves_the_previous_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    previous = _previous_set(tmp_path)
    real = output.stage

    def full_disk_at_markdown(path: Path, *args: object, **kwargs: object) -> output.Staged:
        if path.suffix == ".md":
            raise TraceError(path, "No space left on device")
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(output, "stage", full_disk_at_markdown)
    with pytest.raises(TraceError, match="No space left"):
        output.write_outputs({path: "new" for path in previous}, protected=())
    assert {p: p.read_text() for p in tmp_path.iterdir()} == previous  # nothing renamed, no temp file left


def test_a_sigterm_at_the_first_rename_lands_after_the_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    previous = _previous_set(tmp_path)
    staged = [output.stage(path, lambda f: f.write(b"new")) for path in previous]
    renamed: list[str] = []
    real = os.replace

    def replace_once_signalled(src: str, dst: str) -> None:
        if not renamed:
            os.kill(os.getpid(), signal.SIGTERM)
        renamed.append(Path(dst).name)
        real(src, dst)

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(output.os, "replace", replace_once_signalled)
    before = signal.signal(signal.SIGTERM, terminated)
    try:
        with pytest.raises(KeyboardInterrupt):
            output.commit(staged)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert renamed == ["r.html", "r.json", "r.md"]
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"r.html": "new", "r.json": "new", "r.md": "new"}


def test_stale_temp_files_of_ours_are_removed_by_the_next_run(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    out = tmp_path / "out"
    out.mkdir()
    killed = out / f".r.html.traceinsight-{dead_pid}-k9x2ab.tmp"  # `kill -9` at the rename
    old = out / f".r.json.traceinsight-{os.getppid()}-old1.tmp"  # a live pid, but a day old: reused since
    live = out / f".r.html.traceinsight-{os.getppid()}-busy1.tmp"  # a run writing there now
    users = [out / ".r.html.notes.tmp", out / f".other.html.traceinsight-{dead_pid}-x.tmp"]  # not ours / not beside
    for path in (killed, old, live, *users):
        path.write_text("partial")
    os.utime(old, (0, 0))
    args = ["report", str(RUN), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q"]
    assert main(args) == 0
    assert not killed.exists() and not old.exists()
    assert live.exists() and all(p.exists() for p in users)
    assert sorted(p.name for p in out.iterdir()) == sorted([live.name, *(p.name for p in users), "r.html", "r.json"])
