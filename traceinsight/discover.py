"""Find the traces of one run under whatever path the user gave.

Accepted: a trace file; a profile run folder (``plugins/profile/<run>/``, holding
one ``<host>.xplane.pb`` per host); a TensorBoard logdir (any depth above such
folders); a folder of traces (``tensorboard_trace_handler`` output, one file per
rank, or JSON traces of any name); Nsight Systems exports (``*.sqlite``) and
reports (``*.nsys-rep``). JSON and SQLite are traces when their content says so
(`readers.looks_like_trace`), whatever they are called; other such files are
skipped and counted. Only regular files are opened: a FIFO, a socket, a device
or a dangling link named like a trace is skipped and counted (`readers.regular`),
so nothing waits on one. A report with its SQLite export beside it is read once, from
the export. Files in one folder are one run (several hosts or ranks) only when
their captures overlap in time and come from different processes; otherwise each
capture is a run of its own (a repeating schedule, a script profiled twice,
unrelated traces side by side), named by its capture time (`group_captures`).
Runs are ordered by capture time on the traces' own clocks, by modification time
only where a file has none. Of several runs, `choose_run` takes the one `--run`
names, else the newest that is not a CUDA/HIP graph capture pass, and says why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from traceinsight.errors import TraceError
from traceinsight.readers import JSON_SUFFIXES, REPORT_SUFFIX, SQLITE_SUFFIX, is_trace_file, looks_like_trace
from traceinsight.readers.json_files import CHUNK_BYTES, FileText
from traceinsight.readers.regular import not_regular, refusal
from traceinsight.readers.stamp import CaptureStamp, capture_stamp
from traceinsight.rules import GRAPH_CAPTURE_BYTES, LONE_TRACE_MAX_ENTRIES, RUN_OVERLAP_MIN_SHARE

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
# How runs were ordered (`RunChoice.reason`): by their traces' own clocks, or, where a run's files have none, by
# the files' modification times (copied files all share their copy time).
BY_CAPTURE_TIME = "by capture time"
BY_MODIFICATION_TIME = "then, by modification time, {runs}: no wall clock in their files"


class Run(msgspec.Struct, frozen=True):
    """One profiling run: its name, the folder it lives in and its trace files. Of the whole walk under the path
    given (skipped, with a warning in the report): `unreadable`, the folders that could not be listed,
    `not_traces`, how many JSON files are no traces, and `not_regular`, how many files named like traces are no
    regular files (FIFOs, sockets, devices, dangling links)."""

    name: str
    root: Path
    files: tuple[Path, ...]
    unreadable: tuple[Path, ...] = ()
    not_traces: int = 0
    started_ns: int | None = None  # the capture's start on its traces' own clock (None: they have none)
    grouping: str | None = None  # why these files are one run, or apart from the others in their folder
    doubt: str | None = None  # a warning: what `grouping` could not tell for certain
    not_regular: int = 0

    @property
    def time_ns(self) -> int:
        """When the run was captured, for ordering: `started_ns`, else its newest file's modification time."""
        if self.started_ns is not None:
            return self.started_ns
        return max((_mtime_ns(f) for f in self.files), default=0)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # deleted since the walk
        return 0


class RunChoice(msgspec.Struct, frozen=True):
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
    """Whether discovery takes `path` as a trace: named like one, a regular file, and (JSON) holding one by its
    head."""
    return _is_candidate(path) and not not_regular(path) and _content_says_trace(path)


