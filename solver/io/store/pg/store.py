"""The store on PostgreSQL: the journal (fenced by the lease), the tables people query and the
nonce registers, shared by every instance of one account (DESIGN "Persistence is the desk's
journal"; docs/operations.md "Two instances").

:class:`PgStore` is a :class:`~solver.io.store.sqlite_store.Store` to everything that uses one —
the executor's journal port, the status pages, ``solver history``, exports, the rebalancer's
nonce register — so the rest of the bot does not know which backend it runs on. The tables are
SQLite's, in the same text conventions (one declaration: :mod:`solver.io.store.tables`), and
the queries and the projection are SQLite's code, run through
:class:`~solver.io.store.pg.conn.PgConn`.

What differs from SQLite:

- Several processes open it at once. Writes that must come from the active instance only (the
  journal, snapshots) are fenced by the lease (:mod:`solver.io.store.pg.lease`); the projection
  locks its position (``FOR UPDATE``), so two instances never project the same entry; nonce
  prefixes and deposit nonces are unique by their keys, whoever writes them.
- One synchronous connection per instance, on the event loop, with a statement timeout: a
  broken one is replaced at the next use.
- No checkpoints (the server's business) and no backups through the bot (``pg_dump`` does
  that). The retention pass (``storage.retain_days``) is SQLite's
  (:mod:`solver.io.store.retention`), run by the active instance only: each of its
  transactions takes the lease's fence first.
- ``path`` is the local file the instance keeps beside it (its alert spool); nothing of the
  store is in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from solver.core.clock import Micros
from solver.core.market import QuoteRequest
from solver.io.store.migrations import migrate_pg
from solver.io.store.nonce_registry import INSERT_NONCE_PREFIX
from solver.io.store.pg.conn import PgConn, connect, redact
from solver.io.store.pg.journal import FENCE, PgJournal
from solver.io.store.pg.lease import Lease, LeaseHolder, current_holder
from solver.io.store.pg.projector import Projector
from solver.io.store.projection import SELECT_ENTRIES, pending, project
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.retention import Pruned, Pruner
from solver.io.store.schema import (
    INSERT_NONCE,
    INSERT_REQUEST,
    FencedError,
    NonceReusedError,
    StoreError,
    ts,
    ts_us,
)
from solver.io.store.sqlite_store import Store
from solver.protocol.nonce import PREFIX_LEN

log = logging.getLogger("solver.store")

__all__ = ["SELECT_ENTRIES", "PgStore"]


class PgStore(Store):
    """The bot's PostgreSQL database (one per account)."""

    def __init__(
        self,
        url: str,
        *,
        password_env: str | None = None,
        account: str = "",
        lease_s: float = 5.0,
        local_path: str | Path = "var/solver-pg",
        sample_requests: float = 0.0,
        lost_quote_sample_rate: float = 1.0,
        writer: bool = True,
    ) -> None:
        """Connect and migrate. ``writer``: the bot (it projects and may take the lease);
        readers (``solver history``, exports) pass False."""
        if not 0.0 <= sample_requests <= 1.0:
            raise ValueError("sample_requests must be a fraction between 0 and 1")
        self.url = url
        self.shown = redact(url)
        self._password_env = password_env
        self.path = Path(local_path)
        self.sample_requests = sample_requests
        self._sample_below = int(sample_requests * 2**64)
        self.quote_rows = QuoteRows(lost_quote_sample_rate)
        self._raw: psycopg.Connection | None = None
        self.lease = Lease(account or "?", lease_s)
        raw = self._connection()
        try:
            migrate_pg(raw)
        except psycopg.Error as exc:
            self._close()
            raise StoreError(f"cannot migrate the store {self.shown}: {exc}") from None
        self.holder = None
        self.checkpoints = None
        self._syncer = None
        self.account = account
        self._writer = writer
        self.journal = PgJournal(self._connection, self.lease)  # type: ignore[assignment]
        self._requests: list[tuple[Any, ...]] = []
        self._projector: Projector | None = None
        self._projected_at: int | None = None
        self._pruner = Pruner(fence=self._fence_prune)

    # ------------------------------------------------------------------ connection

    def _connection(self) -> psycopg.Connection:
        """The connection, made again if the last one broke (raises :class:`StoreError`)."""
        raw = self._raw
        if raw is None or raw.closed or raw.broken:
            if raw is not None:  # said once a break, not at every try while the server is away
                log.warning("the store's connection to %s broke: connecting again", self.shown)
                self._raw = None
                with contextlib.suppress(psycopg.Error):
                    raw.close()
            name = f"solver {self.lease.holder}"[:63]  # who, in pg_stat_activity
            raw = self._raw = connect(self.url, self._password_env, application_name=name)
            self._adapter = PgConn(raw)
        return raw

    @property
    def _conn(self) -> Any:
        """The shared queries' connection (:class:`PgConn`)."""
        self._connection()
        return self._adapter

    def __repr__(self) -> str:
        return f"PgStore({self.shown!r}, account={self.account!r})"

    def close(self) -> None:
        try:
            if not self.journal.fenced:  # type: ignore[attr-defined]
                self.commit()
                if self._projector is not None:  # what the thread had not reached yet
                    self._projector.stop()
                    self._projector = None
                    with contextlib.suppress(StoreError):
                        self._project_here(0.5)
        finally:
            self._close()

    def _close(self) -> None:
        if self._projector is not None:
            self._projector.stop()
            self._projector = None
        raw, self._raw = self._raw, None
        if raw is None:
            return
        if self.lease.epoch is not None and not raw.broken:
            self.lease.release(raw)
        with contextlib.suppress(psycopg.Error):
            raw.close()

    # ------------------------------------------------------------------ the lease

    def try_take_lease(self) -> bool:
        """Take the lease if it is free; once it is, the projection runs in its own thread."""
        try:
            taken = self.lease.try_take(self._connection())
        except psycopg.Error as exc:
            raise StoreError(f"cannot take the lease in {self.shown}: {exc}") from None
        if taken and self._projector is None and self._writer:
            name = f"solver {self.lease.holder} projection"[:63]
            journal: PgJournal = self.journal  # type: ignore[assignment]
            self._projector = Projector(
                lambda: connect(self.url, self._password_env, application_name=name),
                self.quote_rows,
                committed=lambda: journal.committed_seq,
            )
            self._projector.start()
        return taken

    def refresh_lease(self) -> None:
        """Extend the lease (:class:`FencedError` if lost, :class:`StoreError` if the
        database did not answer: the caller tries again until its deadline)."""
        try:
            self.lease.refresh(self._connection())
        except psycopg.Error as exc:
            raise StoreError(f"cannot refresh the lease in {self.shown}: {exc}") from None

    def lease_holder(self) -> LeaseHolder | None:
        try:
            return current_holder(self._connection(), self.lease.account)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the lease in {self.shown}: {exc}") from None

    # ------------------------------------------------------------------ what Store does

    def note_control(self, url: str) -> None:
        return

    def checkpoint_if_due(self) -> bool:
        return False

    def backup(self, dest: str | Path) -> int:
        raise StoreError(f"the store {self.shown} is PostgreSQL: back it up with pg_dump")

    @property
    def schema_version(self) -> int:
        row = self._conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0])

    def commit(self) -> None:
        """What the journal holds (:meth:`PgJournal.commit_aside`: a failure fails the
        executor's next commit too), then the request samples of the turn (not fenced: a
        sample is not a record the desk needs)."""
        self.journal.commit_aside()
        requests, self._requests = self._requests, []
        if requests:
            try:
                self._conn.cursor().executemany(INSERT_REQUEST, requests)
            except psycopg.Error as exc:
                raise StoreError(f"cannot record request samples: {exc}") from None

    def unprojected(self) -> int:
        try:
            return pending(self._conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read how far {self.shown} is projected: {exc}") from None

    def _fresh(self) -> None:
        """The active's own reads (status windows, history through it) see everything it
        committed: the loop catches up with the thread first (a few milliseconds at most: the
        thread is a pass behind)."""
        if not self._writer:
            return
        give_up = time.monotonic() + 0.5
        while self._project_here(0.05) or self.unprojected():
            if time.monotonic() > give_up:  # the thread holds the position: close enough
                return
            time.sleep(0.002)

    def project(self, budget_s: float | None = None) -> int:
        """The upkeep's slice: nothing while the thread projects (it reports a failure that
        lasts); else on this connection, as on SQLite."""
        projector = self._projector
        if projector is not None and projector.running:
            self.commit()
            failure = projector.failure()
            if failure is not None:
                raise StoreError(f"cannot project the journal: {failure}")
            return 0
        return self._project_here(budget_s)

    def _project_here(self, budget_s: float | None) -> int:
        self.commit()
        appended = self.journal.appended
        if self._projected_at == appended:
            return 0
        try:
            done = project(self._conn, self.quote_rows, budget_s=budget_s, savepoints=True)
        except StoreError:
            if self._raw is None or not self._raw.broken:
                raise
            # A cut connection (the commit before it may have found it whole): the projection
            # is one transaction with its position, so it runs again on a new one.
            done = project(self._conn, self.quote_rows, budget_s=budget_s, savepoints=True)
        if done == 0 and self.unprojected() == 0:  # not a turn skipped for another's lock
            self._projected_at = appended
        return done

    def disk_usage(self) -> tuple[int, int]:
        """``(the database's size, 0)``: the server's free space is not this process's to see."""
        try:
            row = self._conn.execute("SELECT pg_database_size(current_database())").fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the size of {self.shown}: {exc}") from None
        return int(row[0]), 0

    def prune(self, before: datetime, budget_s: float | None = None) -> Pruned:
        """What SQLite's :meth:`Store.prune` deletes, by the same rules and statements
        (:mod:`solver.io.store.retention`), after committing what was appended. Only the
        lease holder deletes: a standby, a reader or a fenced-out instance forgets nothing
        (done, so its upkeep waits for the next pass), and every transaction of the pass takes
        the lease's fence first (:class:`FencedError` if the database refuses it)."""
        if not self._writer or self.lease.epoch is None or self.journal.fenced:  # type: ignore[attr-defined]
            return Pruned(done=True)
        self.commit()
        return self._pruner.prune(self._conn, before, budget_s=budget_s)

    def _fence_prune(self, conn: PgConn) -> None:
        """The lease's fence inside a retention transaction (as a commit's, ``FOR UPDATE``:
        a successor's taking waits for the piece to end)."""
        if conn.raw.execute(FENCE, self.lease.fence_params()).fetchone() is None:
            raise FencedError("the database refused the retention's fence")

    def _write(self, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> int:
        self.commit()
        rowcount = 0
        try:
            raw = self._connection()
            with raw.transaction():
                cur = self._adapter.cursor()
                for sql, params in statements:
                    rowcount = cur.execute(sql, params).rowcount
        except psycopg.Error as exc:
            raise StoreError(f"store write failed: {exc}") from None
        return rowcount

    def record_request(
        self, request: QuoteRequest, outcome: str, at: Micros, reason: str | None = None
    ) -> bool:
        if not self.sampled(request.quote_id):
            return False
        r = request
        self._requests.append(
            (ts_us(at), r.quote_id, r.asset_in, r.asset_out, int(r.exact_in), str(r.amount),
             r.min_deadline_ms, r.partner_id, outcome, reason)
        )  # fmt: skip
        return True

    def claim_nonce_prefix(self, at: datetime) -> bytes:
        if not self.account:
            raise StoreError("the store has no account to claim a nonce prefix for")
        for _ in range(8):
            prefix = os.urandom(PREFIX_LEN)
            if self._write([(INSERT_NONCE_PREFIX, (self.account, prefix, ts(at)))]):
                return prefix
        raise StoreError(f"cannot claim a fresh nonce prefix in {self.shown}")

    def register_nonce(self, account: str, nonce: bytes, at: datetime) -> None:
        try:
            self._write([(INSERT_NONCE, (account, nonce.hex(), None, ts(at)))])
        except StoreError as exc:
            if "nonces_pkey" in str(exc):
                raise NonceReusedError(
                    f"nonce {nonce.hex()} of {account} was signed before: not signed again"
                ) from None
            raise
