"""Exact repeats dropped: the quick way for rows in line order (XSpace) finds what the hash sort of every row
finds, on tables laid out every way."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests import corpus
from traceinsight.events import make_event_table
from traceinsight.readers import _repair, xplane_schema, xspace

_XEvent = xplane_schema.message_class("XEvent")


def _table(rng: np.random.Generator) -> pd.DataFrame:
    """Blocks of rows, one place each (device, stream, thread), in time order or not, some place in two blocks,
    with a repeat next to its row or anywhere, and rows that start together in a place but differ."""
    blocks = []
    for _ in range(rng.integers(1, 6)):
        n = int(rng.integers(1, 40))
        ts = np.sort(rng.integers(0, 30, n)) if rng.random() < 0.7 else rng.integers(0, 30, n)
        place = (f"GPU:{rng.integers(0, 2)}", int(rng.integers(0, 3)), int(rng.integers(0, 2)))
        blocks.append(
            {"ts_ns": ts, "dur_ns": rng.integers(0, 3, n), "place": [place] * n, "name": rng.choice(["a", "b"], n)}
        )
    rows = pd.concat([pd.DataFrame(b) for b in blocks], ignore_index=True)
    if rng.random() < 0.5 and len(rows) > 1:  # a repeat next to its row, or anywhere
        at = int(rng.integers(0, len(rows)))
        where = at + 1 if rng.random() < 0.5 else int(rng.integers(0, len(rows) + 1))
        rows = pd.concat([rows.iloc[:where], rows.iloc[[at]], rows.iloc[where:]], ignore_index=True)
    device, stream, thread = zip(*rows["place"], strict=True)
    return make_event_table(
        {
            "ts_ns": rows["ts_ns"].to_numpy(),
            "dur_ns": rows["dur_ns"].to_numpy(),
            "kind": ["kernel"] * len(rows),
            "device": list(device),
            "stream": np.array(stream),
            "thread": np.array(thread),
            "name": rows["name"].tolist(),
        }
    )


@pytest.mark.parametrize("seed", range(300))
def test_rows_in_line_order_lose_the_repeats_the_hash_sort_finds(seed: int) -> None:
    table = _table(np.random.default_rng(seed))
    quick, full = Counter(), Counter()
    got = _repair.drop_duplicates(table, quick, "x", in_line_order=True)
    want = _repair.drop_duplicates(table, full, "x")
    pd.testing.assert_frame_equal(got, want)
    assert quick == full


def test_tied_rows_only_where_the_layout_allows() -> None:
    """In order, one block per place: only rows starting together in a block are candidates; a block out of
    order, or a place in two blocks, leaves every row a candidate (None)."""

    def table(ts: list[int], stream: list[int]) -> pd.DataFrame:
        n = len(ts)
        columns = {
            "ts_ns": np.array(ts),
            "dur_ns": np.ones(n, np.int64),
            "kind": ["kernel"] * n,
            "device": ["GPU:0"] * n,
        }
        return make_event_table({**columns, "stream": np.array(stream), "name": ["k"] * n})

    assert _repair._tied_rows(table([1, 2, 2, 5, 0, 0], [7, 7, 7, 7, 8, 8])).tolist() == [0, 1, 1, 0, 1, 1]
    assert _repair._tied_rows(table([1, 3, 2], [7, 7, 7])) is None  # out of order
    assert _repair._tied_rows(table([1, 2, 0, 3], [7, 7, 8, 7])) is None  # stream 7 in two blocks


def test_xspace_event_written_twice_in_a_row_is_dropped_once() -> None:
    """A line with an event written twice, one after the other (in time order): one row, one warning."""
    clean = xspace.read_xspace(corpus.XSPACE_SEED)
    space = xspace._space_class()()
    space.ParseFromString(corpus.XSPACE_SEED.read_bytes())
    gpu = next(p for p in space.planes if p.name.startswith("/device:GPU:"))
    line = next(li for li in gpu.lines if li.name.startswith("Stream #"))
    events = list(line.events)
    del line.events[:]
    line.events.extend([events[0], events[0], *events[1:]])
    twice = xspace.read_xspace(corpus.XSPACE_SEED, space.SerializeToString())
    pd.testing.assert_frame_equal(twice.events, clean.events)
    assert twice.warnings == clean.warnings + Counter({"xspace: exact duplicate events skipped": 1})
