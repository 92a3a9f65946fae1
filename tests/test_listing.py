"""Many runs (`traceinsight/listing.py`): the one listing, the report cache and the one-line summaries.

A run is analysed once: a second pass over unchanged files reads every report from the cache (counted by its
hits and misses, and checked by an analysis that fails if called), touching one run's file re-analyses that run
only, and a cache entry that is corrupt, of another schema or for another key is a miss, never an error.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from tests.conftest import SAMPLE_TRACES
from tests.corpus import shift_capture
from traceinsight import listing, workflow
from traceinsight.discover import choose_run, find_runs
from traceinsight.errors import TraceError
from traceinsight.listing import (
    CACHE_ENV,
    ReportCache,
    analyze_runs,
    default_cache_dir,
    files_key,
    list_runs,
    report_key,
    summarize,
)
from traceinsight.result import RunReport, to_document
from traceinsight.tensorboard.runs import ProfileRun

SAMPLES = ("synthetic_gpu/input_bound", "synthetic_gpu/launch_bound", "synthetic_gpu/healthy")


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Three small runs in a logdir of their own (their files may be touched), captured oldest first, a second
    apart (the samples share one capture time)."""
    root = tmp_path / "logdir"
    for age, sample in enumerate(reversed(SAMPLES)):
        target = root / Path(sample).name
        shutil.copytree(SAMPLE_TRACES / sample, target)
        for f in target.iterdir():
            if f.name.endswith(".pt.trace.json.gz"):
                shift_capture(f, age)
            os.utime(f, ns=(1_700_000_000_000_000_000 + age, 1_700_000_000_000_000_000 + age * 1_000_000_000))
    return root


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReportCache:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return ReportCache()


