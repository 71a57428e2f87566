"""A consistent copy of the store while its owner keeps it open (``solver store backup``).

The owner holds the store alone (exclusive locking, :mod:`solver.io.store.owner`), so no other
process can copy it safely — nor can ``cp`` of a database whose WAL is in use. The copy is made
by the owner itself through SQLite's online backup API (``sqlite3.Connection.backup``) on its
own connection, between two of its commits: a snapshot of everything committed. It is written
to a new file beside the destination, turned into a self-contained rollback-journal database
(no ``-wal`` to carry along), checked (``quick_check``), synced and only then renamed into
place, so a destination that exists is always whole.

The copy runs in one call: it holds the caller (the bot's event loop) while SQLite copies every
page, about as long as reading the file from the page cache (docs/operations.md "Backups").
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from solver.io.store.schema import StoreError


def backup_to(source: sqlite3.Connection, path: Path, dest: Path) -> int:
    """Copy the database open on ``source`` (the store at ``path``) to ``dest``, which must
    not exist; returns the copy's size in bytes. Raises :class:`StoreError`."""
    if source.in_transaction:  # the backup would wait for it for ever
        raise StoreError("cannot back up the store inside an open transaction")
    if dest.exists():
        raise StoreError(f"the backup {dest} exists already: give a new file")
    if not dest.parent.is_dir():
        raise StoreError(f"the backup's directory {dest.parent} does not exist")
    if dest.resolve() == path.resolve():
        raise StoreError("the backup must not be the store itself")
    temp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        copy = sqlite3.connect(temp, isolation_level=None)
        try:
            copy.execute("PRAGMA locking_mode = EXCLUSIVE")  # no -shm beside the copy either
            source.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")
            check = copy.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreError(f"the backup {dest} failed its integrity check: {check}")
        finally:
            copy.close()
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, dest)
        return dest.stat().st_size
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot back up the store {path} to {dest}: {exc}") from None
    finally:
        for leftover in (temp, Path(f"{temp}-journal"), Path(f"{temp}-wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
