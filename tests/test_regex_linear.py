"""Every regular expression that runs on trace text takes time linear in the text (issue 36, case 2).

One kernel named ``'gemm_' * 16000`` made a Tensor Core rule's ``^[^<(]*gemm[^<(]*...`` search take 40 s, a
1 MB name about an hour: a pattern whose search restarts at each of many occurrences and rescans the rest is
quadratic. Each pattern is searched in adversarial names built from its own literals (repeated, then a long run
of one character after them), at two sizes: the time may grow about fourfold for four times the text, not
sixteenfold. The slowest name of each pattern is then searched at 25 and 100 times `NAME_MATCH_MAX_CHARS` (names
are cut to it before the analyses match them, but the readers' patterns see what the file holds).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from traceinsight import events, rules
from traceinsight.analysis import collectives, device_memory, hardware, settings
from traceinsight.readers import (
    _classify,
    chrome,
    columns,
    json_events,
    json_stream,
    kineto,
    stamp,
    xspace_classify,
    xspace_memory,
)
from traceinsight.result import field_names, is_record

MODULES: tuple[ModuleType, ...] = (
    rules,
    _classify,
    chrome,
    columns,
    json_events,
    json_stream,
    kineto,
    stamp,
    xspace_classify,
    xspace_memory,
    collectives,
    device_memory,
    hardware,
    settings,
)
# rules.py's patterns kept as strings, compiled where they are used.
STRING_PATTERNS = {
    "NSYS_API_VERSION_SUFFIX": rules.NSYS_API_VERSION_SUFFIX,
    "NSYS_PYTORCH_RANGE": rules.NSYS_PYTORCH_RANGE,
    "OPTIMIZER_UPDATE_PATTERN": rules.OPTIMIZER_UPDATE_PATTERN,
    "EAGER_OP_RUN_PATTERN": rules.EAGER_OP_RUN_PATTERN,
    **{f"STAGE_TYPES[{kind}]": pattern for kind, pattern in rules.STAGE_TYPES.items()},
}
LIMIT = rules.NAME_MATCH_MAX_CHARS
FILLERS = ("a", " ", "1", "_", ".", "(", "<", ":", "/", "\n")
# Patterns used anchored (`match`, `fullmatch` at a position), as their readers use them: a search would restart
# at every blank of a run, which their readers never do.
ANCHORED = {
    "json_events._ARRAY_START",
    "json_stream._ARRAY_OF_EVENTS",
    "json_stream._NEXT_EVENT",
    "json_stream._OPEN_ARRAY_END",
    "_classify._STEP_NUMBER",
}
# For 8x the text a linear search takes about 8x the time (up to twice that once the text outgrows a CPU cache, or
# on a busy machine); a quadratic one 64x.
GROWTH = 8
MAX_GROWTH = 24.0
NOISE_S = 0.002  # below this, a timing says nothing of growth
MAX_SECONDS_AT_100X = 0.5  # a linear pattern searches 400 kB in a few ms


def _walk(label: str, value: object, depth: int = 0) -> Iterator[tuple[str, re.Pattern]]:
    if isinstance(value, re.Pattern):
        yield label, value
    elif not isinstance(value, type) and callable(getattr(value, "compiled", None)):  # rules.NameRule and kin
        yield label, value.compiled()
    elif is_record(value) and not isinstance(value, type):  # rules.NamePattern and kin
        for name in field_names(value):
            yield from _walk(f"{label}.{name}", getattr(value, name), depth + 1)
    elif isinstance(value, (tuple, list)) and depth < 4:
        for index, item in enumerate(value):
            yield from _walk(f"{label}[{index}]", item, depth + 1)
    elif isinstance(value, dict) and depth < 4:
        for key, item in value.items():
            yield from _walk(f"{label}[{key!r}]", item, depth + 1)


def all_patterns() -> dict[str, re.Pattern]:
    """Every compiled pattern the modules hold (attributes, tables of them, rule rows), and rules.py's strings."""
    found = {}
    for module in MODULES:
        for name, value in vars(module).items():
            if not name.startswith("__"):
                for label, pattern in _walk(name, value):
                    found.setdefault(f"{module.__name__.rsplit('.', 1)[-1]}.{label}", pattern)
    found.update({f"rules.{label}": re.compile(text) for label, text in STRING_PATTERNS.items()})
    return found