def _is_regular(entry: os.DirEntry[str]) -> bool:
    """Whether a folder's entry is a regular file, through a link (no system call for one that is no link)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def walk(root: Path, unreadable: list[Path] | None = None) -> Iterator[tuple[Path, list[os.DirEntry[str]]]]:
    """Each folder under `root` (itself first), depth first in name order, with its entries that are no folders,
    in name order. A loop, not recursion, so a logdir thousands of folders deep is walked like any other. Hidden
    folders are left out; symlinked folders are followed, each real folder once (by device and inode), so a
    symlink loop ends the walk instead of looping. Folders that cannot be listed are added to `unreadable`."""
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
            if unreadable is not None:
                unreadable.append(folder)
            continue
        subfolders, others = [], []
        for entry in listed:
            try:
                is_dir = entry.is_dir()  # through a symlink
            except OSError:  # a link loop: no folder
                is_dir = False
            if not is_dir:
                others.append(entry)
            elif not entry.name.startswith("."):
                subfolders.append(Path(entry.path))
        yield folder, others
        stack.extend(reversed(subfolders))  # depth first, in name order


def lone_trace(root: Path) -> Path | None:
    """The one candidate trace file under `root` (`walk`), when `root` holds exactly one and at most
    `LONE_TRACE_MAX_ENTRIES` entries in all: the file `report FOLDER` then reads, known before the command's imports
    (its early read). None otherwise: discovery decides after the imports, and listing a big logdir twice would
    cost it more than a head start gains."""
    found: Path | None = None
    seen = 0
    for _, entries in walk(root):
        seen += 1 + len(entries)
        if seen > LONE_TRACE_MAX_ENTRIES:
            return None
        for entry in entries:
            if _is_candidate(path := Path(entry.path)) and _is_regular(entry):
                if found is not None:
                    return None
                found = path
    return found


def _candidate_files(root: Path) -> tuple[list[Path], list[Path], int]:
    """The candidate trace files under `root` (`walk`), the folders that could not be listed and how many files
    named like traces are no regular files (skipped: never opened)."""
    found: list[Path] = []
    unreadable: list[Path] = []
    irregular = 0
    for _, entries in walk(root, unreadable):
        for entry in entries:
            if _is_candidate(path := Path(entry.path)):
                if _is_regular(entry):
                    found.append(path)
                else:
                    irregular += 1
    return found, unreadable, irregular


def _run_name(folder: Path, base: Path) -> str:
    """`<logdir>/<run>`: the logdir's name and the folder under it, without TensorBoard's `plugins/profile/`."""
    if folder == base:
        return folder.resolve().name or str(folder)
    parts = [p for p in folder.relative_to(base).parts if p not in ("plugins", "profile")]
    return "/".join([base.resolve().name, *parts])


def _sort_key(run: Run) -> tuple[bool, int, str]:
    """Oldest first by the capture's start on the traces' clock, runs without one before them all, by their newest
    file's modification time (a copy's time: no capture time to compare with); then the name (XProf's run folders
    are timestamps, which sort by time)."""
    return (run.started_ns is not None, run.time_ns, run.name)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two capture windows are one capture's: they share at least `RUN_OVERLAP_MIN_SHARE` of the shorter
    (ranks of one run record the same steps; one process's successive captures only touch, if that)."""
    shared = min(a[1], b[1]) - max(a[0], b[0])
    shorter = min(a[1] - a[0], b[1] - b[0])
    return shared >= 0 and (shorter <= 0 or shared >= RUN_OVERLAP_MIN_SHARE * shorter)


def _distinct(stamps: list[CaptureStamp], files: list[int]) -> bool:
    """Whether no two of `files` say they come from one process (those that say nothing never clash)."""
    known = [p for i in files if (p := stamps[i].process) is not None]
    return len(set(known)) == len(known)


def _who(stamps: list[CaptureStamp]) -> str:
    """'ranks 0, 1', 'hosts a, b' or 'processes 12, 13': what tells the files' processes apart."""
    for word, values in (
        ("ranks", [s.rank for s in stamps]),
        ("hosts", [s.host for s in stamps]),
        ("processes", [s.pid for s in stamps]),
    ):
        if None not in values and len(set(values)) == len(values):
            return f"{word} {', '.join(str(v) for v in sorted(values))}"  # type: ignore[type-var]
    return "processes it could not tell apart"


def group_captures(stamps: list[CaptureStamp]) -> list[tuple[list[int], str | None, str | None]]:
    """The files of one folder (their stamps) as runs: (file indices, why, doubt). Files are one run when their
    windows overlap and they come from different processes. A file without a wall clock (a relative clock, a file
    cut before its first event) joins the folder's one capture if there is one, else the others that have none;
    either with a doubt, since nothing says whether it belongs."""
    if len(stamps) == 1:
        return [([0], None, None)]
    windows = {i: (s.start_ns, s.end_ns) for i, s in enumerate(stamps) if s.start_ns is not None and s.end_ns}
    clusters: list[list[int]] = []
    window = (0, 0)
    for i in sorted(windows, key=lambda i: windows[i]):
        here = windows[i]
        if clusters and _overlap(window, here):
            clusters[-1].append(i)
            window = (window[0], max(window[1], here[1]))
        else:
            clusters.append([i])
            window = here
    groups: list[tuple[list[int], str | None, str | None]] = []
    for members in clusters:
        known = [p for i in members if (p := stamps[i].process) is not None]
        if not _distinct(stamps, members):  # one process twice at once: copies of one capture
            copies = f"{len(members)} files overlap in time but come from one process (copies of one capture?)"
            groups.extend(([i], "one of " + copies, copies + ": each read as a run of its own") for i in members)
        elif len(members) > 1:
            who = _who([stamps[i] for i in members])
            doubt = None if len(known) == len(members) else f"{len(members)} files overlap in time: {who}"
            groups.append((members, f"{len(members)} files captured at the same time by {who}: one run", doubt))
        else:
            groups.append((members, None, None))
    untimed = [i for i in range(len(stamps)) if i not in windows]
    if untimed and len(clusters) == 1 and len(groups) == 1 and _distinct(stamps, groups[0][0] + untimed):
        members, why, doubt = groups[0]  # one capture here, whose ranks they may be: nothing says otherwise
        joined = f"{len(untimed)} of {len(stamps)} files without a wall clock read with the folder's one capture"
        doubt = f"{doubt}; {joined}" if doubt else joined
        groups = [(sorted(members + untimed), why or f"{len(stamps)} files in one folder: one run", doubt)]
    elif untimed and not _distinct(stamps, untimed):  # one process's files, nothing to order them: each a run
        apart = f"{len(untimed)} files without a wall clock, from one process: each read as a run of its own"
        groups.extend(([i], "no wall clock in the files", apart) for i in untimed)
    elif untimed:
        doubt = (
            f"{len(untimed)} files without a wall clock: read as one run, though nothing says they are one capture"
            if len(untimed) > 1
            else None
        )
        groups.append((untimed, "no wall clock in the files" if len(untimed) > 1 else None, doubt))
    if len(groups) > 1:
        split = f"one of {len(groups)} captures in this folder at different times, each a run of its own"
        groups = [(members, why or split, doubt) for members, why, doubt in groups]
    return groups


