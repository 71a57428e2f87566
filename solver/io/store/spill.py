"""Where the journal's group commits go while a checkpoint pass has the connection (issue 29).

The store is one SQLite connection (exclusive locking: :mod:`solver.io.store.sqlite_store`), and
a checkpoint pass holds it in the store's thread for 7–35 ms. Until this module, a group commit
that fell in a pass waited for its end with its answers: ~4 % of the answers at 2,000 requests/s
waited 6–35 ms, which made the bot's p99 and its largest answer gap the pass's length.

Now such a commit appends its journal rows to a file beside the store, ``<store>-spill``, with one
``write`` (plus an ``fdatasync`` when the store runs ``synchronous="full"``), and the answers
leave. That is the same durability the WAL gives a commit under ``synchronous=NORMAL``: once the
``write`` returned the rows are in the OS page cache and survive the process dying in any way,
``kill -9`` included. When the pass ended, the next commit inserts the spilled rows into the
journal first, in order, and empties the file in the same step (after SQLite's ``COMMIT``).

A process that died with rows in the file leaves them there: the next writer to open the store
moves them into the journal before it reads anything (:func:`recover`), so a restart rebuilds
the desk from every fact whose answer could have left. A line cut short by the death (only the
last can be) was never followed by its answers — they leave after the ``write`` returns — and is
dropped with a warning.

A process that died after the commit that moved the rows, before the file was emptied (or that
could not empty it), leaves rows the journal holds already: inserted again, a restart would
apply those facts twice. So the rows of a pass follow a line giving the journal's last entry
when the pass began (:meth:`Spill.start`): nothing else enters the journal until they do, so a
journal past that entry holds them, and :func:`recover` drops them.

Each line is JSON: ``{"after": seq}`` (a pass's rows follow), or one journal row,
``[at_us, kind, body]``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import orjson

from solver.io.store.schema import StoreError

log = logging.getLogger("solver.store")

INSERT_ENTRY = "INSERT INTO journal (at, kind, body) VALUES (?, ?, ?)"

Row = tuple[int, str, str]


def spill_path(store: Path) -> Path:
    return Path(f"{store}-spill")


class Spill:
    """The spill file of one store, open for appending while the store is (owner only)."""

    def __init__(self, path: Path, *, sync: bool = False) -> None:
        self.path = path
        self._sync = sync
        self._fd: int | None = None
        self.rows: list[Row] = []
        """What the file holds, in order: inserted into the journal at the next commit."""
        self.spilled = 0
        """Rows spilled since the store opened (a count for tests and figures)."""
        self._after = 0

    def start(self, after: int) -> None:
        """A checkpoint pass begins, the journal's last entry at ``after`` (the file is
        empty: the owner committed): rows spilled in it follow that position in the file."""
        self._after = after

    def write(self, rows: list[Row]) -> None:
        """Append ``rows`` durably (as the WAL under the store's ``synchronous``); raises
        :class:`StoreError` (nothing of them may then be sent)."""
        data = b"".join(orjson.dumps(row) + b"\n" for row in rows)
        if not self.rows:  # the pass's first: where they go in the journal
            data = orjson.dumps({"after": self._after}) + b"\n" + data
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            written = os.write(self._fd, data)
            if written != len(data):  # a full disk: the rest cannot follow, refuse all
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
                raise OSError(f"wrote {written} of {len(data)} bytes")
            if self._sync:
                os.fdatasync(self._fd)
        except OSError as exc:
            raise StoreError(f"cannot spill the journal to {self.path}: {exc}") from None
        self.rows.extend(rows)
        self.spilled += len(rows)

    def emptied(self) -> None:
        """The rows are committed in the journal: the file starts over."""
        self.rows = []
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError as exc:  # the next open finds the journal past them: dropped
                log.warning("cannot empty %s: %s", self.path, exc)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self.rows:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove %s: %s", self.path, exc)


def recover(conn: sqlite3.Connection, path: Path) -> int:
    """Move the rows a dead owner left in the spill file into the journal (one transaction),
    but those it had moved already, then remove the file; returns how many. Raises
    :class:`StoreError` when they cannot be written (the store is not opened without them)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    passes = _passes(path, data)
    moved = 0
    try:
        conn.execute("BEGIN")
        for after, rows in passes:
            if not rows:  # its rows cut short
                continue
            (last,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
            if last > after:  # moved by the commit after that pass
                log.warning("%s: %d rows in the journal already, dropped", path, len(rows))
                continue
            conn.executemany(INSERT_ENTRY, rows)
            moved += len(rows)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreError(f"cannot move spilled journal rows: {exc}") from None
    if moved:
        log.warning(
            "%d journal entries recovered from %s (the last owner stopped during a checkpoint)",
            moved, path,
        )  # fmt: skip
    path.unlink()
    return moved


def _passes(path: Path, data: bytes) -> list[tuple[int, list[Row]]]:
    """The file's rows by pass, each with the journal's last entry when the pass began."""
    passes: list[tuple[int, list[Row]]] = []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            item = orjson.loads(line)
            if isinstance(item, dict):
                passes.append((int(item["after"]), []))
            else:
                at, kind, body = item
                passes[-1][1].append((int(at), str(kind), str(body)))
        except (orjson.JSONDecodeError, ValueError, TypeError, KeyError, IndexError):
            if number == len(lines):  # the last, cut short: its answers never left
                log.warning("%s: line %d cut short, dropped (never sent)", path, number)
                continue
            raise StoreError(f"{path}: line {number} is damaged; move the file aside") from None
    return passes
