"""Real 2-rank DDP captures (gloo on the CPU) whose straggler is known: who waits for whom, measured twice.

Why: the collective analysis (`traceinsight.analysis.collectives`) says which rank arrives late at each all-reduce,
how long the others wait for it, and in which phase of its step it loses the time. Its tests need real
`torch.distributed` runs where that answer is known beforehand: the same small MLP under DDP on two ranks, one rank
made slow on purpose in one phase, and the wait measured by the script itself with `time.perf_counter`.

Each rank runs `warm-up` unprofiled steps, then `ACTIVE` profiled ones (`ProfilerStep#N`), each step's phases in
`record_function("data")`, `("forward")`, `("backward")` and `("optimizer")`. `torch.profiler` with
`tensorboard_trace_handler` writes one `rank<R>.*.pt.trace.json.gz` per rank into `sample_traces/distributed/
<scenario>/`, with `record_shapes=True` (gloo's `gloo:all_reduce` then carries its tensor's shape and dtype), but for
the `*_noshapes` scenarios: profiled without it, as a run often is, their collectives carry no args at all (no size,
and, as ever with gloo, no `Seq` or process group), so only their order can match them across ranks.

The measurement: DDP calls a communication hook when a gradient bucket is ready, just before it starts the
bucket's all-reduce; ours notes `time.perf_counter()` there (CLOCK_MONOTONIC: one clock for every process on the
machine) and then runs the all-reduce as DDP's default hook does. Per step and bucket, a rank's wait is the latest
rank's arrival minus its own, and a step's wait the union of its buckets' (their all-reduces run at once);
`run_info.json` holds each rank's arrivals and rank 0's wait per profiled step.

    python -m tools.capture_distributed                    # every scenario, then the README
    python -m tools.capture_distributed sleep_rank1        # only those (README rebuilt from every run_info.json)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "sample_traces" / "distributed"
WORLD = 2
SKIP, ACTIVE = 6, 8  # schedule: skip_first=6, wait=1, warmup=1, then 8 profiled steps
FEATURES, WIDTH, CLASSES = 128, 1024, 10
BATCH = 64


@dataclass(frozen=True)
class Scenario:
    """What one capture changes on rank 1 (rank 0 always runs the plain step)."""

    summary: str
    sleep_s: float = 0.0  # rank 1 sleeps this long inside its `data` phase
    batch_factor: int = 1  # rank 1's batch is this many times rank 0's
    record_shapes: bool = True  # False: gloo's range carries no shape or dtype args (nor Seq / group, as ever)


SCENARIOS: dict[str, Scenario] = {
    "balanced": Scenario("both ranks run the same step: no straggler"),
    "sleep_rank1": Scenario("rank 1 sleeps 30 ms in its `data` phase: rank 1 is the straggler, in `data`", 0.030),
    "big_batch_rank1": Scenario(
        "rank 1's batch is 4x rank 0's: rank 1 is the straggler, in `forward` and `backward`", batch_factor=4
    ),
    "balanced_noshapes": Scenario("`balanced` without `record_shapes`: no straggler", record_shapes=False),
    "sleep_rank1_noshapes": Scenario(
        "`sleep_rank1` without `record_shapes`: rank 1 is the straggler, in `data`", 0.030, record_shapes=False
    ),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, scenario_name: str, out: str, port: int, arrivals_dir: str) -> None:
    """One rank: DDP of the MLP, `SKIP + 2` unprofiled steps then `ACTIVE` profiled ones, arrivals to a file."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    scenario = SCENARIOS[scenario_name]
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)  # two ranks on two cores: one compute thread each
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, CLASSES),
    )
    ddp = DistributedDataParallel(model)
    step_arrivals: list[float] = []  # this step's bucket arrivals (perf_counter s)

    def timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations, if any
        """DDP's default all-reduce hook, noting when this rank arrives at the collective."""
        step_arrivals.append(time.perf_counter())
        work = dist.all_reduce(bucket.buffer(), async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0].div_(WORLD))

    ddp.register_comm_hook(None, timed_allreduce)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    batch = BATCH * (scenario.batch_factor if rank == 1 else 1)
    gen = torch.Generator().manual_seed(rank)
    x_all = torch.randn(batch * 4, FEATURES, generator=gen)
    y_all = torch.randint(0, CLASSES, (batch * 4,), generator=gen)
    total = SKIP + 2 + ACTIVE
    arrivals: list[list[float]] = []
    dist.barrier()
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(skip_first=SKIP, wait=1, warmup=1, active=ACTIVE, repeat=1),
        on_trace_ready=tensorboard_trace_handler(out, worker_name=f"rank{rank}", use_gzip=True),
        record_shapes=scenario.record_shapes,
    ) as prof:
        for number in range(total):
            step_arrivals.clear()
            with record_function("data"):
                i = (number % 4) * batch
                x, y = x_all[i : i + batch].clone(), y_all[i : i + batch].clone()
                if rank == 1 and scenario.sleep_s:
                    time.sleep(scenario.sleep_s)
            with record_function("forward"):
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            arrivals.append(list(step_arrivals))
            prof.step()
    (Path(arrivals_dir) / f"rank{rank}.json").write_text(json.dumps(arrivals[total - ACTIVE :]))
    dist.destroy_process_group()


