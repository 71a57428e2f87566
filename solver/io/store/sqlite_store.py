"""The persistent store: SQLite in WAL mode (DESIGN "Settlement", "The quote path").

The desk's journal lives here (:class:`~solver.io.store.journal.SqliteJournal`, ``Store.journal``):
every fact the desk decides is appended, and made durable before any answer it caused leaves
the process, so a restart rebuilds the desk exactly. ``nonce_prefixes`` registers the prefix
of each start's quote nonce sequence, so no quote nonce repeats across restarts; ``nonces``
holds the nonces of rebalance deposits, registered before they are signed, whose reuse is
refused (:class:`~solver.io.store.schema.NonceReusedError`). Beside them: the tables people
query, projected from the journal (quotes, fills, balances, alerts, rebalances), and sampled
requests.

:class:`Store` is built from parts by role (since issue 29, when this file had grown to 609
lines), mixins as :class:`~solver.io.store.queries.StoreQueries` was already:
:mod:`~solver.io.store.checkpoint_handoff` (the checkpoint passes and desk snapshots, with the
checkpointer thread), :mod:`~solver.io.store.writes` (projection, pruning, request samples,
alerts), :mod:`~solver.io.store.nonce_registry` (the nonce registers) and
:mod:`~solver.io.store.queries` (the reads). This module keeps the connection itself: opening
it (locking, WAL, migrations, the owner's lock file, recovery), committing, closing, backups.

Durability. WAL with ``synchronous=NORMAL`` (the default): a commit appends to the WAL file
without an fsync. Once a journal commit returns, the transaction is in the OS page cache, so it
survives the process dying in any way, ``kill -9`` included (a test kills a writer and checks
this); an OS crash or power loss may lose the last commits, never the database's integrity.
``synchronous="full"`` fsyncs the WAL at every commit to survive those too, at the cost of a
disk flush on the hot path. Hot-path writes are plain prepared statements (sqlite3 caches them
by SQL text) in one group transaction per turn of the event loop; no ORM.

Checkpoints: the writer checkpoints the WAL itself, between two of its commits, when the bot's
ticker asks (:mod:`solver.io.store.checkpoint_handoff`, which says why).

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

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Literal

from solver.io.store.backup import backup_to
from solver.io.store.checkpoint import CHECKPOINT_MIN_ENTRIES, Checkpointer, Checkpoints, Pacing
from solver.io.store.checkpoint_handoff import CheckpointHandoff
from solver.io.store.checks import check_usable, open_error, refuse_unusable_file
from solver.io.store.journal import SqliteJournal
from solver.io.store.migrations import SCHEMA_VERSION, migrate, schema_version
from solver.io.store.nonce_registry import NonceRegistry
from solver.io.store.owner import Holder, busy_error, me, remove_holder, take_over, write_holder
from solver.io.store.queries import StoreQueries
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.retention import Pruner
from solver.io.store.schema import Alert, BalanceSnapshot, Fill, StoreError
from solver.io.store.spill import Spill, recover, spill_path
from solver.io.store.writes import StoreWrites

__all__ = [
    "SCHEMA_VERSION",
    "Alert",
    "BalanceSnapshot",
    "Fill",
    "Store",
    "StoreError",
]

log = logging.getLogger("solver.store")

Synchronous = Literal["normal", "full"]
WAL_LIMIT_BYTES = 256 << 20
"""After a burst, the WAL file is cut back to twice this (``journal_size_limit``)."""


class Store(CheckpointHandoff, StoreWrites, NonceRegistry, StoreQueries):
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
