"""Hand-built event tables with known answers, for the analysis tests.

Times are given in microseconds for readability and stored as ns.
"""

from __future__ import annotations

from typing import Any

from traceinsight.events import Profile, make_event_table

US = 1_000


def table(rows: list[dict[str, Any]]) -> Any:
    """Event table from rows like {"kind": "kernel", "ts": 10, "dur": 5, "device": "GPU:0", ...} (us)."""
    columns: dict[str, list[Any]] = {}
    keys = {k for r in rows for k in r} - {"ts", "dur"}
    columns["ts_ns"] = [int(r["ts"] * US) for r in rows]
    columns["dur_ns"] = [int(r["dur"] * US) for r in rows]
    defaults = {
        "device": None,
        "name": "op",
        "stream": -1,
        "correlation": -1,
        "external_id": -1,
        "bytes": -1,
        "copy_kind": None,
        "src_memory": None,
        "blocks_per_sm": float("nan"),
        "step_id": -1,
    }
    for key in keys | {"name", "device"}:
        columns[key] = [r.get(key, defaults.get(key)) for r in rows]
    for key in ("name", "kind"):
        columns[key] = [str(v) for v in columns[key]]
    return make_event_table(columns)


def profile(rows: list[dict[str, Any]], framework: str = "pytorch") -> Profile:
    return Profile(events=table(rows), inputs=[], framework=framework)


def kernel(ts: float, dur: float, corr: int = -1, name: str = "k", device: str = "GPU:0", **kw: Any) -> dict[str, Any]:
    return {
        "kind": "kernel",
        "ts": ts,
        "dur": dur,
        "device": device,
        "stream": 7,
        "correlation": corr,
        "name": name,
        **kw,
    }


def launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    return {"kind": "runtime", "ts": ts, "dur": dur, "correlation": corr, "name": name}


def host(kind: str, ts: float, dur: float, name: str) -> dict[str, Any]:
    return {"kind": kind, "ts": ts, "dur": dur, "name": name}
