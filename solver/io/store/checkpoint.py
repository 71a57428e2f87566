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
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class Checkpoints:
    """The writer's checkpoints: it looks at most every ``every_s`` (the old thread's period)
    whether :class:`Pacing` says a pass is due, and makes it on its own connection."""

    every_s: float
    pacing: Pacing
    next_look: float = 0.0
    passes: int = 0
    last_pass_s: float = 0.0
    """How long the last pass held the caller (seconds), for people and tests."""
    longest_pass_s: float = field(default=0.0)

    def maybe(self, conn: sqlite3.Connection, appended: int, now: float) -> bool:
        """A pass if one is due (the caller committed first); True if it made one. Raises
        :class:`sqlite3.Error`."""
        if now < self.next_look:
            return False
        self.next_look = now + self.every_s
        if not self.pacing.due(appended, now):
            return False
        started = time.perf_counter()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.last_pass_s = time.perf_counter() - started
        self.longest_pass_s = max(self.longest_pass_s, self.last_pass_s)
        self.passes += 1
        return True