def _no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any analysis from now on fails the test."""

    def fail(*args: object, **kwargs: object) -> None:
        pytest.fail("a run was analysed")  # not an Exception: `runs._analyze` would make it the row's error

    monkeypatch.setattr(workflow, "analyze_path", fail)


def test_list_runs_is_newest_first_under_the_names_run_takes(logdir: Path) -> None:
    runs = list_runs(logdir)
    assert runs == list(reversed(find_runs(logdir)))
    assert [r.name for r in runs] == [f"logdir/{Path(s).name}" for s in SAMPLES]
    for run in runs:
        assert choose_run(logdir, run.name).run == run
    (empty := logdir.parent / "empty").mkdir()
    with pytest.raises(TraceError, match="no trace files"):
        list_runs(empty)


def test_files_key_is_the_tabs_key(logdir: Path) -> None:
    run = list_runs(logdir)[0]
    (f,) = run.files
    st = f.stat()
    assert files_key(run.files) == ((str(f.absolute()), st.st_size, st.st_mtime_ns),)
    assert ProfileRun("input_bound", run).key() == files_key(run.files)
    f.unlink()
    assert files_key(run.files) == ((str(f.absolute()), -1, -1),)


def test_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == ReportCache().directory == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "traceinsight" / "reports"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "traceinsight" / "reports"


def test_a_second_pass_analyses_nothing(logdir: Path, cache: ReportCache, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = list_runs(logdir)
    first = analyze_runs(logdir, runs, jobs=2, cache=cache)
    assert (cache.hits, cache.misses) == (0, 3)
    assert all(isinstance(r, RunReport) for r in first)
    assert [r.run for r in first if isinstance(r, RunReport)] == [run.name for run in runs]  # in the order given
    assert len(list(cache.entries.glob("*.json"))) == 3

    _no_analysis(monkeypatch)
    again = ReportCache()
    second = analyze_runs(logdir, runs, jobs=2, cache=again)
    assert (again.hits, again.misses) == (3, 0)
    assert [to_document(r) for r in second if isinstance(r, RunReport)] == [
        to_document(r) for r in first if isinstance(r, RunReport)
    ]


def test_touching_a_file_reanalyses_that_run_only(
    logdir: Path, cache: ReportCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = list_runs(logdir)
    analyze_runs(logdir, runs, cache=cache)
    (touched,) = runs[1].files
    os.utime(touched)
    analysed: list[str] = []
    analyze = workflow.analyze_path

    def counted(path: Path, name: str, *args: object, **kwargs: object) -> workflow.Analyzed:
        analysed.append(name)
        return analyze(path, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(workflow, "analyze_path", counted)
    again = ReportCache()
    analyze_runs(logdir, runs, jobs=1, cache=again)
    assert analysed == [runs[1].name]
    assert (again.hits, again.misses) == (2, 1)


def test_a_bad_entry_is_a_miss(logdir: Path, cache: ReportCache) -> None:
    runs = list_runs(logdir)[:1]
    (report,) = analyze_runs(logdir, runs, cache=cache)
    assert isinstance(report, RunReport)
    key = report_key(logdir, runs[0])
    (entry,) = cache.entries.glob("*.json")
    good = entry.read_bytes()
    doc = orjson.loads(good)
    for bad in (
        b"{not json",
        good[: len(good) // 2],
        orjson.dumps({**doc, "schema": "traceinsight.cache/0"}),
        orjson.dumps({**doc, "key": "another"}),
        orjson.dumps({**doc, "report": {**doc["report"], "schema": "traceinsight.report/3"}}),
        orjson.dumps({**doc, "report": {"schema": "traceinsight.report/1"}}),
    ):
        entry.write_bytes(bad)
        assert cache.get(key) is None
    entry.write_bytes(good)
    assert cache.get(key) is not None
    assert (cache.hits, cache.misses) == (1, 7)
    assert cache.get(report_key(logdir, runs[0], small_kernel_ns=1)) is None  # another threshold: another report


def test_the_cache_keeps_the_latest_entries_and_never_fails(
    logdir: Path, cache: ReportCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The module by name: `traceinsight.listing` as an attribute is the API's `ti.runs`.
    monkeypatch.setattr(listing, "MAX_ENTRIES", 2)
    runs = list_runs(logdir)
    reports = analyze_runs(logdir, runs, cache=cache)
    assert len(list(cache.entries.glob("*.json"))) == 2
    assert not list(cache.entries.glob(".*"))  # no temp file left
    blocked = ReportCache(logdir / "input_bound" / "ground_truth.json" / "cache")  # a folder under a file
    report = reports[0]
    assert isinstance(report, RunReport)
    blocked.put(report_key(logdir, runs[0]), report)
    assert blocked.get(report_key(logdir, runs[0])) is None


def test_a_run_that_fails_is_its_error_and_is_not_kept(logdir: Path, cache: ReportCache) -> None:
    bad = logdir / "bad"
    bad.mkdir()
    (bad / "cut.pt.trace.json").write_text('{"traceEvents": [{"name": "x", "ph": "X", "ts": 1')
    runs = list_runs(logdir)
    outcomes = analyze_runs(logdir, runs, jobs=2, cache=cache)
    failed = [(run, o) for run, o in zip(runs, outcomes, strict=True) if isinstance(o, TraceError)]
    assert [run.name for run, _ in failed] == ["logdir/bad"]
    row = summarize(*failed[0])
    assert row.error and "cut.pt.trace.json" in row.error
    assert row.steps == 0 and row.capture_kind is None and row.files == 1
    assert len(list(cache.entries.glob("*.json"))) == 3  # only the reports


def test_summary_of_a_report(logdir: Path, cache: ReportCache) -> None:
    run = list_runs(logdir)[0]
    (report,) = analyze_runs(logdir, [run], cache=cache)
    assert isinstance(report, RunReport)
    row = summarize(run, report)
    top = report.bottlenecks[0]
    assert top.projection is not None
    assert (row.name, row.format, row.framework, row.files) == (run.name, "kineto", report.framework, 1)
    assert row.bytes == run.files[0].stat().st_size
    assert row.capture_time == report.meta.capture_date and row.capture_time is not None
    assert row.capture_kind == report.capture.kind if report.capture else False
    assert (row.steps, row.mean_step_ns) == (report.steps.count, report.steps.mean_ns)
    assert (row.gpu_util, row.mfu) == (report.totals.step_gpu_util, report.compute.mfu)
    assert (row.top_bottleneck, row.top_step_ns_after) == (top.id, top.projection.step_ns_after)
    assert row.error is None
    unanalysed = summarize(run)
    assert (unanalysed.name, unanalysed.files, unanalysed.bytes) == (run.name, 1, row.bytes)
    assert unanalysed.steps == 0 and unanalysed.capture_kind is None and unanalysed.error is None


def test_the_cache_touches_only_its_own_files(logdir: Path, cache: ReportCache) -> None:
    """`$TRACEINSIGHT_CACHE` may name a folder of the user's own: 300 of their JSON files (one named like an entry)
    and a hidden temp file survive 300 entries written, more than `MAX_ENTRIES`; the entries are trimmed to it,
    and of our temporary entries only one a dead writer left an hour ago goes."""
    user = cache.directory
    user.mkdir()
    mine = {user / f"result-{i}.json": f'{{"user": {i}}}' for i in range(299)}
    mine[user / f"{'a' * 40}.json"] = '{"user": "digest-like"}'
    mine[user / ".notes.tmp"] = "draft"
    for path, text in mine.items():
        path.write_text(text)
    runs = list_runs(logdir)[:1]
    (report,) = analyze_runs(logdir, runs, cache=cache)
    assert isinstance(report, RunReport)
    stale, fresh = cache.entries / ".traceinsight-entry-dead1.tmp", cache.entries / ".traceinsight-entry-live1.tmp"
    stale.write_text("{")
    fresh.write_text("{")
    os.utime(stale, (0, 0))
    for i in range(300):
        cache.put(("another run", i), report)
    assert {p: p.read_text() for p in user.iterdir() if p.is_file()} == mine
    entries = sorted(p.name for p in cache.entries.iterdir())
    assert len(entries) == listing.MAX_ENTRIES + 1  # and the live temp file
    assert not stale.exists() and fresh.exists()
