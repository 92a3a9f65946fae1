"""`DistinctNames.rows` searches a pattern only in the names that hold one of its required literals
(`regex_literals`): the same rows as searching every name, for every pattern the project holds."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from tests.test_regex_linear import PATTERNS, hostile_names
from traceinsight.events import DistinctNames
from traceinsight.regex_literals import FEW_NAMES, JoinedNames, required_literals
from traceinsight.rules import TRAINING_PATTERN


@pytest.mark.parametrize(
    ("pattern", "literals"),
    [
        (r"[a-z]Backward\d*|^aten::\w+_backward", {("Backward", False), ("_backward", False)}),
        (r"^cudaLaunchKernel", {("cudaLaunchKernel", False)}),
        (r"x/(?i:adam|sgd)/", {("adam", True), ("sgd", True)}),  # the longer shortest literal of the sequence
        (r"(?i)Optimizer\.step", {("optimizer.step", True)}),
        (r"(?:Grad)+V\d", {("Grad", False)}),  # a repeat of at least one
        (r"\w+_(?:fwd|bwd|xyz)", {("fwd", False), ("bwd", False), ("xyz", False)}),
    ],
)
def test_required_literals(pattern, literals):
    assert required_literals(re.compile(pattern)) == literals


@pytest.mark.parametrize(
    "pattern",
    [r"\w+", r"x(?:foo)?y", r"(?:abc|\d+)", r"ab|xyz", r"(?i:ſgd)", r"a{0,3}bcd?"],
)
def test_no_literal_every_match_needs(pattern):
    """An optional part, a side with no literal, a literal shorter than 3 characters, a non-ASCII literal whose
    case is ignored: no set is claimed (every name is searched)."""
    assert required_literals(re.compile(pattern)) is None


def test_joined_names_find_the_holders():
    names = ["alpha", "xbeta", "ta", "gamma beta", "BETA"]
    joined = JoinedNames(names)
    assert joined.holding(frozenset([("beta", False)])) == [1, 3]
    assert joined.holding(frozenset([("beta", True)])) == [1, 3, 4]
    # "a\nxb" spans two names: the name it starts in is a candidate, never a name that lacks the start.
    assert joined.holding(frozenset([("a\nxb", False)])) == [0]
    assert JoinedNames(["ſ", "beta"]).holding(frozenset([("beta", True)])) is None  # not all ASCII


def _names(pattern: re.Pattern[str]) -> list[str]:
    """Names that match `pattern` and names that nearly do: its own literals repeated (`hostile_names`), in upper
    and title case, after a newline, and two letters `re.IGNORECASE` folds onto ASCII ones."""
    base = [name[:120] for name in hostile_names(pattern, 60).values()]
    near = [*base, *(n.upper() for n in base), *(n.title() for n in base), *(f"x\n{n}" for n in base[:10])]
    return near + [f"op_{i}" for i in range(FEW_NAMES)]  # enough names for the literals to be looked for


@pytest.mark.parametrize("label", sorted(label for label, p in PATTERNS.items() if isinstance(p.pattern, str)))
def test_rows_are_those_of_a_search_of_every_name(label):
    pattern = PATTERNS[label]
    for extra in ([], ["opt/ſgd/", "\u212aernel"]):  # ASCII names alone, then with two that are not
        names = _names(pattern) + extra
        rows = pd.DataFrame({"name": pd.Categorical(names + names[:5])})
        where = np.arange(len(rows)) % 3 > 0
        expected = np.array([bool(pattern.search(n)) for n in rows["name"].astype(str)])
        assert (DistinctNames(rows).rows(pattern) == expected).all()
        assert (DistinctNames(rows, where).rows(pattern) == (expected & where)).all()


def test_the_training_pattern_is_searched_in_few_names():
    """The capture classification's costliest pattern (issue 38: 35 ms over 5,000 TensorFlow op names) runs only
    on names that hold one of its literals."""
    literals = required_literals(TRAINING_PATTERN)
    assert literals is not None and ("Backward", False) in literals and ("adam", True) in literals
    names = [f"bert/encoder/layer_{i}/attention/self/query/MatMul" for i in range(1000)]
    names += ["gradients/bert/pooler/dense/MatMul_grad/MatMul", "ConvBackpropInputV2"]
    distinct = DistinctNames(pd.DataFrame({"name": pd.Categorical(names)}))
    assert list(distinct._candidates(TRAINING_PATTERN)) == [0, 1001]  # the categories, sorted: "Conv..." first
    assert distinct.rows(TRAINING_PATTERN).sum() == 2


def test_few_names_are_all_searched():
    """Under `FEW_NAMES` names each is searched: the pattern's literals are not worth finding."""
    names = ["aten::mm", "gradients/MatMul_grad/MatMul", "Optimizer.step"]
    distinct = DistinctNames(pd.DataFrame({"name": pd.Categorical(names)}))
    assert list(distinct._candidates(TRAINING_PATTERN)) == [0, 1, 2]
    assert distinct.rows(TRAINING_PATTERN).tolist() == [bool(TRAINING_PATTERN.search(n)) for n in names]
