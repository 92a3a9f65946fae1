"""Chrome reader: XProf's trace_viewer export of the real 8xV100 XSpace, and hand-built exports.

The real export is made here by xprof's converter, from a copy of the XSpace in a
temporary directory (the converter writes cache files next to its input).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import SAMPLE_TRACES, shared_trace
from traceinsight.cli import main
from traceinsight.errors import TraceError
from traceinsight.events import TraceRead
from traceinsight.readers import json_stream, kineto, kineto_chunks, read_trace

XSPACE = "xprof/GPU-multi-worker/34.83.195.179_6003.xplane.pb"
_CONVERT = """
import sys
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "trace_viewer", {"use_saved_result": False})
open(sys.argv[2], "w").write(data)
"""


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trace_viewer JSON of the GPU-multi-worker XSpace, converted in a temporary directory."""
    source = shared_trace(XSPACE)
    if importlib.util.find_spec("xprof") is None:
        pytest.skip("xprof is not installed")
    work = tmp_path_factory.mktemp("xprof")
    copy = work / source.name
    shutil.copyfile(source, copy)
    out = work / "trace_viewer.json"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run(
        [sys.executable, "-c", _CONVERT, str(copy), str(out)],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def raw(export: Path) -> dict[str, Any]:
    return json.loads(export.read_bytes())


@pytest.fixture(scope="module")
def read(export: Path) -> TraceRead:
    return read_trace(export)


def _lines(doc: dict[str, Any]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    events = doc["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    return processes, threads


def _stream_events(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(device, event) for every complete event on a GPU ``Stream #`` line."""
    processes, threads = _lines(doc)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        process = processes.get(e["pid"], "")
        if process.startswith("/device:GPU:") and threads.get((e["pid"], e["tid"]), "").startswith("Stream #"):
            out.append((process.removeprefix("/device:"), e))
    return out


def test_kernels_per_device_match_the_json_and_formats_notes(raw: dict[str, Any], read: TraceRead) -> None:
    expected = Counter(d for d, e in _stream_events(raw) if not e["name"].startswith(("Memcpy", "Memset")))
    table = read.events
    kernels = table[table["kind"] == "kernel"]
    assert Counter(kernels["device"].astype(str)) == expected
    assert len(kernels) == 1330  # formats.md 4c


def test_h2d_copies_and_bytes(raw: dict[str, Any], read: TraceRead) -> None:
    h2d = [e for _, e in _stream_events(raw) if e["name"] == "MemcpyH2D"]
    expected_bytes = sum(int(re.findall(r"size:(\d+)", e["args"]["memcpy_details"])[0]) for e in h2d)
    copies = read.events[read.events["copy_kind"] == "h2d"]
    assert (len(copies), int(copies["bytes"].sum())) == (len(h2d), expected_bytes) == (202, 81118)
    assert (copies["kind"] == "memcpy").all() and set(copies["src_memory"]) == {"unknown"}  # 2020: no kind_src


def test_rows_are_stream_events_steps_and_host_events(raw: dict[str, Any], read: TraceRead) -> None:
    processes, threads = _lines(raw)
    steps = [e for e in raw["traceEvents"] if e.get("ph") == "X" and threads.get((e["pid"], e["tid"])) == "Steps"]
    host = [e for e in raw["traceEvents"] if e.get("ph") == "X" and processes.get(e["pid"]) == "/host:CPU"]
    table = read.events
    on_device = table["device"].notna()
    assert on_device.sum() == len(_stream_events(raw)) + len(steps)  # TensorFlow Ops / Name Scope skipped
    assert (~on_device).sum() == len(host)
    step_rows = table[table["kind"] == "step"]
    assert sorted(step_rows["device"].astype(str)) == ["GPU:4", "GPU:6"] and set(step_rows["step_id"]) == {0}
    launches = sum(1 for e in host if "correlation_id" in e.get("args", {}))
    assert launches == 1556  # formats.md 4c: every device event has its host launch
    assert table["kind"].isin(["runtime", "sync"]).sum() == launches
    assert read.framework == "tensorflow" and read.metadata["clock"] == "relative"
    assert sorted(read.devices) == [f"GPU:{i}" for i in range(8)]


def test_same_device_rows_as_the_xspace_reader(read: TraceRead) -> None:
    xspace = pytest.importorskip("traceinsight.readers.xspace")
    direct = xspace.read_xspace(shared_trace(XSPACE)).events
    exported = read.events

    def counts(table: pd.DataFrame) -> Counter[tuple[str, str, int]]:
        rows = table[table["device"].notna()]
        return Counter(zip(rows["device"].astype(str), rows["kind"].astype(str), rows["stream"], strict=True))

    assert counts(exported) == counts(direct)
    assert exported["bytes"].clip(lower=0).sum() == direct["bytes"].clip(lower=0).sum()


# --------------------------------------------------------------------------- hand-built exports


def _meta(kind: str, pid: int, name: str, tid: int | None = None) -> dict[str, Any]:
    event = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    return event if tid is None else {**event, "tid": tid}


def _x(pid: int, tid: int, name: str, ts: float = 1.0, dur: float = 2.0, **args: str) -> dict[str, Any]:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": args}


def _read(tmp_path: Path, events: list[dict[str, Any]]) -> TraceRead:
    path = tmp_path / "tv.json"
    path.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}))
    return read_trace(path)


def _row(read: TraceRead, name: str) -> pd.Series:
    rows = read.events[read.events["name"] == name]
    assert len(rows) == 1, name
    return rows.iloc[0]


def test_hand_built_export(tmp_path: Path) -> None:
    events = [
        _meta("process_name", 1, "/device:GPU:0"),
        _meta("thread_name", 1, "Stream #7(Compute,MemcpyH2D)", 7),
        _meta("thread_name", 1, "TensorFlow Ops", 3735928562),
        _meta("thread_name", 1, "Steps", 3735928559),
        _meta("process_name", 2, "/device:TPU:1"),
        _meta("thread_name", 2, "XLA Ops", 3),
        _meta("thread_name", 2, "XLA Modules", 2),
        _meta("process_name", 9, "/host:CPU"),
        _meta("thread_name", 9, "python3", 1234),
        _x(1, 7, "MemcpyH2D", memcpy_details="kind_src:pageable kind_dst:device size:4096 dest:0 async:1"),
        _x(1, 7, "MemcpyD2H", memcpy_details="kind_src:device kind_dst:pinned size:64 dest:0 async:1"),
        _x(1, 7, "Memset 3", Memset_details="kind:device num_bytes:256 async:0"),
        _x(1, 7, "gemm", kernel_details="regs:38 static_shared:0 grid:160,1,1 block:1024,1,1 occ_pct:50"),
        _x(1, 7, "relu", theoretical_occupancy_pct="75", kernel_details="regs:1 occ_pct:50"),
        _x(1, 7, "MemoryAlloc"),
        _x(1, 3735928562, "MatMul"),
        _x(1, 3735928559, "12"),
        _x(2, 3, "fusion.1"),
        _x(2, 2, "jit_f(123)"),
        _x(9, 1234, "gemm", correlation_id="41"),
        _x(9, 1234, "cuStreamSynchronize", correlation_id="42"),
        _x(9, 1234, "train", step_num="3", _r="1"),
        _x(9, 1234, "$train.py:10 step"),
        _x(9, 1234, "MatMul", long_name="model/dense/MatMul:MatMul"),
        _x(9, 1234, "IteratorGetNextOp::DoCompute"),
    ]
    read = _read(tmp_path, events)
    expected = {
        "MemcpyH2D": ("memcpy", "GPU:0", 7, -1),
        "MemcpyD2H": ("memcpy", "GPU:0", 7, -1),
        "Memset 3": ("memset", "GPU:0", 7, -1),
        "relu": ("kernel", "GPU:0", 7, -1),
        "MemoryAlloc": ("other", "GPU:0", 7, -1),
        "12": ("step", "GPU:0", -559038737, -1),  # XSpace line id 0xDEADBEEF as int32
        "fusion.1": ("kernel", "TPU:1", 3, -1),
        "jit_f(123)": ("annotation", "TPU:1", 2, -1),
        "cuStreamSynchronize": ("sync", None, -1, 1234),
        "train": ("step", None, -1, 1234),
        "$train.py:10 step": ("python", None, -1, 1234),
        "MatMul": ("cpu_op", None, -1, 1234),  # the TensorFlow Ops copy on GPU:0 is not read
        "IteratorGetNextOp::DoCompute": ("input_wait", None, -1, 1234),
    }
    for name, (kind, device, stream, thread) in expected.items():
        row = _row(read, name)
        got_device = None if pd.isna(row["device"]) else row["device"]
        assert (row["kind"], got_device, row["stream"], row["thread"]) == (kind, device, stream, thread), name
    gemm = read.events[read.events["name"] == "gemm"].set_index("kind")
    assert gemm.loc["kernel", "occupancy_pct"] == 50.0 and gemm.loc["runtime", "correlation"] == 41
    assert _row(read, "relu")["occupancy_pct"] == 75.0  # the stat wins over kernel_details
    h2d, d2h = _row(read, "MemcpyH2D"), _row(read, "MemcpyD2H")
    assert (h2d["copy_kind"], h2d["src_memory"], h2d["bytes"]) == ("h2d", "pageable", 4096)
    assert (d2h["copy_kind"], d2h["src_memory"], d2h["bytes"]) == ("d2h", "pinned", 64)  # host side
    assert _row(read, "Memset 3")["bytes"] == 256
    assert _row(read, "12")["step_id"] == 12 and _row(read, "train")["step_id"] == 3
    assert len(read.events) == len(events) - 9 - 1  # metadata and the TensorFlow Ops copy are not rows
    assert read.input.format == "chrome" and sorted(read.devices) == ["GPU:0", "TPU:1"]


def test_a_trace_of_host_work_alone_is_read_as_host_rows(tmp_path: Path) -> None:
    """No Kineto cats, no XProf names, no line named for a device: host work alone (a browser's, a server's
    request spans), read as it is; the report then says there is no accelerator activity."""
    read = _read(tmp_path, [_meta("process_name", 1, "Browser"), _x(1, 1, "Paint"), _x(1, 1, "Layout")])
    assert len(read.events) == 2 and read.events["device"].isna().all() and not read.devices


def test_json_with_no_timed_event_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no timed events"):
        _read(tmp_path, [_meta("process_name", 1, "Browser")])


def test_export_is_not_streamed_as_kineto_past_its_first_events(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report` first streams JSON as Kineto; an XProf export is told apart by its first events and then
    read once, whole, by the Chrome reader (not decoded twice)."""
    decoded: list[int] = []
    real = json_stream._decode_piece

    def counting(piece: Any, exact_hint: bool = False) -> Any:
        decoded.append(len(piece))
        return real(piece, exact_hint)

    monkeypatch.setattr(json_stream, "_decode_piece", counting)
    monkeypatch.setattr(kineto_chunks, "_ROWS_TO_TELL_KINETO", 2_000)  # this export has 20,631 complete events
    assert kineto.read_kineto_json(export, chunk_bytes=1 << 16) is None
    assert sum(decoded) < export.stat().st_size / 4  # its first events, not the file
    assert read_trace(export).input.format == "chrome"


def test_trace_out_of_a_run_of_several_inputs_reads_back(tmp_path: Path) -> None:
    """`--trace-out` names a multi-input run's devices ``rank0/device:GPU:0``: read back, each rank's device is
    there with the kernels its own file holds."""
    source = SAMPLE_TRACES / "synthetic_gpu" / "input_bound" / "sample_1.1767229323456.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(source.read_bytes()))
    kernels = sum(e.get("cat") == "kernel" and e.get("ph") == "X" for e in doc["traceEvents"])
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
        (run / f"rank{rank}.1.pt.trace.json").write_text(json.dumps(doc))
    out = tmp_path / "annotated.json"
    assert main(["report", str(run), "-o", str(tmp_path / "r.html"), "--trace-out", str(out), "-q"]) == 0
    back = tmp_path / "back.json"
    assert main(["report", str(out), "-o", str(tmp_path / "back.html"), "--json", str(back), "-q"]) == 0
    devices = {d["id"]: d["kernels"]["count"] for d in json.loads(back.read_text())["devices"]}
    assert devices == {"rank0/GPU:0": kernels, "rank1/GPU:0": kernels}
