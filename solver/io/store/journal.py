"""The desk's journal in the SQLite store (DESIGN "Persistence is the desk's journal").

Every fact the desk decides (:mod:`solver.core.facts`) is appended to the ``journal`` table in
the store's open transaction; :meth:`SqliteJournal.commit` makes the batch durable, and the
driver commits before any answer decided in the batch leaves the process (group commit: one
commit per turn of the event loop, not one per quote). On start, :meth:`SqliteJournal.load`
gives the latest desk snapshot and every fact after it, and the desk applies them in order.

The quote path writes one row per answer: the journal entry, with the signed answer (kept
for disputes). Its nonce needs no row of its own: quote nonces are unique by construction
(:class:`~solver.protocol.nonce.NonceSequence`, a prefix the store registers per start). The
tables people query — quotes, transitions, fills, balance snapshots, alerts — are derived from
the journal in batches, off the quote path (:mod:`solver.io.store.projection`), a tick behind at
most while the bot runs.

The interface is small (append, commit, rollback, load, snapshot) so that a shared PostgreSQL
journal for several instances can stand beside this one later.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import orjson

from solver.core import facts as f
from solver.io.store.schema import StoreError

INSERT_ENTRY = "INSERT INTO journal (at, kind, body) VALUES (?, ?, ?)"


class SqliteJournal:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self.appended = 0
        self.held: list[tuple[str, tuple[Any, ...]]] | None = None
        """While the store's checkpoint pass has the connection (in its thread): the rows
        appended meanwhile, written to SQLite, in order, when the pass ends (the store sets
        it; :meth:`wait_commit`)."""
        self.settle: Callable[[], None] | None = None
        """The store's: waits for a pass in progress to end and writes :attr:`held`."""
        self._resume: list[Callable[[], None]] = []
        self.lost: str | None = None
        """Set when the store committed the open transaction for another reason (projection,
        a status read, a write of its own) and that commit failed: what the driver appended
        was rolled back with it, so its own next :meth:`commit` must fail too, or it would
        send answers that are not in the journal (issue 24)."""
        """Facts appended since this journal was opened; it only ever grows (a rollback does
        not take it back). Read by the snapshots' pacing, the store's checkpointer and its
        projection, each against its own mark."""

    # ------------------------------------------------------------------ writing

    def append(self, fact: f.Fact) -> None:
        """Append ``fact`` to the open transaction; ``commit`` makes it durable (a
        ``QuoteOpened`` carries its signed answer, kept for disputes)."""
        held = self.held
        if held is not None:  # the checkpoint pass has the connection: SQLite gets it after
            if type(fact) is f.QuoteOpened:
                body = orjson.dumps(f.encode(fact)).decode()
                held.append((INSERT_ENTRY, (f.micros(fact.created_at), "quote_opened", body)))
            else:
                body_text = orjson.dumps(f.encode(fact)).decode()
                held.append((INSERT_ENTRY, (f.micros(_at(fact)), f.kind_of(fact), body_text)))
            self.appended += 1
            return
        cur = self._cur
        try:
            if not self._conn.in_transaction:
                cur.execute("BEGIN")
            if type(fact) is f.QuoteOpened:
                body = orjson.dumps(f.encode(fact)).decode()
                entry = (f.micros(fact.created_at), "quote_opened", body)
            else:
                body_text = orjson.dumps(f.encode(fact)).decode()
                entry = (f.micros(_at(fact)), f.kind_of(fact), body_text)
            cur.execute(INSERT_ENTRY, entry)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot record {f.kind_of(fact)}: {exc}") from None
        self.appended += 1

    def commit(self) -> None:
        """Make everything appended so far durable (the group commit). Raises
        :class:`StoreError` when it fails, or when the store's own commit of what was
        appended failed since the last call (:attr:`lost`). While a checkpoint pass runs,
        this waits for it to end (:meth:`wait_commit` does not)."""
        if self.held is not None and self.settle is not None:
            self.settle()
        lost, self.lost = self.lost, None
        if self._conn.in_transaction:
            try:
                self._cur.execute("COMMIT")
            except sqlite3.Error as exc:
                self.rollback()
                raise StoreError(f"cannot commit the journal: {exc}") from None
        if lost is not None:
            raise StoreError(f"cannot commit the journal: {lost}")

    def wait_commit(self, resume: Callable[[], None]) -> bool:
        """True when :meth:`commit` would wait for the store's checkpoint pass (in its
        thread): ``resume`` is then called, on the owner's thread, once it ended and what was
        appended meanwhile is in SQLite's transaction. False: commit now."""
        if self.held is None:
            return False
        if resume not in self._resume:
            self._resume.append(resume)
        return True

    def resumed(self) -> None:
        """The pass ended (the store, after writing :attr:`held`): call those waiting."""
        waiting, self._resume = self._resume, []
        for resume in waiting:
            resume()

    def rollback(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._cur.execute("ROLLBACK")

    # ------------------------------------------------------------------ reading

    def load(self) -> tuple[dict[str, Any] | None, list[f.Fact]]:
        """The latest desk snapshot (or None) and every fact appended after it, in order.

        An entry that cannot be read back stops the start with its sequence number: applying
        the rest without it would rebuild a desk that is silently wrong."""
        row = self._conn.execute(
            "SELECT seq, body FROM desk_snapshots ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        snapshot: dict[str, Any] | None = None
        after = 0
        if row is not None:
            after = int(row[0])
            try:
                snapshot = orjson.loads(row[1])
            except orjson.JSONDecodeError as exc:
                raise StoreError(
                    f"the desk snapshot at journal entry {after} is damaged: {exc}"
                ) from None
        facts: list[f.Fact] = []
        sql = "SELECT seq, kind, body FROM journal WHERE seq > ? ORDER BY seq"
        for seq, kind, body in self._conn.execute(sql, (after,)):
            try:
                facts.append(f.decode(kind, orjson.loads(body)))
            except (f.FactError, orjson.JSONDecodeError) as exc:
                raise StoreError(f"journal entry {seq} ({kind}) cannot be read: {exc}") from None
        return snapshot, facts

    def write_snapshot(self, body: Mapping[str, Any], at: datetime) -> int:
        """Store a desk snapshot covering every fact appended so far (committed with them).
        Returns the journal position it covers. Older snapshots but the previous are dropped."""
        self.commit()
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
        seq = int(row[0])
        try:
            cur = self._cur
            cur.execute("BEGIN")
            cur.execute(
                "INSERT OR REPLACE INTO desk_snapshots (seq, at, body) VALUES (?, ?, ?)",
                (seq, f.micros(at), orjson.dumps(dict(body)).decode()),
            )
            cur.execute(
                "DELETE FROM desk_snapshots WHERE seq < (SELECT seq FROM desk_snapshots "
                "ORDER BY seq DESC LIMIT 1 OFFSET 1)"
            )
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreError(f"cannot write the desk snapshot: {exc}") from None
        return seq


def _at(fact: f.Fact) -> datetime:
    if type(fact) is f.BalancesReconciled:
        return fact.observed
    if type(fact) is f.QuoteOpened:
        return fact.created_at
    at: datetime = getattr(fact, "at")  # noqa: B009 (every other fact has ``at``)
    return at
