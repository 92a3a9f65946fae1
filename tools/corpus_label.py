"""Print the raw-event figures behind the corpus labels (corpus/labels.json).

Independent of traceinsight on purpose: the labels are a check *on* the tool, so this script never imports
it and re-derives every figure from the trace's own events with the standard library and numpy.

    python -m tools.corpus_label --data corpus/data [--json figures.json] [ID ...]

Figures per trace (times in microseconds unless said otherwise):
- window: ProfilerStep#N spans when present, else the span of all timed events ("whole trace");
- device busy = union of kernel + memcpy + memset intervals inside the window / window time;
- copy / collective shares are of the device-busy union;
- input wait = union of DataLoader / GetNext host spans inside the window / window time;
- blocking sync = union of host cuda*Synchronize and synchronous cudaMemcpy calls inside the window / window time.

Nsight Systems SQLite exports (.sqlite) are read with SQL (sqlite3): CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET
rows are the device intervals (busy per deviceId), CUPTI_ACTIVITY_KIND_RUNTIME rows the host CUDA calls (names from
StringIds, the `_v3020`-style version suffix dropped), NVTX `ProfilerStep#N` ranges the steps when present, else
the span of every device and runtime row. Chrome traces in array form may pair `B`/`E` (per pid/tid) and `b`/`e`
(per cat/id) events instead of `X`; legacy autograd exports put kernels on pid "CUDA functions".
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

MANIFEST = Path(__file__).resolve().parent.parent / "corpus" / "manifest.json"

# Kineto / legacy Chrome categories for device activity.
KERNEL_CATS = {"kernel", "Kernel"}
MEMCPY_CATS = {"gpu_memcpy", "Memcpy"}
MEMSET_CATS = {"gpu_memset", "Memset"}
COLLECTIVE = re.compile(
    r"nccl|rccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|deep_ep"
    r"|::ep::(inter|intra)node",  # DeepSeek's expert-parallel dispatch/combine kernels
    re.I,
)
INPUT_WAIT = re.compile(r"enumerate\(DataLoader\)|DataLoader.*__next__|_next_data|IteratorGetNext|GetNext", re.I)
BLOCKING_SYNC = re.compile(r"^(cuda(Device|Stream|Event)Synchronize|cudaMemcpy|hip(Device|Stream|Event)Synchronize)$")
BACKWARD = re.compile(r"Backward|autograd::engine|gradients/|_grad/|BackpropFilter|BackpropInput", re.I)
OPTIMIZER = re.compile(
    r"Optimizer\.|optimizer|Apply(Adam|GradientDescent|Momentum|RMSProp|Adagrad)|adam_|_foreach_", re.I
)
INFERENCE = re.compile(r"no_grad|inference_mode|model_inference|generate|decode|vllm|sglang|prefill", re.I)
TF1_GPU_STREAM = re.compile(r"/device:GPU:\d+/stream:\d+ Compute$")
TF1_GPU_MEMCPY = re.compile(r"/device:GPU:\d+/memcpy Compute$")
TF1_CPU_COMPUTE = re.compile(r"device:CPU:\d+ Compute$|/cpu:\d+ Compute$")
# Events without `cat`: a process or thread named like a device line holds device work (legacy "CUDA functions").
DEVICE_LINE = re.compile(r"stream|gpu|device|cuda", re.I)
# nsys runtime names carry the API version: cudaMemcpy_v3020, cudaLaunchKernel_v7000.
API_VERSION = re.compile(r"_v\d+$")
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}


def load_events(path: Path) -> tuple[dict, list[dict]]:
    """The document (empty dict for the array form) and its event list."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if isinstance(doc, list):
        return {}, doc
    return doc, doc.get("traceEvents", [])


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged, sorted, non-overlapping intervals covering the input ones."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def covered(starts: np.ndarray, ends: np.ndarray, windows: list[tuple[float, float]]) -> float:
    """Time of the union of the intervals that falls inside the windows."""
    us, ue = union(starts, ends)
    total = 0.0
    for w0, w1 in windows:
        total += float(np.clip(np.minimum(ue, w1) - np.maximum(us, w0), 0, None).sum())
    return total


