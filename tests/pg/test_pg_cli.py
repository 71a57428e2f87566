"""The store's commands on PostgreSQL: ``solver store copy`` from SQLite, then ``solver
history`` and ``solver store export`` reading the copy (in-process ``solver.cli.main``)."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from solver.cli import main
from solver.core import facts as f
from solver.core.lifecycle import QuoteState
from solver.io.store.pg.store import PgStore
from solver.io.store.sqlite_store import Store
from tests.app.test_cli_run import write_config
from tests.io.store_helpers import ACCOUNT, T0, T0_US, move, record, signed_quote
from tests.pg.cluster import PASSWORD_ENV


def test_an_sqlite_store_copied_into_postgresql_reads_the_same(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "solver.sqlite"
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("q1"), signed_quote("q2", at=T0 + timedelta(seconds=1)))
        move(store, "q1", QuoteState.WON, intent_hash="i1")
        move(store, "q1", QuoteState.SETTLED, intent_hash="i1", tx_hash="t1")
        store.journal.append(f.PauseSet("*", "daily_loss", "too much", T0_US))
        store.commit()
        store.claim_nonce_prefix(T0)
        store.journal.write_snapshot({"not": "a desk"}, T0_US)
        store.journal.append(f.PauseCleared("*", "daily_loss", T0_US, "operator"))
        store.commit()  # one entry after the snapshot, not projected yet
        expected = store.journal.load()
        quotes = store.quotes_since(limit=10)
        prefixes = store.nonce_prefixes(ACCOUNT)
        entries = store.export("journal", "jsonl", io.StringIO())

    assert main(["store", "copy", "--db", str(db), "--to", pg_url,
                 "--password-env", PASSWORD_ENV]) == 0  # fmt: skip
    assert "copied" in capsys.readouterr().out
    copy = PgStore(pg_url, password_env=PASSWORD_ENV, account=ACCOUNT)
    try:
        assert copy.journal.load() == expected
        assert copy.try_take_lease()
        copy.project()  # what the SQLite bot had not projected yet
        assert copy.quotes_since(limit=10) == quotes
        assert copy.nonce_prefixes(ACCOUNT) == prefixes
        assert copy.open_alerts() == []  # the entry after the snapshot, projected here
        copy.journal.append(f.PauseSet("*", "stale_data", "old", T0_US))
        copy.journal.commit()  # the journal's numbering goes on after the copied rows
    finally:
        copy.close()
    # A second copy into a store that holds a journal is refused, and changes nothing.
    assert main(["store", "copy", "--db", str(db), "--to", pg_url,
                 "--password-env", PASSWORD_ENV]) == 2  # fmt: skip
    assert "holds a journal already" in capsys.readouterr().err

    config = write_config(
        tmp_path / "pg.yaml",
        {
            "account.id": ACCOUNT,
            "storage.url": pg_url,
            "storage.password_env": PASSWORD_ENV,
            "metrics.listen": None,
        },
    )
    assert main(["history", "--config", str(config), "--kind", "quotes", "--format", "json"]) == 0
    listed = orjson.loads(capsys.readouterr().out)
    assert {row["quote_id"] for row in listed} == {"q1", "q2"}
    assert main(["store", "export", "--config", str(config), "--table", "journal",
                 "--format", "jsonl"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == entries + 1  # and the one the PostgreSQL store appended


def test_a_password_in_storage_url_is_refused_and_never_echoed(tmp_path: Path) -> None:
    from solver.config import load_bot_config
    from solver.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        write_config(tmp_path / "bad.yaml", {"storage.url": "postgresql://u:hunter2@h/db"})
    assert "storage.password_env" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    good = write_config(tmp_path / "good.yaml", {"storage.url": "postgresql://u@h/db"})
    assert load_bot_config(good).storage.url == "postgresql://u@h/db"


def test_store_backup_of_a_postgresql_store_says_to_use_the_databases_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``solver store backup`` copies SQLite stores; on ``storage.url`` it refuses clearly
    (exit 2 with a message naming pg_dump), never a traceback."""
    config = write_config(tmp_path / "bot.yaml", {"storage.url": "postgresql://u@127.0.0.1:9/db"})
    code = main(["store", "backup", "--config", str(config), "--out", str(tmp_path / "b.sqlite")])
    assert code == 2
    err = capsys.readouterr().err
    assert "pg_dump" in err and "Traceback" not in err
    assert not (tmp_path / "b.sqlite").exists()