def _step_wait(arrivals: list[list[list[float]]], rank: int, step: int) -> float:
    """Seconds `rank` waits in `step`: per bucket, from its arrival to the latest rank's; the buckets' all-reduces
    run at once (one gloo thread each), so their waits are a union, not a sum."""
    spans = sorted((mine, max(other[step][b] for other in arrivals)) for b, mine in enumerate(arrivals[rank][step]))
    total, reached = 0.0, float("-inf")
    for start, end in spans:
        total += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return total


def capture(name: str) -> None:
    """Run one scenario on `WORLD` spawned ranks into `OUT_DIR/<name>/`, with its `run_info.json`."""
    import torch
    import torch.multiprocessing as mp

    out = OUT_DIR / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as arrivals_dir:
        mp.spawn(_rank_main, args=(name, str(out), _free_port(), arrivals_dir), nprocs=WORLD, join=True)
        arrivals = [json.loads((Path(arrivals_dir) / f"rank{r}.json").read_text()) for r in range(WORLD)]
    waits_ms = [[round(_step_wait(arrivals, r, s) * 1000, 3) for s in range(ACTIVE)] for r in range(WORLD)]
    traces = sorted(out.glob("*.pt.trace.json.gz"))
    scenario = SCENARIOS[name]
    info = {
        "scenario": f"{name}: {scenario.summary}",
        "torch": torch.__version__,
        "backend": "gloo (CPU)",
        "world_size": WORLD,
        "model": f"DDP of MLP {FEATURES}-{WIDTH}-{WIDTH}-{CLASSES}, SGD, two gradient buckets (DDP's default caps)",
        "settings": {**asdict(scenario), "batch_size_rank0": BATCH, "torch_threads": 1},
        "schedule": {"skip_first": SKIP, "wait": 1, "warmup": 1, "active": ACTIVE},
        "step_marker": "ProfilerStep#N",
        "step_nums": list(range(SKIP + 2, SKIP + 2 + ACTIVE)),
        "phases": ["data", "forward", "backward", "optimizer"],
        "measured": "perf_counter when DDP's comm hook starts each bucket's all-reduce (one clock for all ranks)",
        "arrival_s": {f"rank{r}": arrivals[r] for r in range(WORLD)},
        "wait_ms": {f"rank{r}": waits_ms[r] for r in range(WORLD)},
        "rank0_mean_wait_ms": round(statistics.fmean(waits_ms[0]), 3),
        "trace_files": [t.name for t in traces],
        "trace_bytes": {t.name: t.stat().st_size for t in traces},
    }
    (out / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"{name}: rank 0 waits {info['rank0_mean_wait_ms']} ms a step; {[t.stat().st_size for t in traces]} bytes")


