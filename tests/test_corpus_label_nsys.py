"""tools/corpus_label reads Nsight Systems SQLite exports with its own SQL: checked on a hand-built export."""

from __future__ import annotations

import sqlite3

from tools.corpus_label import figures

MS = 1_000_000  # ns


def _export(path):
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, shortName INT,
            demangledName INT, gridX INT, gridY INT, gridZ INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, copyKind INT, bytes INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, nameId INT, correlationId INT);
        INSERT INTO StringIds VALUES (1, 'gemm'), (2, 'cudaMemcpy_v3020'), (3, 'cudaLaunchKernel_v7000'),
            (4, 'cudaDeviceSynchronize_v3020'), (5, 'cudaMemcpy');
        """
    )
    # Window 0-100 ms (first runtime call to last event). Device 0: copy 0-10 ms, kernels 10-40 and 30-50 ms
    # (overlapping: union 40 ms busy). Blocking: cudaMemcpy 0-10 ms (stored twice, as 2022.x exports do) and
    # cudaDeviceSynchronize 60-100 ms: 50 ms of 100.
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, 1024)", [(0, 10 * MS)])
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 1, 4, 1, 1)",
        [(10 * MS, 40 * MS), (30 * MS, 50 * MS)],
    )
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)",
        [(0, 10 * MS, 2, 1), (0, 10 * MS - 5, 5, 1), (10 * MS, 10 * MS + 5000, 3, 2), (60 * MS, 100 * MS, 4, 3)],
    )
    db.commit()
    db.close()


def test_nsys_figures_are_unions_over_the_window(tmp_path):
    path = tmp_path / "hand.sqlite"
    _export(path)
    fig = figures(path)
    assert fig["window_ms"] == 100.0
    assert fig["per_device"][0]["device_busy_share"] == 0.5  # (10 + 40) of 100 ms
    assert fig["per_device"][0]["kernel_busy_share"] == 0.4
    assert fig["per_device"][0]["copy_share_of_device_busy"] == 0.2  # 10 of 50 busy ms
    assert fig["blocking_sync_share"] == 0.5
    assert fig["runtime_calls"] == 3  # the duplicated cudaMemcpy counts once
    assert fig["blocking_calls"] == {"cudaMemcpy": 1, "cudaDeviceSynchronize": 1}
    assert fig["kernel_median_us"] == 25_000.0
