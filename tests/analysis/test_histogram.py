import numpy as np

from traceinsight.analysis.histogram import duration_histogram


def test_bins_counts_totals_and_labels():
    durations = np.array([1, 5_000, 9_999, 10_000, 200_000_000])
    bins = duration_histogram(durations, (2_000, 10_000, 50_000, 100_000_000))
    assert [b.label for b in bins] == ["< 2 µs", "2-10 µs", "10-50 µs", "50 µs - 100 ms", ">= 100 ms"]
    assert [b.count for b in bins] == [1, 2, 1, 0, 1]
    assert [b.total_ns for b in bins] == [1, 14_999, 10_000, 0, 200_000_000]
    assert sum(b.count for b in bins) == len(durations)
