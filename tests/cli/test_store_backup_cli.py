"""``solver store backup`` and the readers' way in while a bot holds the store (issue 24): a
stopped bot's store is copied by the command itself; a store held by a running bot that serves
no known control API is refused naming the holder, with what to do."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from solver.cli import main
from solver.io.store.sqlite_store import Store
from tests.io.store_helpers import ACCOUNT, record, signed_quote

REPO = Path(__file__).resolve().parents[2]


def test_backup_of_a_stopped_bots_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("q1"), signed_quote("q2"))
    out = tmp_path / "copies" / "bot.bak"
    out.parent.mkdir()
    assert main(["store", "backup", "--db", str(db), "--out", str(out)]) == 0
    assert "the bot was not running" in capsys.readouterr().out
    with Store(out, create=False) as copy:
        assert len(copy.journal.load()[1]) == 2
    assert main(["store", "backup", "--db", str(db), "--out", str(out)]) == 2
    assert "exists already" in capsys.readouterr().err


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from solver.io.store.sqlite_store import Store
    store = Store(sys.argv[1], account="solver.sandbox")
    print("holding", flush=True)
    time.sleep(600)
    """
)


def test_a_held_store_without_a_known_api_is_refused_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "bot.sqlite"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db)], cwd=REPO, stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
            for argv in (
                ["history", "--db", str(db)],
                ["store", "export", "--db", str(db), "--table", "quotes", "--format", "csv"],
                ["store", "backup", "--db", str(db), "--out", str(tmp_path / "b.sqlite")],
            ):
                assert main(argv) == 2
                err = capsys.readouterr().err
                assert f"in use by a running bot: pid {holder.pid}" in err, err
                assert "give --url" in err, err
        finally:
            holder.kill()
            holder.wait(timeout=30)
