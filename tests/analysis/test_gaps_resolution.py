"""Gaps no longer than the device's timestamp resolution are rounding, not gaps (`rules.TIMESTAMP_RESOLUTION_MAX_NS`):
hand-built traces with known answers, and the real traces whose figures change (ROCm graph replays, whole-µs
Kineto) or must not."""

import gzip
import json
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from tests.analysis.builders import kernel, table
from tests.conftest import shared_trace
from traceinsight.analysis.devices import device_usage
from traceinsight.analysis.gaps import gap_intervals, idle_gaps, timestamp_resolution
from traceinsight.workflow import analyze_path


@pytest.mark.parametrize(
    ("stamps_ns", "resolution"),
    [
        ([1_779_988_464_216_566_336, 1_779_988_464_216_566_337], 1),  # epoch ns, 3 decimals of a µs
        ([1_623_143_089_861_000, 1_623_143_089_868_000, 1_623_143_089_870_000], 1_000),  # whole µs
        ([0, 5_000, 15_000], 1_000),  # a coarser common step is never taken for the unit: 1 µs at most
        ([100, 300, 1_200], 100),
        ([7, 7], 1),  # one timestamp: nothing to read
        ([], 1),
    ],
)
def test_resolution_is_the_decimal_unit_of_the_timestamps(stamps_ns, resolution):
    stamps = np.array(stamps_ns, dtype=np.int64)
    assert timestamp_resolution(stamps, stamps) == resolution


def _gaps_of(rows):
    events = table(rows)
    return idle_gaps(events, device_usage(events))[0]


def test_whole_us_trace_drops_the_1_us_gaps():
    """Kernels in whole µs: three 1 µs gaps (rounding at this resolution) and two 5 µs gaps. Two gaps counted,
    p50 5 µs, total 10 µs; the ledger's idle time still holds all 13 µs."""
    rows, t = [], 0
    for gap in (1, 5, 1, 5, 1):
        rows.append(kernel(t, 10))
        t += 10 + gap
    rows.append(kernel(t, 10))
    g = _gaps_of(rows)
    assert (g.resolution_ns, g.count, g.below_resolution) == (1_000, 2, 3)
    assert (g.p50_ns, g.total_ns, sum(b.count for b in g.histogram)) == (5_000, 10_000, 2)
    assert sum(int((i.ends - i.starts).sum()) for i in gap_intervals(g).values()) == 13_000


def test_ns_trace_keeps_gaps_longer_than_1_ns():
    """µs with 3 decimals (ns clocks): a 1 ns gap is rounding, a 2 ns gap and a 1.5 µs gap are gaps."""
    starts = [Fraction(0), Fraction(10_001, 1_000), Fraction(20_003, 1_000), Fraction(31_503, 1_000)]
    g = _gaps_of([kernel(s, 10) for s in starts])
    assert (g.resolution_ns, g.count, g.below_resolution, g.total_ns) == (1, 2, 1, 1_502)


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")


def _raw_device_gaps(relative: str) -> list[Decimal]:
    """Gaps between the union of the trace's kernels, copies and memsets, in µs, from the raw JSON."""
    with gzip.open(shared_trace(relative)) as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    work = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X"
        and str(e.get("cat")).lower() in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
    )
    gaps, end = [], work[0][1]
    for start, stop in work[1:]:
        if start > end:
            gaps.append(start - end)
        end = max(end, stop)
    return gaps


@pytest.mark.parametrize(
    ("relative", "resolution_ns"),
    [
        ("inference/vllm_decode_full/graph_execution.json.gz", 1),  # 433 raw gaps, 430 of them 1 ns: 3 left
        ("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", 1),  # 548 of 556 are 1 ns
        ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", 1),  # no 1 ns gap: nothing changes
        ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 1),  # NVIDIA, ns clocks: nothing changes
    ],
)
def test_real_traces_count_only_gaps_over_their_resolution(relative, resolution_ns):
    raw = _raw_device_gaps(relative)
    resolution = Decimal(resolution_ns) / 1000
    (device,) = analyze_path(shared_trace(relative)).report.devices
    g = device.gaps
    assert g.resolution_ns == resolution_ns
    assert (g.count, g.below_resolution) == (sum(x > resolution for x in raw), sum(x <= resolution for x in raw))
    assert g.total_ns == int(sum(x for x in raw if x > resolution) * 1000)


def test_whole_us_kineto_drops_its_1_us_gaps():
    """The old-schema ResNet trace is in whole µs: its 1 µs gaps between device work (4,982 in the raw events)
    are the rounding left out."""
    relative = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    raw = _raw_device_gaps(relative)
    (device,) = analyze_path(shared_trace(relative)).report.devices
    assert (device.gaps.resolution_ns, device.gaps.below_resolution) == (1_000, sum(x <= 1 for x in raw))
    assert device.gaps.p50_ns > 1_000
