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
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import Counter
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


def classify(events: list[dict]) -> tuple[dict[str, list[dict]], bool]:
    """Split timed events into device kernels / copies / memsets and host events; say whether it is TF1."""
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
    proc = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
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
        else:
            out["host"].append(e)
    return out, tf1


def figures(path: Path) -> dict:
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
        result[entry["id"]] = fig = figures(matches[0])
        print(f"== {entry['id']} ({entry['format']})")
        for key, value in fig.items():
            print(f"   {key}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
