"""The `traceinsight` command: builds the parser from the command classes and turns
every input problem into one line on stderr and exit code 2 (never a traceback).

Exit codes: 0 ok, 1 the ``--fail-on`` gate failed (a threshold crossed, or a value it reads that the run does not
have, unless ``--fail-on-missing skip``), 2 bad input or usage (the user can fix it: a ``--fail-on`` name no rule
or field has, a file no reader can use, a run over ``--max-memory``, a trace cut
short under ``--strict``), 3 an internal error (a bug of ours: the user cannot fix it, and
CI should not mistake it for either a bad trace or a crossed threshold), 130
interrupted (SIGINT, Ctrl-C), 143 terminated (SIGTERM): one line from this process, none from its workers,
which are killed; no output or temp file is left. ``TRACEINSIGHT_DEBUG=1`` lets internal errors through with their
tracebacks. Python warnings are never silenced here: the tests turn any warning raised in this package into a
failure, so one a user sees is a bug to report, not noise.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence

from traceinsight import __version__
from traceinsight.errors import TraceError
from traceinsight.gating import ExpressionError
from traceinsight.parallel import exit_now
from traceinsight.render.format import escape_control

# Each command's name and its class in `traceinsight.commands.NAME`, which builds its options and runs it. Only the
# module of the command that runs is imported: `diff` and `trend` import the page renderers and jinja2 (0.1 s), which
# `report` imports only once its options are checked (commands/report.py).
COMMANDS = {"report": "ReportCommand", "diff": "DiffCommand", "runs": "RunsCommand", "trend": "TrendCommand"}
EXIT_OK, EXIT_THRESHOLD, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
# 128 + SIGINT / SIGPIPE / SIGTERM, as a shell reports them
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE, EXIT_TERMINATED = 130, 141, 143
DEBUG_ENV = "TRACEINSIGHT_DEBUG"
# The cyclic garbage collector runs each time 700 more container objects exist than before (Python's default).
# Importing pandas and building a report's tables make millions, nearly none of them in a cycle: the collections
# cost 8-10 % of a small report's CPU time (issue 38). At 50,000, a small report still ran two of 16 ms each, on
# the objects its imports and its early read had just made, all alive; a command collects when 1,000,000 more
# exist (the peak memory of a 306 MB trace's report is the same: benchmarks/README.md, "Issue 38, seventh session").
GC_ALLOCATIONS = 1_000_000
# numpy's OpenBLAS starts a thread per core at import, and they spin: 0.05-0.07 s of CPU time in each process that
# imports numpy, taken from the early read and the analyses on a 2-core machine (issue 38). No analysis does
# linear algebra, so the command's processes keep it to this thread unless the environment says otherwise.
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
_MAX_MESSAGE = 500


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given the command line `argv`, of the command it names alone (the others are
    listed by name, their modules not imported)."""
    chosen = _command_named(argv)
    parser = argparse.ArgumentParser(
        prog="traceinsight",
        description="Explain why the GPU is not busy, from TensorFlow/JAX XSpace, PyTorch Kineto or Chrome traces.",
    )
    parser.add_argument("--version", action="version", version=f"traceinsight {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, class_name in COMMANDS.items():
        if chosen not in (None, name):
            sub.add_parser(name)
            continue
        command = getattr(importlib.import_module(f"traceinsight.commands.{name}"), class_name)
        sub_parser = sub.add_parser(name, help=command.help, description=command.help)
        command.prepare_parser(sub_parser)
        sub_parser.set_defaults(handler=command.run)
    return parser


def _command_named(argv: Sequence[str] | None) -> str | None:
    """The command `argv` runs: its first word not an option (the top level's options take no value), if a command."""
    word = next((a for a in argv or () if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def _say(message: str) -> None:
    """One line on stderr: control characters escaped, long messages cut."""
    line = escape_control(message)
    if len(line) > _MAX_MESSAGE:
        line = line[: _MAX_MESSAGE - 3] + "..."
    print(f"traceinsight: {line}", file=sys.stderr)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main process is, so it unwinds as Ctrl-C does: pools killed, temp files gone."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def main(argv: Sequence[str] | None = None) -> int:
    argv_given = argv is not None
    if not argv_given:  # the command itself: numpy not yet imported (tests/commands/test_report_cli.py)
        os.environ.setdefault(BLAS_THREADS_ENV, "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    args.command_line = ["traceinsight", *argv]  # as run, for the report's `meta`
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        return _run(args)
    previous = signal.signal(signal.SIGTERM, _terminate)
    collect_at = gc.get_threshold()
    gc.set_threshold(GC_ALLOCATIONS, *collect_at[1:])  # process-wide: from the main thread alone
    leaving = not argv_given and sys.getprofile() is None and sys.gettrace() is None
    try:
        code = _run(args)
    finally:
        if not leaving:  # a caller goes on: its thresholds back (which would collect every object made, 30 ms)
            gc.set_threshold(*collect_at)
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    if leaving:
        # The command itself, its outputs written and closed, its processes ended (or, cut short, killed and its
        # files removed): leave now, without the exit handlers (`exit_now` says why for a command cut short) and
        # without tearing down every module's objects one by one, which took 0.06-0.1 s of a report. Under a
        # profiler or a coverage tracer the exit handlers run: they write what was measured.
        exit_now(code)
    return code


def _run(args: argparse.Namespace) -> int:
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, inside these handlers, not at interpreter exit
        return code
    except (TraceError, ExpressionError) as error:
        _say(f"error: {error}")
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # stdout closed early (`| head`): the reports are already written; stay quiet, also at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        _say(f"error: {where}{error.strerror or error}")
        return EXIT_BAD_INPUT
    except Terminated:
        _say("terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except Exception as error:  # the last resort: a bug of ours must not print a traceback either
        if _debug():
            raise
        path = getattr(args, "path", None)
        on = f" on {path}" if path is not None else ""
        detail = f": {error}" if str(error) else ""
        _say(
            f"internal error while running '{args.command}'{on}: {type(error).__name__}{detail} "
            f"(set {DEBUG_ENV}=1 for the traceback)"
        )
        return EXIT_INTERNAL
