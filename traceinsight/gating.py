"""`--fail-on` expressions: CI thresholds over the report (`result.RunReport`), or over two of them (`diff`).

``PATH OP NUMBER`` compares a value of the report (dotted path of its JSON names, resolved against the model by
`lookup`, the only place a path names a field; list items by index, or by their `id` or `name`, e.g.
``devices.GPU:0.idle_fraction``, ``compute.classes.matmul.share``) with a number, OP one of
``> >= < <= == !=``; ``bottleneck=ID`` is crossed when that bottleneck is present
with severity medium or high.

Expressions are checked when parsed, before any trace is read, so a typo never passes a build: a malformed one, a
bottleneck id no rule has, or a field the report model does not have (`check_path`: the field names, by the model's
types; an item's id can only be known from a run) is a usage error (exit 2) that lists the valid names.

A value the path names that this run's report leaves out or holds null (a GPU device on a CPU-only run, an idle
fraction without steps) cannot be compared: by default the gate fails on it (exit 1, the reports still written, one
line saying which expression and why); with ``--fail-on-missing skip`` it is skipped, saying so (`Gate`). One gate
shared by jobs of different hardware is then a choice the user makes, never a silent pass.

`traceinsight diff` adds change forms, told apart by the explicit sign of the number:
``PATH OP +X`` / ``PATH OP -X`` compare the change NEW - BASE with X, and
``PATH OP +X%`` / ``PATH OP -X%`` the relative change (NEW - BASE) / BASE with X/100
(``steps.mean_ns>+5%``: step time up more than 5 %; ``totals.idle_fraction<-0.1``:
idle fraction down more than 0.1). Without a sign the comparison is on the NEW value;
``bottleneck=ID`` is crossed when ID is new in NEW or present there with severity
medium or high. A value missing or null on either side is a missing value (the policy above); a relative change
from 0 is infinite (any rise from nothing crosses ``>+X%``), none when the value stays 0.

`traceinsight trend` compares its last run with the previous K (`check_window`): a change with the median of
their K values, so one noisy run among them moves nothing; ``bottleneck=ID`` is crossed when ID is new in the
last run (none of the K had it) or present there with severity medium or high. `check_diff` is the window of one.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
import types
from collections.abc import Callable, Sequence
from functools import cache
from statistics import median
from typing import Any, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import field

from traceinsight.result import RunReport, field_names, is_record

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_COMPARISON = re.compile(
    r"^\s*([A-Za-z_][\w.:/#-]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?)((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%?)\s*$"
)
_BOTTLENECK = re.compile(r"^\s*bottleneck\s*=\s*([a-z0-9_]+)\s*$")
GATING_SEVERITIES = ("medium", "high")
# `--fail-on-missing`: what a threshold whose value this run does not have does to the gate.
FAIL, SKIP = "fail", "skip"
ON_MISSING = (FAIL, SKIP)
_NUMBERS = (int, float, bool)


class ExpressionError(ValueError):
    """A --fail-on expression that cannot be understood."""


class MissingValue(ExpressionError):
    """A path the report model has, whose value this run's report leaves out or holds null."""


def bottleneck_ids() -> tuple[str, ...]:
    """The bottleneck ids, from the rules that make them (imported only here: they bring the analyses)."""
    from traceinsight.findings import RULES

    return tuple(rule.id for rule in RULES)


