"""Desk snapshots in the live bot: when one is due, and where it goes (the store), made in
slices by :class:`~solver.runtime.snapshot_slices.SnapshotInSlices` at the ticker's pace.

A restart applies every fact after the latest snapshot (~20 µs each, measured), so one is due
every :data:`SNAPSHOT_DUE_FACTS`; building and writing it costs the loop ~6 µs per open quote,
so it waits for a quiet book unless :data:`SNAPSHOT_FORCED_FACTS` would have to be replayed.
Captured at once (~2 ms with the soak's book) at the journal position committed at that
moment, its document and text are made a slice per tick; the insert and the deletion of the
older ones each get a tick of their own (the loop is held by the longest of these, not their
sum), and the memory it freed goes back to the system (:mod:`solver.runtime.heap`). Split out
of :mod:`solver.runtime.upkeep`, which calls it each tick (issue 29).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from solver.core.clock import Micros
from solver.errors import SolverError
from solver.io.store.checkpoint import SnapshotJob
from solver.io.store.schema import StoreError
from solver.runtime import heap
from solver.runtime.snapshot_slices import SnapshotInSlices

if TYPE_CHECKING:
    from solver.core.view import DeskView
    from solver.io.store.sqlite_store import Store

log = logging.getLogger("solver.bot")  # the soak reads the snapshot's line (benchmarks/soak.py)

SNAPSHOT_DUE_FACTS = 50_000
"""A desk snapshot is due after this many facts; it is taken at the next quiet moment."""
SNAPSHOT_QUIET_QUOTES = 500
"""Quiet: at most this many open quotes. A snapshot costs ~6 µs of the loop per open quote
(building and writing it; 8,000 open quotes at 2,000 answers/s: ~50 ms, measured), so it
waits for a small book: a few milliseconds."""
SNAPSHOT_FORCED_FACTS = 500_000
"""Taken anyway past this many facts: a restart applies every fact after the latest snapshot
(~20 µs each, measured: ~10 s at most), whatever the flow."""


class DeskSnapshots:
    """The bot's desk snapshots: :meth:`maybe_take` once a second (and forced at shutdown),
    :meth:`slice` at each tick while :attr:`making`. A store failure goes to ``failed`` (the
    upkeep's ``store_error`` pause) and the snapshot is given up until the next is due."""

    def __init__(
        self, view: DeskView, store: Store | None, failed: Callable[[SolverError], None]
    ) -> None:
        self.view = view
        self.store = store
        self.failed = failed
        self._mark = 0  # the journal's count of facts at the last snapshot
        self._snapshot: SnapshotInSlices | None = None  # being made, a slice a tick
        self._text: bytes | None = None  # its text, made: stored at the next tick
        self._drop_due = False  # one was stored: the older ones go at the next tick
        self._storing: tuple[SnapshotInSlices, SnapshotJob, float] | None = None
        """Handed to the store, not stored yet; with the loop's time the hand-over took."""

    def maybe_take(self, now: Micros, *, force: bool = False) -> None:
        """A desk snapshot when one is due: captured now (~2 ms with the soak's book), its
        document made in slices at the next ticks (:meth:`slice`). ``force`` (the
        shutdown's): made and stored at once, a snapshot being made meanwhile dropped for it."""
        store = self.store
        if store is None:
            return
        journal = store.journal
        # Facts since the last snapshot, from the journal's count, which only ever grows: the
        # store's checkpointer and projection read it too (resetting it once made the
        # checkpointer wait 30 s after a snapshot: the WAL grew to 437 MB, not ~275).
        facts = journal.appended - self._mark
        if not force:
            if self.making:
                return
            due = facts >= SNAPSHOT_DUE_FACTS
            quiet = len(self.view.open_quotes) <= SNAPSHOT_QUIET_QUOTES
            if not ((due and quiet) or facts >= SNAPSHOT_FORCED_FACTS):
                return
        try:
            if force:
                store.commit()  # after a checkpoint pass under way: its spilled facts in
            seq = journal.snapshot_position()
            if seq is None:  # a checkpoint pass holds the connection: at the next look
                return
            self._snapshot, self._text, self._drop_due, self._storing = None, None, False, None
            making = SnapshotInSlices(self.view.capture(), seq, now, facts)
        except SolverError as exc:
            self.failed(exc)
            return
        self._mark = journal.appended
        if force:
            if self._store_at_once(making, making.finish()):
                self._drop_old()
        else:  # made from the next tick on
            self._snapshot = making

    @property
    def making(self) -> bool:
        """A snapshot is being made or stored, or the older ones are still to drop
        (:meth:`slice` at each tick)."""
        return self._snapshot is not None or self._storing is not None or self._drop_due

    def slice(self) -> None:
        """The snapshot's work of this tick: a slice of making it
        (:data:`~solver.runtime.snapshot_slices.SLICE_S` of the loop); once its text is whole,
        handing it to the store, which writes it in its checkpointer's thread with the older
        ones' deletion (:meth:`Store.store_snapshot`: the insert of the soak's 8 MB held the
        loop 20–80 ms); then a look per tick whether it is stored. A store that wrote it here
        (PostgreSQL) leaves the older ones to the tick after (~15 ms each with the soak's book:
        the loop is held by the longest of these, not by their sum)."""
        if self._drop_due:  # the turn after the insert: the older ones go
            self._drop_due = False
            self._drop_old()
            return
        if self._storing is not None:
            making, job, handed_s = self._storing
            if job.done.is_set():
                self._storing = None
                self._drop_due = self._stored(making, job, handed_s)
            return
        if self._snapshot is None:
            return
        making = self._snapshot
        if self._text is not None:  # a turn of its own for the hand-over
            store = self.store
            assert store is not None
            text, self._text, self._snapshot = self._text, None, None
            started = time.perf_counter()
            job = store.store_snapshot(text, making.at, making.seq)
            del text
            self._storing = (making, job, time.perf_counter() - started)
            return
        self._text = making.step()

    def _drop_old(self) -> None:
        store = self.store
        assert store is not None
        try:
            store.journal.drop_old_snapshots()
        except SolverError as exc:
            self.failed(exc)

    def _stored(self, making: SnapshotInSlices, job: SnapshotJob, handed_s: float) -> bool:
        """A snapshot's store ended: said, or its failure given to ``failed``; whether the
        older ones are still to drop."""
        if job.error is not None:
            self.failed(StoreError(job.error))
            return False
        where = ", in the store's thread" if job.dropped else ""
        self._said(making, max(making.longest_s, handed_s), job.took_s, where)
        return not job.dropped

    def _store_at_once(self, making: SnapshotInSlices, text: bytes) -> bool:
        """The shutdown's snapshot, made and inserted in one turn (the loop is held for both;
        :meth:`maybe_take` waited for a checkpoint pass under way); whether it was stored."""
        store = self.store
        assert store is not None
        started = time.perf_counter()
        try:
            store.journal.store_snapshot(text, making.at, making.seq)
        except SolverError as exc:
            self.failed(exc)
            return False
        finally:
            del text
        stored_s = time.perf_counter() - started
        self._said(making, making.longest_s + stored_s, stored_s, "")
        return True

    def _said(self, making: SnapshotInSlices, held_s: float, insert_s: float, where: str) -> None:
        """The snapshot's line (the soak reads it: benchmarks/soak.py); then the document's
        and text's memory goes back to the system (tens of MB with a large book), or each
        forced snapshot left more behind (:mod:`solver.runtime.heap`)."""
        log.info(
            "desk snapshot: %d facts since the last, %d open quotes, made in %d slices over "
            "%.0f ms, the loop held %.0f ms at most (the longest slice %.0f ms, the insert "
            "%.0f ms%s)",
            making.facts, making.open_quotes, making.slices, making.took_ms(), held_s * 1e3,
            making.longest_s * 1e3, insert_s * 1e3, where,
        )  # fmt: skip
        heap.give_back()
