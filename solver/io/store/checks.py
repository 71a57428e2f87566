"""Refuse an unusable store when it is opened, naming what is wrong with it (issue 10).

The bot writes every quote to the store before the answer leaves (DESIGN "The quote path"), so a
store it cannot write, or one whose pages are damaged, must stop it at start with a clear line —
"the store var/bot.db is read-only" — not fail on the first quote, or with SQLite's bare
"attempt to write a readonly database" or "file is not a database" (which do not say which file)
after the bot has connected to the bus. The three findings:

- **not a SQLite database**: the file does not start with SQLite's header (or SQLite says so);
- **read-only**: the process may not write the file or create the ``-wal`` / ``-shm`` files
  beside it (``os.access``), or SQLite refuses a write. Both are needed: ``os.access`` is true
  for root whatever the mode bits say, and SQLite opens an unwritable file read-only without a
  word, then in WAL mode even lets ``BEGIN IMMEDIATE`` through; only a real write (undone at
  once) shows it;
- **damaged**: ``PRAGMA quick_check`` (every page and b-tree, without the index-content cross
  check of ``integrity_check``, so linear in the file's size) reports a problem, or SQLite finds
  the file malformed while reading it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from solver.io.store.schema import StoreError

SQLITE_HEADER = b"SQLite format 3\x00"


def refuse_unusable_file(path: Path) -> None:
    """Before SQLite opens ``path``: refuse a file that is not a database, or not writable
    (even a reader of a WAL database writes its ``-shm`` file)."""
    if not path.is_file():
        return  # created by the open (or "no store at ..." when creating is not allowed)
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"the store {path} cannot be read ({exc.strerror})") from None
    if header and header != SQLITE_HEADER:
        raise StoreError(f"the store {path} is not a SQLite database")
    if not os.access(path, os.W_OK):
        raise StoreError(f"the store {path} is read-only (no write permission on the file)")
    directory = path.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreError(
            f"the store {path} is read-only (its directory {directory} is not writable, and "
            "SQLite needs to create the -wal and -shm files there)"
        )


def check_usable(conn: sqlite3.Connection, path: Path, *, writable: bool = True) -> None:
    """On a fresh autocommit connection: refuse a damaged store, or (``writable``) one SQLite
    cannot write. The write probe takes the write lock for an instant, so a reader skips it:
    it would wait for a running bot's transaction, and it needs no write.

    Raises :class:`StoreError` (SQLite's own errors are translated by :func:`open_error`).
    """
    rows = conn.execute("PRAGMA quick_check").fetchall()
    findings = [line for (text,) in rows for line in str(text).splitlines()]
    findings = [line for line in findings if line != "ok" and not line.startswith("***")]
    if findings:
        more = f"; and {len(findings) - 1} more" if len(findings) > 1 else ""
        raise StoreError(f"the store {path} is damaged (integrity check: {findings[0]}{more})")
    if not writable:
        return
    # A real write, undone at once: BEGIN IMMEDIATE alone succeeds on a read-only WAL database.
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def open_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """SQLite's error at open time as a :class:`StoreError` naming the store and the problem."""
    name = getattr(exc, "sqlite_errorname", "")
    if name.startswith("SQLITE_READONLY"):
        return StoreError(f"the store {path} is read-only (SQLite: {exc})")
    if name == "SQLITE_NOTADB":
        return StoreError(f"the store {path} is not a SQLite database")
    if name.startswith("SQLITE_CORRUPT"):
        return StoreError(f"the store {path} is damaged (integrity check: {exc})")
    return StoreError(f"cannot open the store {path}: {exc}")
