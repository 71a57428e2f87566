"""A store that cannot be used is refused when it is opened, with its path and what is wrong
(issue 10): read-only, damaged, not a database. The files are made for real (see
:mod:`tests.io.store_files`, including how read-only is made meaningful as root)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from solver.io.store.checks import check_usable, open_error
from solver.io.store.sqlite_store import Store, StoreError
from tests.io.store_files import KINDS, WORDS, good_store, unusable_store


@pytest.mark.parametrize("kind", KINDS)
def test_an_unusable_store_is_refused_naming_the_file_and_the_problem(
    kind: str, tmp_path: Path
) -> None:
    with unusable_store(kind, tmp_path / "var") as path:
        with pytest.raises(StoreError) as refused:
            Store(path, checkpoint_every_s=None)
        message = str(refused.value)
        assert message.startswith(f"the store {path} {WORDS[kind]}"), message
        with pytest.raises(StoreError, match=WORDS[kind].split(" (")[0]):
            Store(path, create=False, checkpoint_every_s=None)  # the readers' way in too


def test_a_good_store_opens_and_a_new_one_is_created(tmp_path: Path) -> None:
    path = good_store(tmp_path / "good.db", quotes=5)
    with Store(path, checkpoint_every_s=None) as store:
        assert len(store.journal.load()[1]) == 5
    with Store(tmp_path / "new" / "fresh.db", checkpoint_every_s=None) as store:
        assert store.journal.load() == (None, [])


def test_sqlite_refusing_the_write_probe_is_read_only(tmp_path: Path) -> None:
    """The write probe, independent of who runs the test: a ``mode=ro`` connection cannot
    write even as root, and in WAL mode it still lets ``BEGIN IMMEDIATE`` through."""
    path = good_store(tmp_path / "ro.db", quotes=1)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")  # what a lazier probe would take for "writable"
        conn.execute("ROLLBACK")
        with pytest.raises(sqlite3.Error) as refused:
            check_usable(conn, path)
        assert not conn.in_transaction
    finally:
        conn.close()
    assert str(open_error(path, refused.value)).startswith(f"the store {path} is read-only")


def test_check_usable_leaves_the_store_unchanged(tmp_path: Path) -> None:
    path = good_store(tmp_path / "same.db", quotes=3)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        before = conn.execute("PRAGMA data_version").fetchone(), conn.total_changes
        check_usable(conn, path)
        assert (conn.execute("PRAGMA data_version").fetchone(), conn.total_changes) == before
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
    finally:
        conn.close()
