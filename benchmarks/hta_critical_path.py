"""Holistic Trace Analysis (HTA) 0.5.0's critical-path breakdown of a fixed list of traces, written down so that
our own critical path (issue 37) can be compared with a peer's.

For each trace, in HTA's own virtual environment (``--hta-python``; by default one made here, in the system's
temporary folder, by `hta_python`), a child process:

* copies the single file into a folder of its own and loads it with
  ``hta.trace_analysis.TraceAnalysis(trace_dir=folder)`` (HTA reads every ``.json``/``.gz`` file of a folder; the
  file's name does not matter; its rank is the first ``"rank": N`` in the text, ``distributedInfo``'s, else 0;
  ``include_last_profiler_step`` is left False, so HTA drops the CPU events of the last ``ProfilerStep`` when
  the trace has two or more);
* picks the region: ``ProfilerStep#N`` given after ``#`` on the command line, else the middle one
  (``steps[len(steps) // 2]``, steps sorted by number) of the CPU ``ProfilerStep#N`` annotations HTA kept, else
  (no ProfilerStep) the whole trace (``annotation=""``); HTA's own test traces use the annotation HTA's
  tests/test_critical_path_analysis.py uses;
* runs ``critical_path_analysis(rank=rank, annotation=..., instance_id=0)``, then ``cp_graph.summary()`` (shares
  in % of the path's weight, by ``bound_by``) and ``get_critical_path_breakdown()`` (one row per path edge).

HTA works in whole microseconds (fractional-us timestamps are rounded: start up, end down); the ``*_ns``
figures are its microseconds x 1000. ``step_ns`` is the window HTA clips to (the first row, in its data frame's
order, whose name *contains* the annotation: hta/analyzers/critical_path_analysis.py:1554-1585, repeated here to
say which event it was); ``path_weight_ns`` is the sum of the path edges' weights (``duration`` in the
breakdown); ``path_span_ns`` is the time from the path's first node to its last; ``edge_types`` gives, per HTA
edge type on the path, its edges' count, weight and the time they cover (end node's ts minus begin node's:
zero-weight edges cover time too, which is why the weight falls short of the span).

Run from the repository root: ``python -m benchmarks.hta_critical_path [--hta-python PY] [--out OUT]
[TRACE[#N] ...]``; the defaults write benchmarks/data/hta_critical_path.json from the traces in DEFAULT_TRACES
(../shared/traces) and HTA's own critical-path test traces (read out of its git mirror at HTA_COMMIT).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HTA_VERSION = "0.5.0"
# The only combination HTA 0.5.0's critical path runs with: under pandas 3 it fails with type errors.
HTA_PACKAGES = [f"holistictraceanalysis=={HTA_VERSION}", "pandas==2.2.3", "numpy==1.26.4"]
DEFAULT_HTA_VENV = Path(tempfile.gettempdir()) / f"traceinsight-bench-hta-{HTA_VERSION}"
REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
HTA_MIRROR = REPO.parent / ".mirror" / "facebookresearch+HolisticTraceAnalysis" / "repo"
HTA_COMMIT = "f4d0062c382f42bd8a74838bcdad1916c7d5d2da"  # the commit the hta/ traces of ../shared were copied from
DEFAULT_OUT = REPO / "benchmarks" / "data" / "hta_critical_path.json"
CHILD_TIMEOUT_S = 1800
TOP_EVENTS = 10


@dataclass(frozen=True)
class TraceSpec:
    """One trace to analyse: a file (or ``HTA_MIRROR`` path), and the region (None: the default choice)."""

    source: str
    annotation: str | None = None
    instance_id: int = 0
    from_hta_repo: bool = False


_ALEXNET_MEASURE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"  # HTA's test, instance 1
DEFAULT_TRACES = [
    TraceSpec("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"),
    TraceSpec("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
    TraceSpec("hta/nccl_parser_config/nccl_data.json.gz"),
    TraceSpec("hta/trace_diff/control/control.json.gz"),
    TraceSpec("hta/trace_diff/test/test.json.gz"),
    TraceSpec("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"),
    TraceSpec("kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"),
    TraceSpec("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    TraceSpec("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    TraceSpec("inference/vllm_decode_full/graph_execution.json.gz"),
    TraceSpec("inference/vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"),
    TraceSpec("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"),
    TraceSpec("inference/sglang_decode/capture_traces/bs_32_rank0.json.gz"),
    TraceSpec("tracelens/mi300/jax_conv_minimal_08/tw003.xplane.pb"),
    TraceSpec("tracelens/b200/eager_trace.json.gz"),
    TraceSpec(
        "tests/data/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        _ALEXNET_MEASURE,
        1,
        True,
    ),
    TraceSpec("tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz", from_hta_repo=True),
    TraceSpec("tests/data/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz", from_hta_repo=True),
    TraceSpec(
        "tests/data/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
        _ALEXNET_MEASURE,
        1,
        True,
    ),
]

# Runs in HTA's environment: argv[1] the folder holding the one trace, argv[2] the annotation (or "-" for the
# default choice), argv[3] the instance id, argv[4] how many top events, argv[5] the JSON file to write (HTA
# prints to stdout).
CHILD = r"""
import json, re, sys, traceback
from importlib.metadata import version
folder, annotation, out = sys.argv[1], sys.argv[2], sys.argv[5]
instance_id, top_events = int(sys.argv[3]), int(sys.argv[4])
result = {"hta_version": version("holistictraceanalysis")}
try:
    from hta.trace_analysis import TraceAnalysis
    ta = TraceAnalysis(trace_dir=folder)
    rank = ta.t.get_ranks()[0]
    df = ta.t.get_trace(rank)
    ids = ta.t.symbol_table.get_sym_id_map()
    names = ta.t.symbol_table.get_sym_table()
    result["rank"] = int(rank)
    result["has_cuda_sync"] = "cuda_sync" in ids
    steps = {int(m.group(1)): i for k, i in ids.items() if (m := re.fullmatch(r"ProfilerStep#(\d+)", k))}
    kept = sorted(n for n, i in steps.items() if ((df.name == i) & (df.stream == -1)).any())
    result["profiler_steps"] = kept
    if annotation == "-":
        annotation = f"ProfilerStep#{kept[len(kept) // 2]}" if kept else ""
    result["step"] = annotation
    result["instance_id"] = instance_id
    # HTA's window (critical_path_analysis.py:1554-1585), repeated to say which event it is.
    if annotation:
        rows = df[df.name.isin([i for k, i in ids.items() if annotation in k])]
        row = rows.iloc[instance_id]
        start, end = int(row.ts), int(row.ts + row.dur)
        result["window_event"] = {"name": names[row["name"]], "cat": names[row["cat"]], "stream": int(row.stream)}
    else:  # HTA's own window is [ts.min(), end.max()], and its "end" column is not shifted with ts: unbounded
        start, end = int(df.ts.min()), int((df.ts + df.dur).max())
    result["step_ns"] = (end - start) * 1000
    analysis = ta.critical_path_analysis(rank=rank, annotation=annotation, instance_id=instance_id)
    if analysis is None:
        raise RuntimeError(f"critical_path_analysis returned None (annotation {annotation!r} not found)")
    graph, ok = analysis
    if not ok:
        raise RuntimeError("critical_path() returned False (networkx found no longest path)")
    shares = graph.summary()
    edges = graph.get_critical_path_breakdown()
    nodes = graph.critical_path_nodes
    result["path_weight_ns"] = int(edges.duration.sum()) * 1000
    result["path_graph_weight_ns"] = int(sum(graph.edges[u, v]["weight"] for u, v in zip(nodes, nodes[1:]))) * 1000
    result["path_span_ns"] = int(graph.node_list[nodes[-1]].ts - graph.node_list[nodes[0]].ts) * 1000
    result["path_edges"] = len(edges)
    result["shares"] = {str(k): round(float(v), 3) for k, v in shares.items()}
    by_type = edges.groupby("type").duration.agg(["count", "sum"])
    # The time each edge type covers (its end node's ts minus its begin node's): zero-weight edges cover time too.
    covered = {}
    for e in graph.critical_path_edges_set:
        gap = graph.node_list[e.end].ts - graph.node_list[e.begin].ts
        covered[e.type.value] = covered.get(e.type.value, 0) + int(gap)
    result["edge_types"] = {
        t: {"count": int(r["count"]), "weight_ns": int(r["sum"]) * 1000, "covers_ns": covered[t] * 1000}
        for t, r in by_type.iterrows()
    }
    attributed = edges.dropna(subset=["event_idx"])
    per_event = attributed.groupby(["event_idx", "bound_by"]).duration.sum()
    top = per_event.sort_values(ascending=False, kind="stable").head(top_events)
    result["top"] = [
        {"name": names[df.name.loc[int(i)]][:160], "bound_by": bound, "duration_ns": int(duration) * 1000}
        for (i, bound), duration in top.items()
    ]