def exposed(only: list[dict], others: list[dict], windows: list[tuple[float, float]]) -> float:
    """Time inside the windows covered by `only` and by none of `others`."""
    if not only:
        return 0.0
    both = covered(*spans(only + others), windows)
    return both - (covered(*spans(others), windows) if others else 0.0)


def spans(events: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([float(e["ts"]) for e in events], dtype=float)
    d = np.array([float(e.get("dur", 0) or 0) for e in events], dtype=float)
    return s, s + d


def share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


def paired(events: list[dict]) -> list[dict]:
    """`X`-like events made from `B`/`E` pairs (a stack per pid/tid) and async `b`/`e` pairs (per cat/id/name)."""
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    opened: dict[tuple, dict] = {}
    out = []
    for e in sorted((e for e in events if e.get("ph") in ("B", "E", "b", "e") and "ts" in e), key=lambda e: e["ts"]):
        ph = e["ph"]
        if ph == "B":
            stacks[(e.get("pid"), e.get("tid"))].append(e)
        elif ph == "E" and stacks[(e.get("pid"), e.get("tid"))]:
            begin = stacks[(e.get("pid"), e.get("tid"))].pop()
            out.append({**begin, "ph": "X", "dur": float(e["ts"]) - float(begin["ts"])})
        elif ph == "b":
            opened[(e.get("cat"), e.get("id"), e.get("name"))] = e
        elif ph == "e" and (begin := opened.pop((e.get("cat"), e.get("id"), e.get("name")), None)):
            out.append({**begin, "ph": "X", "dur": float(e["ts"]) - float(begin["ts"])})
    return out


def classify(events: list[dict]) -> tuple[dict[str, list[dict]], bool]:
    """Split timed events into device kernels / copies / memsets and host events; say whether it is TF1."""
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e] + paired(events)
    proc = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    threads = {
        (e.get("pid"), e.get("tid")): e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    out: dict[str, list[dict]] = {"kernel": [], "memcpy": [], "memset": [], "host": []}
    tf1 = any(c == "Op" for c in (e.get("cat") for e in xs[:50]))
    for e in xs:
        cat = e.get("cat", "")
        if tf1:
            pname = proc.get(e.get("pid"), "")
            if TF1_GPU_STREAM.search(pname):
                out["kernel"].append(e)
            elif TF1_GPU_MEMCPY.search(pname):
                out["memcpy"].append(e)
            else:
                out["host"].append(e)
        elif cat in KERNEL_CATS:
            out["kernel"].append(e)
        elif cat in MEMCPY_CATS:
            out["memcpy"].append(e)
        elif cat in MEMSET_CATS:
            out["memset"].append(e)
        elif not cat and DEVICE_LINE.search(
            f"{e.get('pid') if isinstance(e.get('pid'), str) else ''} {proc.get(e.get('pid'), '')} "
            f"{threads.get((e.get('pid'), e.get('tid')), '')}"
        ):
            out["kernel"].append(e)
        else:
            out["host"].append(e)
    return out, tf1


def _rows(db: sqlite3.Connection, sql: str, table: str) -> list[tuple]:
    """The rows of `sql`, or none when the export has no such table (nsys writes only the tables it captured)."""
    present = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
    return db.execute(sql).fetchall() if present else []


def _intervals(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """Start/end arrays in microseconds from (start_ns, end_ns, ...) rows."""
    if not rows:
        return np.zeros(0), np.zeros(0)
    arr = np.array([(r[0], r[1]) for r in rows], dtype=float) / 1e3
    return arr[:, 0], arr[:, 1]


def nsys_figures(path: Path) -> dict:
    """The same figures from an Nsight Systems SQLite export, by SQL on its CUPTI / NVTX tables (times in us)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    strings = "(SELECT value FROM StringIds WHERE id = {col})"
    kernels = _rows(
        db,
        f"SELECT start, end, deviceId, {strings.format(col='shortName')}, {strings.format(col='demangledName')}, "
        "gridX * gridY * gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_KERNEL",
    )
    memcpys = _rows(
        db, "SELECT start, end, deviceId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMCPY"
    )
    memsets = _rows(db, "SELECT start, end, deviceId FROM CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMSET")
    # Older exports (2022.x) hold a call twice, a wrapper row and the API row with the same correlationId: one call
    # is counted once, as its widest row.
    widest: dict[int, tuple] = {}
    for r in _rows(
        db,
        f"SELECT start, end, {strings.format(col='nameId')}, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
    ):
        if r[3] not in widest or r[1] - r[0] > widest[r[3]][1] - widest[r[3]][0]:
            widest[r[3]] = (r[0], r[1], API_VERSION.sub("", str(r[2])))
    runtime = sorted(widest.values())
    nvtx = _rows(
        db,
        f"SELECT start, end, COALESCE(text, {strings.format(col='textId')}) FROM NVTX_EVENTS WHERE end IS NOT NULL",
        "NVTX_EVENTS",
    )
    gpus = [r[0] for r in _rows(db, "SELECT name FROM TARGET_INFO_GPU ORDER BY id", "TARGET_INFO_GPU")]
    version = _rows(
        db, "SELECT value FROM META_DATA_EXPORT WHERE name='EXPORT_PRODUCT_VERSION'", "META_DATA_EXPORT"
    ) or _rows(db, "SELECT value FROM EXPORT_META_DATA WHERE name='EXPORT_PRODUCT_VERSION'", "EXPORT_META_DATA")

    steps = sorted((r for r in nvtx if str(r[2]).startswith("ProfilerStep#")), key=lambda r: r[0])
    if steps:
        windows = [(r[0] / 1e3, r[1] / 1e3) for r in steps]
        step_source = f"ProfilerStep# x{len(steps)}"
    elif kernels or memcpys or memsets or runtime:
        s, e = _intervals(kernels + memcpys + memsets + runtime)
        windows = [(float(s.min()), float(e.max()))]
        step_source = "none (span of device + runtime rows)"
    else:
        windows, step_source = [], "none (no device or runtime rows)"
    window_time = sum(w1 - w0 for w0, w1 in windows)

    per_device = {}
    for device in sorted({r[2] for r in kernels + memcpys + memsets}):
        k = [r for r in kernels if r[2] == device]
        c = [r for r in memcpys if r[2] == device]
        busy = covered(*_intervals(k + c + [r for r in memsets if r[2] == device]), windows)
        per_device[device] = {
            "device_busy_share": share(busy, window_time),
            "kernel_busy_share": share(covered(*_intervals(k), windows), window_time) if k else 0.0,
            "copy_share_of_device_busy": share(covered(*_intervals(c), windows), busy) if c else 0.0,
            "collective_share_of_device_busy": share(
                covered(*_intervals([r for r in k if COLLECTIVE.search(f"{r[3]} {r[4]}")]), windows), busy
            )
            if k
            else 0.0,
        }
    syncs = [r for r in runtime if BLOCKING_SYNC.match(r[2])]
    kdur = np.array([(r[1] - r[0]) / 1e3 for r in kernels])
    by_kernel: Counter[str] = Counter()
    for r in kernels:
        by_kernel[str(r[3])[:70]] += (r[1] - r[0]) / 1e3
    by_call: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for r in runtime:
        by_call[r[2]] += (r[1] - r[0]) / 1e3
        calls[r[2]] += 1
    copies: Counter[str] = Counter()
    for r in memcpys:
        copies[MEMCPY_KINDS.get(r[3], str(r[3]))] += (r[1] - r[0]) / 1e3
    longest = max(runtime, key=lambda r: r[1] - r[0], default=None)
    return {
        "nsys_version": version[0][0] if version else None,
        "gpu_names": gpus or None,
        "steps": step_source,
        "window_ms": round(window_time / 1e3, 3),
        "step_ms": [round((w1 - w0) / 1e3, 3) for w0, w1 in windows][:12],
        "kernels": len(kernels),
        "memcpys": len(memcpys),
        "memsets": len(memsets),
        "runtime_calls": len(runtime),
        "nvtx_ranges": len(nvtx),
        "nvtx_names": sorted({str(r[2])[:40] for r in nvtx})[:6],
        "per_device": per_device or None,
        "blocking_sync_share": share(covered(*_intervals(syncs), windows), window_time) if syncs else 0.0,
        "blocking_calls": dict(Counter(r[2] for r in syncs)),
        "longest_runtime_call": (longest[2], round((longest[1] - longest[0]) / 1e6, 3)) if longest else None,
        "kernel_median_us": round(float(np.median(kdur)), 2) if kdur.size else None,
        "kernels_under_10us": int((kdur < 10).sum()),
        "kernel_blocks_median": float(np.median([r[5] for r in kernels])) if kernels else None,
        "launch_calls": sum(n for name, n in calls.items() if "Launch" in name),
        "copy_ms_by_kind": {k: round(v / 1e3, 3) for k, v in copies.items()},
        "copy_bytes": int(sum(r[4] for r in memcpys)),
        "top_kernels_ms": [(k, round(v / 1e3, 3)) for k, v in by_kernel.most_common(5)],
        "top_runtime_ms": [(k, calls[k], round(v / 1e3, 3)) for k, v in by_call.most_common(6)],
    }


def figures(path: Path) -> dict:
    if path.suffix == ".sqlite":
        return nsys_figures(path)
    doc, events = load_events(path)
    parts, tf1 = classify(events)
    host, kernels, memcpys, memsets = parts["host"], parts["kernel"], parts["memcpy"], parts["memset"]
    timed = host + kernels + memcpys + memsets
    steps = sorted(
        (e for e in host if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: float(e["ts"])
    )
    if steps:
        windows = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in steps]
        step_source = f"ProfilerStep# x{len(steps)}"
    elif timed:
        s, e = spans([x for x in timed if x.get("cat") not in ("Trace", "overhead")] or timed)
        windows = [(float(s.min()), float(e.max()))]
        step_source = "none (whole trace window)"
    else:
        windows, step_source = [], "none (no timed events)"
    window_time = sum(w1 - w0 for w0, w1 in windows)

    dev = kernels + memcpys + memsets
    busy = covered(*spans(dev), windows) if dev else 0.0
    kbusy = covered(*spans(kernels), windows) if kernels else 0.0
    cbusy = covered(*spans(memcpys), windows) if memcpys else 0.0
    coll = [k for k in kernels if COLLECTIVE.search(str(k.get("name", "")))]
    collbusy = covered(*spans(coll), windows) if coll else 0.0
    compute = [k for k in kernels if not COLLECTIVE.search(str(k.get("name", "")))]
    runtime = [e for e in host if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    longest_call = max(runtime, key=lambda e: float(e.get("dur", 0)), default=None)
    waits = [e for e in host if INPUT_WAIT.search(str(e.get("name", "")))]
    syncs = [e for e in host if BLOCKING_SYNC.match(str(e.get("name", "")))]
    names = [str(e.get("name", "")) + " " + str(e.get("args", {}).get("name", "")) for e in host]

    kdur = np.array([float(k.get("dur", 0)) for k in kernels]) if kernels else np.zeros(0)
    launches = [e for e in host if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in str(e["name"])]
    by_kernel: Counter[str] = Counter()
    for k in kernels:
        by_kernel[str(k.get("name", ""))[:70]] += float(k.get("dur", 0))
    by_host: Counter[str] = Counter()
    for e in host:
        if e.get("cat") not in ("Trace", "overhead", "python_function"):
            by_host[str(e.get("name", ""))[:50]] += float(e.get("dur", 0))
    shapes = any(
        any(dims for dims in (e.get("args", {}).get("Input Dims") or e.get("args", {}).get("Input dims") or []))
        for e in host
    )
    gpu = sorted({str(p.get("name")) for p in doc.get("deviceProperties", [])})
    tf1_devices = sorted(
        {
            e.get("args", {}).get("name", "")
            for e in events
            if tf1 and e.get("ph") == "M" and e.get("name") == "process_name"
        }
    )
    return {
        "events": len(events),
        "gpu_names": gpu or None,
        "tf1_processes": tf1_devices[:4] if tf1 else None,
        "steps": step_source,
        "window_ms": round(window_time / 1e3, 3),
        "step_ms": [round((w1 - w0) / 1e3, 3) for w0, w1 in windows][:12],
        "kernels": len(kernels),
        "memcpys": len(memcpys),
        "memsets": len(memsets),
        "device_busy_share": share(busy, window_time) if dev else None,
        "kernel_busy_share": share(kbusy, window_time) if kernels else None,
        "copy_share_of_device_busy": share(cbusy, busy) if dev else None,
        "collective_share_of_device_busy": share(collbusy, busy) if dev else None,
        "collective_kernels": sorted({str(k["name"])[:60] for k in coll})[:4],
        "exposed_collective_share": share(exposed(coll, compute + memcpys, windows), window_time) if coll else None,
        "longest_runtime_call": (longest_call["name"], round(float(longest_call.get("dur", 0)) / 1e3, 3))
        if longest_call
        else None,
        "input_wait_share": share(covered(*spans(waits), windows), window_time) if waits else 0.0,
        "blocking_sync_share": share(covered(*spans(syncs), windows), window_time) if syncs else 0.0,
        "kernel_median_us": round(float(np.median(kdur)), 2) if kdur.size else None,
        "kernels_under_10us": int((kdur < 10).sum()),
        "launch_calls": len(launches),
        "backward_events": sum(bool(BACKWARD.search(n)) for n in names),
        "optimizer_events": sum(bool(OPTIMIZER.search(n)) for n in names),
        "inference_markers": sorted({m.group(0) for n in names for m in [INFERENCE.search(n)] if m})[:5],
        "has_shapes": bool(shapes),
        "host_spans": len(host),
        "host_cover_share": share(covered(*spans(host), windows), window_time) if host else None,
        "host_span_median_ms": round(float(np.median(spans(host)[1] - spans(host)[0])) / 1e3, 3) if host else None,
        "top_kernels_ms": [(k, round(v / 1e3, 3)) for k, v in by_kernel.most_common(5)],
        "top_host_ms": [(k, round(v / 1e3, 3)) for k, v in by_host.most_common(6)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="corpus/data", help="folder holding <id>.<ext> files")
    parser.add_argument("--json", help="also write all figures to this JSON file")
    parser.add_argument("ids", nargs="*", help="only these ids")
    args = parser.parse_args(argv)
    manifest = json.loads(MANIFEST.read_text())
    result = {}
    for entry in manifest["traces"]:
        if args.ids and entry["id"] not in args.ids:
            continue
        matches = sorted(Path(args.data).glob(entry["id"] + ".*"))
        if not matches:
            print(f"{entry['id']}: missing (run python -m tools.corpus first)")
            continue
        result[entry["id"]] = shown(f"{entry['id']} ({entry['format']})", figures(matches[0]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def shown(title: str, fig: dict) -> dict:
    """`fig`, printed under `title` a figure a line."""
    print(f"== {title}")
    for key, value in fig.items():
        print(f"   {key}: {value}")
    return fig


if __name__ == "__main__":
    raise SystemExit(main())
