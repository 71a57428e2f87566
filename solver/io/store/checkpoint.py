"""The store's background checkpointer (the "Checkpoints" part of
:mod:`solver.io.store.sqlite_store`'s
docstring): ``wal_checkpoint(PASSIVE)`` from its own thread and connection, paced by what was
written (:class:`Pacing`), and the moment it tells the writer to restart the WAL, with both
files synced first."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("solver.store")

WAL_FRAME_HEADER = 24
CATCH_UP_PASSES = 2
"""Quick checkpoint passes after the one that found the WAL past its limit, before the writer
is told to restart it."""
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
    counts, so a pass never waits for entries written before the thread first looked)."""
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
    """Runs ``wal_checkpoint(PASSIVE)`` on its own connection: it never waits for the writer,
    and the writer never waits for it (sqlite3 releases the GIL while SQLite works). It looks
    every ``every_s`` and makes a pass when ``pacing`` says one is due; ``appended`` reads the
    writer's count of journal entries (an int, read under the GIL)."""

    def __init__(
        self,
        path: Path,
        every_s: float,
        busy_timeout_ms: int,
        past_limit: Callable[[], tuple[int, Callable[[], None] | None]],
        appended: Callable[[], int],
        pacing: Pacing,
    ) -> None:
        super().__init__(name=f"store-checkpoint:{path.name}", daemon=True)
        self._path = path
        self._every_s = every_s
        self._busy_timeout_ms = busy_timeout_ms
        self._past_limit = past_limit
        self._appended = appended
        self._pacing = pacing
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            timeout_s = self._busy_timeout_ms / 1000
            conn = sqlite3.connect(self._path, timeout=timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            log.warning("store checkpointer cannot open %s: %s", self._path, exc)
            return
        try:
            page = int(conn.execute("PRAGMA page_size").fetchone()[0]) + WAL_FRAME_HEADER
            while not self._stopping.wait(self._every_s):
                if not self._pacing.due(self._appended(), time.monotonic()):
                    continue
                try:
                    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    limit, notify = self._past_limit()
                    # Frames in use, not the file's size: a restarted WAL keeps its size.
                    if notify is not None and frames * page > limit:
                        # Catch up with what was committed during the pass (each pass is
                        # shorter than the one before), then let the writer restart it.
                        for _ in range(CATCH_UP_PASSES):
                            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        self.sync_files()
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        notify()
                except sqlite3.Error as exc:
                    log.warning("store checkpoint of %s failed: %s", self._path, exc)
        finally:
            conn.close()

    def sync_files(self) -> None:
        """Flush the database and its WAL to disk from this thread, just before the writer's
        RESTART: that checkpoint fsyncs both files on the event loop's thread, and what it
        waited for was the data written since the last sync, the pages the passes copied in
        (10–65 ms under load). Synced here first, it finds a few pages left: ~1 ms at 2,000
        answers/s (measured in the running bot). An extra sync never weakens durability."""
        for name in (str(self._path), f"{self._path}-wal"):
            try:
                fd = os.open(name, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                log.warning("cannot sync %s to disk before the WAL restart: %s", name, exc)

    def stop(self) -> None:
        self._stopping.set()
        self.join()