def _folder_runs(
    folder: Path,
    files: list[Path],
    base: Path,
    stamped: bool,
    skipped: tuple[Path, ...],
    not_traces: int,
    irregular: int = 0,
) -> list[Run]:
    """The runs of one folder's trace files (`group_captures`), each named by its capture time when the folder
    holds several (`<folder>@2026-12-04T09:15:07Z`), as `--run` takes it. `stamped`: whether the files' stamps
    are read at all (a lone file of a lone folder needs none)."""
    name = _run_name(folder, base)
    if not stamped:
        return [Run(name, folder, tuple(files), skipped, not_traces, not_regular=irregular)]
    stamps = [capture_stamp(f, window=len(files) > 1) for f in files]
    groups = group_captures(stamps)
    starts = [min((s for i in group[0] if (s := stamps[i].start_ns) is not None), default=None) for group in groups]
    # Named to the second, or to the millisecond where two runs share a second; a time they still share names
    # neither: their first files' names do.
    texts = [_stamp_text(s) if s is not None else None for s in starts]
    if len(set(texts)) < len(texts):
        texts = [_stamp_text(s, milliseconds=True) if s is not None else None for s in starts]
    runs = []
    for (members, why, doubt), started, text in zip(groups, starts, texts, strict=True):
        run_name = name
        if len(groups) > 1:
            unique = text is not None and texts.count(text) == 1
            run_name = f"{name}@{text if unique else files[members[0]].name}"
        chosen = tuple(sorted(files[i] for i in members))
        runs.append(Run(run_name, folder, chosen, skipped, not_traces, started, why, doubt, irregular))
    return runs


