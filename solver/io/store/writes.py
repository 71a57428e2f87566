"""The store's writes besides the journal: the tables people query, derived from the journal
(:meth:`StoreWrites.project`) and pruned (:meth:`StoreWrites.prune`), the sampled quote requests
and the alerts the journal could not carry (:class:`StoreWrites`, a part of
:class:`~solver.io.store.sqlite_store.Store`; the read side is
:class:`~solver.io.store.queries.StoreQueries`).

A module of its own since issue 29: the store's file was over the project's size (609 lines),
and these methods are one role, the writer keeping the query tables. A mixin, as
:class:`~solver.io.store.queries.StoreQueries` is: PostgreSQL's store
(:class:`~solver.io.store.pg.store.PgStore`) is a :class:`~solver.io.store.sqlite_store.Store`
and overrides what its connection does differently.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from solver.core.clock import Micros
from solver.core.market import QuoteRequest
from solver.io.store.journal import SqliteJournal
from solver.io.store.projection import pending, project
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.retention import Pruned, Pruner
from solver.io.store.schema import INSERT_REQUEST, StoreError, ts, ts_us


class StoreWrites:
    """The writer's projection, pruning, request samples and alerts."""

    # What the store gives this part (:class:`~solver.io.store.sqlite_store.Store`).
    path: Path
    _conn: Any
    _cur: sqlite3.Cursor
    journal: SqliteJournal
    quote_rows: QuoteRows
    _pruner: Pruner
    _sample_below: int
    _writer: bool
    _projected_at: int | None
    commit: Callable[[], None]
    _settle: Callable[[], None]

    def _fresh(self) -> None:
        """The writer's own reads (status windows, exports) see everything it journaled."""
        if self._writer:
            self._settle()
            self.project()

    def unprojected(self) -> int:
        """Journal entries the query tables do not show yet."""
        try:
            return pending(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read how far {self.path} is projected: {exc}") from None

    def project(self, budget_s: float | None = None) -> int:
        """Derive the query tables from the journal (:mod:`solver.io.store.projection`), after
        committing what was appended; ``budget_s``: at most about this long. Writer only.

        Once a call found nothing to project, the next ones run no SQL until the journal has
        a new entry: the ticker calls this 50 times a second, and a caught-up projection's
        transaction (locks, reads, commit) cost ~120 µs of the event loop each time (median, timed
        in the idle bot), ~8 µs for the call now."""
        if self.journal.held:
            return 0  # a checkpoint pass has the connection (its thread): at a next tick
        self.commit()
        appended = self.journal.appended
        if self._projected_at == appended:
            return 0
        done = project(self._conn, self.quote_rows, budget_s=budget_s)
        if done == 0:
            self._projected_at = appended
        return done

    def prune(self, before: datetime, budget_s: float | None = None) -> Pruned:
        """Delete what the store may forget that is older than ``before``
        (:mod:`solver.io.store.retention`: quotes never traded, journal entries the desk no
        longer needs, old balance snapshots and request samples), after committing what was
        appended; ``budget_s``: at most about this long. Writer only. Nothing (not done)
        while a checkpoint pass has the connection: the next tick goes on."""
        if self.journal.held:
            return Pruned()
        self.commit()
        return self._pruner.prune(self._conn, before, budget_s=budget_s)

    def _write(self, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> int:
        """Run the statements in one transaction; return the last one's rowcount."""
        self.commit()  # what the journal appended goes first
        cur = self._cur
        rowcount = 0
        try:
            cur.execute("BEGIN")
            for sql, params in statements:
                rowcount = cur.execute(sql, params).rowcount
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._conn.in_transaction:
                cur.execute("ROLLBACK")
            raise StoreError(f"store write failed: {exc}") from None
        return rowcount

    def sampled(self, quote_id: str) -> bool:
        """Whether ``quote_id`` is in the request sample: a hash, so the same on every run."""
        digest = hashlib.blake2b(quote_id.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") < self._sample_below

    def record_request(
        self, request: QuoteRequest, outcome: str, at: Micros, reason: str | None = None
    ) -> bool:
        """Keep a sampled request with its outcome (``quoted``, ``skipped``...); True if kept."""
        if not self.sampled(request.quote_id):
            return False
        r = request
        row = (ts_us(at), r.quote_id, r.asset_in, r.asset_out, r.exact_in, str(r.amount),
               r.min_deadline_ms, r.partner_id, outcome, reason)  # fmt: skip
        self.journal.extra.append((INSERT_REQUEST, row))  # written with the next group commit
        return True

    def record_alert(
        self, kind: str, detail: str, at: datetime, resolved_at: datetime | None
    ) -> bool:
        """An alert the journal could not carry (a ``store_error`` the previous run kept in the
        alert spool only) into the ``alerts`` table, once: False when a row of ``kind`` opened
        about ``at`` is there already. Not a journal fact: the desk never knew of it durably."""
        self._fresh()
        at_text, near = ts(at), timedelta(seconds=2)  # the desk's pause and the alert: one turn
        found = self._conn.execute(
            "SELECT 1 FROM alerts WHERE kind = ? AND at BETWEEN ? AND ?",
            (kind, ts(at - near), ts(at + near)),
        ).fetchone()
        if found is not None:
            return False
        resolved = None if resolved_at is None else ts(resolved_at)
        self._write(
            [
                (
                    "INSERT INTO alerts (at, kind, detail, resolved_at) VALUES (?, ?, ?, ?)",
                    (at_text, kind, detail, resolved),
                )
            ]
        )
        return True
