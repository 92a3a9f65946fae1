"""Reports made in worker processes: a progress state first, one slow run never holding up another, a
changed run analyzed again, failures and dead workers reported (stand-in jobs: `jobs.py`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import typed_report
from tests.tensorboard import jobs
from traceinsight.listing import ReportCache, report_key
from traceinsight.tensorboard.reports import Outcome, ReportStore
from traceinsight.tensorboard.runs import ProfileRun, list_runs


def run_named(logdir: Path, folder: str) -> ProfileRun:
    """The run in `folder` of the logdir, named as `traceinsight runs` names it."""
    return next(r for r in list_runs(logdir) if r.name == f"{logdir.name}/{folder}")


def wait(store: ReportStore, run: ProfileRun, timeout: float = 30.0) -> Outcome:
    """Ask as the tab does until the answer is no longer a progress state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        outcome = store.get(run)
        if outcome.state not in ("queued", "running"):
            return outcome
        time.sleep(0.05)
    raise AssertionError(f"{run.name}: still {outcome.state}")


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    for name in ("slow", "quick"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.pt.trace.json").write_text('{"traceEvents": []}')
    return tmp_path


@pytest.fixture
def store_of(logdir: Path) -> Iterator[Callable[..., ReportStore]]:
    made: list[ReportStore] = []

    def make(job, workers: int = 2, cache: ReportCache | None = None) -> ReportStore:
        made.append(ReportStore(logdir, workers=workers, job=job, cache=cache))
        return made[-1]

    yield make
    for store in made:
        store.close()


def test_a_slow_run_does_not_hold_up_another(logdir, store_of):
    store = store_of(jobs.slow_or_quick)
    slow, quick = run_named(logdir, "slow"), run_named(logdir, "quick")
    first = store.get(slow)
    assert first.state in ("queued", "running")
    assert first.progress("slow") == {"run": "slow", "state": first.state, "elapsed_s": 0.0, "files": 1, "bytes": 19}
    done = wait(store, quick)
    assert done.state == "ready" and done.json == f'{{"run": "{logdir.name}/quick", "size": 19}}'
    assert store.get(slow).state == "running"
    (logdir / "release").touch()
    assert wait(store, slow).html == f"<p>{logdir.name}/slow</p>"


def test_a_run_still_being_written_is_analyzed_again(logdir, store_of):
    store = store_of(jobs.quick)
    run = run_named(logdir, "quick")
    assert '"size": 19' in (wait(store, run).json or "")
    assert store.get(run).state == "ready"  # cached while the files stay as they are
    (logdir / "quick" / "t.pt.trace.json").write_text('{"traceEvents": [] }')
    assert store.get(run).state in ("queued", "running")
    assert '"size": 20' in (wait(store, run).json or "")


def test_failures_are_reported_not_retried(logdir, store_of):
    store = store_of(jobs.failing)
    run = run_named(logdir, "quick")
    outcome = wait(store, run)
    assert outcome.state == "failed" and outcome.error == f"cannot read {logdir.name}/quick"
    assert outcome.progress("quick")["error"] == outcome.error
    assert store.get(run).state == "failed"


def test_a_worker_that_dies_fails_its_run_only(logdir, store_of):
    outcome = wait(store_of(jobs.dying), run_named(logdir, "quick"))
    assert outcome.state == "failed" and "process died" in (outcome.error or "")
    assert wait(store_of(jobs.quick), run_named(logdir, "slow")).state == "ready"


def test_the_json_of_a_cached_report_needs_no_job(logdir, store_of, report_cache):
    cache = ReportCache(report_cache)
    run = run_named(logdir, "quick")
    cache.put(report_key(logdir, run.run), typed_report(run=run.name))
    store = store_of(jobs.failing, cache=cache)
    outcome = store.get(run, page=False)
    assert outcome.state == "ready" and outcome.json is not None
    served = json.loads(outcome.json)
    assert served["run"] == run.name
    assert served["meta"]["command"] == ["traceinsight", "report", str(logdir), "--run", run.name]
    assert store.get(run).state in ("queued", "running")  # the page is drawn from the analysis: a job
    (logdir / "quick" / "t.pt.trace.json").write_text('{"traceEvents": [] }')  # changed: the cached report is stale
    assert wait(store, run).state == "failed" and store.get(run, page=False).state == "failed"
