"""Runs as they were made: a folder's files are one run only when their captures overlap in time and come from
different processes; runs are ordered by capture time on the traces' own clocks (issue 35).

Expected answers come from the raw files (each event's ts plus `baseTimeNanoseconds`, read with `json`), never
from the tool.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.cli import main
from traceinsight.discover import BY_CAPTURE_TIME, NEWEST_RUN, choose_run, find_runs, group_captures
from traceinsight.readers.stamp import EDGE_BYTES, CaptureStamp, capture_stamp

S = 10**9
# A stamp reads the events at the head of a file, not all of them: its start is the capture's within this much.
NEAR_NS = 10**7


def _raw_window(path: Path) -> tuple[int, int, set[int]]:
    """(first ts, last ts) of a Kineto file's events (not the profiler's own span) in epoch ns, and its pids."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    base = doc.get("baseTimeNanoseconds", 0)
    times = [round(e["ts"] * 1000) for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    times = [t + (base if t < base else 0) for t in times]
    pids = {e["pid"] for e in doc["traceEvents"] if isinstance(e.get("pid"), int) and e["pid"] > 100}
    return min(times), max(times), pids


# --------------------------------------------------------------------------- grouping, by hand-built stamps


def test_overlapping_captures_of_different_ranks_are_one_run():
    stamps = [CaptureStamp(100 * S, 110 * S, rank=0, pid=7), CaptureStamp(100 * S + 5, 110 * S + 9, rank=1, pid=8)]
    ((members, why, doubt),) = group_captures(stamps)
    assert members == [0, 1] and doubt is None and "ranks 0, 1" in why


def test_one_process_captured_at_different_times_is_several_runs():
    stamps = [CaptureStamp(t * S, t * S + S // 5, pid=42) for t in (100, 300, 101)]  # a repeating schedule
    groups = group_captures(stamps)
    assert sorted(g[0] for g in groups) == [[0], [1], [2]]
    assert all("3 captures in this folder at different times" in why and doubt is None for _, why, doubt in groups)


def test_windows_that_only_touch_or_barely_overlap_are_apart():
    # 10 s captures; the second starts 1 s before the first ends: 10 % of the shorter shared, under half.
    stamps = [CaptureStamp(0 + 10**18, 10 * S + 10**18, rank=0), CaptureStamp(9 * S + 10**18, 19 * S + 10**18, rank=1)]
    assert len(group_captures(stamps)) == 2
    stamps[1] = CaptureStamp(4 * S + 10**18, 14 * S + 10**18, rank=1)  # 60 % shared: one run
    assert len(group_captures(stamps)) == 1


def test_copies_of_one_capture_are_runs_of_their_own_with_a_warning():
    stamps = [CaptureStamp(5 * S, 6 * S, pid=9), CaptureStamp(5 * S, 6 * S, pid=9)]
    groups = group_captures(stamps)
    assert [g[0] for g in groups] == [[0], [1]]
    assert all(doubt and "copies of one capture" in doubt for *_, doubt in groups)


def test_files_without_a_clock_join_the_one_capture_of_their_folder_with_a_warning():
    """A rank file cut before its first event beside its run's other ranks stays in the run (its error is then
    the report's), but said: nothing tells that it belongs."""
    stamps = [CaptureStamp(rank=0), CaptureStamp(rank=1), CaptureStamp(7 * S, 8 * S, rank=2)]
    ((members, why, doubt),) = group_captures(stamps)
    assert members == [0, 1, 2] and "2 of 3 files without a wall clock" in doubt


def test_files_without_a_clock_beside_several_captures_are_a_run_of_their_own():
    stamps = [
        CaptureStamp(rank=0),
        CaptureStamp(rank=1),
        CaptureStamp(7 * S, 8 * S, pid=5),
        CaptureStamp(9 * S, 10 * S, pid=5),
    ]
    groups = group_captures(stamps)
    assert sorted(g[0] for g in groups) == [[0, 1], [2], [3]]
    undated = next(g for g in groups if g[0] == [0, 1])
    assert "without a wall clock" in undated[2]
    assert len(group_captures([CaptureStamp(rank=0), CaptureStamp(rank=1)])) == 1  # none has one: together
    # Two undated files of one process (two servers' request traces, both pid 0) are no ranks of one run.
    one_process = group_captures([CaptureStamp(pid=0), CaptureStamp(pid=0), CaptureStamp(7 * S, 8 * S, pid=5)])
    assert sorted(g[0] for g in one_process) == [[0], [1], [2]]


def test_overlapping_files_that_do_not_say_who_made_them_are_joined_with_a_warning():
    ((members, _, doubt),) = group_captures([CaptureStamp(5 * S, 9 * S), CaptureStamp(5 * S, 9 * S)])
    assert members == [0, 1] and "could not tell apart" in doubt


# --------------------------------------------------------------------------- stamps, by hand-built files


def _kineto(path: Path, ts_us: list[float], base: int | None, pad_events: int = 0) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 4242, "tid": 1, "ts": t, "dur": 1} for t in ts_us]
    filler = [{"ph": "i", "name": "x" * 40, "pid": 4242, "tid": 1, "ts": ts_us[0] + 1} for _ in range(pad_events)]
    doc: dict = {"distributedInfo": {"backend": "gloo", "rank": 3}, "traceEvents": [*events[:1], *filler, *events]}
    if base is not None:
        doc["baseTimeNanoseconds"] = base  # torch writes it last
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_kineto_stamp_is_its_events_on_the_base_clock(tmp_path, name):
    base = 1_735_632_360 * S
    path = _kineto(tmp_path / name, [1_000.25, 5_000.5, 2_000.0], base, pad_events=4000)  # > 2 edges of text
    assert path.stat().st_size > 2 * EDGE_BYTES or name.endswith(".gz")
    stamp = capture_stamp(path)
    assert stamp.start_ns == base + 1_000_250 and stamp.end_ns == base + 5_000_500
    assert stamp.rank == 3 and stamp.pid == 4242


def test_a_stamp_on_the_epoch_clock_and_one_with_none(tmp_path):
    epoch_us = 1_623_142_623_460_111.0  # resnet50's first ts: µs since the epoch, no base
    assert capture_stamp(_kineto(tmp_path / "a.json", [epoch_us, epoch_us + 7], None)).start_ns == round(
        epoch_us * 1000
    )
    undated = capture_stamp(_kineto(tmp_path / "b.json", [10.0, 20.0], None))  # a relative clock
    assert undated.start_ns is None and undated.rank == 3


def test_a_number_cut_by_the_edge_of_the_head_is_no_ts(tmp_path):
    base = 1_700_000_000 * S
    path = _kineto(tmp_path / "t.json", [3_000.5, 3_500.0], base, pad_events=3000)
    text = path.read_text()
    cut = text.index('"ts": 3001.5', EDGE_BYTES - 500)  # a filler's ts near the head's edge
    padded = text[:cut] + " " * (EDGE_BYTES - cut - len('"ts": 30')) + text[cut:]  # "ts": 30|01.5 at the edge
    path.write_text(padded)
    assert capture_stamp(path).start_ns == base + 3_000_500


# --------------------------------------------------------------------------- real captures


def test_two_captures_of_the_example_are_two_runs_and_the_newer_is_reported(tmp_path, capsys):
    folder = tmp_path / "profile"
    shutil.copytree(SAMPLE_TRACES / "two_captures", folder)
    files = sorted(folder.glob("*.pt.trace.json.gz"))
    windows = {f: _raw_window(f) for f in files}
    newer = max(files, key=lambda f: windows[f][0])
    older = min(files, key=lambda f: windows[f][0])
    assert windows[newer][0] - windows[older][1] > 60 * S  # a couple of minutes apart
    os.utime(older, (2_000_000_000, 2_000_000_000))  # modified last: no matter
    choice = choose_run(folder)
    assert [r.files for r in choice.runs] == [(newer,), (older,)]
    assert choice.run.files == (newer,) and choice.reason == f"{NEWEST_RUN} {BY_CAPTURE_TIME}"
    assert abs(choice.run.started_ns - windows[newer][0]) < NEAR_NS  # the head's events: the capture's start
    out = tmp_path / "r.json"
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [i["path"] for i in report["inputs"]] == [newer.name]
    assert report["window"]["start_ns"] == windows[newer][0]
    assert "2 captures in this folder at different times" in report["meta"]["run_choice"]
    assert [r["captured"] is not None and r["files"] == 1 for r in report["meta"]["runs"]] == [True, True]
    terminal = capsys.readouterr().out
    assert "run 1 of 2 (the newest run by capture time; one of 2 captures" in terminal
    page = (tmp_path / "r.html").read_text()
    assert "captured (UTC)" in page and "files grouped" in page
    # Each capture is a run `--run` takes by its name.
    for run in choice.runs:
        assert choose_run(folder, run.name).run == run


def test_a_repeating_schedule_is_one_run_per_cycle():
    folder = SAMPLE_TRACES / "repeating_schedule"
    files = sorted(folder.glob("*.pt.trace.json.gz"))
    windows = sorted(_raw_window(f)[:2] for f in files)
    assert len({pid for f in files for pid in _raw_window(f)[2]}) == 1  # one process
    assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:], strict=False))  # one after another
    runs = find_runs(folder)
    assert all(abs(r.started_ns - w[0]) < NEAR_NS for r, w in zip(runs, windows, strict=True))
    assert len({r.name for r in runs}) == 3 and all(r.name.startswith("repeating_schedule@2026-") for r in runs)


