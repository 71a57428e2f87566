"""The desk's journal in the SQLite store (DESIGN "Persistence is the desk's journal").

Every fact the desk decides (:mod:`solver.core.facts`) is appended to the ``journal`` table in
the store's open transaction; :meth:`SqliteJournal.commit` makes the batch durable, and the
driver commits before any answer decided in the batch leaves the process (group commit: one
commit per turn of the event loop, not one per quote). On start, :meth:`SqliteJournal.load`
gives the latest desk snapshot and every fact after it, and the desk applies them in order.

The quote path writes one row per answer: the journal entry, with the signed answer (kept
for disputes). Rows wait in memory until the commit, which writes the turn's batch with one
``executemany`` inside its transaction (issue 29: a statement per fact cost ~5 µs an answer;
the batch, ~1.5 µs a row). Nothing appended is in SQLite before the commit, so a commit the
store makes for its own reasons (projection, a read) writes them first, in order.

An answer's nonce needs no row of its own: quote nonces are unique by construction
(:class:`~solver.protocol.nonce.NonceSequence`, a prefix the store registers per start). The
tables people query — quotes, transitions, fills, balance snapshots, alerts — are derived from
the journal in batches, off the quote path (:mod:`solver.io.store.projection`), a tick behind at
most while the bot runs.

The interface is small (append, commit, rollback, load, snapshot) so that a shared PostgreSQL
journal for several instances can stand beside this one later.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Mapping
from typing import Any

import orjson

from solver.core import fact_codec
from solver.core import facts as f
from solver.core.clock import Micros
from solver.io.store.quote_counts import MINUTE_US
from solver.io.store.quote_rows import HANDOFF_CAP, Handed
from solver.io.store.schema import StoreError
from solver.io.store.spill import Spill

log = logging.getLogger("solver.store")

INSERT_ENTRY = "INSERT INTO journal (at, kind, body) VALUES (?, ?, ?)"
DROP_OLD_SNAPSHOTS = (
    "DELETE FROM desk_snapshots WHERE seq < (SELECT seq FROM desk_snapshots "
    "ORDER BY seq DESC LIMIT 1 OFFSET 1)"
)
INSERT_SNAPSHOT = "INSERT OR REPLACE INTO desk_snapshots (seq, at, body) SELECT ?, ?, ? WHERE ?"
"""The last value says whether to insert: executed again with 0 and an empty body once the
snapshot is written, it inserts nothing and SQLite lets go of the body (``write_snapshot``)."""


class SqliteJournal:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self.appended = 0
        self.rows: list[tuple[int, str, str]] = []
        """Journal entries appended since the last commit, in order (written at the commit)."""
        self.extra: list[tuple[str, tuple[Any, ...]]] = []
        """Other rows of the group commit (the store's request samples): statement, values.
        Written in a savepoint: one SQLite refuses costs the commit nothing (counted in
        :attr:`extra_failed`, logged the first time and every 1,000th)."""
        self.extra_failed = 0
        self.handoff: dict[str, Handed] | None = None
        """The projection's :attr:`~solver.io.store.quote_rows.QuoteRows.handoff` (the store
        sets it): each ``QuoteOpened`` appended goes there with its body, so that projecting
        it needs no parsing."""
        self.held: bool = False
        """While the store's checkpoint pass has the connection (in its thread): a commit
        goes to :attr:`spill` (the store sets it)."""
        self.spill: Spill | None = None
        """The owner's spill file (:mod:`solver.io.store.spill`): where a commit made during a
        checkpoint pass writes its rows, instead of waiting for the pass's end. None (a
        reader, which has no checkpoint thread)."""
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
        doc = fact_codec.encode(fact)
        body = orjson.dumps(doc).decode()
        if type(fact) is f.QuoteOpened:
            self.rows.append((fact.created_at, "quote_opened", body))
            handoff = self.handoff
            if handoff is not None and len(handoff) < HANDOFF_CAP:  # full: parsed when read
                minute = fact.created_at // MINUTE_US
                amount = doc["amount_in"]  # the digits of the text written: no int formatted
                handoff[fact.quote_id] = (body, minute, fact.asset_in, fact.asset_out, len(amount))
        else:
            self.rows.append((_at(fact), f.kind_of(fact), body))
        self.appended += 1

    def write_and_commit(self) -> None:
        """Put what waits into SQLite's transaction (opened if none is), in order — the rows
        spilled during a checkpoint pass first, then :attr:`rows`, :attr:`extra` — and commit
        it; the spill file is emptied once SQLite committed. Raises ``sqlite3.Error``: what
        was appended is then dropped (the caller rolls back: it was not recorded), what was
        spilled is kept (its answers may have left) for the next commit."""
        spill = self.spill
        spilled = spill.rows if spill is not None else []
        rows = spilled + self.rows if spilled else self.rows
        extra = self.extra
        self.rows, self.extra = [], []
        cur = self._cur
        if len(rows) == 1 and not extra and not self._conn.in_transaction:
            # One entry in the loop's turn (below saturation, the common case): the INSERT
            # alone is the transaction (the connection autocommits), as durable as BEGIN,
            # INSERT, COMMIT and two statements fewer (9.9 -> 8.3 µs a commit, issue 29).
            cur.execute(INSERT_ENTRY, rows[0])
        else:
            if rows or extra:
                if not self._conn.in_transaction:
                    cur.execute("BEGIN")
                if rows:
                    cur.executemany(INSERT_ENTRY, rows)
                if extra:
                    self._write_extra(extra)
            if self._conn.in_transaction:
                cur.execute("COMMIT")
        if spilled:
            assert spill is not None
            spill.emptied()

    def _write_extra(self, extra: list[tuple[str, tuple[Any, ...]]]) -> None:
        cur = self._cur
        try:
            cur.execute("SAVEPOINT extra")
            for sql, params in extra:
                cur.execute(sql, params)
            cur.execute("RELEASE extra")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                cur.execute("ROLLBACK TO extra")
                cur.execute("RELEASE extra")
            before, self.extra_failed = self.extra_failed, self.extra_failed + len(extra)
            if before == 0 or before // 1000 != self.extra_failed // 1000:
                log.warning("request sample not stored (%d so far): %s", self.extra_failed, exc)

    def commit(self) -> None:
        """Make everything appended so far durable (the group commit). Raises
        :class:`StoreError` when it fails, or when the store's own commit of what was
        appended failed since the last call (:attr:`lost`). While a checkpoint pass runs,
        the rows go to the spill file instead, and the commit never waits for the pass."""
        if self.held:  # the owner's checkpoint pass has the connection
            self._spill()
            return
        lost, self.lost = self.lost, None
        if lost is not None:  # the driver appends it all again: none of it is written twice
            self.rollback()
            raise StoreError(f"cannot commit the journal: {lost}")
        try:
            self.write_and_commit()
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreError(f"cannot commit the journal: {exc}") from None

    def commit_aside(self) -> None:
        """A commit made aside of the driver's (the store's own, a snapshot's): it writes
        what the driver appended. If that fails, those rows are gone and the driver's next
        :meth:`commit` fails too (:attr:`lost`). While a loss waits for the driver nothing is
        written: the driver appends its facts again once its commit failed (written here
        too, they would be in the journal twice), and the loss is the driver's to see (taken
        here, its next commit would send answers that are not in the journal)."""
        if self.lost is not None:
            return
        try:
            self.write_and_commit()
        except sqlite3.Error as exc:
            self.rollback()
            self.lost = str(exc)
            raise StoreError(f"cannot commit the journal: {exc}") from None

    def _spill(self) -> None:
        """The commit during a checkpoint pass: the rows go to the spill file (raises
        :class:`StoreError`, and they are dropped: nothing of them may be sent)."""
        lost, self.lost = self.lost, None
        rows, self.rows = self.rows, []
        if lost is not None:
            raise StoreError(f"cannot commit the journal: {lost}")
        if rows:
            assert self.spill is not None
            self.spill.write(rows)

    def close(self) -> None:
        """Release the cursor (the store closes the connection after)."""
        with contextlib.suppress(sqlite3.Error):
            self._cur.close()

    def rollback(self) -> None:
        self.rows, self.extra = [], []
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
                facts.append(fact_codec.decode(kind, orjson.loads(body)))
            except (fact_codec.FactError, orjson.JSONDecodeError) as exc:
                raise StoreError(f"journal entry {seq} ({kind}) cannot be read: {exc}") from None
        return snapshot, facts

    def write_snapshot(self, body: Mapping[str, Any], at: Micros) -> int:
        """Store a desk snapshot covering every fact appended so far (committed with them).
        Returns the journal position it covers. Older snapshots but the previous are dropped."""
        position = self.snapshot_position()
        if position is None:
            raise StoreError("cannot write the desk snapshot: a checkpoint pass holds the store")
        seq = self.store_snapshot(orjson.dumps(dict(body)), at, position)
        self.drop_old_snapshots()
        return seq

    def snapshot_position(self) -> int | None:
        """Commit what is appended and return the journal position a desk snapshot taken now
        covers: one built later (in slices, :mod:`solver.runtime.snapshot_slices`) is stored
        with it (:meth:`store_snapshot`), and a restart applies only the facts after it.

        None while a checkpoint pass holds the connection (:attr:`held`): the facts committed
        meanwhile wait in the spill file and get their positions after the pass, so a snapshot
        taken now would include facts its position does not, and a restart would apply them a
        second time. Ask again after the pass.

        Refused while a loss waits for the driver (:attr:`lost`): the desk holds facts the
        journal does not (PostgreSQL's journal refuses too)."""
        if self.held:
            return None
        if self.lost is not None:
            raise StoreError(f"cannot write the desk snapshot: the journal lost facts: {self.lost}")
        self.commit_aside()
        return self.last_seq()

    def last_seq(self) -> int:
        """The position of the journal's last committed entry."""
        try:
            row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the journal's position: {exc}") from None
        return int(row[0])

    def store_snapshot(self, text: bytes, at: Micros, seq: int) -> int:
        """Store a desk snapshot's JSON ``text`` covering the journal up to ``seq`` (from
        :meth:`snapshot_position`); returns ``seq``. The older ones are dropped by
        :meth:`drop_old_snapshots`, a transaction of its own: deleting the previous 8 MB body
        took ~15 ms more (the soak's book), which a driver may leave to its next turn.

        SQLite keeps a statement's bound values until it is bound again, and the connection
        caches the statement: the body (11 MB with 3,000 open quotes and 20,000 recently lost,
        the soak's book) stayed in SQLite's memory until the next snapshot. The statement is
        bound again with an empty body once the snapshot is written (issue 29)."""
        cur = self._cur
        try:
            cur.execute("BEGIN")
            cur.execute(INSERT_SNAPSHOT, (seq, at, text.decode(), 1))
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreError(f"cannot write the desk snapshot: {exc}") from None
        finally:
            with contextlib.suppress(sqlite3.Error):  # memory only: the snapshot is written
                cur.execute(INSERT_SNAPSHOT, (0, 0, "", 0))
        return seq

    def drop_old_snapshots(self) -> None:
        """Every desk snapshot but the latest two (a restart reads the latest; the one before
        is kept in case the latest cannot be read)."""
        self.commit_aside()
        try:
            self._conn.execute(DROP_OLD_SNAPSHOTS)
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreError(f"cannot drop the old desk snapshots: {exc}") from None


def _at(fact: f.Fact) -> Micros:
    if type(fact) is f.BalancesReconciled:
        return fact.observed
    if type(fact) is f.QuoteOpened:
        return fact.created_at
    at: Micros = getattr(fact, "at")  # noqa: B009 (every other fact has ``at``)
    return at
