"""Find the traces of one run under whatever path the user gave.

Accepted: a trace file; a profile run folder (``plugins/profile/<run>/``, holding
one ``<host>.xplane.pb`` per host); a TensorBoard logdir (any depth above such
folders); a folder of traces (``tensorboard_trace_handler`` output, one file per
rank, or JSON traces of any name). JSON is a trace when its content says so
(`readers.looks_like_trace`), whatever it is called; other JSON files are skipped
and counted. Files in one folder form one run (several hosts or ranks). Of several
runs, `choose_run` takes the one `--run` names, else the newest that is not a
CUDA/HIP graph capture pass, and says why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from traceinsight.errors import TraceError
from traceinsight.readers import XSPACE_SUFFIX, is_trace_file, looks_like_trace
from traceinsight.readers.json_files import CHUNK_BYTES, FileText
from traceinsight.rules import GRAPH_CAPTURE_BYTES

# JSON of ours beside traces: the versions a run records (render/meta.py reads them), the synthetic samples' truth
# (tools/make_samples.py).
RUN_INFO = "run_info.json"
_SAMPLE_METADATA = (RUN_INFO, "ground_truth.json")
# Why `choose_run` took the run it took (the report's `meta.run_choice`).
ONLY_RUN = "the only run"
NAMED_RUN = "named by --run"
NEWEST_RUN = "the newest run"
NEWEST_NOT_CAPTURE = (
    "the newest run that is not a graph capture pass (a capture pass records kernels once; it is no steady state)"
)


@dataclass(frozen=True)
class Run:
    """One profiling run: its name, the folder it lives in and its trace files. Of the whole walk under the path
    given (skipped, with a warning in the report): `unreadable`, the folders that could not be listed, and
    `not_traces`, how many JSON files are no traces."""

    name: str
    root: Path
    files: tuple[Path, ...]
    unreadable: tuple[Path, ...] = ()
    not_traces: int = 0


@dataclass(frozen=True)
class RunChoice:
    """The run to report on, every run found (newest first, `run` among them), whether each is a graph capture
    pass (None: not looked at) and why this one: what the report's `meta.runs` and `meta.run_choice` say."""

    run: Run
    runs: tuple[Run, ...]
    capture_pass: tuple[bool | None, ...]
    reason: str


def _is_candidate(path: Path) -> bool:
    """Named like a trace file, and no sample metadata of ours (never a trace, nor worth a warning)."""
    name = path.name
    return is_trace_file(path) and not name.startswith(".") and name not in _SAMPLE_METADATA


def _content_says_trace(path: Path) -> bool:
    """`looks_like_trace`; a file whose head cannot be read counts as one, so the reader says what is wrong."""
    try:
        return looks_like_trace(path)
    except TraceError:
        return True


def is_trace(path: Path) -> bool:
    """Whether discovery takes `path` as a trace: named like one, and (JSON) holding one by its head."""
    return _is_candidate(path) and _content_says_trace(path)


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
    """Every run under `path`, newest last. A file given by name is a run whatever it holds: reading it says
    why it is no trace."""
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        return [Run(path.name, path.parent, (path,))]
    candidates, unreadable = _candidate_files(path)
    files = [f for f in candidates if _content_says_trace(f)]
    if not files:
        if unreadable:
            first = unreadable[0]
            raise TraceError(first, f"cannot list this folder, and no readable trace files found under {path}")
        files_word = "JSON file" if len(candidates) == 1 else "JSON files"
        note = f"; skipped {len(candidates)} {files_word} holding none" if candidates else ""
        looked = "*.xplane.pb, and *.json[.gz] holding traceEvents or an array of trace events"
        raise TraceError(path, f"no trace files found (looked for {looked}{note})")
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    skipped, not_traces = tuple(unreadable), len(candidates) - len(files)
    runs = [Run(_run_name(folder, path), folder, tuple(fs), skipped, not_traces) for folder, fs in by_folder.items()]
    return sorted(runs, key=_sort_key)


def is_capture_pass(run: Run) -> bool:
    """Whether `run` is a CUDA/HIP graph capture pass (kernels recorded once, no steady state), told without
    parsing: its first JSON file holds `GRAPH_CAPTURE_BYTES`. Every rank of a run captures alike, so one file
    tells; an XSpace file never is one."""
    first = next((f for f in run.files if not f.name.lower().endswith(XSPACE_SUFFIX)), None)
    return first is not None and _holds(first, GRAPH_CAPTURE_BYTES)


def _holds(path: Path, needle: bytes) -> bool:
    """Whether the file's text (inflated, for gzip) holds `needle`, read block by block up to the first hit."""
    keep = len(needle) - 1
    tail = b""
    for block in FileText(path).blocks(CHUNK_BYTES):  # left at a hit, the blocks close the file
        if needle in block or needle in tail + block[:keep]:
            return True
        tail = (tail + block[-keep:])[-keep:]
    return False


def choose_run(path: Path, run: str | None = None) -> RunChoice:
    """The run to report on and why: the one named `run` (folder name or path under `path`); else the newest
    that is not a graph capture pass while another run exists, looking at the runs newest first and only as far
    as the first that is not one (a capture pass left where its replay is would otherwise be reported)."""
    runs = tuple(reversed(find_runs(path)))
    unknown: tuple[bool | None, ...] = (None,) * len(runs)
    if run is not None:
        matches = [r for r in runs if run in (r.name, r.root.name)]
        if not matches:
            names = ", ".join(r.name for r in reversed(runs))
            raise TraceError(path, f"no run named {run!r} (runs found: {names})")
        return RunChoice(matches[0], runs, unknown, NAMED_RUN)
    if len(runs) == 1:
        return RunChoice(runs[0], runs, unknown, ONLY_RUN)
    capture = list(unknown)
    for i, candidate in enumerate(runs):
        capture[i] = is_capture_pass(candidate)
        if not capture[i]:
            return RunChoice(candidate, runs, tuple(capture), NEWEST_NOT_CAPTURE if i else NEWEST_RUN)
    return RunChoice(runs[0], runs, tuple(capture), NEWEST_RUN)  # capture passes only


def capture_pass_beside(choice: RunChoice) -> Run | None:
    """The graph capture pass recorded beside the chosen run (in a folder of its own, or next to it), newest first:
    the ops that launched a replay's nodes are there (`analysis.with_graph_capture`); None when there is none or
    the chosen run is a capture pass itself."""
    chosen = choice.run
    for run, known in zip(choice.runs, choice.capture_pass, strict=True):
        if run == chosen:
            continue
        near = chosen.root in run.root.parents or run.root.parent == chosen.root.parent
        if near and (known if known is not None else is_capture_pass(run)):
            return run
    return None


def discover(path: Path, run: str | None = None) -> Run:
    """The run to report on (`choose_run`'s choice), for callers that need not say why."""
    return choose_run(path, run).run
