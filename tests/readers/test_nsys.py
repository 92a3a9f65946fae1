"""Nsight Systems SQLite exports: read into the event table, found by discovery, refused cleanly when broken.

The figures the reports are checked against are computed here from the raw files with plain SQL (sqlite3 of the
standard library, never the reader): device busy time is the union of each device's kernel, copy and memset
intervals, found as "islands" of intervals with window functions. A hand-built export gives known answers for
steps, busy time and launch links.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

import traceinsight as ti
from tests.conftest import REPO, shared_trace
from traceinsight.discover import find_runs
from traceinsight.errors import TraceError
from traceinsight.limits import EVENT_BYTES, MemoryLimit
from traceinsight.readers import is_trace_file, looks_like_trace, read_trace
from traceinsight.readers.stamp import capture_stamp

CLOVERLEAF = "nsys/perlmutter-cloverleaf-cuda.sqlite"
SAXPY = "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
# Public exports of other nsys versions, read from their repositories' snapshots (git objects, never committed
# here): (mirror, commit, path). nsys 2025.5.2 (schema 3.24.0): one kernel, three copies; nsys 2023.2.3 (schema
# 3.1.7): runtime calls and syncs but no kernel table at all.
MIRRORED = {
    "nsys-2025.5": (
        "/work/.mirror/p4arth+cuda-perf-sandbox/repo",
        "8aa5f2e920277f4df463d0609b678e6ba51646df",
        "report1.sqlite",
    ),
    "nsys-2023.2-no-kernels": (
        "/work/.mirror/haroonsyed+NVIDIA_SGEMM_PRACTICE/repo",
        "51a630e0cd01550840acdad7876498e6ed536eab",
        "report1.sqlite",
    ),
}
DEVICE_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
US = 1000
PID, TID = 4242, 4243
GLOBAL_TID = (1 << 48) | (PID << 24) | TID  # nsys: pid and tid in the low 48 bits, above them its own id
SESSION_START = 1_700_000_000_000_000_000


# --------------------------------------------------------------------------- raw SQL arithmetic


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _raw_device_figures(path: Path) -> dict[int, tuple[int, int]]:
    """Per device id: (kernel count, busy ns: the union of its kernel, copy and memset intervals), by SQL alone."""
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        present = [t for t in DEVICE_TABLES if t in _tables(db)]
        if not present:
            return {}
        work = " UNION ALL ".join(f"SELECT deviceId, start, end FROM {t} WHERE end IS NOT NULL" for t in present)
        busy = db.execute(
            f"""
            WITH work AS ({work}),
            ordered AS (
                SELECT deviceId, start, end, MAX(end) OVER (
                    PARTITION BY deviceId ORDER BY start, end ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
                ) AS reach FROM work
            ),
            islands AS (
                SELECT deviceId, start, end, SUM(CASE WHEN reach IS NULL OR start > reach THEN 1 ELSE 0 END) OVER (
                    PARTITION BY deviceId ORDER BY start, end ROWS UNBOUNDED PRECEDING
                ) AS island FROM ordered
            )
            SELECT deviceId, SUM(span) FROM (
                SELECT deviceId, MAX(end) - MIN(start) AS span FROM islands GROUP BY deviceId, island
            ) GROUP BY deviceId
            """
        ).fetchall()
        kernels = dict(
            db.execute("SELECT deviceId, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId").fetchall()
            if "CUPTI_ACTIVITY_KIND_KERNEL" in present
            else []
        )
    return {device: (kernels.get(device, 0), total) for device, total in busy}


def _report_device_figures(path: Path) -> dict[int, tuple[int, int]]:
    """Per device id: (kernel count, busy ns) of the JSON report made from `path`."""
    devices = ti.analyze(path).to_dict()["devices"]
    return {int(d["id"].removeprefix("GPU:")): (d["kernels"]["count"], d["busy_ns"]) for d in devices}


@pytest.mark.parametrize(
    ("relative", "kernels", "copies"),
    [(CLOVERLEAF, 1312, 279), (SAXPY, 5, 15)],  # the shared folder's README
)
def test_busy_time_and_kernels_of_the_shared_exports_match_sql(relative: str, kernels: int, copies: int) -> None:
    path = shared_trace(relative)
    raw = _raw_device_figures(path)
    assert sum(count for count, _ in raw.values()) == kernels
    assert _report_device_figures(path) == raw
    events = read_trace(path).events
    assert (events["kind"] == "kernel").sum() == kernels and (events["kind"] == "memcpy").sum() == copies


def test_the_shared_exports_figures() -> None:
    """What the exports hold, counted in SQL: the reader's host calls and device info follow from them."""
    path = shared_trace(CLOVERLEAF)
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        calls = db.execute("SELECT COUNT(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        gpu = db.execute("SELECT name, smCount, totalMemory FROM TARGET_INFO_GPU WHERE id = 0").fetchone()
        h2d = db.execute("SELECT COUNT(*), SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1").fetchone()
    read = read_trace(path)
    events = read.events
    host = events["device"].isna()
    assert host.sum() == calls == 3048
    assert read.input.format == "nsys" and read.framework == "unknown"
    info = read.devices["GPU:0"]
    assert (info.name, info.sm_count, info.memory_bytes) == gpu and info.compute_capability == "8.0"
    copies = events[events["copy_kind"] == "h2d"]
    assert (len(copies), int(copies["bytes"].sum())) == h2d == (254, 225065752)
    # every kernel's launch is the one host call with its correlation id
    launches = events[host & (events["name"] == "cudaLaunchKernel")]
    kernels = events[events["kind"] == "kernel"]
    assert sorted(launches["correlation"]) == sorted(kernels["correlation"]) and len(launches) == 1312


def test_host_rank_and_capture_window_of_an_mpi_rank_export() -> None:
    """The MPI rank's export names its host and rank (the launcher's environment nsys recorded), and its capture
    window is the session's start plus its analysis span: all read here with plain SQL."""
    path = shared_trace(SAXPY)
    with closing(sqlite3.connect(path)) as db:
        db.text_factory = bytes
        env = dict(db.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV").fetchall())
        (epoch,) = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        start, stop = db.execute("SELECT startTime, stopTime FROM ANALYSIS_DETAILS").fetchone()
    variables = dict(pair.split(b"=", 1) for pair in env[b"DeviceEnvironment"].split(b"\0") if b"=" in pair)
    read = read_trace(path)
    assert read.input.host == env[b"Hostname"].decode() == "nid001608"
    assert read.input.rank == int(variables[b"PMI_RANK"]) == 0
    stamp = capture_stamp(path)
    assert (stamp.start_ns, stamp.end_ns, stamp.rank, stamp.host) == (epoch + start, epoch + stop, 0, "nid001608")


def test_end_to_end_report_of_the_cloverleaf_export(tmp_path: Path) -> None:
    path = shared_trace(CLOVERLEAF)
    out = tmp_path / "out.json"
    done = _cli("report", str(path), "--json", str(out), "-o", str(tmp_path / "out.html"), "-q")
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["inputs"][0]["format"] == "nsys"
    assert document["bottlenecks"], "the report has findings"
    assert document["devices"][0]["kernels"]["count"] == 1312
    # A CUDA program's export names no framework: no PyTorch profiler advice for its missing FLOPs.
    assert document["framework"] == "unknown" and "torch.profiler" not in document["compute"]["note"]


@pytest.mark.parametrize("name", sorted(MIRRORED))
def test_exports_of_other_nsys_versions_match_sql(name: str, tmp_path: Path) -> None:
    path = _mirrored(name, tmp_path)
    raw = _raw_device_figures(path)
    read = read_trace(path)
    kernels = read.events[read.events["kind"] == "kernel"]
    assert len(kernels) == sum(count for count, _ in raw.values())
    if raw:
        assert _report_device_figures(path) == raw


def _mirrored(name: str, tmp_path: Path) -> Path:
    """A public export from its repository's snapshot under /work/.mirror, skipped when that is not here."""
    git_dir, commit, inner = MIRRORED[name]
    if not Path(git_dir).is_dir():
        pytest.skip(f"{git_dir} not available")
    done = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{inner}"], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"{commit}:{inner} not in {git_dir}")
    path = tmp_path / f"{name}.sqlite"
    path.write_bytes(done.stdout)
    return path


# --------------------------------------------------------------------------- a hand-built export

# Three 1 ms steps (ProfilerStep#0..2, also bracketed by start/end ranges named "iteration"), each with two
# 200 µs kernels launched by cudaLaunchKernel; a 150 µs copy in step 0 overlaps its first kernel by 50 µs, and
# a 100 µs memset ends step 2. Busy: step 0 [100, 400) + [500, 700) = 500 µs; step 1 400 µs; step 2 500 µs.
KERNELS = [(100, 300), (500, 700), (1100, 1300), (1500, 1700), (2100, 2300), (2500, 2700)]  # µs
COPY = (250, 400)
MEMSET = (2800, 2900)
BUSY_US = 500 + 400 + 500
STEP_US = 1000
SM_COUNT = 80
GRID = (64, 2, 1)


def _build_export(path: Path) -> Path:
    """The export described above, in the tables and columns of an nsys export (a 2023 schema's subset)."""
    strings = {1: "void gemm_kernel<float>(float*, int)", 2: "gemm_kernel", 3: "cudaLaunchKernel_v7000"}
    strings |= {4: "cudaMemcpyAsync_v3020", 5: "cudaMemsetAsync_v3020", 6: "cudaDeviceSynchronize_v3020"}
    strings |= {7: "iteration", 8: "cudaLaunchKernel"}
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
            CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, totalMemory INTEGER, smCount INTEGER,
                clockRate INTEGER, memoryBandwidth INTEGER, computeMajor INTEGER, computeMinor INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
                demangledName INTEGER, shortName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER,
                blockX INTEGER, blockY INTEGER, blockZ INTEGER, registersPerThread INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, bytes INTEGER, copyKind INTEGER,
                srcKind INTEGER, dstKind INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, value INTEGER, bytes INTEGER,
                memKind INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
                eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER,
                returnValue INTEGER, callchainId INTEGER);
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER, rangeId INTEGER,
                category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
                textId INTEGER, domainId INTEGER);
            """
        )
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
        db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (SESSION_START,))
        db.execute(
            "INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 85520809984, ?, 1980000000, "
            "3352320000000, 9, 0)",
            (SM_COUNT,),
        )
        kernels = [
            (a * US, b * US, 0, 1, 7, 100 + i, 1, 1, 2, *GRID, 256, 1, 1, 32) for i, (a, b) in enumerate(KERNELS)
        ]
        db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * 16)})", kernels)
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 7, 200, 1048576, 1, 1, 2)",
            (COPY[0] * US, COPY[1] * US),
        )
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, 7, 201, 0, 4096, 2)",
            (MEMSET[0] * US, MEMSET[1] * US),
        )
        calls = [(a * US - 20 * US, a * US - 15 * US, 0, GLOBAL_TID, 100 + i, 3) for i, (a, _) in enumerate(KERNELS)]
        calls += [(COPY[0] * US - 10 * US, COPY[0] * US - 5 * US, 0, GLOBAL_TID, 200, 4)]
        calls += [(MEMSET[0] * US - 10 * US, MEMSET[0] * US - 5 * US, 0, GLOBAL_TID, 201, 5)]
        calls += [(2950 * US, 2990 * US, 0, GLOBAL_TID, 300, 6)]
        # nsys's "CUDA backtrace" twin of the first launch: around it, the same correlation id
        calls += [(KERNELS[0][0] * US - 21 * US, KERNELS[0][0] * US - 14 * US, 67, GLOBAL_TID, 100, 8)]
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, 0, NULL)", calls)
        ranges = [(s * STEP_US * US, (s + 1) * STEP_US * US, 59, f"ProfilerStep#{s}", None) for s in range(3)]
        ranges += [(s * STEP_US * US, (s + 1) * STEP_US * US, 60, None, 7) for s in range(3)]  # "iteration"
        ranges += [(10 * US, None, 59, "unclosed", None), (5 * US, 5 * US, 34, "a mark", None)]
        db.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid) VALUES (?, ?, ?, ?, ?, ?)",
            [(a, b, kind, text, text_id, GLOBAL_TID) for a, b, kind, text, text_id in ranges],
        )
    return path


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return _build_export(tmp_path / "hand_built.sqlite")


def test_hand_built_export_reads_as_its_tables_say(export: Path) -> None:
    read = read_trace(export)
    events = read.events
    kinds = events["kind"].value_counts()
    assert (kinds["kernel"], kinds["memcpy"], kinds["memset"], kinds["step"]) == (6, 1, 1, 3)
    assert kinds["runtime"] == 8 and kinds["sync"] == 1  # the backtrace twin is gone; cudaDeviceSynchronize syncs
    assert kinds["annotation"] == 3  # "iteration" x3; the unclosed range and the mark are no ranges
    steps = events[events["kind"] == "step"].sort_values("ts_ns")
    assert steps["step_id"].tolist() == [0, 1, 2]
    assert (steps["ts_ns"] - SESSION_START).tolist() == [s * STEP_US * US for s in range(3)]
    assert (steps["dur_ns"] == STEP_US * US).all() and (steps["thread"] == TID).all()
    copy = events[events["kind"] == "memcpy"].iloc[0]
    assert (copy["name"], copy["copy_kind"], copy["src_memory"], copy["bytes"]) == (
        "Memcpy HtoD (Pinned -> Device)",
        "h2d",
        "pinned",
        1048576,
    )
    memset = events[events["kind"] == "memset"].iloc[0]
    assert (memset["name"], memset["bytes"]) == ("Memset (Device)", 4096)
    kernels = events[events["kind"] == "kernel"]
    assert set(kernels["name"]) == {"void gemm_kernel<float>(float*, int)"}
    assert np.allclose(kernels["blocks_per_sm"], GRID[0] * GRID[1] * GRID[2] / SM_COUNT)
    info = read.devices["GPU:0"]
    assert (info.sm_count, info.compute_capability, info.clock_khz, info.vendor) == (SM_COUNT, "9.0", 1980000, "Nvidia")
    assert read.framework == "pytorch"  # ProfilerStep#N ranges are PyTorch's


def test_an_older_schema_with_fewer_columns(tmp_path: Path) -> None:
    """Columns an export may lack (an older nsys): no demangled name, no grid, no textId, no GPU table."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
                streamId INTEGER, correlationId INTEGER, shortName INTEGER);
            CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER);
            INSERT INTO StringIds VALUES (1, 'axpy');
            INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 4000, 1, 13, 5, 1), (3000, 9000, 1, 14, 6, 1);
            INSERT INTO NVTX_EVENTS VALUES (0, 10000, 59, 'solve', 77);
            """
        )
    read = read_trace(path)
    events = read.events
    kernels = events[events["kind"] == "kernel"]
    assert set(kernels["name"]) == {"axpy"} and set(kernels["device"]) == {"GPU:1"}
    assert kernels["blocks_per_sm"].isna().all() and read.metadata["clock"] == "relative"
    assert events.loc[events["kind"] == "annotation", "name"].tolist() == ["solve"]
    assert ti.analyze(path).to_dict()["devices"][0]["busy_ns"] == 8000  # [1000, 9000)


def test_hand_built_launches_link_to_their_kernels(export: Path) -> None:
    events = read_trace(export).events
    launches = events[events["name"] == "cudaLaunchKernel"]
    assert len(launches) == len(KERNELS) and (launches["thread"] == TID).all()
    kernels = events[events["kind"] == "kernel"].sort_values("ts_ns")
    linked = launches.set_index("correlation")["ts_ns"].reindex(kernels["correlation"]).to_numpy()
    # each launch is 20 µs before its kernel; the first one's backtrace twin (21 µs before) is not it
    assert (kernels["ts_ns"].to_numpy() - linked == 20 * US).all()


def test_hand_built_report_has_the_known_steps_and_busy_time(export: Path) -> None:
    report = ti.analyze(export).to_dict()
    steps = report["steps"]
    assert steps["count"] == 3
    assert [item["dur_ns"] for item in steps["items"]] == [STEP_US * US] * 3
    device = report["devices"][0]
    assert device["busy_ns"] == BUSY_US * US == _raw_device_figures(export)[0][1]
    assert device["kernels"]["count"] == len(KERNELS)
    assert device["copies"]["h2d"]["bytes"] == 1048576


def test_memory_limit_is_checked_before_the_rows_are_read(export: Path) -> None:
    rows = 6 + 1 + 1 + 10 + 8  # kernels, copy, memset, host calls (with the twin), NVTX events (marks and all)
    assert len(read_trace(export, limit=MemoryLimit(total=rows * EVENT_BYTES, source="test")).events) == 23
    with pytest.raises(TraceError, match="needs about"):
        read_trace(export, limit=MemoryLimit(total=(rows - 1) * EVENT_BYTES, source="test"))


def test_step_range_names_the_steps(export: Path) -> None:
    events = read_trace(export, step_range="iteration").events
    steps = events[events["kind"] == "step"].sort_values("ts_ns")
    assert steps["name"].unique().tolist() == ["iteration"] and steps["step_id"].tolist() == [0, 1, 2]
    assert (events["name"] == "ProfilerStep#1").sum() == 1
    assert events.loc[events["name"] == "ProfilerStep#1", "kind"].item() == "annotation"
    report = ti.analyze(export, step_range="iteration").to_dict()
    assert report["steps"]["count"] == 3 and report["devices"][0]["busy_ns"] == BUSY_US * US
    missing = read_trace(export, step_range="no such range")
    assert any("no such range" in warning for warning in missing.warnings)


def test_step_range_option_of_the_report_command(export: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = _cli("report", str(export), "--step-range", "iteration", "--json", str(out), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    assert document["steps"]["count"] == 3 and "iteration" in document["steps"]["marker"]


# --------------------------------------------------------------------------- discovery and .nsys-rep


def test_discovery_tells_an_export_by_its_tables(export: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "profile.sqlite").write_bytes(export.read_bytes())
    (folder / "profile.nsys-rep").write_bytes(b"a report: read from its export beside it")
    with sqlite3.connect(folder / "cache.sqlite") as db:
        db.execute("CREATE TABLE test (col1 INTEGER, col2 INTEGER)")  # SQLite, but no export
    assert is_trace_file(folder / "cache.sqlite") and not looks_like_trace(folder / "cache.sqlite")
    assert looks_like_trace(folder / "profile.sqlite") and looks_like_trace(folder / "profile.nsys-rep")
    [run] = find_runs(folder)
    assert run.files == (folder / "profile.sqlite",) and run.not_traces == 1


def test_a_report_is_exported_by_nsys_on_the_path(export: Path, tmp_path: Path, monkeypatch) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not read by us")
    path = os.environ.get("PATH", "")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(TraceError, match="needs the `nsys` binary"):
        read_trace(report)
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "nsys"  # writes the hand-built export where `nsys export --output` says
    fake.write_text(f'#!/bin/sh\nwhile [ "$1" != "--output" ]; do shift; done\ncp "{export}" "$2"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tools), path]))
    read = read_trace(report)
    assert (read.events["kind"] == "kernel").sum() == len(KERNELS) and read.input.format == "nsys"


# --------------------------------------------------------------------------- bad input


def _bad_files(export: Path, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Broken files, each with what its one-line error says."""
    cut = tmp_path / "cut.sqlite"
    data = export.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    wrong = tmp_path / "wrong.sqlite"
    with sqlite3.connect(wrong) as db:
        db.execute("CREATE TABLE test (col1 INTEGER, col2 INTEGER)")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    text = tmp_path / "text.sqlite"
    text.write_text("not a database\n" * 20)
    other_version = tmp_path / "other_version.sqlite"  # nsys's table name, another schema's columns
    with sqlite3.connect(other_version) as db:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (begin INTEGER, finish INTEGER)")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2)")
    mistyped = tmp_path / "mistyped.sqlite"  # the columns, holding text where times belong
    with sqlite3.connect(mistyped) as db:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start TEXT, end TEXT, deviceId TEXT, demangledName INT)")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('soon', 'later', 'gpu', 1)")
    no_rows = tmp_path / "no_rows.sqlite"
    with sqlite3.connect(no_rows) as db:
        db.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
        db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '9.9.9')")
        db.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER)")
    return {
        "truncated": (cut, "ends early"),
        "wrong schema": (wrong, "wrong schema"),
        "empty": (empty, "empty file"),
        "not sqlite": (text, "not a SQLite database"),
        "other schema version": (other_version, "wrong schema: CUPTI_ACTIVITY_KIND_KERNEL has no start, end"),
        "mistyped columns": (mistyped, "columns do not hold what nsys writes"),
        "no rows": (no_rows, "no kernel, copy, runtime or NVTX rows (export schema 9.9.9)"),
    }


@pytest.mark.parametrize(
    "kind",
    ["truncated", "wrong schema", "empty", "not sqlite", "other schema version", "mistyped columns", "no rows"],
)
def test_bad_input_is_one_trace_error_naming_the_file(kind: str, export: Path, tmp_path: Path) -> None:
    path, says = _bad_files(export, tmp_path)[kind]
    with pytest.raises(TraceError, match=re.escape(says)) as error:
        read_trace(path)
    assert error.value.path == str(path)
    out = tmp_path / "out.html"
    done = _cli("report", str(path), "-o", str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.count("\n") == 1 and str(path) in done.stderr and says in done.stderr, done.stderr


def test_a_real_export_cut_in_half_is_refused(tmp_path: Path) -> None:
    data = shared_trace(CLOVERLEAF).read_bytes()
    cut = tmp_path / "cloverleaf-cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.html"
    done = _cli("report", str(cut), "-o", str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.count("\n") == 1 and f"{cut}: the SQLite file ends early" in done.stderr, done.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "traceinsight", *args], capture_output=True, text=True, env=env, cwd=REPO, check=False
    )
