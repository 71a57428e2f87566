"""What the store may forget after ``storage.retain_days``, forgotten in small pieces
(docs/operations.md, "Disk").

A store grows by about 1.1 KB an answered quote: its journal entry, which carries the signed
answer; 2.2 KB for one that keeps its row in ``quotes`` with the same signed answer (all but
the lost quotes not sampled: :mod:`solver.io.store.quote_rows`). Most answers are never used:
a solver wins a minority of what it quotes. Left alone, a bot answering a few quotes a second
fills gigabytes a week. After ``retain_days``:

- quotes that never became a trade — ``LOST`` (expired, no claim) and ``REJECTED`` (refused by
  the relay, or never sent) — are deleted with their transitions. Nothing can be disputed on
  them: no intent of theirs executed. Won, settling, settled and failed quotes stay, with
  their fills: they are the record of the money.
- journal entries the desk no longer needs: older than the cut, covered by the *older* of the
  two desk snapshots the store keeps (so either one can still rebuild the desk) and already
  projected into the query tables. Only entries *before* those are deleted, so the journal's
  last entry always stays and its ``seq`` goes on from there.
- balance snapshots (the latest always stays) and sampled requests.

``quote_counts`` stays: a few rows a minute count every quote, so the windows of ``solver
history`` and the status page count what they counted before the rows went.

Alerts, rebalances and their steps, nonces and nonce prefixes are small and stay. Deleted rows
free pages that SQLite reuses, so the file stops growing once the retention is reached; it
does not shrink (``VACUUM`` with the bot stopped does that). PostgreSQL's autovacuum reuses
them the same way.

Each piece is one short transaction of at most :data:`CHUNK` rows on the writer's connection,
and :meth:`Pruner.prune` stops at its time budget, so the live bot calls it from its ticker
without holding the quote path (``solver.runtime.upkeep``).

The same rules and statements run on PostgreSQL, through
:class:`~solver.io.store.pg.conn.PgConn` (the statements here are written in SQL both dialects
take). There each transaction first takes the lease's fence (``fence``: the PostgreSQL store
passes it), so only the active instance deletes anything, and a successor's taking of the
lease waits for the piece to end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from solver.core.clock import micros
from solver.io.store.schema import StoreError, db_errors, ts

CHUNK = 64
"""Rows deleted in one transaction: ~0.3 ms on average (measured on a copy of 100,000
recorded quotes: ~5 µs a row; a piece took 10–20 ms now and then while the WAL grew)."""
SELECT_QUOTES = (  # LOST and REJECTED: the quotes that never became a trade
    "SELECT quote_id, created_at FROM quotes WHERE created_at >= ? AND created_at < ? "
    "AND state IN ('LOST', 'REJECTED') ORDER BY created_at LIMIT ?"
)
SELECT_JOURNAL = "SELECT seq, at FROM journal WHERE seq > ? AND seq < ? ORDER BY seq LIMIT ?"
JOURNAL_KEPT_FROM = (  # the older snapshot's entry, the first one not projected, or the
    # entry of the oldest quote still open (the projection rebuilds its memory from there);
    # an aggregate over a union, not SQLite's MIN(a, b, c): PostgreSQL runs it too
    "SELECT MIN(kept) FROM (SELECT MIN(seq) AS kept FROM desk_snapshots "
    "UNION ALL SELECT seq FROM projection UNION ALL SELECT COALESCE(open_from, seq) "
    "FROM projection) AS k WHERE (SELECT COUNT(*) FROM desk_snapshots) >= 2"
)
DELETE_BALANCE_SNAPSHOTS = (  # the latest stays
    "DELETE FROM balance_snapshots WHERE id IN (SELECT id FROM balance_snapshots "
    "WHERE at < ? AND at < (SELECT MAX(at) FROM balance_snapshots) ORDER BY at LIMIT ?)"
)
DELETE_REQUESTS = (
    "DELETE FROM requests WHERE id IN (SELECT id FROM requests WHERE ts < ? ORDER BY ts LIMIT ?)"
)


@dataclass
class Pruned:
    """Rows deleted by one :meth:`Pruner.prune` call (or a pass of them, :meth:`add`);
    ``done``: nothing older is left to delete."""

    quotes: int = 0
    journal: int = 0
    balance_snapshots: int = 0
    requests: int = 0
    done: bool = False

    @property
    def rows(self) -> int:
        return self.quotes + self.journal + self.balance_snapshots + self.requests

    def add(self, step: Pruned) -> None:
        self.quotes += step.quotes
        self.journal += step.journal
        self.balance_snapshots += step.balance_snapshots
        self.requests += step.requests


class Pruner:
    """Remembers where each table's deletions got to within a pass, so that its calls do not
    walk again the old rows that stay (trades) or were deleted already.

    ``conn``: SQLite's connection, or PostgreSQL's through
    :class:`~solver.io.store.pg.conn.PgConn`; ``fence``: called with it at the start of every
    transaction, it raises (a :class:`StoreError`) when this instance may not delete (PostgreSQL:
    the lease is not this instance's any more)."""

    def __init__(self, fence: Callable[[Any], None] | None = None) -> None:
        self._quotes_from = ""
        self._journal_after = 0
        self._fence = fence

    def _begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")
        if self._fence is not None:
            self._fence(conn)

    def prune(self, conn: Any, before: datetime, *, budget_s: float | None = None) -> Pruned:
        """Delete what is older than ``before`` and forgettable (module doc), a chunk per
        transaction, until done or past ``budget_s`` (None: until done). The connection must
        have no transaction open."""
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        pruned = Pruned()
        steps = (self._quotes, self._journal, self._balance_snapshots, self._requests)
        try:
            for step in steps:
                while step(conn, before, pruned):
                    if deadline is not None and time.perf_counter() > deadline:
                        return pruned
        except StoreError:  # the fence refused: nothing of the piece is deleted
            _rollback(conn)
            raise
        except db_errors() as exc:
            _rollback(conn)
            raise StoreError(f"cannot delete old rows from the store: {exc}") from None
        pruned.done = True
        # The next pass starts over: a quote older than the cut may have been open when this
        # one went by (a bot stopped for a month closes it at its restart).
        self._quotes_from, self._journal_after = "", 0
        return pruned

    def _quotes(self, conn: Any, before: datetime, pruned: Pruned) -> bool:
        rows = conn.execute(SELECT_QUOTES, (self._quotes_from, ts(before), CHUNK)).fetchall()
        if not rows:
            return False
        ids = [(quote_id,) for quote_id, _ in rows]
        self._begin(conn)
        conn.executemany("DELETE FROM transitions WHERE quote_id = ?", ids)
        conn.executemany("DELETE FROM quotes WHERE quote_id = ?", ids)
        conn.execute("COMMIT")
        self._quotes_from = rows[-1][1]
        pruned.quotes += len(rows)
        return len(rows) == CHUNK

    def _journal(self, conn: Any, before: datetime, pruned: Pruned) -> bool:
        (kept_from,) = conn.execute(JOURNAL_KEPT_FROM).fetchone() or (None,)
        if kept_from is None:
            return False
        cut = micros(before)
        rows = conn.execute(SELECT_JOURNAL, (self._journal_after, kept_from, CHUNK)).fetchall()
        last = None
        for seq, at in rows:
            if at >= cut:  # entries come in time order, near enough: stop at the first new one
                break
            last = seq
        if last is None:
            return False
        self._begin(conn)
        deleted = conn.execute(
            "DELETE FROM journal WHERE seq > ? AND seq <= ?", (self._journal_after, last)
        ).rowcount
        conn.execute("COMMIT")
        self._journal_after = last
        pruned.journal += deleted
        return last == rows[-1][0] and len(rows) == CHUNK

    def _balance_snapshots(self, conn: Any, before: datetime, pruned: Pruned) -> bool:
        deleted = self._delete_chunk(conn, DELETE_BALANCE_SNAPSHOTS, before)
        pruned.balance_snapshots += deleted
        return deleted == CHUNK

    def _requests(self, conn: Any, before: datetime, pruned: Pruned) -> bool:
        deleted = self._delete_chunk(conn, DELETE_REQUESTS, before)
        pruned.requests += deleted
        return deleted == CHUNK

    def _delete_chunk(self, conn: Any, sql: str, before: datetime) -> int:
        """Run one chunk's ``DELETE`` (parameters: the cut, :data:`CHUNK`); rows deleted."""
        self._begin(conn)
        deleted = int(conn.execute(sql, (ts(before), CHUNK)).rowcount)
        conn.execute("COMMIT")
        return deleted


def _rollback(conn: Any) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
