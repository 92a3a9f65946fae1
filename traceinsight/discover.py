"""Find the traces of one run under whatever path the user gave.

Accepted: a trace file; a profile run folder (``plugins/profile/<run>/``, holding
one ``<host>.xplane.pb`` per host); a TensorBoard logdir (any depth above such
folders); a folder of ``tensorboard_trace_handler`` output (``*.pt.trace.json[.gz]``,
one file per rank). Files in one folder form one run (several hosts or ranks);
several runs -> the newest, or the one `--run` names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from traceinsight.errors import TraceError
from traceinsight.readers import is_trace_file

# JSON files that sit beside traces (our sample metadata, XProf tool output) and are not traces.
_NOT_TRACES = ("run_info.json", "ground_truth.json", "overview_page.json", "input_pipeline_analyzer.json")
# Names only traces have; other .json files count only where no such file is found.
_TRACE_NAMES = (".xplane.pb", ".pt.trace.json", ".pt.trace.json.gz", ".trace.json.gz")


@dataclass(frozen=True)
class Run:
    """One profiling run: its name, the folder it lives in and its trace files; `unreadable`: the folders under
    the path given that could not be listed (skipped, with a warning in the report)."""

    name: str
    root: Path
    files: tuple[Path, ...]
    unreadable: tuple[Path, ...] = ()


def _is_candidate(path: Path) -> bool:
    name = path.name
    return is_trace_file(path) and not name.startswith(".") and name not in _NOT_TRACES


def _candidate_files(root: Path) -> tuple[list[Path], list[Path]]:
    """The candidate trace files under `root` and the folders that could not be listed. Symlinked folders are
    followed, each real folder once (by device and inode), so a symlink loop ends the walk instead of looping."""
    found: list[Path] = []
    unreadable: list[Path] = []
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError:
            unreadable.append(folder)
            continue
        subfolders = []
        for entry in listed:
            try:
                is_dir = entry.is_dir()  # through a symlink
            except OSError:
                continue
            if is_dir:
                if not entry.name.startswith("."):
                    subfolders.append(Path(entry.path))
            elif _is_candidate(path := Path(entry.path)):
                found.append(path)
        stack.extend(reversed(subfolders))  # depth first, in name order
    return found, unreadable


def _run_name(folder: Path, base: Path) -> str:
    """`<logdir>/<run>`: the logdir's name and the folder under it, without TensorBoard's `plugins/profile/`."""
    if folder == base:
        return folder.resolve().name or str(folder)
    parts = [p for p in folder.relative_to(base).parts if p not in ("plugins", "profile")]
    return "/".join([base.resolve().name, *parts])


def _sort_key(run: Run) -> tuple[float, str]:
    """Newest first: latest modification time of the run's files, then name (XProf's run
    folders are timestamps, which sort by time)."""
    return (max(f.stat().st_mtime for f in run.files), run.name)


def find_runs(path: Path) -> list[Run]:
    """Every run under `path`, newest last."""
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        return [Run(path.name, path.parent, (path,))]
    files, unreadable = _candidate_files(path)
    # Prefer files that are traces by name; other .json files count only when nothing else is there.
    named = [f for f in files if f.name.lower().endswith(_TRACE_NAMES)]
    files = named or files
    if not files:
        if unreadable:
            first = unreadable[0]
            raise TraceError(first, f"cannot list this folder, and no readable trace files found under {path}")
        raise TraceError(
            path, "no trace files found (looked for *.xplane.pb, *.pt.trace.json[.gz], *.trace.json[.gz], *.json)"
        )
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    skipped = tuple(unreadable)
    runs = [Run(_run_name(folder, path), folder, tuple(fs), skipped) for folder, fs in by_folder.items()]
    return sorted(runs, key=_sort_key)


def discover(path: Path, run: str | None = None) -> Run:
    """The run to report on: the one named `run` (folder name or path under `path`), else the newest."""
    runs = find_runs(path)
    if run is None:
        return runs[-1]
    matches = [r for r in runs if run in (r.name, r.root.name)]
    if not matches:
        names = ", ".join(r.name for r in runs)
        raise TraceError(path, f"no run named {run!r} (runs found: {names})")
    return matches[-1]
