"""Command line, `vllm-speedtest` or `python -m toolkit`: serve, matrix, run, import-report, import-results,
compare, reconcile, interleave, batch, rates, capacity, check, gate, notebooks, demo."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from toolkit import CONSOLE_SCRIPT, __version__
from toolkit.base.api_keys import redact
from toolkit.base.errors import ToolkitError
from toolkit.cli import folders, gate, measure
from toolkit.cli.output import error
from toolkit.rates.cli import add_parser as add_rates_parser


class _Parser(argparse.ArgumentParser):
    """Bad command-line input: one line naming the argument and what is allowed, exit status 2."""

    def error(self, message: str) -> NoReturn:
        required = "the following arguments are required: "
        if message.startswith(required):
            message = f"{message.removeprefix(required)}: required"
        self.exit(2, f"error: {message.removeprefix('argument ')} (see {self.prog} --help)\n")


def _program_name() -> str:
    """How this command was called: the console script by its name, else `python -m toolkit`."""
    name = Path(sys.argv[0]).name if sys.argv else ""
    return CONSOLE_SCRIPT if name == CONSOLE_SCRIPT else "python -m toolkit"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_program_name(), description=__doc__)
    parser.add_argument("--version", action="version", version=f"{CONSOLE_SCRIPT} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        measure.add_serve,
        measure.add_matrix,
        measure.add_run,
        folders.add_import_report,
        folders.add_import_results,
        folders.add_compare,
        folders.add_reconcile,
        measure.add_interleave,
        measure.add_batch,
        add_rates_parser,
        folders.add_capacity,
        folders.add_check,
        gate.add_gate,
        folders.add_notebooks,
        measure.add_demo,
    ):
        add(sub)
    return parser


def _os_error(exc: OSError) -> str:
    """An OSError as one line: the file named, then what the system said."""
    what = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {what}" if exc.filename is not None else what


def main(argv: list[str] | None = None) -> int:
    """Run a command. A `ToolkitError` or an `OSError` is one line on stderr (exit 2: bad input, 1: the
    environment), a notebook that failed among them (NotebookError: one line naming its cell); anything else is a
    bug: its traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ToolkitError as exc:  # a launched server that did not come up: its reason, the log named in it
        error(exc.line)
        return exc.exit_code
    except OSError as exc:
        error(_os_error(exc))
        return 1
    except Exception:  # a bug: its traceback, redacted
        sys.stderr.write(redact(traceback.format_exc()))
        return 1
    except KeyboardInterrupt:
        print("interrupted: finished measurements are kept; rerun with --resume to continue", file=sys.stderr)
        return 130