def _stamp_text(epoch_ns: int, milliseconds: bool = False) -> str:
    """2026-12-04T09:15:07Z (or 09:15:07.975Z): a capture time as a run's name takes it (a shell word)."""
    text = datetime.fromtimestamp(epoch_ns // 10**9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{epoch_ns // 10**6 % 1000:03d}Z" if milliseconds else f"{text}Z"


def resolves_within(path: Path, root: Path) -> bool:
    """Whether `path`, links resolved, lies under `root` (already resolved); told without opening it."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a link loop
        return False


def reads_inside(run: Run, folder: Path) -> bool:
    """Whether everything a report of `run` reads lies under `folder`: its trace files, and the `run_info.json`
    files the report's `meta` reads in its folder and each one above it up to `folder`."""
    root = folder.resolve()
    readable = list(run.files)
    at = run.root
    while True:
        readable.append(at / RUN_INFO)
        if at == folder or folder not in at.parents:
            break
        at = at.parent
    return all(resolves_within(f, root) for f in readable if f.is_symlink() or f in run.files)


def find_runs(path: Path, within: Path | None = None) -> list[Run]:
    """Every run under `path`, newest last. A file given by name is a run whatever it holds: reading it says
    why it is no trace; one that is no regular file (a FIFO) is refused at once. `within` (the TensorBoard tab's
    logdir): nothing that resolves outside it is opened, and no run that would read there is found
    (`reads_inside`); a folder holding a trace that links outside is left out whole, rather than read in part."""
    if not path.is_dir() and (kind := not_regular(path)):
        raise TraceError(path, refusal(kind))
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        return [Run(path.name, path.parent, (path,))]
    candidates, unreadable, irregular = _candidate_files(path)
    if within is not None:  # before any file's head is read
        root = within.resolve()
        leaking = {f.parent for f in candidates if not resolves_within(f, root)}
        candidates = [f for f in candidates if f.parent not in leaking]
    traces = [f for f in candidates if _content_says_trace(f)]
    files = _without_exported_reports(traces)
    if not files:
        if unreadable:
            first = unreadable[0]
            raise TraceError(first, f"cannot list this folder, and no readable trace files found under {path}")
        kinds = {"SQLite" if f.name.lower().endswith(SQLITE_SUFFIX) else "JSON" for f in candidates}
        files_word = f"{' or '.join(sorted(kinds))} file{'' if len(candidates) == 1 else 's'}"
        note = f"; skipped {len(candidates)} {files_word} holding none" if candidates else ""
        if irregular:
            note += f"; skipped {irregular} named like traces that are no regular files (FIFOs, sockets, devices)"
        looked = (
            "*.xplane.pb, *.nsys-rep, *.json[.gz] holding traceEvents or an array of trace events, and *.sqlite "
            "holding an Nsight Systems export"
        )
        raise TraceError(path, f"no trace files found (looked for {looked}{note})")
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    skipped, not_traces = tuple(unreadable), len(candidates) - len(traces)
    stamped = len(files) > 1  # several files: their windows say which are one run, and which is newest
    runs = [
        run
        for folder, fs in by_folder.items()
        for run in _folder_runs(folder, fs, path, stamped, skipped, not_traces, irregular)
    ]
    if within is not None:
        runs = [run for run in runs if reads_inside(run, within)]
        if not runs:
            raise TraceError(path, f"no run whose files all lie under {within}")
    return sorted(runs, key=_sort_key)


def _without_exported_reports(files: list[Path]) -> list[Path]:
    """`files` without the ``X.nsys-rep`` reports whose SQLite export (``X.sqlite``, or ``X.nsys-rep.sqlite`` as
    ``nsys profile --export sqlite`` names it) is among them: one run's one input, not two."""
    exported = {f.parent / f.name[: -len(SQLITE_SUFFIX)] for f in files if f.name.lower().endswith(SQLITE_SUFFIX)}

    def beside(report: Path) -> bool:
        stem = report.parent / report.name[: -len(REPORT_SUFFIX)]
        return stem in exported or report in exported

    return [f for f in files if not (f.name.lower().endswith(REPORT_SUFFIX) and beside(f))]


def is_capture_pass(run: Run) -> bool:
    """Whether `run` is a CUDA/HIP graph capture pass (kernels recorded once, no steady state), told without
    parsing: its first JSON file holds `GRAPH_CAPTURE_BYTES`. Every rank of a run captures alike, so one file
    tells; an XSpace file or an Nsight Systems export is never looked at (a JSON flag, not theirs)."""
    first = next((f for f in run.files if f.name.lower().endswith(JSON_SUFFIXES)), None)
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


def choose_run(path: Path, run: str | None = None, within: Path | None = None) -> RunChoice:
    """The run to report on and why: the one named `run` (folder name or path under `path`); else the newest
    that is not a graph capture pass while another run exists, looking at the runs newest first and only as far
    as the first that is not one (a capture pass left where its replay is would otherwise be reported). `within`:
    as `find_runs` takes it (no run beside the one chosen, nor it, reads outside)."""
    runs = tuple(reversed(find_runs(path, within)))
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
    order = ordering(runs)
    for i, candidate in enumerate(runs):
        capture[i] = is_capture_pass(candidate)
        if not capture[i]:
            newest = NEWEST_NOT_CAPTURE if i else NEWEST_RUN
            return RunChoice(candidate, runs, tuple(capture), f"{newest} {order}")
    return RunChoice(runs[0], runs, tuple(capture), f"{NEWEST_RUN} {order}")  # capture passes only


def ordering(runs: tuple[Run, ...] | list[Run]) -> str:
    """How `runs` were put in order: by capture time, saying which runs (if any) fell back to modification time."""
    undated = [r.name for r in runs if r.started_ns is None]
    if not undated:
        return BY_CAPTURE_TIME
    named = ", ".join(undated[:3]) + (f" and {len(undated) - 3} more" if len(undated) > 3 else "")
    return f"{BY_CAPTURE_TIME} ({BY_MODIFICATION_TIME.format(runs=named)})"


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


def discover(path: Path, run: str | None = None, within: Path | None = None) -> Run:
    """The run to report on (`choose_run`'s choice), for callers that need not say why."""
    return choose_run(path, run, within).run
