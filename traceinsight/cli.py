"""The `traceinsight` command: builds the parser from the command classes and turns
every input problem into one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from traceinsight import __version__
from traceinsight.commands.report import ReportCommand
from traceinsight.gating import ExpressionError
from traceinsight.model import TraceError

COMMANDS = (ReportCommand,)
EXIT_OK, EXIT_THRESHOLD, EXIT_BAD_INPUT = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traceinsight",
        description="Explain why the GPU is not busy, from TensorFlow/JAX XSpace, PyTorch Kineto or Chrome traces.",
    )
    parser.add_argument("--version", action="version", version=f"traceinsight {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub_parser = sub.add_parser(command.name, help=command.help, description=command.help)
        command.prepare_parser(sub_parser)
        sub_parser.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (TraceError, ExpressionError) as error:
        print(f"traceinsight: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"traceinsight: error: {error.filename or ''}: {error.strerror or error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("traceinsight: interrupted", file=sys.stderr)
        return 130