def _valid_names(name: str, names: Sequence[str]) -> str:
    """'did you mean X? valid: a, b, c' for an unknown `name` among `names`."""
    close = difflib.get_close_matches(name, names, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f"{guess}valid: {', '.join(names)}"


def change(base: float | None, new: float | None) -> tuple[float | None, float | None]:
    """(NEW - BASE, (NEW - BASE) / BASE): what a change threshold compares and the diff reports.

    Both are None when either value is unknown; the relative change is None from a base of 0.
    """
    if base is None or new is None:
        return None, None
    delta = new - base
    return delta, (delta / base if base else None)


def _gated_change(base: float, new: float) -> tuple[float, float]:
    """`change` for a threshold: a relative change from 0 is infinite with the change's sign (0 when none), so a
    rise from nothing crosses ``>+X%`` instead of passing unseen."""
    delta = new - base
    if base:
        return delta, delta / base
    return delta, math.copysign(math.inf, delta) if delta else 0.0


class Threshold(msgspec.Struct, frozen=True):
    text: str
    path: str | None
    op: str | None
    number: float | None
    bottleneck: str | None
    change: str | None = None  # None: the value itself; "abs": NEW - BASE; "rel": (NEW - BASE) / BASE

    def check(self, report: RunReport) -> str | None:
        """A message when the threshold is crossed by this one report, else None. Raises MissingValue when the
        report has no value at the path."""
        if self.bottleneck is not None:
            for b in report.bottlenecks:
                if b.id == self.bottleneck and b.severity in GATING_SEVERITIES:
                    return f"{self.text}: bottleneck {b.id} is present ({b.severity})"
            return None
        assert self.path is not None and self.op is not None and self.number is not None
        value = _known(report, self.path)
        if OPERATORS[self.op](float(value), self.number):
            return f"{self.text}: {self.path} = {value:g}"
        return None

    def check_diff(self, base: RunReport, new: RunReport) -> str | None:
        """A message when the threshold is crossed going from the `base` report to the `new` one, else None."""
        return self.check_window([base], new)

    def check_window(self, previous: Sequence[RunReport], new: RunReport) -> str | None:
        """A message when the threshold is crossed going from the `previous` reports to the `new` one, else None: a
        change is measured from the median of their values, so one outlier among them does not decide it. With no
        run before (a history's first), a change crosses nothing; a value `new` lacks, or that none of them has,
        raises MissingValue."""
        if self.bottleneck is not None:
            if not any(b.id == self.bottleneck for report in previous for b in report.bottlenecks):
                for b in new.bottlenecks:
                    if b.id == self.bottleneck:
                        return f"{self.text}: bottleneck {b.id} is new ({b.severity})"
            return self.check(new)
        if self.change is None:
            return self.check(new)
        assert self.path is not None and self.op is not None and self.number is not None
        new_value = _known(new, self.path)
        if not previous:
            return None
        known = [v for report in previous if (v := _value_or_none(report, self.path)) is not None]
        if not known:
            before = "the base run" if len(previous) == 1 else f"any of the {len(previous)} runs before"
            raise MissingValue(f"{self.path} is missing or null in {before}")
        old_value = median(known)
        if all(isinstance(v, int) for v in known):  # ns, bytes, counts: a whole one (an even K's median ends in .5)
            old_value = round(old_value)
        delta, relative = _gated_change(old_value, new_value)
        measured = delta if self.change == "abs" else relative
        if not OPERATORS[self.op](measured, self.number):
            return None
        if self.change == "abs":
            shown = _number(measured)
        else:
            shown = "from 0" if math.isinf(measured) else f"{measured * 100:.1f} %"
        of = f" (median of {len(known)} runs)" if len(previous) > 1 else ""
        sign = "+" * (measured > 0 and not math.isinf(measured))
        return f"{self.text}: {self.path} {_number(old_value)}{of} -> {_number(new_value)} ({sign}{shown})"


def _number(value: float) -> str:
    """Integers (ns, bytes, counts) in full, other numbers to 6 significant digits."""
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def _known(report: RunReport, path: str) -> float:
    """The number at `path` in `report`; MissingValue when it has none there (left out, or null)."""
    value = lookup(report, path)
    if value is None:
        raise MissingValue(f"{path} is null in this run")
    return float(value) if isinstance(value, bool) else value


def _value_or_none(report: RunReport, path: str) -> float | None:
    try:
        return lookup(report, path)
    except MissingValue:
        return None


class Gate(msgspec.Struct, frozen=True):
    """The `--fail-on` thresholds over one run: those crossed, and those it has no value for (`missing`), which
    fail the gate or are skipped as `on_missing` says."""

    crossed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    on_missing: str = FAIL

    @property
    def failed(self) -> bool:
        return bool(self.crossed) or (self.on_missing == FAIL and bool(self.missing))

    def lines(self) -> list[str]:
        """One stderr line per threshold crossed, failed for a missing value, or skipped."""
        return [line for line, _ in self.outcomes()]

    def outcomes(self) -> list[tuple[str, bool]]:
        """Each of `lines` with whether it fails the gate (a threshold skipped for a missing value does not)."""
        missing = (
            [(f"threshold failed, no value: {m} (--fail-on-missing skip passes it)", True) for m in self.missing]
            if self.on_missing == FAIL
            else [(f"threshold skipped, no value: {m}", False) for m in self.missing]
        )
        return [(f"threshold crossed: {m}", True) for m in self.crossed] + missing


def evaluate(
    thresholds: Sequence[Threshold],
    new: RunReport,
    previous: Sequence[RunReport] | None = None,
    on_missing: str = FAIL,
) -> Gate:
    """The gate of `new`: each threshold on it alone (`check`), or against the `previous` runs (`check_window`)."""
    crossed, missing = [], []
    for threshold in thresholds:
        try:
            message = threshold.check(new) if previous is None else threshold.check_window(previous, new)
        except MissingValue as why:
            missing.append(f"{threshold.text}: {why}")
            continue
        if message:
            crossed.append(message)
    return Gate(crossed, missing, on_missing)


def parse_threshold(text: str, allow_change: bool = False) -> Threshold:
    """Parse one --fail-on expression, its names checked against the rules and the report model (raises
    ExpressionError); change forms only where `allow_change`."""
    m = _BOTTLENECK.match(text)
    if m:
        ids = bottleneck_ids()
        if m.group(1) not in ids:
            raise ExpressionError(f"--fail-on {text!r}: no bottleneck {m.group(1)!r}; {_valid_names(m.group(1), ids)}")
        return Threshold(text, None, None, None, m.group(1))
    m = _COMPARISON.match(text)
    if not m:
        raise ExpressionError(
            f"bad --fail-on expression {text!r}: expected 'PATH OP NUMBER' (e.g. totals.idle_fraction>0.3) "
            "or 'bottleneck=ID'" + (", or a change 'PATH OP +X' / 'PATH OP +X%'" if allow_change else "")
        )
    path, op, sign, number, percent = m.groups()
    check_path(path)
    if not sign:
        if percent:
            raise ExpressionError(f"bad --fail-on expression {text!r}: a relative change needs a sign (+5% or -5%)")
        return Threshold(text, path, op, float(number), None)
    if not allow_change:
        raise ExpressionError(
            f"bad --fail-on expression {text!r}: a signed number is a change between two runs "
            "(traceinsight diff); compare with a plain number here"
        )
    value = float(sign + number)
    if percent:
        return Threshold(text, path, op, value / 100, None, "rel")
    return Threshold(text, path, op, value, None, "abs")


@cache
def _hints(record: type) -> dict[str, Any]:
    """A record's fields and their types, in declaration order (the model's annotations, resolved)."""
    hints = get_type_hints(record)
    return {name: hints[name] for name in field_names(record)}


def _unwrapped(kind: Any) -> Any:
    """`kind` without its None (an optional field); a union of other types is Any (nothing to check)."""
    if get_origin(kind) in (Union, types.UnionType):
        rest = [arg for arg in get_args(kind) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
        return float if all(arg in _NUMBERS for arg in rest) else Any
    return kind


def _item_type(kind: Any) -> Any | None:
    """What a list, a tuple or a map of the model holds (None: `kind` is none of them)."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is dict:
        return args[1] if args else Any
    if origin is list:
        return args[0] if args else Any
    if origin is tuple:
        return args[0] if len(args) == 2 and args[1] is Ellipsis else Any
    return None


def check_path(path: str) -> None:
    """Raise ExpressionError unless `path` names a number of the report model (`result.RunReport`), by its types:
    each field name is checked, a list's or a map's item (an id, a name, an index, a key) only from a run."""
    kind: Any = RunReport
    where = "the report"
    parts = path.split(".")
    for i, part in enumerate(parts):
        kind = _unwrapped(kind)
        if kind is Any:
            return
        if isinstance(kind, type) and is_record(kind):
            names = list(_hints(kind))
            if part not in names:
                valid = _valid_names(part, names)
                raise ExpressionError(f"--fail-on path {path!r}: {where} has no field {part!r}; {valid}")
            kind = _hints(kind)[part]
        elif (item := _item_type(kind)) is not None:
            kind = item  # `part` is an item: an id, a name, an index or a key
        else:
            raise ExpressionError(f"--fail-on path {path!r}: {where} is a value, with no field {part!r}")
        where = ".".join(parts[: i + 1])
    kind = _unwrapped(kind)
    if kind is Any or kind in _NUMBERS:
        return
    if isinstance(kind, type) and is_record(kind):
        what = f"a record; its fields: {', '.join(_hints(kind))}"
    elif _item_type(kind) is not None:
        what = "a list or a map: name one of its items (an id, a name, an index or a key), then its field"
    else:
        what = "text"
    raise ExpressionError(f"--fail-on path {path!r} is not a number: it is {what}")


def _field(node: Any, name: str) -> tuple[bool, Any]:
    """(True, value) when `node` (a record of the model, or a map of it) has `name`, else (False, None)."""
    if is_record(node) and not isinstance(node, type):
        if name in field_names(node):
            return True, getattr(node, name)
        return False, None
    if isinstance(node, dict) and name in node:
        return True, node[name]
    return False, None


def _items(node: list[Any] | tuple[Any, ...]) -> str:
    """The ids (else names) of a list's items, for a message; 'none' when empty."""
    names = [str(_field(item, "id")[1] if _field(item, "id")[0] else _field(item, "name")[1]) for item in node]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return shown or "none"


def lookup(report: Any, path: str) -> Any:
    """The value at a dotted path of the report (its JSON names); list items by index or by their `id`.

    Raises MissingValue when this report leaves out a part of the path (a device it has not, a record or key
    it holds null), ExpressionError when the path names no field of the model or no number.
    """
    node = report
    parts = path.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i]) or "the report"
        found, value = _field(node, part)
        if found:
            node = value
        elif node is None:
            raise MissingValue(f"{where} is null in this run")
        elif isinstance(node, list | tuple):
            by_id = [item for item in node if part in (_field(item, "id")[1], _field(item, "name")[1])]
            if by_id:
                node = by_id[0]
            elif part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise MissingValue(f"this run has no {part!r} in {where} (it has: {_items(node)})")
        elif isinstance(node, dict):
            raise MissingValue(f"this run has no {part!r} in {where} (it has: {', '.join(map(str, node)) or 'none'})")
        else:
            raise ExpressionError(f"--fail-on path {path!r}: no field {part!r}")
    if node is not None and not isinstance(node, int | float):
        raise ExpressionError(f"--fail-on path {path!r} is not a number")
    return node
