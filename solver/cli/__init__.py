"""The ``solver`` command: an argparse dispatcher over subcommand modules.

Each subcommand group lives in its own module exposing ``register(subparsers) -> None``, which
adds its parsers and binds a handler with ``set_defaults(handler=fn)``; a handler takes the
parsed ``argparse.Namespace`` and returns the exit code. Adding a group is one line in
:data:`COMMAND_MODULES` and one per command it adds in :data:`COMMANDS`.

A command line that names a known command imports only the module(s) that register it: the
modules pull in what their handlers need (FastAPI, psycopg, pydantic's config models, the
codecs), ~1.8 s of CPU for all of them on a slow machine against ~0.4–0.8 s for one, paid by
every ``solver status`` or ``solver intents …`` (and by every test that runs the CLI as a
subprocess). Anything else (no command, ``--help``, a misspelt one) registers every group, so
the help and the usage error list them all.

This is the boundary where errors become exit codes (STYLE 7): every
:class:`~solver.errors.SolverError` and every usage error is one line on stderr,
``solver: error: ...``, and exit code 2; Ctrl-C is exit 130 without a word. A traceback is shown
only for a bug (an exception outside the project's hierarchy) when ``--traceback`` is given;
otherwise a bug is one line too, with exit code 70 (``EX_SOFTWARE``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

import solver
from solver.errors import ConfigError, SolverError

PROG = "solver"

COMMAND_MODULES: tuple[str, ...] = (
    "solver.cli.config",
    "solver.cli.intents",
    "solver.cli.keys",
    "solver.cli.funds",
    "solver.cli.sandbox",
    "solver.cli.run",
    "solver.cli.history",
    "solver.cli.ops",
    "solver.cli.backtest.streams",
    "solver.cli.backtest.run",
    "solver.cli.swap.group",
    "solver.cli.import_history",
    "solver.cli.signer",
)
"""Modules that each register one subcommand group (``register(subparsers) -> None``)."""

COMMANDS: dict[str, tuple[str, ...]] = {
    "config": ("solver.cli.config",),
    "intents": ("solver.cli.intents",),
    "keys": ("solver.cli.keys",),
    "withdraw": ("solver.cli.funds",),
    "transfer": ("solver.cli.funds",),
    "sandbox": ("solver.cli.sandbox",),
    "run": ("solver.cli.run",),
    "demo": ("solver.cli.run",),
    "history": ("solver.cli.history",),
    "store": ("solver.cli.history",),
    "status": ("solver.cli.ops",),
    "pause": ("solver.cli.ops",),
    "resume": ("solver.cli.ops",),
    "record": ("solver.cli.backtest.streams",),
    "backtest": (
        "solver.cli.backtest.streams",
        "solver.cli.backtest.run",
        "solver.cli.import_history",
    ),
    "swap": ("solver.cli.swap.group",),
    "signer": ("solver.cli.signer",),
}
"""Each top-level command and the modules of :data:`COMMAND_MODULES` that register it (in that
order); ``tests/cli/test_cli.py`` checks it against what the modules register."""

EXIT_OK = 0
EXIT_USAGE = 2  # bad input of any kind, and every SolverError
EXIT_SOFTWARE = 70  # a bug: an exception outside solver.errors
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a filter whose reader went away

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Raised by the parsers instead of argparse's print-usage-and-exit."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.message = message
        self.prog = prog


class _ParserExit(Exception):
    """``--help`` / ``--version`` finished; carries the exit code (output already written)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class CliParser(argparse.ArgumentParser):
    """An ArgumentParser that never calls ``sys.exit``, so ``main()`` can run in-process."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _ParserExit(status)


def modules_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The modules to register for the command line ``argv``: those of the command it names
    (its first word that is not an option), or every one (no command, or an unknown one)."""
    if argv is not None:
        word = next((arg for arg in argv if not arg.startswith("-")), None)
        if word is not None and word in COMMANDS:
            return COMMANDS[word]
    return COMMAND_MODULES


def build_parser(argv: Sequence[str] | None = None) -> CliParser:
    """The parser of every command, or, given the command line, of the command it names."""
    parser = CliParser(
        prog=PROG,
        description="Solver bot for an intents-based swap network.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {solver.__version__}")
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="show the Python traceback of an unexpected internal error (for bug reports)",
    )
    subparsers = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", parser_class=CliParser
    )
    subparsers.required = True
    for name in modules_for(argv):
        importlib.import_module(name).register(subparsers)
    return parser


# An ``ed25519:`` secret key is base58 of 64 bytes (86-88 characters); public keys are ~44.
_SECRET_LIKE = re.compile(r"ed25519:[1-9A-HJ-NP-Za-km-z]{80,}")


def redact(text: str) -> str:
    """Hide anything shaped like a secret key, in case one was typed where a name belongs.

    Catches argparse's echo of a stray argument (``unrecognized arguments: ed25519:...``) and
    a secret given as a file name. Signatures have the same shape and are hidden too: no loss
    in an error line.
    """
    return _SECRET_LIKE.sub("ed25519:<redacted>", text)


def error_line(message: str, kind: str = "error") -> str:
    """One line, whatever the message: embedded newlines would break ``solver: error:`` greps."""
    return f"{PROG}: {kind}: " + " ".join(redact(message).split())


def _print_error(message: str) -> None:
    print(error_line(message), file=sys.stderr)


def warn(message: str) -> None:
    """A one-line ``solver: warning: ...`` on stderr (the command goes on)."""
    print(error_line(message, "warning"), file=sys.stderr)


def note(message: str) -> None:
    """A one-line ``solver: note: ...`` on stderr: worth knowing, nothing wrong."""
    print(error_line(message, "note"), file=sys.stderr)


def read_json_input(source: str, what: str) -> Any:
    """Parse JSON from the file ``source`` or, for ``-``, standard input.

    Every failure is a :class:`ConfigError` naming ``what`` (exit code 2).
    """
    if source == "-":
        stream = sys.stdin
        if stream is None:
            raise ConfigError(f"no standard input to read the {what} from")
        if stream.isatty():
            print(
                f"{PROG}: reading the {what} from standard input (end with Ctrl-D)", file=sys.stderr
            )
        buffer = getattr(stream, "buffer", None)
        data: bytes | str = buffer.read() if buffer is not None else stream.read()
        origin = "standard input"
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {what} file {source}: {exc.strerror}") from None
        origin = source
    if not data.strip():
        raise ConfigError(f"{origin} is empty: expected the {what} as JSON")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{origin} is not valid JSON ({exc}): expected the {what}") from None


def print_json(value: Any) -> None:
    """Compact one-line JSON on stdout (``orjson``: amounts are already strings)."""
    sys.stdout.write(orjson.dumps(value).decode("utf-8") + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    args: argparse.Namespace | None = None
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(words)
        try:
            args = parser.parse_args(words)
        except _ParserExit as done:
            return done.status
        except UsageError as exc:
            hint = f" (see '{exc.prog} --help')"
            _print_error(exc.message + hint)
            return EXIT_USAGE
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:  # a group registered without a handler: show what it offers
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except SolverError as exc:
        _print_error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (``solver ... | head``): stay quiet, as a Unix filter does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        if args is not None and args.traceback:
            raise
        # Only the type: a library's message could quote input we were given (a secret).
        _print_error(
            f"internal error ({type(exc).__name__}); "
            f"rerun as '{PROG} --traceback ...' and report the traceback"
        )
        return EXIT_SOFTWARE