except Exception as error:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    first_line = (str(error).strip().splitlines() or [""])[0][:300]
    where = f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
    result["error"] = f"{type(error).__name__}: {first_line} ({where})"
with open(out, "w") as f:
    json.dump(result, f)
"""


def hta_python(venv: Path = DEFAULT_HTA_VENV) -> Path:
    """The Python of a virtual environment with HTA 0.5.0 (and the pandas/numpy it works with), made at `venv` if
    it is not there."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *HTA_PACKAGES], check=True)
    return python


def _read_source(spec: TraceSpec) -> bytes:
    """The trace's bytes: a file under ../shared/traces (or any path), or a blob of HTA's git mirror."""
    if spec.from_hta_repo:
        blob = f"{HTA_COMMIT}:{spec.source}"
        return subprocess.run(["git", f"--git-dir={HTA_MIRROR}", "show", blob], check=True, capture_output=True).stdout
    path = Path(spec.source)
    return (path if path.is_absolute() else TRACES / path).read_bytes()


def analyse(spec: TraceSpec, python: Path) -> dict[str, Any]:
    """HTA's critical-path figures for one trace (or its one-line error), from a copy in a folder of its own."""
    label = f"HolisticTraceAnalysis@{HTA_COMMIT}:{spec.source}" if spec.from_hta_repo else spec.source
    entry: dict[str, Any] = {"path": label}
    with tempfile.TemporaryDirectory() as folder:
        try:
            data = _read_source(spec)
        except (OSError, subprocess.CalledProcessError) as error:
            return entry | {"hta_version": HTA_VERSION, "error": f"not readable here: {error}"}
        (Path(folder) / "trace").mkdir()
        (Path(folder) / "trace" / Path(spec.source).name).write_bytes(data)
        out = Path(folder) / "result.json"
        annotation = "-" if spec.annotation is None else spec.annotation
        command = [str(python), "-c", CHILD, f"{folder}/trace", annotation, str(spec.instance_id), str(TOP_EVENTS)]
        command.append(str(out))
        try:
            subprocess.run(command, check=True, capture_output=True, timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return entry | {"hta_version": HTA_VERSION, "error": f"timed out after {CHILD_TIMEOUT_S} s"}
        return entry | json.loads(out.read_text())


def parse_trace_arg(text: str) -> TraceSpec:
    """``PATH`` or ``PATH#N`` (ProfilerStep#N); a relative PATH is taken under ../shared/traces, else as given."""
    source, _, step = text.partition("#")
    path = Path(source)
    if not path.is_absolute() and not (TRACES / path).exists():
        source = str(path.resolve())
    return TraceSpec(source, f"ProfilerStep#{int(step)}" if step else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="*", metavar="TRACE", help="PATH or PATH#N (default: DEFAULT_TRACES)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON to write")
    parser.add_argument("--hta-python", type=Path, help="a Python with HTA 0.5.0 installed (default: made here)")
    args = parser.parse_args()
    python = args.hta_python or hta_python()
    specs = [parse_trace_arg(text) for text in args.traces] or DEFAULT_TRACES
    entries = []
    for spec in specs:
        entry = analyse(spec, python)
        entries.append(entry)
        figures = entry.get("error") or ", ".join(f"{k or '(none)'} {v:.1f} %" for k, v in entry["shares"].items())
        print(f"{entry['path']} [{entry.get('step') or 'whole trace'}]: {figures}", flush=True)
    document = {
        "about": "HTA's own critical-path breakdown (a peer's figures for issue 37); regenerate with the command",
        "command": "python -m benchmarks.hta_critical_path",
        "packages": HTA_PACKAGES,
        "hta_repo_commit": HTA_COMMIT,
        "units": "ns (HTA's whole microseconds x 1000); shares: % of path_weight_ns by HTA's bound_by",
        "traces": entries,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(entries)} traces -> {args.out}")


if __name__ == "__main__":
    main()