def hostile_names(pattern: re.Pattern, size: int) -> dict[str, str | bytes]:
    """Names of about `size` characters made of the pattern's own literals: each repeated (alone and with a
    filler after it), and each followed by one long run of a filler; then runs of the fillers alone."""
    literals = sorted(
        set(
            re.findall(
                r"[A-Za-z0-9_]{2,}|[=%#@-]",
                pattern.pattern if isinstance(pattern.pattern, str) else pattern.pattern.decode("latin-1"),
            )
        )
    )
    names: dict[str, str] = {}
    for unit in (*FILLERS, "_1", "a ", "1."):
        names[f"{unit!r}*"] = unit * (size // len(unit))
    for literal in literals:
        for after in ("", " ", "_", "1", "("):
            unit = literal + after
            names[f"({unit!r})*"] = unit * (size // len(unit))
        for filler in FILLERS:
            names[f"{literal!r}+{filler!r}*"] = literal + filler * size
        names[f"'('+{literal!r}+' '*"] = "(" + literal + " " * size
    names = {label: name + "\x00" for label, name in names.items()}  # ends on nothing any pattern matches
    if isinstance(pattern.pattern, bytes):
        return {label: name.encode("latin-1", "replace") for label, name in names.items()}
    return names


def seconds(pattern: re.Pattern, name: str | bytes, repeats: int = 1, anchored: bool = False) -> float:
    """The least time of `repeats` searches (`match`: `anchored`) of `pattern` in `name`."""
    find = pattern.match if anchored else pattern.search
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        find(name)
        best = min(best, time.perf_counter() - start)
    return best


def growth_failures(pattern: re.Pattern, small: int, big: int, anchored: bool = False) -> tuple[list[str], str | bytes]:
    """The hostile names whose search time grows faster than linearly from `small` to `big` characters, and the
    name (at `big`) that took longest."""
    small_names, big_names = hostile_names(pattern, small), hostile_names(pattern, big)
    failures, slowest, slowest_name = [], -1.0, next(iter(big_names.values()))
    for label, name in small_names.items():
        before = seconds(pattern, name, anchored=anchored)
        if before * (big / small) ** 2 > 60:  # quadratic: the big one would hang the test
            failures.append(f"{label}: {before:.3f} s at {small:,} characters")
            continue
        after = seconds(pattern, big_names[label], anchored=anchored)
        if after > NOISE_S and after > MAX_GROWTH * max(before, NOISE_S / (big / small)):
            before = seconds(pattern, name, 3, anchored)  # noise?
            after = seconds(pattern, big_names[label], 3, anchored)
            if after > NOISE_S and after > MAX_GROWTH * max(before, NOISE_S / (big / small)):
                failures.append(f"{label}: {before:.4f} s at {small:,}, {after:.4f} s at {big:,} characters")
        if after > slowest:
            slowest, slowest_name = after, big_names[label]
    return failures, slowest_name


PATTERNS = all_patterns()


def test_the_patterns_are_all_found():
    """The walk finds the rules' tables (a walk that found nothing would pass every check)."""
    assert len([label for label in PATTERNS if label.startswith("rules.NAME_RULES[")]) == len(rules.NAME_RULES)
    assert "rules.KERNEL_CLASS_RULES[6][1]" in PATTERNS and "_classify._KINETO_MEMORY" in PATTERNS
    assert len(PATTERNS) > 120


def test_the_check_catches_a_quadratic_pattern():
    """The issue's pattern, as it was, fails the growth check; its rewrite passes."""
    old = re.compile(
        r"^[^<(]*gemm[^<(]*(?:_f16|_bf16|_fp16|bf16_|f16_)|^[^<(]*(?:_f16|_bf16|_fp16|bf16_|f16_)[^<(]*gemm"
    )
    failures, _ = growth_failures(old, LIMIT // 4, LIMIT * 2)
    assert any(label.startswith("('gemm") for label in failures), failures
    new = rules.NAME_RULES[[r.why.startswith("cuBLAS / cuBLASLt GEMM whose") for r in rules.NAME_RULES].index(True)]
    assert growth_failures(new.compiled(), LIMIT // 4, LIMIT * 2)[0] == []


@pytest.mark.parametrize("label", sorted(PATTERNS))
def test_search_time_grows_linearly(label):
    pattern, anchored = PATTERNS[label], label in ANCHORED
    failures, slowest = growth_failures(pattern, LIMIT // 4, LIMIT * 2, anchored)
    assert failures == [], f"{label} ({pattern.pattern!r}) grows faster than linearly: {failures[:3]}"
    # The slowest hostile name, at 12.5 and 100 times the limit: linear growth, and fast.
    unit = slowest[: len(slowest) // 16]  # an eighth of the limit
    small, big = unit * 100, unit * 800
    before, after = seconds(pattern, small, 2, anchored), seconds(pattern, big, 2, anchored)
    if after > MAX_GROWTH * max(before, NOISE_S / GROWTH):  # noise on a busy machine?
        before, after = seconds(pattern, small, 5, anchored), seconds(pattern, big, 5, anchored)
    assert after < MAX_SECONDS_AT_100X, f"{label}: {after:.2f} s for {len(big):,} characters"
    assert after < MAX_GROWTH * max(before, NOISE_S / GROWTH), (
        f"{label}: {before:.4f} s at 12.5x, {after:.4f} s at 100x"
    )


def test_long_names_are_cut_before_matching():
    """A name longer than the limit is cut to it (names that become equal merge; the count says how many were cut),
    every row keeping its own."""
    long_a, long_b, short = "gemm_" * 2000, "gemm_" * 2000 + "tail", "sgemm"
    table = pd.DataFrame({"name": pd.Categorical([long_a, short, long_b, None, short])})
    assert events.cut_long_names(table, ("name", "op"), LIMIT) == 2
    names = table["name"].tolist()
    assert names[0] == names[2] == long_a[:LIMIT] and names[1] == names[4] == short and pd.isna(names[3])
    assert list(table["name"].cat.categories) == [long_a[:LIMIT], short]
    assert events.cut_long_names(table, ("name",), LIMIT) == 0
    assert np.array_equal(table["name"].cat.codes.to_numpy(), [0, 1, 0, -1, 1])
