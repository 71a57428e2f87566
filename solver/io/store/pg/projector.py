"""The PostgreSQL store's projection, off the event loop (:mod:`solver.io.store.projection`).

On SQLite the projection runs on the event loop in small slices, because the store has one
connection (exclusive locking). PostgreSQL takes a second one, and its projection costs round
trips — a dozen per batch through :class:`~solver.io.store.pg.conn.PgConn` — that stalled the
loop: 1.4 ms per answer and 119 ms at p99 in an end-to-end run (docs/operations.md). So the
active instance projects in this thread, on a connection of its own, every :data:`EVERY_S` when
something was committed since its last pass; psycopg releases the GIL while it waits on the
network, so the loop runs meanwhile. A pass goes on at once only while it uses its whole budget
(:data:`PASS_S`: behind), so at saturation a wake makes one pass of what a whole interval
committed, not a chase of the executor's commits (issue 29). The projection's position is
locked for each batch (``FOR UPDATE SKIP LOCKED``): the loop's own catch-up before a read
(:meth:`PgStore._fresh`) and this thread never project the same entry.

A pass that fails is logged (the first, then every 100th) and tried again; the store reports a
failure that lasts :data:`FAILING_S` (the upkeep pauses, as for any store failure).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from solver.io.store.pg.conn import PgConn
from solver.io.store.projection import project
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.schema import StoreError, db_errors

log = logging.getLogger("solver.projection")

EVERY_S = 0.05
PASS_S = 0.05
"""A pass's budget (the projection stops after about this long, and goes on at once)."""
FAILING_S = 5.0


class Projector:
    def __init__(
        self,
        connect: Callable[[], psycopg.Connection],
        quotes: QuoteRows,
        every_s: float = EVERY_S,
        committed: Callable[[], int] | None = None,
    ) -> None:
        """``committed``: the journal position of this instance's last commit; a wake that
        finds the tables projected that far skips its pass (None: never skipped)."""
        self._connect = connect
        self._quotes = quotes
        self._committed = committed
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-projector", daemon=True)
        self.failing_since: float | None = None
        self.last_error: str | None = None
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def failure(self) -> str | None:
        """What has failed for longer than :data:`FAILING_S`, or None."""
        since = self.failing_since
        if since is None or time.monotonic() - since < FAILING_S:
            return None
        return self.last_error

    def _pass(self, conn: PgConn) -> None:
        """Project what the journal holds: again at once only while a pass uses its whole
        budget (behind); a pass that catches up leaves what is committed meanwhile to the next
        wake. Going again while a pass had projected anything chased the executor's commits at
        saturation: ~8 passes of ~36 entries per wake (in-process, 8 answers a loop turn), each
        with the fixed cost of a pass (its round trips: ~0.65 ms of CPU), 27 µs an entry in
        all, where passes of 256 cost 7.6 µs an entry (SQLite's: 6)."""
        while not self._stop.is_set():
            started = time.monotonic()
            project(conn, self._quotes, budget_s=PASS_S, savepoints=True)
            if time.monotonic() - started < PASS_S:
                return

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        while not self._stop.wait(self._every_s):
            committed = self._committed
            if committed is not None and self._quotes.position == committed():
                continue  # nothing new: an empty pass is 5 round trips, ~0.14 ms of CPU
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                self._pass(PgConn(conn))
                self.failing_since = None
            except (StoreError, *db_errors()) as exc:  # type: ignore[misc]
                self.failures += 1
                self.last_error = str(exc)
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                if self.failures % 100 == 1:
                    log.warning("projection failed (%d so far): %s", self.failures, exc)
        if conn is not None:
            conn.close()