@pytest.mark.parametrize(
    "scenario", ["balanced", "sleep_rank1", "big_batch_rank1", "balanced_noshapes", "sleep_rank1_noshapes"]
)
def test_the_ranks_of_one_run_stay_one_run(scenario):
    folder = SAMPLE_TRACES / "distributed" / scenario
    (run,) = find_runs(folder)
    assert len(run.files) == 2 and run.doubt is None and "by ranks 0, 1: one run" in run.grouping


def test_tracelens_h100_is_two_runs():
    folder = shared_trace("tracelens/h100")
    runs = find_runs(folder)
    assert sorted(len(r.files) for r in runs) == [1, 1]
    starts = sorted(_raw_window(f)[0] for f in folder.glob("*.json.gz"))
    assert starts[1] - starts[0] > 2 * 3600 * S
    assert all(abs(r.started_ns - start) < NEAR_NS for r, start in zip(runs, starts, strict=True))


# HTA's two-rank test traces (facebookresearch/HolisticTraceAnalysis, tests/data/trace_filter/), read from the
# repository's snapshot when it is here: two ranks of one job, one run.
HTA_MIRROR = Path("/work/.mirror/facebookresearch+HolisticTraceAnalysis/repo")
HTA_COMMIT = "f4d0062c382f42bd8a74838bcdad1916c7d5d2da"


def test_htas_two_rank_folder_is_one_run(tmp_path):
    if not HTA_MIRROR.is_dir():
        pytest.skip(f"{HTA_MIRROR} not available")
    folder = tmp_path / "trace_filter"
    folder.mkdir()
    for rank in (0, 1):
        inner = f"{HTA_COMMIT}:tests/data/trace_filter/sampled_rank-{rank}.json.gz"
        done = subprocess.run(["git", "--git-dir", str(HTA_MIRROR), "show", inner], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"{inner} not in {HTA_MIRROR}")
        (folder / f"sampled_rank-{rank}.json.gz").write_bytes(done.stdout)
    windows = [_raw_window(f)[:2] for f in sorted(folder.iterdir())]
    shared = min(w[1] for w in windows) - max(w[0] for w in windows)
    assert shared > 0.5 * min(w[1] - w[0] for w in windows)  # the two ranks' captures overlap
    (run,) = find_runs(folder)
    assert len(run.files) == 2 and "ranks 0, 1: one run" in run.grouping and run.doubt is None
