"""Many inputs read in parallel (a process per file, or Dask workers): the same report as reading them one by one.

The eight rank files are synthetic timelines (tools/synth.py) whose steps wait
longer for input the higher the rank, so each rank's mean step, idle fraction
and the slowest rank are known from the timelines' ground truth.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import shared_trace
from tools.synth import GpuTimeline, TimelineBuilder
from traceinsight import parallel
from traceinsight.cli import main
from traceinsight.discover import discover
from traceinsight.load import load_run
from traceinsight.model import TraceError
from traceinsight.parallel import map_files

RANKS = 8
XSPACE_GPU = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"


def _timeline(rank: int) -> GpuTimeline:
    """Three steps: an input wait of (1 + rank / 2) ms, then a 0.3 ms kernel."""
    b = TimelineBuilder(seed=rank)
    for step in range(3):
        with b.step(step):
            b.input_wait(1_000_000 + rank * 500_000)
            b.launch_kernel("gemm", 300_000, op="aten::mm")
    return b.build(f"rank{rank}", "one rank of a data-parallel job")


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A folder of eight rank traces, as tensorboard_trace_handler leaves them, and their ground truths."""
    folder = tmp_path_factory.mktemp("ranks")
    truths = []
    for rank in range(RANKS):
        timeline = _timeline(rank)
        doc = timeline.to_kineto()
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": RANKS}
        (folder / f"worker{rank}.pt.trace.json").write_text(json.dumps(doc))
        truths.append(timeline.ground_truth())
    return folder, truths


def _report(path: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["report", str(path), "-o", str(out / "r.html"), "--json", str(out / "r.json"), "-q", *extra])
    return code, _analysed(json.loads((out / "r.json").read_text())) if code in (0, 1) else {}


def _analysed(report: dict[str, Any]) -> dict[str, Any]:
    """The report less what only says how it was asked for (`meta`: when, the command line, its paths)."""
    meta = {k: v for k, v in report["meta"].items() if k not in ("generated_at", "command", "options", "input")}
    return {**report, "meta": meta}


