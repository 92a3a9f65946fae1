"""`--fail-on` expressions: CI thresholds over the report (`result.RunReport`), or over two of them (`diff`).

``PATH OP NUMBER`` compares a value of the report (dotted path of its JSON names, resolved against the model by
`lookup`, the only place a path names a field; list items by index, or by their `id` or `name`, e.g.
``devices.GPU:0.idle_fraction``, ``compute.classes.matmul.share``) with a number, OP one of
``> >= < <= == !=``; ``bottleneck=ID`` is crossed when that bottleneck is present
with severity medium or high. A malformed expression is a usage error (exit 2).

`traceinsight diff` adds change forms, told apart by the explicit sign of the number:
``PATH OP +X`` / ``PATH OP -X`` compare the change NEW - BASE with X, and
``PATH OP +X%`` / ``PATH OP -X%`` the relative change (NEW - BASE) / BASE with X/100
(``steps.mean_ns>+5%``: step time up more than 5 %; ``totals.idle_fraction<-0.1``:
idle fraction down more than 0.1). Without a sign the comparison is on the NEW value;
``bottleneck=ID`` is crossed when ID is new in NEW or present there with severity
medium or high. A change that cannot be computed (a value null on either side, a
relative change from 0) crosses nothing.

`traceinsight trend` compares its last run with the previous K (`check_window`): a change with the median of
their K values, so one noisy run among them moves nothing; ``bottleneck=ID`` is crossed when ID is new in the
last run (none of the K had it) or present there with severity medium or high. `check_diff` is the window of one.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from statistics import median
from typing import Any

from traceinsight.result import RunReport

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


class ExpressionError(ValueError):
    """A --fail-on expression that cannot be understood."""


def change(base: float | None, new: float | None) -> tuple[float | None, float | None]:
    """(NEW - BASE, (NEW - BASE) / BASE): what a change threshold compares and the diff reports.

    Both are None when either value is unknown; the relative change is None from a base of 0.
    """
    if base is None or new is None:
        return None, None
    delta = new - base
    return delta, (delta / base if base else None)


@dataclass(frozen=True)
class Threshold:
    text: str
    path: str | None
    op: str | None
    number: float | None
    bottleneck: str | None
    change: str | None = None  # None: the value itself; "abs": NEW - BASE; "rel": (NEW - BASE) / BASE

    def check(self, report: RunReport) -> str | None:
        """A message when the threshold is crossed by this one report, else None."""
        if self.bottleneck is not None:
            for b in report.bottlenecks:
                if b.id == self.bottleneck and b.severity in GATING_SEVERITIES:
                    return f"{self.text}: bottleneck {b.id} is present ({b.severity})"
            return None
        assert self.path is not None and self.op is not None and self.number is not None
        value = lookup(report, self.path)
        if value is None:
            return None
        if OPERATORS[self.op](float(value), self.number):
            return f"{self.text}: {self.path} = {value:g}"
        return None

    def check_diff(self, base: RunReport, new: RunReport) -> str | None:
        """A message when the threshold is crossed going from the `base` report to the `new` one, else None."""
        return self.check_window([base], new)

    def check_window(self, previous: Sequence[RunReport], new: RunReport) -> str | None:
        """A message when the threshold is crossed going from the `previous` reports to the `new` one, else None: a
        change is measured from the median of their values, so one outlier among them does not decide it (with none
        before, or no value among them, a change crosses nothing)."""
        if self.bottleneck is not None:
            if not any(b.id == self.bottleneck for report in previous for b in report.bottlenecks):
                for b in new.bottlenecks:
                    if b.id == self.bottleneck:
                        return f"{self.text}: bottleneck {b.id} is new ({b.severity})"
            return self.check(new)
        if self.change is None:
            return self.check(new)
        assert self.path is not None and self.op is not None and self.number is not None
        *values, new_value = lookup_all([*previous, new], self.path)
        known = [v for v in values if v is not None]
        if not known:
            return None
        old_value = median(known)
        if all(isinstance(v, int) for v in known):  # ns, bytes, counts: a whole one (an even K's median ends in .5)
            old_value = round(old_value)
        delta, relative = change(old_value, new_value)
        measured = delta if self.change == "abs" else relative
        if measured is None or not OPERATORS[self.op](measured, self.number):
            return None
        shown = f"{_number(measured)}" if self.change == "abs" else f"{measured * 100:.1f} %"
        of = f" (median of {len(known)} runs)" if len(previous) > 1 else ""
        return (
            f"{self.text}: {self.path} {_number(old_value)}{of} -> {_number(new_value)} ({'+' * (measured > 0)}{shown})"
        )


def _number(value: float) -> str:
    """Integers (ns, bytes, counts) in full, other numbers to 6 significant digits."""
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def parse_threshold(text: str, allow_change: bool = False) -> Threshold:
    """Parse one --fail-on expression (raises ExpressionError); change forms only where `allow_change`."""
    m = _BOTTLENECK.match(text)
    if m:
        return Threshold(text, None, None, None, m.group(1))
    m = _COMPARISON.match(text)
    if not m:
        raise ExpressionError(
            f"bad --fail-on expression {text!r}: expected 'PATH OP NUMBER' (e.g. totals.idle_fraction>0.3) "
            "or 'bottleneck=ID'" + (", or a change 'PATH OP +X' / 'PATH OP +X%'" if allow_change else "")
        )
    path, op, sign, number, percent = m.groups()
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


def _field(node: Any, name: str) -> tuple[bool, Any]:
    """(True, value) when `node` (a record of the model, or a map of it) has `name`, else (False, None)."""
    if is_dataclass(node) and not isinstance(node, type):
        if name in {f.name for f in fields(node)}:
            return True, getattr(node, name)
        return False, None
    if isinstance(node, dict) and name in node:
        return True, node[name]
    return False, None


def lookup(report: Any, path: str) -> Any:
    """The value at a dotted path of the report (its JSON names); list items by index or by their `id`.

    Raises ExpressionError when the path names nothing in the report.
    """
    node = report
    for part in path.split("."):
        found, value = _field(node, part)
        if found:
            node = value
        elif isinstance(node, list | tuple):
            by_id = [item for item in node if part in (_field(item, "id")[1], _field(item, "name")[1])]
            if by_id:
                node = by_id[0]
            elif part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise ExpressionError(f"--fail-on path {path!r}: no item {part!r}")
        else:
            raise ExpressionError(f"--fail-on path {path!r}: no field {part!r}")
    if node is not None and not isinstance(node, int | float):
        raise ExpressionError(f"--fail-on path {path!r} is not a number")
    return node


def lookup_all(reports: Sequence[Any], path: str) -> list[Any]:
    """The value at `path` in each report, None in those that lack it (a device only some runs have).

    Raises ExpressionError when none has it.
    """
    values, errors = [], []
    for report in reports:
        try:
            values.append(lookup(report, path))
        except ExpressionError as error:
            values.append(None)
            errors.append(error)
    if len(errors) == len(reports):
        raise errors[0]
    return values
