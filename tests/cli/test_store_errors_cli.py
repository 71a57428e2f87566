"""``solver run``, ``solver history`` and ``solver store export`` refuse an unusable store at
start: one ``solver: error:`` line naming the file and what is wrong, exit 2, no traceback and
no "internal error" (issue 10). The stores are made for real (:mod:`tests.io.store_files`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.cli import main
from solver.protocol.keys import SecretKey
from tests.cli.helpers import KEY_VAR, assert_one_line_error, run_solver
from tests.config.helpers import minimal, write_yaml
from tests.io.store_files import KINDS, WORDS, unusable_store

READERS = {
    "history": ["history", "--db", "{path}"],
    "store export": ["store", "export", "--db", "{path}", "--table", "quotes", "--format", "csv"],
}


def assert_refused(code: int, out: str, err: str, path: Path, kind: str) -> None:
    assert (code, out) == (2, ""), err
    assert_one_line_error(err)
    assert f"solver: error: the store {path} {WORDS[kind]}" in err, err
    assert "internal error" not in err


@pytest.mark.parametrize("command", sorted(READERS))
@pytest.mark.parametrize("kind", KINDS)
def test_readers_refuse_an_unusable_store(
    command: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unusable_store(kind, tmp_path / "var") as path:
        code = main([arg.format(path=path) for arg in READERS[command]])
        captured = capsys.readouterr()
        assert_refused(code, captured.out, captured.err, path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_solver_run_refuses_an_unusable_store_before_it_connects(kind: str, tmp_path: Path) -> None:
    """A child process, as an operator runs it: the bus URLs of the config lead nowhere, so a
    bot that got past the store would hang or fail differently."""
    with unusable_store(kind, tmp_path / "var") as path:
        data = minimal()
        data["storage"] = {"path": str(path)}
        config = write_yaml(tmp_path / "bot.yaml", data)
        done = run_solver(
            ["run", "--config", str(config)],
            env={KEY_VAR: SecretKey.generate().to_text()},
            module=True,
        )
        assert_refused(done.returncode, done.stdout, done.stderr, path, kind)