@pytest.fixture(scope="module")
def one_by_one(rank_dir, tmp_path_factory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("jobs1")
    code, report = _report(rank_dir[0], out, "--jobs", "1")
    assert code == 0
    return report, json.dumps(report, sort_keys=True)


def test_two_processes_give_the_same_json_as_one(rank_dir, one_by_one, tmp_path: Path) -> None:
    code, report = _report(rank_dir[0], tmp_path, "--jobs", "2")
    assert code == 0 and json.dumps(report, sort_keys=True) == one_by_one[1]


def test_eight_inputs_with_their_ranks_and_devices(one_by_one) -> None:
    report = one_by_one[0]
    assert [i["rank"] for i in report["inputs"]] == list(range(RANKS))
    assert [d["id"] for d in report["devices"]] == [f"rank{r}/GPU:0" for r in range(RANKS)]


def test_ranks_section_from_the_ground_truth(rank_dir, one_by_one) -> None:
    ranks = one_by_one[0]["ranks"]
    truths = rank_dir[1]
    means = [sum(s["dur_ns"] for s in t["steps"]["items"]) // t["steps"]["count"] for t in truths]
    assert means == sorted(means) and len(set(means)) == RANKS  # the higher the rank, the longer its steps
    assert ranks["count"] == RANKS
    for item, truth, mean in zip(ranks["items"], truths, means, strict=True):
        device = truth["devices"]["GPU:0"]
        assert item["steps"]["mean_ns"] == mean and item["steps"]["count"] == 3
        assert (item["span_ns"], item["busy_ns"]) == (device["span_ns"], device["busy_ns"])
        assert item["idle_fraction"] == pytest.approx(device["idle_ns"] / device["span_ns"])
    assert (ranks["step_mean_min_ns"], ranks["step_mean_max_ns"]) == (means[0], means[-1])
    assert ranks["step_mean_spread_ns"] == means[-1] - means[0]
    assert ranks["step_mean_spread_fraction"] == pytest.approx((means[-1] - means[0]) / means[0])
    assert ranks["slowest"]["rank"] == RANKS - 1 and ranks["slowest"]["label"] == "rank 7"


def test_html_shows_the_ranks_only_with_several_inputs(rank_dir, tmp_path: Path) -> None:
    folder = rank_dir[0]
    code, _ = _report(folder, tmp_path, "--jobs", "1")
    page = (tmp_path / "r.html").read_text()
    assert code == 0 and 'id="ranks"' in page and "rank 7 <strong>(slowest)</strong>" in page
    code, single = _report(folder / "worker3.pt.trace.json", tmp_path)
    assert code == 0 and single["ranks"] is None and 'id="ranks"' not in (tmp_path / "r.html").read_text()


def test_a_bad_file_read_in_a_worker_is_one_line_and_exit_2(rank_dir, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for source in sorted(rank_dir[0].iterdir())[:3]:
        (folder / source.name).write_bytes(source.read_bytes())
    (folder / "worker9.pt.trace.json").write_bytes(b'{"traceEvents": [{"ph": "X",')
    code, _ = _report(folder, tmp_path, "--jobs", "2")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "worker9.pt.trace.json: invalid JSON at byte" in err


def _square(path: Path) -> int:
    if path.name == "bad":
        raise TraceError(path, "no good")
    return int(path.name) ** 2


def test_map_files_keeps_the_order_and_reports_each_file_done() -> None:
    done: list[int] = []
    paths = [Path(str(n)) for n in range(6)]
    assert map_files(_square, paths, jobs=2, on_done=done.append) == [n * n for n in range(6)]
    assert sorted(done) == list(range(6))
    with pytest.raises(TraceError) as info:
        map_files(_square, [Path("1"), Path("bad")], jobs=2)
    assert (info.value.path, info.value.reason) == ("bad", "no good")


def test_dask_workers_give_the_same_json(rank_dir, one_by_one, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        code, report = _report(rank_dir[0], tmp_path, "--scheduler", cluster.scheduler_address)
    assert code == 0 and json.dumps(report, sort_keys=True) == one_by_one[1]


def test_without_dask_the_scheduler_option_says_what_to_install(
    rank_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    code, _ = _report(rank_dir[0], tmp_path, "--scheduler", "local")
    err = capsys.readouterr().err
    assert code == 2 and "Dask is not installed: pip install 'dask[distributed]'" in err


@pytest.mark.parametrize(
    "files",
    [
        # Two hosts' XSpace: the steps come from a device Steps line, named with its host's prefix.
        {"plugins/profile/r/w1.xplane.pb": XSPACE_GPU, "plugins/profile/r/w0.xplane.pb": XSPACE_GPU},
        # A CPU-only rank (no devices at all) beside two GPU ones of other makes and schemas.
        {
            "a.pt.trace.json.gz": "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
            "b.pt.trace.json.gz": "hta/nccl_parser_config/nccl_data.json.gz",
            "c.pt.trace.json.gz": "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        },
    ],
    ids=["xspace-steps-lines", "cpu-only-and-gpu-ranks"],
)
def test_inputs_analysed_apart_give_the_json_of_the_merged_table(files: dict[str, str], tmp_path: Path) -> None:
    """With several files and jobs, each input is analysed where it is read and the results merged
    (`merge_analyses`); one job analyses the merged table. The reports are the same."""
    run = tmp_path / "run"
    for name, source in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_trace(source), run / name)
    reports = []
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        out.mkdir()
        code, report = _report(run, out, "--jobs", jobs)
        assert code == 0
        reports.append(report)
    assert reports[0] == reports[1]
    assert len(reports[0]["inputs"]) == len(files) and reports[0]["steps"]["count"] > 0


def test_load_run_reads_the_files_in_processes_into_the_same_table(rank_dir) -> None:
    """`load_run` (the library's way to get a run's merged table) maps files over processes with jobs > 1:
    the table is the one read file by file here."""
    folder = rank_dir[0]
    here = load_run(discover(folder), folder, jobs=1)
    apart = load_run(discover(folder), folder, jobs=2)
    pd.testing.assert_frame_equal(apart.events, here.events)
    assert [i.rank for i in apart.inputs] == list(range(RANKS))


@pytest.mark.parametrize(("platform", "method"), [("linux", "fork"), ("darwin", "spawn"), ("win32", "spawn")])
def test_workers_fork_only_on_linux(monkeypatch, platform, method):
    """macOS offers fork, but forking a process whose threads ran is unsafe there (issue 13): spawn."""
    monkeypatch.setattr(parallel.sys, "platform", platform)
    assert parallel.fork_context().get_start_method() == method
