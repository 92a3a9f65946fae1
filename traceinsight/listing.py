"""Many runs: every run under a path, each analysed once and summarised in one row.

The one listing behind `traceinsight runs`, `traceinsight trend`, `ti.runs` and the TensorBoard tab's first view,
so all four show the same runs, in the same order (newest first), under the names `--run` takes. A run's report
is cached by its files' paths, sizes and modification times, so a run whose files have not changed is never
analysed twice (`ReportCache`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Iterable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from msgspec.structs import replace

from traceinsight import __version__
from traceinsight.discover import Run, find_runs
from traceinsight.errors import TraceError
from traceinsight.parallel import map_outcomes
from traceinsight.render.meta import iso_utc
from traceinsight.result import SCHEMA, RunReport, RunSummary, from_document, to_document
from traceinsight.rules import DEFAULT_SMALL_KERNEL_NS

if TYPE_CHECKING:
    from traceinsight.limits import MemoryLimit

CACHE_ENV = "TRACEINSIGHT_CACHE"
CACHE_SCHEMA = "traceinsight.cache/1"
# Entries kept (a report is some 100 KB to a few MB of JSON); the least recently used go first.
MAX_ENTRIES = 256
# The cache folder may be one the user also keeps files in (`$TRACEINSIGHT_CACHE=$PWD`): entries live in a subfolder
# of their own and are named by a digest, and only names of these patterns are ever removed.
ENTRIES_FOLDER = "traceinsight-reports-v1"
_ENTRY_NAME = re.compile(r"[0-9a-f]{40}\.json")
_TEMP_PREFIX, _TEMP_SUFFIX = ".traceinsight-entry-", ".tmp"
_TEMP_NAME = re.compile(re.escape(_TEMP_PREFIX) + r"[A-Za-z0-9_]+" + re.escape(_TEMP_SUFFIX))
# A temporary entry older than this was left by a writer that died (one is written in well under a second).
STALE_TEMP_S = 3600

FilesKey = tuple[tuple[str, int, int], ...]
Outcome = RunReport | TraceError


def list_runs(path: Path, within: Path | None = None) -> list[Run]:
    """Every run under `path`, newest first, named as `--run` takes them (`discover.Run.name`); `TraceError`
    when there is none. `within`: only runs that read nothing outside it, found without opening anything there
    (`discover.find_runs`)."""
    return list(reversed(find_runs(path, within)))


def files_key(files: Iterable[Path]) -> FilesKey:
    """Each file's absolute path, size and mtime (ns): a report is stale once this changes (a run still being
    written). The one key of finished reports, on disk (`ReportCache`) and in the TensorBoard tab."""
    key = []
    for f in files:
        try:
            st = f.stat()
        except OSError:  # deleted since the walk: a different run now
            key.append((os.path.abspath(f), -1, -1))
            continue
        key.append((os.path.abspath(f), st.st_size, st.st_mtime_ns))
    return tuple(key)


def report_key(path: Path, run: Run, small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS) -> tuple[Any, ...]:
    """What a cached report of `run` stands for: its files as they are now, and what else shapes the report (the
    path it was found under names it and its neighbours in `meta.runs`; the threshold; this version's code)."""
    return (__version__, os.path.abspath(path), run.name, small_kernel_ns, files_key(run.files))


def default_cache_dir() -> Path:
    """`$TRACEINSIGHT_CACHE`, else `$XDG_CACHE_HOME/traceinsight/reports`, else `~/.cache/traceinsight/reports`."""
    if folder := os.environ.get(CACHE_ENV):
        return Path(folder)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "traceinsight" / "reports"


class ReportCache:
    """Finished reports on disk, one JSON file per run, named by a digest of its `report_key`, in a subfolder of
    `directory` of their own (`entries`): the cache never touches a file it did not name. Entries are written
    to a temporary file and renamed into place, so concurrent writers never leave half a file; an entry that
    cannot be read, of another schema or for another key is a miss; a cache that cannot be written is none.
    `hits` and `misses` count the lookups."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_cache_dir()
        self.entries = self.directory / ENTRIES_FOLDER
        self.hits = 0
        self.misses = 0

    def _entry(self, key_text: bytes) -> Path:
        return self.entries / f"{hashlib.sha256(key_text).hexdigest()[:40]}.json"

    def get(self, key: tuple[Any, ...]) -> RunReport | None:
        """The report stored for `key`, else None."""
        key_text = orjson.dumps(key)
        entry = self._entry(key_text)
        try:
            doc = orjson.loads(entry.read_bytes())
            if doc["schema"] != CACHE_SCHEMA or doc["key"] != key_text.decode() or doc["report"]["schema"] != SCHEMA:
                raise ValueError("another entry")
            report = from_document(doc["report"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError):  # none, corrupt, another schema or key
            self.misses += 1
            return None
        with suppress(OSError):
            os.utime(entry)  # recently used: kept by `_trim`
        self.hits += 1
        return report

    def put(self, key: tuple[Any, ...], report: RunReport) -> None:
        """Store `report` for `key` (nothing when the folder cannot be written)."""
        key_text = orjson.dumps(key)
        doc = {"schema": CACHE_SCHEMA, "key": key_text.decode(), "report": to_document(report)}
        try:
            self.entries.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.entries, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))
            os.replace(tmp, self._entry(key_text))
        except BaseException as error:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(error, OSError):  # a full disk: no entry
                return
            raise
        self._trim()

    def _trim(self) -> None:
        """Remove the least recently used entries beyond `MAX_ENTRIES`, and temporary entries a dead writer left;
        nothing else (`_ENTRY_NAME`, `_TEMP_NAME`)."""
        with suppress(OSError):
            entries, stale = [], []
            too_old = time.time() - STALE_TEMP_S
            for e in os.scandir(self.entries):
                if not e.is_file(follow_symlinks=False):
                    continue
                if _ENTRY_NAME.fullmatch(e.name):
                    entries.append((e.stat().st_mtime_ns, Path(e.path)))
                elif _TEMP_NAME.fullmatch(e.name) and e.stat().st_mtime < too_old:
                    stale.append(Path(e.path))
            oldest = [entry for _, entry in sorted(entries)[: max(0, len(entries) - MAX_ENTRIES)]]
            for path in stale + oldest:
                path.unlink(missing_ok=True)


def _analyze(name: str, path: Path, small_kernel_ns: int, limit: MemoryLimit | None) -> RunReport:
    """One run's report, as `traceinsight report PATH --run NAME --json` makes it (a worker's job). A bug of ours
    on one run is that run's error, so it does not cost the others their rows."""
    from traceinsight.workflow import analyze_path  # pandas and the analyses: only once a run is analysed

    try:
        return analyze_path(path, name, small_kernel_ns, limit=limit).report
    except TraceError:
        raise
    except Exception as error:  # noqa: BLE001  # one row's error, never the listing's
        raise TraceError(name, f"internal error: {type(error).__name__}: {error}") from None


