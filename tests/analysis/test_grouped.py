"""`grouped`'s per-group figures are pandas' groupby figures on the same rows, in groupby(sort=False)'s order."""

import numpy as np
import pandas as pd

from traceinsight.analysis.grouped import groups_of, ranked


def test_counts_sums_and_maxima_are_pandas_groupby() -> None:
    rng = np.random.default_rng(0)
    codes = rng.integers(-1, 30, 5000)  # -1: a missing name, in no group
    dur = rng.integers(0, 1 << 52, 5000)
    tc = np.where(rng.random(5000) < 0.3, np.nan, rng.integers(0, 2, 5000).astype(float))
    tc[codes == 7] = np.nan  # a group whose every value is unknown
    names = pd.Categorical.from_codes(codes, [f"k{i}" for i in range(40)])  # ten categories unused
    want = (
        pd.DataFrame({"name": names, "dur": dur, "tc": tc})
        .groupby("name", observed=True, sort=False)
        .agg(count=("dur", "size"), total=("dur", "sum"), tc=("tc", "max"))
    )
    groups = groups_of(codes)
    assert [f"k{c}" for c in groups.codes] == list(want.index)
    assert groups.count.tolist() == want["count"].tolist()
    assert groups.sum(dur).tolist() == want["total"].tolist()  # exact int64 sums, past a double's 2**53
    np.testing.assert_array_equal(groups.max(tc), want["tc"].to_numpy())
    assert np.array_equal(groups.of_row >= 0, codes >= 0)


def test_ranked_breaks_ties_by_first_row() -> None:
    assert ranked(np.array([5, 9, 5, 9, 1]), 4).tolist() == [1, 3, 0, 2]
    assert ranked(np.array([], np.int64), 3).tolist() == []


def test_no_rows_and_all_missing() -> None:
    for codes in (np.zeros(0, np.int64), np.full(3, -1)):
        groups = groups_of(codes)
        assert len(groups.codes) == 0
        assert groups.sum(np.ones(len(codes), np.int64)).tolist() == []
