"""The literal strings a regular expression cannot match without: a cheap first pass over many names.

Python's `re` scans an alternation such as ``[a-z0-9]Backward\\d*\\b|^aten::\\w+_backward|...`` position by
position; over the ~5,000 distinct op names of a big TensorFlow trace one such pattern took 35 ms, and the capture
classification asks about 20 (issue 38). Every match of that pattern contains "Backward", "_backward", ... :
`str.find` over the names end to end rules most of them out at memory speed, and the pattern itself runs on the
few left, so which names match is unchanged (`DistinctNames.rows` in `events.py`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

# A literal this short occurs in most names (a "/" or "_"): searching them all costs less than ruling them out.
MIN_LITERAL_CHARS = 3
# Under this many names, searching each costs less than finding a pattern's literals: parsing one takes 0.1-0.5 ms,
# a search of a short name 1-2 µs (a small trace asks about 30 patterns: 5 ms of parsing).
FEW_NAMES = 256
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)

# A literal: its text, and whether the pattern ignores its case there (then the text is ASCII, in lower case, and
# is looked for in lower-cased ASCII names only: `re.IGNORECASE` also lets some non-ASCII letters match ASCII ones).
Literal = tuple[str, bool]
Literals = frozenset[Literal]


@lru_cache(maxsize=256)
def required_literals(pattern: re.Pattern[str]) -> Literals | None:
    """Literals of which every match of `pattern` contains at least one, each `MIN_LITERAL_CHARS` long or more;
    None when no such set is known (a branch with no literal, a pattern that could not be read)."""
    try:
        found = _needed(sre_parse.parse(pattern.pattern, pattern.flags), bool(pattern.flags & re.IGNORECASE))
    except (re.error, TypeError, ValueError):  # a private module's format changed: no shortcut, same answers
        return None
    return found if found and min(len(text) for text, _ in found) >= MIN_LITERAL_CHARS else None


def _needed(items: sre_parse.SubPattern, ignore_case: bool) -> Literals | None:
    """The best literal set every match of the parsed sequence `items` needs: a run of consecutive characters it
    spells, or one drawn from a part it must match (a group, a branch whose every side needs one, a repeat of at
    least one)."""
    best: Literals | None = None
    run: list[str] = []
    for op, av in items:
        if op is sre.LITERAL:
            run.append(chr(av))
            continue
        best = _better(best, _run(run, ignore_case))
        run = []
        best = _better(best, _part(op, av, ignore_case))
    return _better(best, _run(run, ignore_case))


def _run(chars: list[str], ignore_case: bool) -> Literals | None:
    text = "".join(chars)
    if not text or (ignore_case and not text.isascii()):
        return None
    return frozenset([(text.lower(), True) if ignore_case else (text, False)])


def _part(op: object, av: Any, ignore_case: bool) -> Literals | None:
    """What one item of a sequence needs (None: nothing known, as for a character class or an assertion)."""
    if op is sre.SUBPATTERN:
        _group, add_flags, del_flags, inner = av
        scoped = bool(add_flags & re.IGNORECASE) or (ignore_case and not del_flags & re.IGNORECASE)
        return _needed(inner, scoped)
    if op is sre.BRANCH:
        found: set[Literal] = set()
        for side in av[1]:
            needed = _needed(side, ignore_case)
            if needed is None:
                return None
            found |= needed
        return frozenset(found)
    if op in _REPEATS:
        low, _high, inner = av
        return _needed(inner, ignore_case) if low >= 1 else None
    if op is sre.ATOMIC_GROUP:
        return _needed(av, ignore_case)
    return None


def _better(a: Literals | None, b: Literals | None) -> Literals | None:
    """The more selective of two literal sets: the longer shortest literal, then the fewer literals."""
    if a is None or b is None:
        return a if b is None else b
    return max(a, b, key=lambda s: (min(len(text) for text, _ in s), -len(s)))


class JoinedNames:
    """Names end to end (a newline between), to find which of them hold a literal with `str.find`."""

    def __init__(self, names: list[str]) -> None:
        self.text = "\n".join(names)
        self.lower = self.text.lower() if self.text.isascii() else None  # for literals whose case is ignored
        self.starts = [0]  # where each name begins, and one past the end
        for name in names:
            self.starts.append(self.starts[-1] + len(name) + 1)

    def holding(self, literals: Literals) -> list[int] | None:
        """The indices of the names that hold one of `literals` (a literal found across a newline names the name
        it starts in: a candidate the caller's own search rules out); None when it cannot be told here (a literal
        whose case is ignored, among names not all ASCII)."""
        found: set[int] = set()
        last = len(self.starts) - 1
        for literal, folded in literals:
            text = self.lower if folded else self.text
            if text is None:
                return None
            at = text.find(literal)
            while at >= 0:
                index = bisect_right(self.starts, at) - 1
                found.add(index)
                at = text.find(literal, self.starts[index + 1]) if index + 1 < last else -1
        return sorted(found)
