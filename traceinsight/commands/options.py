"""Argument types the commands share."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit

from traceinsight.gating import FAIL, ON_MISSING
from traceinsight.limits import parse_size


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


def absolute_url(text: str) -> str:
    """``--html-url``: an http(s) URL with its host, which links from wherever the Markdown is shown."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an absolute http(s) URL, not {text!r}")
    return text


def memory_size(text: str) -> str:
    """``--max-memory``: a size (64MB, 2GB, bytes), kept as written for the messages that name it."""
    try:
        parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_page_outputs(parser: argparse.ArgumentParser, default_html: str, what: str) -> None:
    """``-o`` (the HTML page, `default_html` unless given), ``--json`` and ``--markdown``, for the commands that
    compare runs (`what`: "diff", "trend")."""
    parser.add_argument(
        "-o", "--output", type=Path, default=Path(default_html), help=f"HTML {what} (default {default_html})"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help=f"also write the JSON {what}")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write a Markdown summary (CI step summary)")


def add_fault_options(parser: argparse.ArgumentParser) -> None:
    """``--strict`` and ``--max-memory``, for every command that reads traces."""
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 2 instead of reporting from part of a trace cut short (a killed job's file)",
    )
    parser.add_argument(
        "--max-memory",
        type=memory_size,
        metavar="SIZE",
        help="stop (exit 2) when the traces' events would take more memory than this: 64MB, 2GB, bytes "
        "(default: 75%% of the memory available)",
    )


def add_gate_options(parser: argparse.ArgumentParser, fail_on_help: str) -> None:
    """``--fail-on`` (what each command compares: `fail_on_help`) and ``--fail-on-missing``, the one policy for a
    value the run does not have (`gating.Gate`)."""
    parser.add_argument("--fail-on", action="append", default=[], metavar="EXPR", help=fail_on_help)
    parser.add_argument(
        "--fail-on-missing",
        choices=ON_MISSING,
        default=FAIL,
        help="a --fail-on value this run does not have (a device it lacks, a null figure): fail the gate (exit 1, "
        "the default) or skip that threshold, saying so",
    )