def write_readme() -> None:
    """`OUT_DIR/README.md` from every scenario's `run_info.json`."""
    rows = []
    for name in SCENARIOS:
        path = OUT_DIR / name / "run_info.json"
        if not path.exists():
            continue
        info = json.loads(path.read_text())
        waits = info["wait_ms"]
        rank1 = statistics.fmean(waits["rank1"])
        rows.append(f"| `{name}` | {SCENARIOS[name].summary} | {info['rank0_mean_wait_ms']:.1f} ms | {rank1:.1f} ms |")
    text = "\n".join(
        [
            "# Distributed captures: who waits for whom",
            "",
            "Real 2-rank `torch.distributed` runs made by `tools/capture_distributed.py`: DDP (gloo backend, on the",
            f"CPU, torch 2.13, one intra-op thread per rank on a 2-core machine) of an MLP {FEATURES}-{WIDTH}-{WIDTH}-"
            f"{CLASSES}, batch {BATCH},",
            "spawned with `torch.multiprocessing.spawn`. Each rank runs warm-up steps, then 8 profiled ones",
            "(`ProfilerStep#N`) with `record_function` ranges `data`, `forward`, `backward` and `optimizer`;",
            "`torch.profiler` + `tensorboard_trace_handler` (`record_shapes=True`, but for the `*_noshapes`",
            "scenarios) writes one `rank<R>.*.pt.trace.json.gz` per rank into `<scenario>/`, one run folder.",
            "",
            "What the traces hold for the collective: DDP's gradient all-reduce is `c10d::allreduce_` on the main",
            "thread (the enqueue, ~70 µs) and `gloo:all_reduce` on a gloo worker thread (`pt_gloo_runloop`), from",
            "when the rank starts the collective until it completes, i.e. its wait for the other rank plus the",
            "transfer; with `record_shapes` it carries `Input Dims` and `Input type`. torch 2.13's gloo backend",
            "writes no `record_param_comms` event and no `Collective name` / `Process Group Name` / `Seq` args,",
            "so instances are matched by order per rank (within each `ProfilerStep`). The main thread's",
            "`backward` range holds the wait: DDP waits for the all-reduce at the end of the backward pass.",
            "",
            "The `*_noshapes` scenarios are real captures made without `record_shapes`: their `gloo:all_reduce`",
            "and `c10d::allreduce_` events carry only `External id`, `Record function id` and `Ev Idx` (a call",
            "cut by the profiler's stop may add `finished`), no shape, dtype, `Seq` or process group: nothing but",
            "their order and timing can match them across ranks (none of their args was stripped by hand).",
            "",
            "`run_info.json` (not a trace) holds the settings and the measurement: a DDP communication hook notes",
            "`time.perf_counter()` when each rank starts the bucket's all-reduce (CLOCK_MONOTONIC, one clock for",
            "both processes); per bucket a rank's wait is the latest arrival minus its own, and per profiled step",
            "the union over the step's two buckets, whose all-reduces run at once (`wait_ms`,",
            "`rank0_mean_wait_ms`). Timings differ run to run.",
            "",
            "| scenario | what rank 1 does | rank 0 waits a step (measured) | rank 1 waits a step |",
            "|---|---|---|---|",
            *rows,
            "",
            "Regenerate (about 10 s a scenario):",
            "",
            "    python -m tools.capture_distributed                  # all scenarios, then this README",
            "    python -m tools.capture_distributed sleep_rank1      # one (README rebuilt from every run_info.json)",
            "",
        ]
    )
    (OUT_DIR / "README.md").write_text(text)


def main(argv: list[str]) -> None:
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
    for name in names:
        capture(name)
    write_readme()


if __name__ == "__main__":
    main(sys.argv[1:])
