"""The store's checkpoints, on the writer's own connection, in a thread of the store (the
"Checkpoints" part of :mod:`solver.io.store.checkpoint_handoff`'s docstring, the owner's side):
``wal_checkpoint(PASSIVE)`` paced by what was written (:class:`Pacing`).

Until issue 24 a background thread checkpointed on a connection of its own. The store is now
opened in exclusive locking mode (one connection per database, no memory-mapped ``-shm``), so
that thread cannot open it. The first cut ran the passes on the event loop between two commits
(the ticker, every 20 ms). A quick ``quote_path`` A/B against ``929db96`` on a busy machine then
showed, at 2,000 requests/s, p50 44 vs 4.9 ms and p99 97 vs 21 ms. Measured in the bot (every
tick and commit over 2 ms logged during a quick run): each pass held the loop 3–12 ms, and the
first commit after it 2–3 ms more; strace of a pass on the loop's thread: three ``fdatasync``
calls — the WAL's rest, the database's after the copy, and the restarted WAL's header inside
that next commit — 0.2–8 ms each here, tens of ms while other work writes. Short of CPU
(other processes took 1.1–1.5 of the 2 cores), each such stall left a queue the next one found
unfinished: 31 of 177 ticks late by more than 5 ms in that run's 2,000/s phase, the worst ≤
50 ms. The syncs were the cause, not the copy (~1 ms).

So a pass now runs in :class:`Checkpointer`, on the same connection (opened with
``check_same_thread=False``; SQLite's connection mutex serialises the two threads, Python's
sqlite3 releases the GIL while SQLite works, and the thread has a cursor of its own):

1. When :class:`Pacing` says a pass is due, the thread first flushes the WAL on a descriptor
   of its own (no SQLite) while the owner goes on committing.
2. At a next look (the ticker), the owner commits and hands the connection over. Until the
   pass ended, the desk goes on deciding and signing, the projection waits, and the
   executor's group commits go to the spill file (:mod:`solver.io.store.spill`, issue 29;
   until then they waited for the pass's end); anything else that needs SQLite (a snapshot,
   a status read, a backup, a store closing) waits for the pass's end.
3. The thread checkpoints, then starts the WAL over with a one-page write (``PRAGMA
   user_version`` set to what it is), so the header's sync is paid there too, and tells the
   loop (``call_soon_threadsafe``).
4. On the loop, the connection is the owner's again; its next commit moves the spilled rows
   into the journal first, in order, and empties the file.

Measured in the bot (quick runs, each pass logged): a pass takes 7–19 ms in the thread (up to
34 ms with 1.4–1.6 other cores busy). Before the spill file, answers that arrived during a pass
waited for its end, 6–35 ms at 2,000/s (a pass every ~0.25 s, so ~4 % of the answers: the
bot's p99 at 2,000/s, 1.26–2.07× ``929db96``'s in three quick runs; CHANGELOG, issue 24), up
to ~90 ms at saturation. Now they leave as usual, their rows one ``write`` away.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solver.io.store.journal import DROP_OLD_SNAPSHOTS, INSERT_SNAPSHOT

log = logging.getLogger("solver.store")

CHECKPOINT_MIN_ENTRIES = 512
"""A pass once the journal has this many new entries since the last pass (a few MB of WAL)..."""
CHECKPOINT_MAX_WAIT_S = 30.0
"""...or this long after the last pass, for whatever else was written (projection, pruning,
rebalances)."""


@dataclass(slots=True)
class SnapshotJob:
    """A desk snapshot to store (:meth:`Store.store_snapshot`), with how it went once
    :attr:`done`. In the checkpointer's thread (issue 29): the insert of the soak's ~8 MB text
    held the event loop 20–25 ms (80 once) while SQLite wrote it; the thread writes it and
    drops the older snapshots in one transaction while the loop goes on (group commits spill
    meanwhile, as during any pass), then checkpoints, so its pages leave the WAL at once."""

    seq: int
    at: int
    text: str
    done: threading.Event = field(default_factory=threading.Event)
    """Set once it went either way (the driver looks at each tick; a caller may wait)."""
    dropped: bool = False
    """The older snapshots went with it (the thread's transaction); False: the caller drops
    them (:meth:`SqliteJournal.drop_old_snapshots`) at a moment of its own."""
    took_s: float = 0.0
    error: str | None = None


@dataclass(slots=True)
class Pacing:
    """When the next checkpoint pass is due; time is an argument.

    Why not a pass every period regardless: each pass syncs the WAL and the database, and
    starts the WAL over (a sync of its header); answers arriving meanwhile wait for its end.
    Before the pass moved to a thread, the header's sync ran inside the next commit, on the
    event loop's thread, before the answer it carries was sent. Every
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


class Checkpointer(threading.Thread):
    """Runs the passes on the owner's connection, off the event loop (module docstring).

    :meth:`start_pass` hands it the connection (the owner has committed and appends nothing to
    SQLite until the pass ended: :attr:`SqliteJournal.held`); it checkpoints, starts the WAL
    over with a one-page write (``PRAGMA user_version`` set to what it is), then sets
    :attr:`done` and calls the ``ended`` callback given (the bot's: the loop's
    ``call_soon_threadsafe``). Its cursor is its own; SQLite's connection mutex serialises
    it with anything the owner's thread still runs on the connection (a read), and the GIL is
    released while SQLite works."""

    def __init__(self, conn: sqlite3.Connection, wal: Path, user_version: int) -> None:
        super().__init__(name=f"store-checkpoint:{wal.name}", daemon=True)
        self._conn = conn
        self._wal = wal
        self._fd: int | None = None
        self._flush = False
        self._restart_sql = f"PRAGMA user_version = {int(user_version)}"
        self._wanted = threading.Event()
        self._stopping = False
        self._ended: Callable[[], None] | None = None
        self._snapshot: SnapshotJob | None = None
        self.done = threading.Event()
        self.done.set()
        self.flushed = threading.Event()
        self.flushed.set()
        self.took_s = 0.0
        self.error: sqlite3.Error | None = None

    def flush_wal(self) -> None:
        """Flush the WAL to disk on the thread's own descriptor while the owner goes on
        committing (no SQLite): the pass that follows then syncs little of it."""
        self.flushed.clear()
        self._flush = True
        self._wanted.set()

    def start_pass(
        self, ended: Callable[[], None] | None, snapshot: SnapshotJob | None = None
    ) -> None:
        """Start a pass; ``snapshot``: stored first, in the pass's own transaction."""
        self.done.clear()
        self.error = None
        self._ended = ended
        self._snapshot = snapshot
        self._wanted.set()

    def run(self) -> None:
        cur = self._conn.cursor()  # this thread's own
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopping:
                    return
                if self._flush:
                    self._flush = False
                    try:
                        os.fdatasync(self._descriptor())
                    except OSError as exc:  # the pass syncs it anyway
                        log.debug("cannot sync %s ahead of a checkpoint: %s", self._wal, exc)
                    self.flushed.set()
                    continue
                snapshot, self._snapshot = self._snapshot, None
                if snapshot is not None:
                    _store_snapshot(cur, snapshot)
                started = time.perf_counter()
                try:
                    cur.execute("PRAGMA wal_checkpoint(PASSIVE)")  # its row: not read
                    # Every frame is in the database now (nobody else reads): this write
                    # starts the WAL over and syncs its header here, not in the next commit.
                    cur.execute(self._restart_sql)
                except sqlite3.Error as exc:
                    self.error = exc
                self.took_s = time.perf_counter() - started
                ended, self._ended = self._ended, None
                self.done.set()
                if ended is not None:
                    try:
                        ended()
                    except Exception as exc:  # a loop closed meanwhile: the owner polls
                        log.debug("checkpoint pass ended, owner not told: %s", exc)
        finally:
            cur.close()
            if self._fd is not None:
                os.close(self._fd)

    def _descriptor(self) -> int:
        """A descriptor of the WAL as it is now (a new file, after the store was reopened,
        gets a new one). Of the WAL, never of the database: closing a descriptor of the
        database file would drop the connection's lock (POSIX locks are the process's)."""
        if self._fd is not None and os.fstat(self._fd).st_ino != os.stat(self._wal).st_ino:
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self._fd = os.open(self._wal, os.O_RDONLY)
        return self._fd

    def stop(self) -> None:
        """After the pass in progress (the owner waited for it): the thread ends."""
        self._stopping = True
        self._wanted.set()
        self.join()


def _store_snapshot(cur: sqlite3.Cursor, job: SnapshotJob) -> None:
    """The snapshot and the older ones' deletion in one transaction; :attr:`SnapshotJob.done`
    in any case (a failure is its :attr:`~SnapshotJob.error`: the store is unchanged)."""
    started = time.perf_counter()
    try:
        cur.execute("BEGIN")
        cur.execute(INSERT_SNAPSHOT, (job.seq, job.at, job.text, 1))
        cur.execute(DROP_OLD_SNAPSHOTS)
        cur.execute("COMMIT")
        job.dropped = True
    except sqlite3.Error as exc:
        job.error = f"cannot write the desk snapshot: {exc}"
        try:
            cur.execute("ROLLBACK")
        except sqlite3.Error as again:
            log.debug("rollback of the snapshot's transaction: %s", again)
    finally:
        try:  # memory only: SQLite lets go of the body bound to its cached statement
            cur.execute(INSERT_SNAPSHOT, (0, 0, "", 0))
        except sqlite3.Error as exc:
            log.debug("cannot unbind the snapshot's body: %s", exc)
    job.text = ""
    job.took_s = time.perf_counter() - started
    job.done.set()


@dataclass(slots=True)
class Checkpoints:
    """The writer's checkpoints: it looks at most every ``every_s`` (the old thread's period)
    whether :class:`Pacing` says a pass is due, and hands the pass to the
    :class:`Checkpointer` (None: a reader's store, the pass runs in the caller)."""

    every_s: float
    pacing: Pacing
    thread: Checkpointer | None = None
    next_look: float = 0.0
    flushing: bool = False
    """A pass is due and waits for the thread's flush of the WAL (the owner still commits)."""
    passing: bool = False
    """A pass runs in the thread: the owner's thread leaves the connection to it."""
    passes: int = 0
    unreported: int = 0
    """Passes that ended since :meth:`Store.checkpoint_if_due` last said so."""
    error: str | None = None
    """A pass's failure, raised by the next :meth:`Store.checkpoint_if_due`."""
    deferred: int = 0
    """Passes refused for a moment (a lock) and left to the next due one."""
    last_pass_s: float = 0.0
    """How long the last pass took (seconds; in the thread: not the event loop's time)."""
    longest_pass_s: float = field(default=0.0)
    snapshot: SnapshotJob | None = None
    """A desk snapshot waiting for the connection: the next pass stores it first, and one
    starts at the next look if none is under way (:meth:`Store.store_snapshot`)."""

    def due(self, appended: int, now: float) -> bool:
        """Whether a pass should start now (looking at most every :attr:`every_s`)."""
        if self.flushing or self.passing or now < self.next_look:
            return False
        self.next_look = now + self.every_s
        return self.pacing.due(appended, now)

    def ended(self, took_s: float, error: sqlite3.Error | None) -> None:
        """Count a pass that ended (on the owner's thread)."""
        self.passing = False
        self.last_pass_s = took_s
        self.longest_pass_s = max(self.longest_pass_s, took_s)
        if error is not None:
            self.error = str(error)
            return
        self.passes += 1
        self.unreported += 1

    def inline(self, conn: sqlite3.Connection) -> None:
        """A pass in the caller's thread (a store without the thread). Raises
        :class:`sqlite3.Error`."""
        started = time.perf_counter()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.ended(time.perf_counter() - started, None)