def analyze_runs(
    path: Path,
    runs: list[Run],
    jobs: int = 1,
    cache: ReportCache | None = None,
    small_kernel_ns: int = DEFAULT_SMALL_KERNEL_NS,
    limit: MemoryLimit | None = None,
) -> list[Outcome]:
    """The report of each of `runs` (found under `path`), or why it could not be made, in the order given. Runs
    the cache holds are not analysed; the others are, `jobs` at a time in processes of their own (`limit` split
    among them), and stored. Failures are not stored: one over the memory limit may fit with fewer jobs."""
    keys = [report_key(path, run, small_kernel_ns) for run in runs]
    outcomes: list[Outcome | None] = [cache.get(key) if cache else None for key in keys]
    todo = [i for i, outcome in enumerate(outcomes) if outcome is None]
    each = None if limit is None else limit.shared(min(jobs, len(todo)))
    job = partial(_analyze, path=path, small_kernel_ns=small_kernel_ns, limit=each)
    for i, outcome in zip(todo, map_outcomes(job, [runs[i].name for i in todo], jobs), strict=True):
        outcomes[i] = outcome
        if cache is not None and isinstance(outcome, RunReport):
            cache.put(keys[i], outcome)
    return [outcome for outcome in outcomes if outcome is not None]


def summarize(run: Run, outcome: Outcome | None = None) -> RunSummary:
    """`run` in one row: its files, and the headline of its report (`outcome`: None, not analysed; a
    `TraceError`, the row's `error`). The capture time is the trace's own (`meta.capture_date`), never a file's."""
    sizes, mtimes = [], []
    for f in run.files:
        with suppress(OSError):  # deleted since the walk
            st = f.stat()
            sizes.append(st.st_size)
            mtimes.append(st.st_mtime)
    captured = None if run.started_ns is None else iso_utc(run.started_ns)
    row = RunSummary(
        name=run.name, files=len(run.files), bytes=sum(sizes), modified=max(mtimes, default=None), capture_time=captured
    )
    if isinstance(outcome, TraceError):
        return replace(row, error=str(outcome))
    return row if outcome is None else _with_figures(row, outcome)


def _with_figures(row: RunSummary, report: RunReport) -> RunSummary:
    """`row` with the report's headline: what it read, what kind of capture, the step, and the top bottleneck."""
    inputs = report.inputs
    top = report.bottlenecks[0] if report.bottlenecks else None
    projection = top.projection if top else None
    return replace(
        row,
        format="+".join(dict.fromkeys(i.format for i in inputs)) or None,
        framework=report.framework,
        hosts=len({i.host for i in inputs if i.host is not None}),
        ranks=len({i.rank for i in inputs if i.rank is not None}),
        capture_kind=report.capture.kind if report.capture else None,
        capture_time=report.meta.capture_date or row.capture_time,
        steps=report.steps.count,
        mean_step_ns=report.steps.mean_ns,
        gpu_util=report.totals.step_gpu_util,
        mfu=report.compute.mfu,
        input_wait_fraction=report.input_pipeline.fraction,
        top_bottleneck=top.id if top else None,
        top_severity=top.severity if top else None,
        top_step_ns_after=projection.step_ns_after if projection and projection.basis != "none" else None,
    )


def summaries(
    path: Path, runs: list[Run], jobs: int = 1, cache: ReportCache | None = None, limit: MemoryLimit | None = None
) -> list[RunSummary]:
    """One row per run, in the order given (`analyze_runs`, then `summarize`): `traceinsight runs` and `ti.runs`."""
    return [
        summarize(r, outcome)
        for r, outcome in zip(runs, analyze_runs(path, runs, jobs, cache, limit=limit), strict=True)
    ]
