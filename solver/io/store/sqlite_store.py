"""The persistent store: SQLite in WAL mode (DESIGN "Settlement", "The quote path").

The desk's journal lives here (:class:`~solver.io.store.journal.SqliteJournal`, ``Store.journal``):
every fact the desk decides is appended, and made durable before any answer it caused leaves
the process, so a restart rebuilds the desk exactly. ``nonce_prefixes`` registers the prefix
of each start's quote nonce sequence, so no quote nonce repeats across restarts; ``nonces``
holds the nonces of rebalance deposits, registered before they are signed, whose reuse is
refused (:class:`NonceReusedError`). Beside them: the tables people query, projected from the
journal (quotes, fills, balances, alerts, rebalances), and sampled requests.

Durability. WAL with ``synchronous=NORMAL`` (the default): a commit appends to the WAL file
without an fsync. Once a journal commit returns, the transaction is in the OS page cache, so it
survives the process dying in any way, ``kill -9`` included (a test kills a writer and checks
this); an OS crash or power loss may lose the last commits, never the database's integrity.
``synchronous="full"`` fsyncs the WAL at every commit to survive those too, at the cost of a
disk flush on the hot path. Hot-path writes are plain prepared statements (sqlite3 caches them
by SQL text) in one group transaction per turn of the event loop; no ORM.

Checkpoints. SQLite's own auto-checkpoint runs inside whichever commit crosses 1000 WAL pages,
stalling that commit for several milliseconds every ~130 quotes. Here it is switched off and
the writer checkpoints itself between two of its commits, in PASSIVE mode, from a thread of
the store, when the bot's ticker asks (:meth:`Store.checkpoint_if_due`, every 20 ms): it looks
every 0.25 s (``checkpoint_every_s``) and makes a pass once 512 journal entries are new, or 30
s after its last pass (:class:`~solver.io.store.checkpoint.Pacing`: each pass costs syncs, and
the answers that arrive during it wait for its end; a quiet bot once paid them several times
a second). Checkpoints keep the WAL short (each page read searches the WAL index), and
``journal_size_limit`` truncates the file after a burst.

What changed with issue 24, and why. Until then a background thread checkpointed on a
connection of its own, off the event loop, and the writer restarted the WAL once 256 MiB of it
were in use (under a steady flow the thread's passes never caught the last frame, so SQLite
never started the file over). Two findings of a chaos run ended that: a second bot on the same
store quoted beside the first (both wrote the same quotes; fills ended ``LOST``), and with the
store made immutable (``chattr +i``) the process died of ``SIGBUS`` writing to the
memory-mapped ``-shm`` WAL index. The store is now opened with ``locking_mode=EXCLUSIVE``
before its first access: SQLite keeps the WAL index in the process's heap (no ``-shm`` file,
nothing mapped) and holds a lock on the database file until the connection closes, so a second
opener is refused (:mod:`solver.io.store.owner` names the holder). Exclusive means one
connection, so the thread could not open the store any more: its passes now run on the
writer's connection, in a thread of the store
(:class:`~solver.io.store.checkpoint.Checkpointer`), with the same pacing. The first cut ran
them on the event loop, and their syncs held it (3–12 ms a pass, and 2–3 ms more in the next
commit; a quick A/B had p50 44 vs 4.9 ms at 2,000/s on a busy machine). Then the loop went on
deciding and signing during a pass but the executor's commit waited for the pass's end (6–35
ms, for ~4 % of the answers at 2,000/s: the bot's p99). Since issue 29 a commit during a pass
writes its rows to a spill file beside the store and its answers leave at once; the rows join
the journal at the first commit after the pass (:mod:`~solver.io.store.spill`: the same
durability as a WAL commit, and a killed owner's spill is recovered by the next).
With no other connection reading, every pass copies the whole WAL, and the pass starts the
file over itself (a one-page write): the separate RESTART went away with the old thread. The
checkpoint's own fsyncs stay (an unsynced checkpoint can corrupt the database on power loss).

Readers in other processes (``solver history``, exports) cannot open a store the bot holds:
they go through the bot's control API while it runs (it reads its own store, and backs it up
with SQLite's online backup API, :meth:`Store.backup`), and open the file only while it is
stopped.

One connection per ``Store``, used from the thread that opened it (the event loop's), and lent
to the store's checkpoint thread for each pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from solver.core.clock import Micros
from solver.core.market import QuoteRequest
from solver.io.store.backup import backup_to
from solver.io.store.checkpoint import (
    CHECKPOINT_MIN_ENTRIES,
    Checkpointer,
    Checkpoints,
    Pacing,
    SnapshotJob,
)
from solver.io.store.checks import check_usable, open_error, refuse_unusable_file
from solver.io.store.journal import SqliteJournal
from solver.io.store.migrations import SCHEMA_VERSION, migrate, schema_version
from solver.io.store.owner import Holder, busy_error, me, remove_holder, take_over, write_holder
from solver.io.store.projection import pending, project
from solver.io.store.queries import StoreQueries, reads
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.retention import Pruned, Pruner
from solver.io.store.schema import (
    INSERT_NONCE,
    INSERT_REQUEST,
    Alert,
    BalanceSnapshot,
    Fill,
    NonceReusedError,
    StoreError,
    ts,
    ts_us,
)
from solver.io.store.spill import Spill, recover, spill_path
from solver.protocol.nonce import PREFIX_LEN

INSERT_NONCE_PREFIX = (
    "INSERT OR IGNORE INTO nonce_prefixes (account, prefix, claimed_at) VALUES (?, ?, ?)"
)

__all__ = [
    "SCHEMA_VERSION",
    "Alert",
    "BalanceSnapshot",
    "Fill",
    "NonceReusedError",
    "Store",
    "StoreError",
]

log = logging.getLogger("solver.store")

Synchronous = Literal["normal", "full"]
WAL_LIMIT_BYTES = 256 << 20
"""After a burst, the WAL file is cut back to twice this (``journal_size_limit``)."""


class Store(StoreQueries):
    """The bot's SQLite database: the desk's journal, quotes, fills, balances, alerts, nonces."""

    def __init__(
        self,
        path: str | Path,
        *,
        sample_requests: float = 0.0,
        lost_quote_sample_rate: float = 1.0,
        synchronous: Synchronous = "normal",
        create: bool = True,
        busy_timeout_ms: int = 5000,
        checkpoint_every_s: float | None = 0.25,
        checkpoint_min_entries: int = CHECKPOINT_MIN_ENTRIES,
        account: str = "",
    ) -> None:
        """Open (``create``: or create, with its parent directory) and migrate the database.

        ``create`` is the writer's way in (the bot): SQLite itself must accept a write, and the
        writer says who it is in ``<store>.lock`` (:mod:`solver.io.store.owner`). Readers
        (``solver history``, ``solver store export``, a stopped bot's) pass ``create=False``.
        Either holds the store alone until it closes (exclusive locking): a store another
        process holds is refused after ``busy_timeout_ms`` with :class:`StoreBusyError`, naming
        the holder. (A read-only file or directory is refused for readers too: SQLite writes
        the WAL even to open it.)

        ``sample_requests`` is the fraction of quote requests :meth:`record_request` keeps.
        ``lost_quote_sample_rate``: the fraction of the quotes that end LOST whose row the
        projection keeps (:mod:`solver.io.store.quote_rows`); 1, here, keeps every row (the
        bot's config samples: ``storage.lost_quote_sample_rate``).
        ``checkpoint_every_s``: the owner checkpoints the WAL itself between its commits
        (:meth:`checkpoint_if_due`, looking at most this often); ``None`` leaves it to SQLite,
        which checkpoints inside the commit that crosses 1000 pages and stalls that commit for
        milliseconds;
        ``checkpoint_min_entries``: a pass once this many journal entries are new
        (:class:`~solver.io.store.checkpoint.Pacing`; tests pass 1). ``account``:
        the bot's signing account, whose nonce prefixes :meth:`claim_nonce_prefix` registers.
        """
        if not 0.0 <= sample_requests <= 1.0:
            raise ValueError("sample_requests must be a fraction between 0 and 1")
        if synchronous not in ("normal", "full"):
            raise ValueError('synchronous must be "normal" or "full"')
        self.path = Path(path)
        self._busy_timeout_ms = int(busy_timeout_ms)
        self.sample_requests = sample_requests
        self._sample_below = int(sample_requests * 2**64)
        self.quote_rows = QuoteRows(lost_quote_sample_rate)
        if not create and not self.path.is_file():
            raise StoreError(f"no store at {self.path}")
        refuse_unusable_file(self.path)
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            # The checkpoint pass runs on this connection from its own thread (Checkpointer).
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from None
        try:
            # Before anything touches the file: no -shm is mapped, and the first access takes
            # the lock this connection keeps until it closes (the module's docstring).
            self._conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            check_usable(self._conn, self.path, writable=create)
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot put the store {self.path} in WAL mode (got {mode})")
            self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            self._conn.execute(f"PRAGMA journal_size_limit = {2 * WAL_LIMIT_BYTES}")
            migrate(self._conn)
            if checkpoint_every_s is not None:
                self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        except sqlite3.Error as exc:
            self._conn.close()
            if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY"):
                raise busy_error(self.path) from None
            raise open_error(self.path, exc) from None
        except BaseException:
            self._conn.close()
            raise
        self.holder: Holder | None = None
        """What ``<store>.lock`` says of this process (the writer only)."""
        if create:
            try:
                holder = me()
                take_over(self.path, holder)
            except StoreError:
                self._conn.close()
                raise
            self.holder = holder
        self.checkpoints: Checkpoints | None = None
        self._cur = self._conn.cursor()
        self._pruner = Pruner()
        self.journal = SqliteJournal(self._conn)
        if lost_quote_sample_rate < 1.0:  # at 1 every entry is parsed for its row anyway
            self.journal.handoff = self.quote_rows.handoff
        self.account = account
        self._writer = create
        self._projected_at: int | None = None  # journal.appended when nothing was left
        # What an owner killed during a checkpoint pass spilled belongs in the journal before
        # anyone reads it (a reader too: a copy or an export of a killed bot's store).
        try:
            recover(self._conn, spill_path(self.path))
        except StoreError:
            self._close()
            raise
        if create:  # the writer: then what a killed run appended but did not project yet
            self.journal.spill = Spill(spill_path(self.path), sync=synchronous == "full")
            self.project()
        if checkpoint_every_s is not None:
            pacing = Pacing(time.monotonic(), min_entries=checkpoint_min_entries)
            thread = None
            if create:
                wal = Path(f"{self.path}-wal")
                thread = Checkpointer(self._conn, wal, schema_version(self._conn))
                thread.start()
            self.checkpoints = Checkpoints(checkpoint_every_s, pacing, thread)

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self._close()

    def _close(self) -> None:
        """Close (SQLite folds the WAL back in and removes it), then the lock file: the lock
        is free from here."""
        checkpoints = self.checkpoints
        try:
            if checkpoints is not None and checkpoints.thread is not None:
                checkpoints.thread.done.wait()  # the connection back from a pass in progress
                checkpoints.thread.stop()
                checkpoints.thread = None
            # Cursors first: one holding a statement (the journal's executemany) keeps the
            # connection, and its lock on the file, open past close() (sqlite3_close_v2).
            self.journal.close()
            if self.journal.spill is not None:
                self.journal.spill.close()
            self._cur.close()
            self._conn.close()
        finally:
            if self.holder is not None:
                remove_holder(self.path, self.holder.pid)
                self.holder = None

    def note_control(self, url: str) -> None:
        """Say in ``<store>.lock`` where this owner's control API answers (the CLI reads the
        store through it while the bot runs). A failure is logged: only the hint is lost."""
        if self.holder is None:
            return
        holder = Holder(self.holder.pid, self.holder.host, self.holder.started_at, url)
        try:
            write_holder(self.path, holder)
        except StoreError as exc:
            log.warning("%s", exc)
            return
        self.holder = holder

    def checkpoint_if_due(self) -> bool:
        """Start a pass copying the WAL into the database if
        :class:`~solver.io.store.checkpoint.Pacing` says one is due (the owner's ticker calls
        this between its commits); the pass runs in the store's thread. True if a pass ended
        since the last call. Raises :class:`StoreError` (a pass that failed)."""
        checkpoints = self.checkpoints
        if checkpoints is None:
            return False
        thread = checkpoints.thread
        self._pass_ended()  # one that ended: the loop's callback may not have run (or no loop)
        if checkpoints.error is not None:
            error, checkpoints.error = checkpoints.error, None
            if _transient(str(error)):
                # A statement of this connection was still open (SQLITE_LOCKED), or another
                # holder of the file was busy: the store is fine, the pass runs when next due.
                checkpoints.deferred += 1
                log.debug("checkpoint of %s deferred: %s", self.path, error)
                return False
            raise StoreError(f"cannot checkpoint the store {self.path}: {error}")
        ended = checkpoints.unreported > 0
        checkpoints.unreported = 0
        if checkpoints.flushing:
            assert thread is not None
            if not thread.flushed.is_set():
                return ended  # at a next look: nobody waits for the flush
            checkpoints.flushing = False
        elif checkpoints.snapshot is not None and thread is not None:
            if checkpoints.passing:
                return ended  # the desk snapshot's pass after this one
            # A desk snapshot waits (store_snapshot): a pass now, without the flush's head start.
        elif not checkpoints.due(self.journal.appended, time.monotonic()):
            return ended  # no SQL at all: the ticker asks 50 times a second
        elif thread is not None:
            checkpoints.flushing = True
            thread.flush_wal()
            return ended
        try:
            self.commit()  # the pass needs the connection outside any transaction
            if thread is None:
                checkpoints.inline(self._conn)
                checkpoints.unreported = 0
                return True
        except sqlite3.Error as exc:
            if _transient(str(exc)):
                checkpoints.deferred += 1
                log.debug("checkpoint of %s deferred: %s", self.path, exc)
                return ended
            raise StoreError(f"cannot checkpoint the store {self.path}: {exc}") from None
        self._start_pass(checkpoints, thread)
        return ended

    def _start_pass(self, checkpoints: Checkpoints, thread: Checkpointer) -> None:
        """Hand the connection, committed, to the thread for a pass (storing the desk snapshot
        that waits first, if any); the loop is told when it ends."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        spill = self.journal.spill
        assert spill is not None  # the writer's: the one with the thread
        spill.start(self.journal.last_seq())  # where what it spills goes (spill.recover)
        self.journal.held = True
        checkpoints.passing = True
        snapshot, checkpoints.snapshot = checkpoints.snapshot, None
        thread.start_pass(None if loop is None else self._on_loop(loop), snapshot)

    def store_snapshot(self, text: bytes, at: Micros, seq: int) -> SnapshotJob:
        """Store a desk snapshot's JSON ``text`` covering the journal up to ``seq``
        (:meth:`SqliteJournal.snapshot_position`); watch the job's ``done``. The writer hands it
        to its checkpointer's thread, which stores it and drops the older ones in one
        transaction, at once or after the pass under way (the ticker's next look,
        :meth:`checkpoint_if_due`), while the loop goes on
        (:class:`~solver.io.store.checkpoint.SnapshotJob`). A store without the thread (or
        PostgreSQL's) stores it here and leaves the older ones to the caller."""
        checkpoints = self.checkpoints
        if checkpoints is None or checkpoints.thread is None:
            job = SnapshotJob(seq, at, "")
            started = time.perf_counter()
            try:
                self.journal.store_snapshot(text, at, seq)
            except StoreError as exc:
                job.error = str(exc)
            job.took_s = time.perf_counter() - started
            job.done.set()
            return job
        thread = checkpoints.thread
        job = checkpoints.snapshot = SnapshotJob(seq, at, text.decode())
        self._pass_ended()  # one that ended: the loop's callback may not have run (or no loop)
        if checkpoints.flushing and thread.flushed.is_set():
            checkpoints.flushing = False  # the pass it was for stores the snapshot too
        if checkpoints.passing or checkpoints.flushing:
            return job  # a pass or its flush is under way: at the ticker's next look after it
        try:
            self.commit()
            self._start_pass(checkpoints, thread)
        except StoreError as exc:
            checkpoints.snapshot = None
            job.error = str(exc)
            job.done.set()
        return job

    def _on_loop(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        def ended() -> None:  # in the checkpointer's thread
            loop.call_soon_threadsafe(self._pass_ended)

        return ended

    def _settle(self) -> None:
        """Wait for a checkpoint pass in progress, then take the connection back (the owner's
        thread, before anything that needs SQLite and cannot wait for the loop's callback)."""
        checkpoints = self.checkpoints
        if checkpoints is None or not checkpoints.passing or checkpoints.thread is None:
            return
        checkpoints.thread.done.wait()
        self._pass_ended()

    def _pass_ended(self) -> None:
        """On the owner's thread, wherever a pass may have ended (at most once a pass): the
        connection is the owner's again; the next commit moves the spilled rows into the
        journal. Nothing while no pass is under way or the thread is still in one: the loop's
        callback of a pass runs after the thread set ``done``, so the owner may have taken the
        connection back and started the next pass before it runs; ending that one would
        commit on the connection inside the thread's transaction."""
        checkpoints = self.checkpoints
        if checkpoints is None or not checkpoints.passing or checkpoints.thread is None:
            return
        if not checkpoints.thread.done.is_set():
            return
        checkpoints.ended(checkpoints.thread.took_s, checkpoints.thread.error)
        self.journal.held = False  # commits go to SQLite again (with what was spilled, first)

    def backup(self, dest: str | Path) -> int:
        """A consistent copy of the whole store at ``dest`` (a new file), made with SQLite's
        online backup API from this connection, after committing what was appended; returns
        its size in bytes (:func:`solver.io.store.backup.backup_to`). Raises
        :class:`StoreError`."""
        self.commit()
        return backup_to(self._conn, self.path, Path(dest))

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return schema_version(self._conn)

    def commit(self) -> None:
        """Commit what the journal and :meth:`record_request` appended, made aside of the
        driver's group commit (:meth:`SqliteJournal.commit_aside`). A failure rolls all of it
        back, and the journal's own next commit fails too (:attr:`SqliteJournal.lost`): the
        driver then sends none of the answers it held and appends its facts again, so while
        that loss waits nothing of the journal is written here. Waits for a checkpoint pass
        in progress."""
        self._settle()
        self.journal.commit_aside()

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

    def disk_usage(self) -> tuple[int, int]:
        """``(the database and its WAL in bytes, free bytes on their volume for this user)``
        (the gauges; docs/operations.md "Disk"). Raises :class:`StoreError`."""
        try:
            size = self.path.stat().st_size
            with contextlib.suppress(FileNotFoundError):
                size += Path(f"{self.path}-wal").stat().st_size
            volume = os.statvfs(self.path.parent)
        except OSError as exc:
            raise StoreError(f"cannot read the size of the store {self.path}: {exc}") from None
        return size, volume.f_bavail * volume.f_frsize

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

    # ------------------------------------------------------------------ records

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

    # ------------------------------------------------------------------ restart

    def claim_nonce_prefix(self, at: datetime) -> bytes:
        """A nonce-sequence prefix for :attr:`account` never handed out before by this store,
        registered durably before it is returned (:class:`~solver.protocol.nonce.NonceSequence`;
        one per start of the bot)."""
        if not self.account:
            raise StoreError("the store has no account to claim a nonce prefix for")
        for _ in range(8):  # a prefix drawn before (2^-56 a time) inserts nothing: draw again
            prefix = os.urandom(PREFIX_LEN)
            if self._write([(INSERT_NONCE_PREFIX, (self.account, prefix, ts(at)))]):
                return prefix
        raise StoreError(f"cannot claim a fresh nonce prefix in {self.path}")

    @reads
    def nonce_prefixes(self, account: str) -> set[bytes]:
        """Every nonce-sequence prefix claimed for ``account``."""
        sql = "SELECT prefix FROM nonce_prefixes WHERE account = ?"
        return {bytes(row[0]) for row in self._conn.execute(sql, (account,))}

    @reads
    def nonce_used_before(self, account: str, nonce: bytes) -> bool:
        """Whether ``nonce`` is recorded as signed by ``account`` (rebalance deposits, and quotes
        signed before schema 8); a quote nonce is unique by its claimed prefix instead."""
        sql = "SELECT 1 FROM nonces WHERE account = ? AND nonce = ?"
        return self._conn.execute(sql, (account, nonce.hex())).fetchone() is not None

    # ------------------------------------------------------------------ rebalances

    def register_nonce(self, account: str, nonce: bytes, at: datetime) -> None:
        """Record ``nonce`` as signed by ``account``, durably, before it is signed (a rebalance
        deposit: :func:`solver.io.ops_intents.sign_operation`); one recorded before, in this
        run or an earlier one, is refused with :class:`NonceReusedError` and nothing is
        signed."""
        try:
            self._write([(INSERT_NONCE, (account, nonce.hex(), None, ts(at)))])
        except StoreError as exc:
            if "nonces." in str(exc):
                raise NonceReusedError(
                    f"nonce {nonce.hex()} of {account} was signed before: not signed again"
                ) from None
            raise


def _transient(error: str) -> bool:
    """A checkpoint refused for a moment (``database table is locked``: a statement of this
    connection still open; ``database is locked``: busy), not a failing store: it is deferred
    to the next due pass rather than paused on as ``store_error`` (measured: a quote_path run
    paused four times on it, 131 requests skipped)."""
    return "is locked" in error
