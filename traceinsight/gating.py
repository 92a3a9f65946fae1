"""`--fail-on` expressions: CI thresholds over the JSON report.

``PATH OP NUMBER`` compares a value of the report (dotted path; list items by
index or by `id`, e.g. ``devices.GPU:0.idle_fraction``) with a number, OP one of
``> >= < <= == !=``; ``bottleneck=ID`` is crossed when that bottleneck is present
with severity medium or high. A malformed expression is a usage error (exit 2).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_COMPARISON = re.compile(
    r"^\s*([A-Za-z_][\w.:/#-]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)
_BOTTLENECK = re.compile(r"^\s*bottleneck\s*=\s*([a-z0-9_]+)\s*$")
GATING_SEVERITIES = ("medium", "high")


class ExpressionError(ValueError):
    """A --fail-on expression that cannot be understood."""


@dataclass(frozen=True)
class Threshold:
    text: str
    path: str | None
    op: str | None
    number: float | None
    bottleneck: str | None

    def check(self, report: dict[str, Any]) -> str | None:
        """A message when the threshold is crossed, else None."""
        if self.bottleneck is not None:
            for b in report.get("bottlenecks", []):
                if b["id"] == self.bottleneck and b["severity"] in GATING_SEVERITIES:
                    return f"{self.text}: bottleneck {b['id']} is present ({b['severity']})"
            return None
        assert self.path is not None and self.op is not None and self.number is not None
        value = lookup(report, self.path)
        if value is None:
            return None
        if OPERATORS[self.op](float(value), self.number):
            return f"{self.text}: {self.path} = {value:g}"
        return None


def parse_threshold(text: str) -> Threshold:
    """Parse one --fail-on expression (raises ExpressionError)."""
    m = _BOTTLENECK.match(text)
    if m:
        return Threshold(text, None, None, None, m.group(1))
    m = _COMPARISON.match(text)
    if not m:
        raise ExpressionError(
            f"bad --fail-on expression {text!r}: expected 'PATH OP NUMBER' (e.g. totals.idle_fraction>0.3) "
            "or 'bottleneck=ID'"
        )
    return Threshold(text, m.group(1), m.group(2), float(m.group(3)), None)


def lookup(report: Any, path: str) -> Any:
    """The value at a dotted path of the report; list items by index or by their `id`.

    Raises ExpressionError when the path names nothing in the report.
    """
    node = report
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list):
            by_id = [item for item in node if isinstance(item, dict) and item.get("id") == part]
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
