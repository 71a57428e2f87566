"""The writer's side of its checkpoints: when a pass is due, the SQLite store hands its
connection to the checkpointer thread and takes it back after; desk snapshots go through the
same hand-off (:class:`CheckpointHandoff`, a part of :class:`~solver.io.store.sqlite_store.Store`).

Checkpoints. SQLite's own auto-checkpoint runs inside whichever commit crosses 1000 WAL pages,
stalling that commit for several milliseconds every ~130 quotes. Here it is switched off and
the writer checkpoints itself between two of its commits, in PASSIVE mode, from a thread of
the store, when the bot's ticker asks (:meth:`CheckpointHandoff.checkpoint_if_due`, every 20
ms): it looks every 0.25 s (``checkpoint_every_s``) and makes a pass once 512 journal entries
are new, or 30 s after its last pass (:class:`~solver.io.store.checkpoint.Pacing`: each pass
costs syncs, and the answers that arrive during it wait for its end; a quiet bot once paid
them several times a second). Checkpoints keep the WAL short (each page read searches the WAL
index), and ``journal_size_limit`` truncates the file after a burst. Why the passes run in a
thread, on the writer's own connection: the "What changed with issue 24" part of
:mod:`solver.io.store.sqlite_store`'s docstring, and :mod:`solver.io.store.checkpoint`.

A module of its own since issue 29: the store's file was over the project's size (609 lines),
and these methods are one role — the owner's half of the thread's protocol (the thread's half
is :class:`~solver.io.store.checkpoint.Checkpointer`). A mixin rather than a collaborator, as
:class:`~solver.io.store.queries.StoreQueries` is: :meth:`Store.commit` (the hot path) calls
:meth:`CheckpointHandoff._settle` as it did, with no object in between, and PostgreSQL's
store (no checkpoints, no thread) inherits :meth:`CheckpointHandoff.store_snapshot` as it did.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solver.core.clock import Micros
from solver.io.store.checkpoint import Checkpointer, Checkpoints, SnapshotJob
from solver.io.store.journal import SqliteJournal
from solver.io.store.schema import StoreError

log = logging.getLogger("solver.store")


class CheckpointHandoff:
    """The owner's side of the checkpoint passes and of the desk snapshots stored in them."""

    # What the store gives this part (:class:`~solver.io.store.sqlite_store.Store`).
    path: Path
    _conn: Any
    journal: SqliteJournal
    checkpoints: Checkpoints | None
    commit: Callable[[], None]

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


def _transient(error: str) -> bool:
    """A checkpoint refused for a moment (``database table is locked``: a statement of this
    connection still open; ``database is locked``: busy), not a failing store: it is deferred
    to the next due pass rather than paused on as ``store_error`` (measured: a quote_path run
    paused four times on it, 131 requests skipped)."""
    return "is locked" in error
