"""The ``solver`` dispatcher: version, usage errors, interrupts and bugs become exit codes."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import solver
import solver.cli.intents
from solver.cli import COMMAND_MODULES, COMMANDS, build_parser, error_line, main, modules_for
from solver.errors import RemoteError
from tests.cli.helpers import SALT_HEX, assert_one_line_error, run_solver


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"solver {solver.__version__}\n"


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["intents", "verify", "--help"]) == 0
    out = capsys.readouterr().out
    assert "ledger matter" in out.replace("\n", " ") or "NOT checked" in out


@pytest.mark.parametrize(
    "argv", [[], ["bogus"], ["intents"], ["intents", "nonce"], ["--no-such-flag"]]
)
def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line_error(captured.err)
    assert "--help" in captured.err


def test_every_registered_module_adds_its_group() -> None:
    parser = build_parser()
    assert {"solver.cli.intents", "solver.cli.keys", "solver.cli.sandbox"} <= set(COMMAND_MODULES)
    groups = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"intents", "keys", "sandbox"} <= set(groups.choices)


def _raiser(exc: BaseException) -> object:
    def handler(args: argparse.Namespace) -> int:
        raise exc

    return handler


def test_keyboard_interrupt_is_130_and_quiet(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(solver.cli.intents, "cmd_nonce", _raiser(KeyboardInterrupt()))
    assert main(["intents", "nonce", "--salt", SALT_HEX]) == 130
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def test_solver_errors_are_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        solver.cli.intents, "cmd_nonce", _raiser(RemoteError("invalid salt\nsecond line"))
    )
    assert main(["intents", "nonce", "--salt", SALT_HEX]) == 2
    assert capsys.readouterr().err == "solver: error: invalid salt second line\n"


def test_a_bug_is_one_line_without_its_message_unless_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(solver.cli.intents, "cmd_nonce", _raiser(ValueError("private detail")))
    assert main(["intents", "nonce", "--salt", SALT_HEX]) == 70
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "ValueError" in err
    assert "private detail" not in err

    with pytest.raises(ValueError, match="private detail"):
        main(["--traceback", "intents", "nonce", "--salt", SALT_HEX])


def test_error_line_redacts_secret_shaped_text() -> None:
    secret = "ed25519:" + "3" * 87
    public = "ed25519:" + "4" * 44
    line = error_line(f"bad {secret} and {public}")
    assert line == f"solver: error: bad ed25519:<redacted> and {public}"


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("busy_offset", [0, 1])
def test_sandbox_on_a_busy_port_is_a_one_line_error_naming_it(
    tmp_path: Path, busy_offset: int
) -> None:
    """``solver sandbox --port N`` when N (or N+1, the chain RPC's) is taken: exit 2 and one
    line naming the port, not ``internal error (OSError)`` and 70 (issue 24).

    With ``busy_offset`` 1 the port below the held one must be free for the test to mean
    anything, and another test on the machine may take it meanwhile (a run named it once): a
    run whose error names that port instead is tried again with a fresh pair, a few times."""
    doc = yaml.safe_load((ROOT / "config" / "sandbox.yaml").read_text(encoding="utf-8"))
    doc["state_dir"] = str(tmp_path / "state")
    state = tmp_path / "sandbox.yaml"
    state.write_text(yaml.safe_dump(doc), encoding="utf-8")
    for _attempt in range(5):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", 0))
            busy = holder.getsockname()[1]
            holder.listen()
            base = busy - busy_offset
            argv = ["sandbox", "--config", str(state), "--port", str(base), "--no-takers"]
            result = run_solver(argv)
        if busy_offset and f"127.0.0.1:{base}: in use" in result.stderr:
            continue  # someone else held the port below ours: not what this test holds
        break
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("solver: error:"), lines
    assert f"127.0.0.1:{busy}" in lines[0] and "in use" in lines[0], lines
    assert "internal error" not in result.stderr


def test_each_command_is_registered_by_the_modules_named_for_it() -> None:
    """:data:`solver.cli.COMMANDS` against what the modules register: every command of the
    full parser is there, and its modules alone register it with every subcommand."""

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        group = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return dict(group.choices)

    every = commands(build_parser())
    assert set(every) == set(COMMANDS)
    for name, full in every.items():
        alone = commands(build_parser([name]))[name]
        assert alone.format_help() == full.format_help(), name


@pytest.mark.parametrize(
    ("argv", "modules"),
    [
        (["intents", "nonce"], ("solver.cli.intents",)),
        (["--traceback", "status", "--config", "x"], ("solver.cli.ops",)),
        (["backtest", "run", "s"], COMMANDS["backtest"]),
        (["--help"], COMMAND_MODULES),
        (["bogus"], COMMAND_MODULES),
        ([], COMMAND_MODULES),
    ],
)
def test_a_named_command_imports_only_its_modules(argv: list[str], modules: object) -> None:
    assert modules_for(argv) == modules


def test_a_cli_command_does_not_import_the_others_heavy_dependencies() -> None:
    """``solver intents`` runs without FastAPI, psycopg, the config models, httpx or the
    key-management commands loaded (together ~1.4 s of a start on a slow machine)."""
    code = (
        "import sys; from solver.cli import main; "
        "code = main(['intents', 'nonce', '--salt', '" + SALT_HEX + "']); "
        "heavy = ('fastapi', 'psycopg', 'solver.config', 'httpx', 'solver.cli.keys'); "
        "print(sorted(m for m in heavy if m in sys.modules), code)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip().splitlines()[-1] == "[] 0", done.stdout + done.stderr


def test_a_bot_on_sqlite_and_the_store_commands_start_without_psycopg() -> None:
    """psycopg is imported by the PostgreSQL store alone (~0.4 s of a start): the bot, its
    store and the CLI's store access load it only for a ``storage.url``; its errors are
    caught as database errors once it is loaded (:func:`solver.io.store.schema.db_errors`)."""
    code = (
        "import sqlite3, sys\n"
        "import solver.runtime.bot, solver.cli.store_access, solver.cli.history\n"
        "from solver.io.store.pg import is_pg\n"
        "from solver.io.store.schema import db_errors\n"
        "from solver.io.store.sqlite_store import Store\n"
        "print('psycopg' in sys.modules, db_errors() == (sqlite3.Error,))\n"
        "import psycopg\n"
        "print(psycopg.Error in db_errors(), is_pg(object()))\n"
        "from solver.io.store.pg.store import PgStore\n"
        "print(is_pg(PgStore.__new__(PgStore)), is_pg(Store.__new__(Store)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.split() == ["False", "True", "True", "False", "True", "False"], (
        done.stdout + done.stderr
    )
