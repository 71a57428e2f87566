"""The store's checkpoints, from the writer's own connection (the "Checkpoints" part of
:mod:`solver.io.store.sqlite_store`'s docstring): ``wal_checkpoint(PASSIVE)`` paced by what was
written (:class:`Pacing`).

Until issue 24 a background thread checkpointed on a connection of its own, so that copying
the WAL into the database never held the event loop. The store is now opened in exclusive
locking mode (one connection per database, no memory-mapped ``-shm``), so that thread cannot
open it: the owner calls :meth:`Checkpoints.maybe` between two of its commits (the bot's
ticker, every 20 ms) and the same pacing decides when a pass is worth its cost. With no other
connection reading, each pass copies every frame, so the next commit writes the WAL from its
start again: the file never grows past what a pass period writes, and the writer's separate
RESTART (and the thread's signal for it) went away with the thread.

What a pass holds the loop for, and what is left of the thread. A pass is a copy (~1 ms for a
512-entry WAL here) and two syncs: the WAL's before it (~4 ms: everything written since the
last pass) and the database's after it (~5 ms: the pages it copied), measured on this machine
at ~10 ms for the whole pass. The first of them is taken off the loop: when a pass is due, a
thread (:class:`WalSyncer`) flushes the WAL on a descriptor of its own first, and the pass runs
at one of the next looks, once that is done: it then finds little to sync (a pass ~5 ms,
measured; the database's sync cannot be moved: its pages are written by the pass itself).
The thread never touches SQLite, and its descriptor is of the WAL, not of the database (closing
a descriptor of the database file would drop the connection's lock: POSIX locks belong to the
process); it is closed only after the connection.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("solver.store")

CHECKPOINT_MIN_ENTRIES = 512
"""A pass once the journal has this many new entries since the last pass (a few MB of WAL)..."""
CHECKPOINT_MAX_WAIT_S = 30.0
"""...or this long after the last pass, for whatever else was written (projection, pruning,
rebalances)."""


@dataclass(slots=True)
class Pacing:
    """When the next checkpoint pass is due; time is an argument.

    Why not a pass every period regardless: a pass that catches up with the whole WAL makes
    the writer's next commit start the file over, and SQLite then syncs the reused WAL's header
    inside that commit, on the event loop's thread, before the answer it carries is sent. Every
    0.25 s, a bot answering 10 requests a second paid that fsync on a third of its answers (3.6
    a second, 0.2–0.3 ms each on an idle disk, measured with strace; a cloud volume's fsync
    takes milliseconds). From ~2,000 answers a second a pass still comes every period or two."""

    last_at: float
    """Monotonic time of the last pass, or of the store's opening (everything appended since
    counts, so a pass never waits for entries written before the first look)."""
    last_entries: int = 0
    min_entries: int = CHECKPOINT_MIN_ENTRIES
    max_wait_s: float = CHECKPOINT_MAX_WAIT_S

    def due(self, appended: int, now: float) -> bool:
        """True (and the pass counted as done) when ``appended`` journal entries in all mean
        :attr:`min_entries` new ones since the last pass, or :attr:`max_wait_s` went by."""
        if appended - self.last_entries < self.min_entries and now - self.last_at < self.max_wait_s:
            return False
        self.last_entries, self.last_at = appended, now
        return True


class WalSyncer(threading.Thread):
    """Flushes the WAL to disk from its own thread when asked (:meth:`request`), so that the
    pass that follows syncs little of it on the event loop. Its descriptor of the WAL stays
    open until :meth:`stop` (after the connection is closed)."""

    def __init__(self, wal: Path) -> None:
        super().__init__(name=f"store-wal-sync:{wal.name}", daemon=True)
        self._wal = wal
        self._fd: int | None = None
        self._wanted = threading.Event()
        self._stopping = False
        self.synced = threading.Event()
        self.synced.set()

    def request(self) -> None:
        self.synced.clear()
        self._wanted.set()

    def run(self) -> None:
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopping:
                    return
                try:
                    os.fdatasync(self._descriptor())
                except OSError as exc:  # the pass syncs it anyway
                    log.debug("cannot sync %s ahead of a checkpoint: %s", self._wal, exc)
                finally:
                    self.synced.set()
        finally:
            if self._fd is not None:
                os.close(self._fd)

    def _descriptor(self) -> int:
        """A descriptor of the WAL as it is now (SQLite keeps the file while it is open; a new
        file, after the store was reopened, gets a new descriptor)."""
        if self._fd is not None and os.fstat(self._fd).st_ino != os.stat(self._wal).st_ino:
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self._fd = os.open(self._wal, os.O_RDONLY)
        return self._fd

    def stop(self) -> None:
        self._stopping = True
        self._wanted.set()
        self.join()


@dataclass(slots=True)
class Checkpoints:
    """The writer's checkpoints: it looks at most every ``every_s`` (the old thread's period)
    whether :class:`Pacing` says a pass is due, and makes it on its own connection — once the
    :class:`WalSyncer` (if any) has flushed the WAL."""

    every_s: float
    pacing: Pacing
    syncer: WalSyncer | None = None
    next_look: float = 0.0
    pending: bool = False
    """A pass is due and waits for the WAL's flush."""
    passes: int = 0
    last_pass_s: float = 0.0
    """How long the last pass held the caller (seconds), for people and tests."""
    longest_pass_s: float = field(default=0.0)

    def maybe(self, conn: sqlite3.Connection, appended: int, now: float) -> bool:
        """A pass if one is due (the caller committed first); True if it made one. Raises
        :class:`sqlite3.Error`."""
        if not self.pending:
            if now < self.next_look:
                return False
            self.next_look = now + self.every_s
            if not self.pacing.due(appended, now):
                return False
            if self.syncer is not None:
                self.pending = True
                self.syncer.request()
        if self.pending:
            assert self.syncer is not None
            if not self.syncer.synced.is_set():
                return False  # at a next look: the loop does not wait for the flush
            self.pending = False
        started = time.perf_counter()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.last_pass_s = time.perf_counter() - started
        self.longest_pass_s = max(self.longest_pass_s, self.last_pass_s)
        self.passes += 1
        return True
