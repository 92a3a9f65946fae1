"""Print the raw-event figures behind the critical-path labels (`critical_path_*` in corpus/labels.json and
corpus/labels_shared_paths.json).

Independent of traceinsight on purpose, like tools/corpus_label.py (whose readers it reuses): the standard library
and numpy only, every figure re-derived from the trace's own events.

    python -m tools.corpus_label_path FILE [FILE ...] [--steps REGEX [--instance N]] [--json figures.json]

What bounds a step is read from these figures (times in microseconds unless said otherwise; shares are of the
summed step windows, every one an interval union clipped to the windows):
- `device_busy`: kernels, copies and memsets, and its split into `compute` (non-collective kernels), `copy`
  (memcpy/memset) and `collective` (kernels named like NCCL/RCCL collectives), plus `collective_alone` (only
  collectives run);
- the main host thread (the one whose runtime calls launch the most device work): time inside framework ops
  (`ops`), launch calls (`launch`), blocking syncs (`sync`: cuda/hip *Synchronize, synchronous cudaMemcpy/hipMemcpy,
  hipMemcpyWithStream), DataLoader/GetNext waits (`input`), and with no traced event at all (`untraced`);
- `device_idle_by_host`: the step time in which the device is idle, split by what the main thread does then
  (first match: sync > input > launch > ops > untraced) -- that time cannot be on a device-only path;
- launch-to-start delay (device start minus runtime call start, first device event of each correlation id):
  median and 90th percentile, share of launches whose work starts within 50 us (`drained`);
- `queue_depth_median`: at each launch call, how many earlier launches have not started yet on the device
  (0-1: queue drained, the host is the limit; several: the host runs ahead, the device is the limit).

Steps are `ProfilerStep#N` ranges, else spans named by --steps, else the whole trace. Nsight Systems SQLite exports
are read with SQL (runtime rows by globalTid, correlationId), TF1 timelines carry no launch calls or correlation ids
(only the device side and the host executor lanes), XSpace protobufs (.xplane.pb) are decoded with a minimal
wire-format reader (field numbers in /work/shared/traces/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np

from tools.corpus_label import COLLECTIVE, INPUT_WAIT, classify, covered, load_events, shown, union

LAUNCH = re.compile(
    r"^(cuda|hip)(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|ExtModuleLaunchKernel|ModuleLaunchKernel"
    r"|ExtLaunchKernel|MemcpyAsync|MemsetAsync|Memcpy2DAsync|LaunchKernelExC)|^cuLaunchKernel|^cuLaunchKernelEx"
)
SYNC = re.compile(
    r"^(cuda|hip)(Device|Stream|Event)Synchronize|^(cuda|hip)Memcpy(2D)?$|^hipMemcpyWithStream|^cudaStreamWaitEvent$"
)
# Events on the host side that are not host work: device-side annotations and the step markers themselves.
NOT_HOST = {"gpu_user_annotation", "cuda_sync", "Trace", "overhead", "cpu_instant_event", "ac2g"}
OP_CATS = {"cpu_op", "Operator", "user_annotation", "python_function"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


def _arr(events: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([float(e["ts"]) for e in events], dtype=float)
    return s, s + np.array([float(e.get("dur", 0) or 0) for e in events], dtype=float)


def _cov(starts: np.ndarray, ends: np.ndarray, windows: list[tuple[float, float]]) -> float:
    return covered(starts, ends, windows) if starts.size else 0.0


def _minus(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of `a` with the union of `b` cut out (both as start/end arrays)."""
    a_s, a_e = union(*a)
    b_s, b_e = union(*b)
    if not a_s.size or not b_s.size:
        return a_s, a_e
    # Elementary intervals between all boundaries; keep those inside a and outside b.
    cuts = np.unique(np.concatenate([a_s, a_e, b_s, b_e]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = (lo + hi) / 2
    in_a = np.searchsorted(a_s, mid, "right") - 1
    in_a = (in_a >= 0) & (mid < a_e[np.clip(in_a, 0, None)])
    in_b = np.searchsorted(b_s, mid, "right") - 1
    in_b = (in_b >= 0) & (mid < b_e[np.clip(in_b, 0, None)])
    keep = in_a & ~in_b
    return union(lo[keep], hi[keep])


def _covered_before(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time of the sorted disjoint intervals (us, ue) that lies before each t."""
    cum = np.concatenate([[0.0], np.cumsum(ue - us)])
    k = np.searchsorted(us, t, "right")
    inside = np.clip(t - us[np.clip(k - 1, 0, None)], 0, None)
    part = np.where(k > 0, np.minimum(inside, (ue - us)[np.clip(k - 1, 0, None)]), 0.0)
    return cum[np.clip(k - 1, 0, None)] * (k > 0) + part


def _share(x: float, whole: float) -> float | None:
    return round(x / whole, 4) if whole > 0 else None


def path_figures(
    windows: list[tuple[float, float]],
    compute: tuple[np.ndarray, np.ndarray],
    copy: tuple[np.ndarray, np.ndarray],
    collective: tuple[np.ndarray, np.ndarray],
    host: dict[str, tuple[np.ndarray, np.ndarray]],
    launch_pairs: tuple[np.ndarray, np.ndarray] | None,
    calls: tuple[np.ndarray, np.ndarray, list[str]] | None = None,
) -> dict:
    """The figures from intervals: device kinds, main-thread states (ops/launch/sync/input/any) and launch pairs
    (runtime call start, device start) of the main thread."""
    total = sum(w1 - w0 for w0, w1 in windows)
    empty = (np.zeros(0), np.zeros(0))
    device = tuple(np.concatenate([compute[i], copy[i], collective[i]]) for i in (0, 1))
    idle = union(*_minus((np.array([w[0] for w in windows]), np.array([w[1] for w in windows])), device))
    # Device-idle time by main-thread state, first match wins.
    by_state = {}
    rest = idle
    for state in ("sync", "input", "launch", "ops"):
        inter = _minus(rest, _minus(rest, host.get(state, empty)))
        by_state[state] = _share(_cov(*inter, windows), total)
        rest = _minus(rest, host.get(state, empty))
    by_state["untraced"] = _share(_cov(*_minus(rest, host.get("any", empty)), windows), total)
    by_state["other_host"] = _share(_cov(*_minus(rest, _minus(rest, host.get("any", empty))), windows), total)
    # Device idle and no traced host event on any thread: nothing at all on a path through traced events.
    by_state["nothing_traced_anywhere"] = _share(_cov(*_minus(idle, host.get("all_threads", empty)), windows), total)
    idle_calls = []
    if calls is not None and calls[0].size and idle[0].size:
        cs, ce, names = calls
        inside = np.zeros(cs.size, dtype=bool)
        for w0, w1 in windows:
            inside |= (cs < w1) & (ce > w0)
        spent = _covered_before(*idle, ce) - _covered_before(*idle, cs)
        per: dict[str, float] = defaultdict(float)
        for name, t in zip(np.array(names)[inside], spent[inside], strict=True):
            per[name] += t
        idle_calls = [
            (str(n), _share(float(t), total)) for n, t in sorted(per.items(), key=lambda x: -x[1])[:5] if t > 0
        ]
    out = {
        "steps_ms": [round((w1 - w0) / 1e3, 3) for w0, w1 in windows][:8],
        "n_steps": len(windows),
        "step_total_ms": round(total / 1e3, 3),
        "device_busy": _share(_cov(*device, windows), total),
        "compute": _share(_cov(*compute, windows), total),
        "copy": _share(_cov(*copy, windows), total),
        "collective": _share(_cov(*collective, windows), total),
        "collective_alone": _share(
            _cov(
                *_minus(collective, (np.concatenate([compute[0], copy[0]]), np.concatenate([compute[1], copy[1]]))),
                windows,
            ),
            total,
        ),
        "host": {k: _share(_cov(*v, windows), total) for k, v in host.items() if k not in ("any", "all_threads")},
        "host_untraced": _share(total - _cov(*host.get("any", empty), windows), total),
        "device_idle_by_host": by_state,
        "device_idle_top_runtime_calls": idle_calls,
    }
    if launch_pairs is not None and launch_pairs[0].size:
        ls, ds = launch_pairs
        inside = np.zeros(ls.size, dtype=bool)
        for w0, w1 in windows:
            inside |= (ls >= w0) & (ls < w1)
        ls, ds = ls[inside], ds[inside]
    if launch_pairs is not None and launch_pairs[0].size and ls.size:
        delay = ds - ls
        order_l, order_d = np.sort(ls), np.sort(ds)
        depth = np.searchsorted(order_l, ls, "left") - np.searchsorted(order_d, ls, "left")
        out.update(
            launches_matched=int(ls.size),
            launch_delay_median_us=round(float(np.median(delay)), 1),
            launch_delay_p90_us=round(float(np.percentile(delay, 90)), 1),
            drained_share=round(float((delay < 50).mean()), 3),
            queue_depth_median=float(np.median(np.clip(depth, 0, None))),
        )
    else:
        out.update(launches_matched=0)
    return out


def _windows(steps: list[tuple[float, float]], spans: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list, str]:
    if steps:
        return sorted(steps), f"{len(steps)} step spans"
    s = np.concatenate([x[0] for x in spans if x[0].size])
    e = np.concatenate([x[1] for x in spans if x[1].size])
    return [(float(s.min()), float(e.max()))], "none (whole trace)"


def kineto(path: Path, step_re: re.Pattern, instance: int | None = None) -> dict:
    doc, events = load_events(path)
    parts, tf1 = classify(events)
    kernels, memcpys, memsets = parts["kernel"], parts["memcpy"], parts["memset"]
    host = [e for e in parts["host"] if e.get("cat") not in NOT_HOST]
    coll = [k for k in kernels if COLLECTIVE.search(str(k.get("name", "")))]
    comp = [k for k in kernels if not COLLECTIVE.search(str(k.get("name", "")))]
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in host
        if step_re.search(str(e.get("name", ""))) and e.get("cat") != "gpu_user_annotation"
    ]
    # One window per step name (Kineto may repeat a step on the python_function lane).
    steps = sorted(set(steps))
    if instance is not None:
        steps = steps[instance : instance + 1]
    device = kernels + memcpys + memsets
    windows, source = _windows(steps, [_arr(device), _arr(host)] if device or host else [])
    # Main thread: the one whose runtime calls launch the most device work (TF1: the busiest executor lane).
    by_corr = {}
    for e in device:
        c = (e.get("args") or {}).get("correlation")
        if c is not None and (c not in by_corr or float(e["ts"]) < by_corr[c]):
            by_corr[c] = float(e["ts"])
    runtime = [e for e in host if e.get("cat") in RUNTIME_CATS]
    launches = defaultdict(int)
    for e in runtime:
        if (e.get("args") or {}).get("correlation") in by_corr:
            launches[(e.get("pid"), e.get("tid"))] += 1
    if launches:
        main = max(launches, key=launches.get)
    else:
        busy = defaultdict(float)
        for e in host:
            if e.get("cat") in OP_CATS or tf1:
                busy[(e.get("pid"), e.get("tid"))] += float(e.get("dur", 0) or 0)
        main = max(busy, key=busy.get) if busy else None
    mine = [e for e in host if (e.get("pid"), e.get("tid")) == main and not step_re.search(str(e.get("name", "")))]
    name = lambda e: str(e.get("name", ""))  # noqa: E731
    states = {
        "ops": _arr([e for e in mine if e.get("cat") in OP_CATS or (tf1 and e.get("cat") == "Op")]),
        "launch": _arr([e for e in mine if e.get("cat") in RUNTIME_CATS and LAUNCH.search(name(e))]),
        "sync": _arr([e for e in mine if SYNC.search(name(e))]),
        # DataLoader waits may sit on any host thread; the main thread's wait is what delays the step.
        "input": _arr([e for e in host if INPUT_WAIT.search(name(e))]),
        "any": _arr(mine),
        "all_threads": _arr([e for e in host if not step_re.search(name(e))]),
    }
    pairs = None
    mine_rt = [e for e in mine if e.get("cat") in RUNTIME_CATS and (e.get("args") or {}).get("correlation") in by_corr]
    if mine_rt:
        pairs = (
            np.array([float(e["ts"]) for e in mine_rt]),
            np.array([by_corr[e["args"]["correlation"]] for e in mine_rt]),
        )
    rt_main = [e for e in mine if e.get("cat") in RUNTIME_CATS]
    calls = (*_arr(rt_main), [name(e) for e in rt_main])
    fig = path_figures(windows, _arr(comp), _arr(memcpys + memsets), _arr(coll), states, pairs, calls)
    ranks = doc.get("distributedInfo") or {}
    return {
        "format": "tf1_timeline" if tf1 else "kineto/chrome",
        "steps": source,
        "gpu": sorted({str(p.get("name")) for p in doc.get("deviceProperties", [])}) or None,
        "rank": f"{ranks.get('rank')} of {ranks.get('world_size')}" if ranks else None,
        "main_thread": str(main),
        "kernels": len(kernels),
        "kernel_median_us": round(float(np.median(_arr(kernels)[1] - _arr(kernels)[0])), 2) if kernels else None,
        **fig,
    }


def nsys(path: Path) -> dict:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def rows(sql: str, table: str) -> list[tuple]:
        return db.execute(sql).fetchall() if table in have else []

    name = "(SELECT value FROM StringIds WHERE id = {})"
    kern = rows(
        f"SELECT start, end, correlationId, {name.format('demangledName')} FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_KERNEL",
    )
    cpy = rows("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMCPY")
    cpy += rows("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_MEMSET")
    rt = rows(
        f"SELECT start, end, correlationId, globalTid, {name.format('nameId')} FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
    )
    nvtx = rows(
        f"SELECT start, end, COALESCE(text, {name.format('textId')}), globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL",
        "NVTX_EVENTS",
    )

    def iv(r: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        a = np.array([(x[0], x[1]) for x in r], dtype=float).reshape(-1, 2) / 1e3
        return a[:, 0], a[:, 1]

    coll = [k for k in kern if COLLECTIVE.search(str(k[3]))]
    comp = [k for k in kern if not COLLECTIVE.search(str(k[3]))]
    steps = [(r[0] / 1e3, r[1] / 1e3) for r in nvtx if str(r[2]).startswith("ProfilerStep#")]
    windows, source = _windows(steps, [iv(kern + cpy), iv(rt)])
    first = {}
    for r in kern + cpy:
        first[r[2]] = min(first.get(r[2], r[0]), r[0])
    counts = defaultdict(int)
    for r in rt:
        counts[r[3]] += r[2] in first
    main = max(counts, key=counts.get) if counts else None
    mine = [r for r in rt if r[3] == main]
    clean = lambda r: re.sub(r"_v\d+$", "", str(r[4]))  # noqa: E731
    states = {
        "ops": iv([r for r in nvtx if r[3] == main and not str(r[2]).startswith("ProfilerStep#")]),
        "launch": iv([r for r in mine if LAUNCH.search(clean(r))]),
        "sync": iv([r for r in mine if SYNC.search(clean(r))]),
        "input": iv([]),
        "any": iv(mine + [r for r in nvtx if r[3] == main]),
        "all_threads": iv(rt + [r for r in nvtx if not str(r[2]).startswith("ProfilerStep#")]),
    }
    linked = [r for r in mine if r[2] in first]
    pairs = (np.array([r[0] / 1e3 for r in linked]), np.array([first[r[2]] / 1e3 for r in linked]))
    kd = iv(kern)
    return {
        "format": "nsys",
        "steps": source,
        "main_thread": str(main),
        "kernels": len(kern),
        "kernel_median_us": round(float(np.median(kd[1] - kd[0])), 2) if kern else None,
        **path_figures(windows, iv(comp), iv(cpy), iv(coll), states, pairs, (*iv(mine), [clean(r) for r in mine])),
    }


# --- XSpace (.xplane.pb): just enough protobuf wire format for planes, lines, events and their names. ---


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def _fields(buf: bytes):
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield field, value


def xplane(path: Path) -> dict:
    """Device intervals per GPU plane (all non-`XLA`-summary lines), host lines; no correlation ids are read."""
    planes = []
    for f, v in _fields(path.read_bytes()):
        if f != 1:
            continue
        plane = {"name": "", "lines": [], "meta": {}}
        for pf, pv in _fields(v):
            if pf == 2:
                plane["name"] = pv.decode(errors="replace")
            elif pf == 4:  # map entry: key=1, value=2 (XEventMetadata: id=1, name=2)
                entry = dict(_fields(pv))
                meta = dict((k, x) for k, x in _fields(entry.get(2, b"")) if k in (1, 2))
                plane["meta"][entry.get(1, 0)] = meta.get(2, b"").decode(errors="replace")
            elif pf == 3:
                line = {"name": "", "ts_ns": 0, "events": []}
                for lf, lv in _fields(pv):
                    if lf == 2:
                        line["name"] = lv.decode(errors="replace")
                    elif lf == 3:
                        line["ts_ns"] = lv
                    elif lf == 4:
                        ev = dict((k, x) for k, x in _fields(lv) if k in (1, 2, 3))
                        line["events"].append((ev.get(1, 0), ev.get(2, 0), ev.get(3, 0)))
                plane["lines"].append(line)
        planes.append(plane)
    out = {"format": "xplane", "planes": []}
    for p in planes:
        spans = []
        for line in p["lines"]:
            for mid, off, dur in line["events"]:
                s = line["ts_ns"] / 1e3 + off / 1e6
                spans.append((s, s + dur / 1e6, line["name"], p["meta"].get(mid, "")))
        if not spans:
            continue
        lines = sorted({x[2] for x in spans})
        out["planes"].append({"name": p["name"], "lines": lines[:12], "events": len(spans), "_spans": spans})
    return out


def xplane_figures(path: Path) -> dict:
    raw = xplane(path)
    gpus = [p for p in raw["planes"] if p["name"].startswith("/device:GPU")]
    host = next((p for p in raw["planes"] if p["name"] == "/host:CPU"), None)
    out = {"format": "xplane", "planes": [(p["name"], p["events"], p["lines"]) for p in raw["planes"]]}
    if not gpus:
        return out
    gpu = max(gpus, key=lambda p: p["events"])
    # Kernel streams only: the `XLA Modules`/`XLA Ops`/`Steps`/name-scope lines repeat the same time.
    stream = [
        x for x in gpu["_spans"] if re.search(r"stream", x[2], re.I) and not re.search(r"XLA|Ops|Steps|Scope", x[2])
    ]
    dev = (np.array([x[0] for x in stream]), np.array([x[1] for x in stream]))
    copy_ = [x for x in stream if re.search(r"memcpy|copyBuffer|Memset", x[3] + " " + x[2], re.I)]
    comp = [x for x in stream if x not in copy_]
    host_spans = host["_spans"] if host else []
    window = (
        float(min(dev[0].min(), min((x[0] for x in host_spans), default=np.inf))),
        float(max(dev[1].max(), max((x[1] for x in host_spans), default=-np.inf))),
    )
    dev_window = (float(dev[0].min()), float(dev[1].max()))
    iv = lambda xs: (np.array([x[0] for x in xs]), np.array([x[1] for x in xs]))  # noqa: E731
    launch = [x for x in host_spans if re.search(r"Launch|hipModule|cuLaunch", x[3])]
    sync = [x for x in host_spans if re.search(r"Synchronize|BlockHostUntilReady|hipMemcpy\b", x[3])]
    out.update(
        gpu_plane=gpu["name"],
        stream_kernels=len(stream),
        kernel_median_us=round(float(np.median(dev[1] - dev[0])), 2),
        top_kernels=sorted({x[3][:50] for x in stream})[:8],
        whole=path_figures(
            [window],
            iv(comp),
            iv(copy_),
            (np.zeros(0), np.zeros(0)),
            {"launch": iv(launch), "sync": iv(sync), "any": iv(host_spans), "all_threads": iv(host_spans)},
            None,
        ),
        device_span_only=path_figures([dev_window], iv(comp), iv(copy_), (np.zeros(0), np.zeros(0)), {}, None),
    )
    return out


def figures(path: Path, step_re: re.Pattern, instance: int | None = None) -> dict:
    if path.suffix == ".sqlite":
        return nsys(path)
    if path.name.endswith(".xplane.pb"):
        return xplane_figures(path)
    return kineto(path, step_re, instance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--steps", default=r"^ProfilerStep#", help="regex naming step spans (default ProfilerStep#)")
    parser.add_argument("--instance", type=int, help="only the Nth (0-based) step span, as HTA's instance_id")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    result = {}
    for path in args.files:
        result[str(path)] = shown(str(path), figures(path, re.compile(args.steps), args.instance))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
