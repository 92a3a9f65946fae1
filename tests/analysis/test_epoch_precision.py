"""Figures stay exact to the ns at epoch timestamps (~1.7e18 ns), where a double is 256 ns coarse.

Kineto and XSpace write absolute epoch times; any step through float64 (a merge that
leaves NaN for an unmatched row, a reindex) would round them.
"""

from __future__ import annotations

import numpy as np

from traceinsight.analysis.devices import device_usage
from traceinsight.analysis.gaps import idle_gaps
from traceinsight.analysis.kernels import kernel_stats
from traceinsight.events import make_event_table

EPOCH = 1_700_000_000_000_000_123  # ns; float64(EPOCH) is off by 123 ns


def _table(rows: list[tuple[str, int, int, int, str | None]]):
    """Rows of (kind, ts_ns, dur_ns, correlation, device)."""
    kinds, ts, dur, corr, device = zip(*rows, strict=True)
    return make_event_table(
        {
            "kind": list(kinds),
            "ts_ns": np.array(ts, np.int64),
            "dur_ns": np.array(dur, np.int64),
            "correlation": np.array(corr, np.int64),
            "device": list(device),
            "stream": [7 if d else -1 for d in device],
            "name": ["k" if d else "cudaLaunchKernel" for d in device],
        }
    )


def test_launch_delay_is_exact_at_epoch_times():
    events = _table(
        [
            ("runtime", EPOCH, 3_001, 1, None),
            ("kernel", EPOCH + 3_008, 5_000, 1, "GPU:0"),  # 7 ns after its launch ended
            ("kernel", EPOCH + 9_000, 5_000, 99, "GPU:0"),  # no launch known: must not turn the rest into floats
        ]
    )
    (stats,) = kernel_stats(events, device_usage(events))
    assert stats.launched_count == 1
    assert stats.launch_delay_max_ns == 7
    assert stats.launch_delay_p50_ns == 7


def test_gap_cause_tells_launches_1_ns_apart():
    """A launch that ended 1 ns before the device drained was queued in time ("other"); 1 ns after, it was late."""
    events = _table(
        [
            ("kernel", EPOCH, 1_000, 1, "GPU:0"),  # busy until EPOCH + 1000
            ("runtime", EPOCH + 500, 499, 2, None),  # ends 1 ns before the gap opens
            ("kernel", EPOCH + 50_000, 1_000, 2, "GPU:0"),  # busy until EPOCH + 51000
            ("runtime", EPOCH + 50_600, 401, 3, None),  # ends 1 ns after the gap opens
            ("kernel", EPOCH + 90_000, 1_000, 3, "GPU:0"),
        ]
    )
    (gaps,) = idle_gaps(events, device_usage(events))
    assert gaps.by_cause["other"] == 49_000
    assert gaps.by_cause["host_launch"] == 39_000
