"""The live bot's upkeep off the quote path: the ticker, the projection of the query tables,
desk snapshots, the WAL's restarts and the garbage collector (issue 11: no event-loop stall
over 5 ms).

Each of these once stopped the event loop for milliseconds at a time at 2,000 answers/s
(measured; ``benchmarks/README.md``, "Stalls"): 100 ms ticks doing 2–3 ms of work, the WAL's
TRUNCATE checkpoint (20–60 ms), snapshots of a large book (~50 ms), CPython's automatic
collections (4–30 ms). Here every piece of work is cut small or moved to a quiet moment:

- the ticker runs ``desk.tick`` every :data:`TICK_S` and one slice of projection;
- the projection takes more slices only while behind *and* the process has CPU to spare, and
  fewer while the process is saturated;
- a snapshot waits for a quiet book, unless too many facts would have to be replayed; it is
  captured at once and made in slices of ~2 ms at the next ticks
  (:mod:`solver.runtime.desk_snapshots`);
- the WAL is checkpointed from the store's own connection when enough was written (the store
  is opened in exclusive locking mode: no second connection, no thread, issue 24);
- the collector runs at the ticker's pace (:mod:`solver.runtime.gc_pacer`);
- what the store may forget after ``storage.retain_days`` is deleted every
  :data:`PRUNE_EVERY_S`, a couple of milliseconds a tick until done, never while saturated.

A store that fails (a full disk, a volume gone read-only) never stops the ticker: the first
failure of a streak pauses quoting with ``store_error`` (an alert, like a journal the executor
cannot write) and is said once; repeats are counted (:class:`~solver.runtime.repeats.Repeats`),
and the line that says the store works again carries the count.

The upkeep is given :class:`UpkeepPorts` — the store, the executor's ticking door, the desk's
view and a few callables — rather than the bot, so what it may touch is written in one place.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from solver.core import events as ev
from solver.core.clock import Micros, from_micros, span
from solver.core.pauses import STORE_ERROR
from solver.errors import SolverError
from solver.io.store.retention import Pruned
from solver.runtime.desk_snapshots import DeskSnapshots
from solver.runtime.gc_pacer import GcPacer
from solver.runtime.repeats import Repeats
from solver.runtime.run_queue import RunQueueWait

if TYPE_CHECKING:
    from solver.core.actions import Action
    from solver.core.view import DeskView
    from solver.io.alert_policy import BusWatch
    from solver.io.store.sqlite_store import Store

log = logging.getLogger("solver.bot")
TICK_S = 0.02
"""``desk.tick`` and a slice of projection this often: short ticks keep each one's work (the
deadlines passed since the last one, at 2,000 answers/s ~40 quotes) well under a millisecond,
where 100 ms ticks held the quote path for 2–3 ms at a time."""
GAUGES_EVERY_TICKS = 25
"""The operator's gauges and the paper book's metrics (and the heartbeat): every 0.5 s, faster
than any scrape. A refresh costs ~300 µs of the loop (the store's size and backlog among
them); every 100 ms it was 2.7 ms of each second at 500 answers/s, time a request arriving
meanwhile waits (issue 29)."""
PROJECT_BUDGET_S = 0.0005
PROJECT_BATCH_ENTRIES = 64
"""Caught up, the next slice waits for this many new journal entries (or
:data:`PROJECT_MAX_WAIT_S`): a slice costs ~300 µs of the loop before its first entry (its
transaction, the per-minute counts, the commit) and ~8 µs an entry, so a slice every tick at
500 answers/s (a dozen entries each) held the loop 380 µs 50 times a second, half the ticker's
CPU and the requests that arrive meanwhile wait (issue 29: p99 at 500/s)."""
PROJECT_MAX_WAIT_S = 0.25
"""The longest the query tables wait for a slice while entries are new: other processes read
them (``solver history``, the history API) this far behind at most; the bot's own reads
project first (:meth:`Store._fresh`)."""
PROJECT_MAX_WAIT_US = span(PROJECT_MAX_WAIT_S)
PROJECT_BEHIND_ENTRIES = 1_000
"""Behind: more journal entries than this wait for the query tables."""
PROJECT_SLICES_BEHIND = 6
"""Slices per tick while behind and idle enough: up to 150 ms of projection a second."""
PROJECT_SPARE_CPU = 0.5
"""Idle enough: the process used under this share of a core over the last tick."""
PROJECT_SATURATED_CPU = 0.9
"""Saturated: the process used at least this share of a core over the last tick."""
PROJECT_SATURATED_EVERY_TICKS = 5
"""While saturated, one slice every this many ticks (100 ms), not every tick: a slice with its
overshoot took ~0.7 ms (timed inside the running bot at 500 answers/s), ~3.6 % of the core
at every tick, time the answers need (the gain at saturation was within the benchmark's
noise, not isolated). The query tables fall behind meanwhile (the journal holds everything)
and catch up once the flow eases."""
SHUTDOWN_PROJECT_S = 2.0
PRUNE_EVERY_S = 600.0
"""A pass over what the store may forget this often (``storage.retain_days``)."""
PRUNE_BUDGET_S = 0.002
"""The pass's share of a tick; it goes on at the next tick until done."""


class JournalState(Protocol):
    """What the ticker reads of the executor's outbox: whether the journal holds every fact."""

    @property
    def journal_clean(self) -> bool: ...


class TickDoor(Protocol):
    """The executor as the ticker needs it: what is due now, the bus outage's alerts carried
    out like the desk's, and a failing store told to the desk (the ``store_error`` pause) once
    its outbox's journal is clean."""

    def tick(self, now: Micros) -> list[Action]: ...

    def carry_out(self, actions: list[Action], now: Micros) -> None: ...

    def feed(self, event: ev.Event, now: Micros | None = None) -> list[Action]: ...

    @property
    def outbox(self) -> JournalState: ...


@dataclass(frozen=True)
class UpkeepPorts:
    """Everything the :class:`Upkeep` uses."""

    view: DeskView
    """The open quotes (a snapshot waits for a quiet book) and the desk's snapshot."""
    executor: TickDoor
    store: Store | None
    """Projected, pruned, checkpointed and snapshots written; None: no store."""
    retain_days: float | None
    """``storage.retain_days`` (None: the store forgets nothing)."""
    bus_watch: BusWatch
    refresh_gauges: Callable[[], None]
    """The operator's gauges and the paper book's metrics."""
    observe_loop_lag: Callable[[float, float], None]
    """Where the ticker's late wake-ups go: the lateness and the part of it the process could
    have spent running (the loop-lag histograms)."""
    clock: Callable[[], Micros]


class Upkeep:
    """The bot's periodic work; :meth:`run` is one of the bot's tasks."""

    def __init__(self, ports: UpkeepPorts) -> None:
        self.ports = ports
        self.gc_pacer = GcPacer()
        self._stopping = False
        self._cpu_mark = (time.monotonic(), time.process_time())
        self._cpu_share = 0.0
        self._saturated_ticks = 0
        self._caught_up_at = 0  # the journal's count of entries when a slice last caught up
        self._sliced_at: Micros | None = None  # when a slice last caught up (None: not yet)
        self._prune_due: Micros | None = None  # None: at the first tick
        self._pruned = Pruned()
        self.store_failing = Repeats(log, "the store (projection, checkpoint, snapshot, pruning)")
        self.snapshots = DeskSnapshots(ports.view, ports.store, self.store_failed)
        self.tick_failing = Repeats(log, "the upkeep's tick", logging.ERROR)

    def start(self) -> None:
        """Right before quoting: the collector's pacing (everything built so far — the control
        API included — is frozen)."""
        self.gc_pacer.start()

    def stop(self) -> None:
        """The ticker stops: the collector runs by itself again, nothing more is projected
        in slices and the WAL is left to the close."""
        self._stopping = True
        self.gc_pacer.stop()

    def store_failed(self, exc: SolverError) -> None:
        """A store operation failed: said once a streak (then counted), and the first of a
        streak pauses quoting with ``store_error`` (the desk's alert): every failure of the
        store is that pause, wherever it shows first."""
        if self.store_failing.failed(exc, time.monotonic()):
            self.ports.executor.feed(
                ev.QuoteNotSent("", f"store failing: {exc}", store_error=True), self.ports.clock()
            )

    def store_worked(self) -> None:
        """A store operation worked: after a failing streak, and with nothing the journal
        refused still waiting, the ``store_error`` pause has lost its cause (``StoreWorks``)."""
        executor = self.ports.executor
        ended_streak = self.store_failing.worked()
        # A pause restored from the journal after a restart has no streak in this process:
        # the view says it holds, and a write that worked now is its recovery too.
        held = any(p.kind == STORE_ERROR for p in self.ports.view.pauses)
        if (ended_streak or held) and executor.outbox.journal_clean:
            executor.feed(ev.StoreWorks("the store writes again"), self.ports.clock())

    def close(self, now: Micros) -> None:
        """At shutdown: a snapshot, and as much projection as :data:`SHUTDOWN_PROJECT_S`
        allows (the rest at the next start)."""
        store = self.ports.store
        if store is None:
            return
        self.snapshots.maybe_take(now, force=True)
        try:
            store.project(SHUTDOWN_PROJECT_S)
        except SolverError as exc:
            log.warning("the query tables are behind the journal: %s", exc)

    async def tick(self, count: int) -> None:
        """One tick's work, in parts with a turn of the loop between them (``sleep(0)``): a
        request that arrives during a tick waits for the part under way, not for the whole
        tick (at 500 answers/s a whole tick held it up to ~1 ms, the p99's tail; issue 29).
        Nothing here may end the ticker: an unexpected error is logged (once a streak, then
        counted) and the next tick runs."""
        ports = self.ports
        now = ports.clock()
        try:
            ports.executor.tick(now)
            outage = ports.bus_watch.tick(from_micros(now))
            if outage:
                ports.executor.carry_out(list(outage), now)
            await asyncio.sleep(0)
            self.measure_cpu()
            if self.project_when_due(now):
                await asyncio.sleep(0)
            self.checkpoint()
            self.gc_pacer.tick()
            if count % GAUGES_EVERY_TICKS == 0:
                await asyncio.sleep(0)
                ports.refresh_gauges()
            if self.snapshots.making:
                await asyncio.sleep(0)
                self.snapshots.slice()
            elif count % round(1 / TICK_S) == 0:
                self.snapshots.maybe_take(now)
            self.maybe_prune(now)
        except Exception as exc:  # the ticker is what follows every quote: it must go on
            self.tick_failing.failed(f"{type(exc).__name__}: {exc}", time.monotonic())
            return
        self.tick_failing.worked()

    def checkpoint(self) -> None:
        """The store's own checkpoint pass when one is due (:meth:`Store.checkpoint_if_due`)."""
        store = self.ports.store
        if store is None or self._stopping:
            return
        try:
            if store.checkpoint_if_due():
                self.store_worked()
        except SolverError as exc:
            self.store_failed(exc)

    async def run(self, stop: asyncio.Event) -> None:
        """``desk.tick`` every :data:`TICK_S`: polls, deadlines, markouts, PnL, kill switch;
        then a slice of projection and the collector. Gauges every
        :data:`GAUGES_EVERY_TICKS`, a snapshot check every second."""
        ports = self.ports
        count = 0
        run_queue = RunQueueWait()  # of this thread: the loop's
        try:
            while not stop.is_set():
                count += 1
                await self.tick(count)
                # A plain sleep, not wait_for(stop.wait()): that made a task and a timer a tick,
                # ~35 µs of CPU more each time (measured under uvloop); a stop waits ≤ one tick.
                due = time.perf_counter() + TICK_S
                waited = run_queue.waited_s()
                await asyncio.sleep(TICK_S)
                # How late the wake-up came is how long other work held the loop, or how long the
                # core was taken: the operator's measure of stalls, requests flowing or not. Less
                # the time the loop's thread waited for a core meanwhile, it is what the bot held
                # the loop itself (at least): a shared machine's stall is told from the bot's.
                lag = max(0.0, time.perf_counter() - due)
                ports.observe_loop_lag(lag, max(0.0, lag - (run_queue.waited_s() - waited)))
        finally:
            run_queue.close()

    def project_when_due(self, now: Micros) -> bool:
        """A slice of projection (:meth:`project`) when one is due: once
        :data:`PROJECT_BATCH_ENTRIES` journal entries wait, or :data:`PROJECT_MAX_WAIT_S` after
        the projection last caught up, whichever comes first (and nothing while none wait).
        True when a slice was due."""
        store = self.ports.store
        if store is None:
            return False
        new = store.journal.appended - self._caught_up_at
        if new <= 0:
            return False
        last = self._sliced_at
        if new < PROJECT_BATCH_ENTRIES and last is not None and now - last < PROJECT_MAX_WAIT_US:
            return False
        self.project()
        if store.journal.appended == self._caught_up_at:  # the slice caught up
            self._sliced_at = now
        return True

    def project(self, slices: int = 1) -> None:
        """The query tables follow the journal in slices of :data:`PROJECT_BUDGET_S`, so the
        quote path barely notices: one per tick (one every
        :data:`PROJECT_SATURATED_EVERY_TICKS` while the process is saturated); while behind
        and the process has time to spare (under :data:`PROJECT_SPARE_CPU` of a core over
        the last tick), up to :data:`PROJECT_SLICES_BEHIND`, each queued behind the loop's
        waiting I/O so that requests are answered between them. Under load the projection
        waits (the journal holds everything; memory does not grow): catching up at 2,000
        answers/s took the CPU the answers needed (p50 0.7 → 3 ms, measured)."""
        store = self.ports.store
        if store is None or self._stopping:
            return
        if slices == 1 and self._cpu_share >= PROJECT_SATURATED_CPU:
            self._saturated_ticks += 1
            if self._saturated_ticks < PROJECT_SATURATED_EVERY_TICKS:
                return
        self._saturated_ticks = 0
        try:
            journal = store.journal
            appended = journal.appended  # committed by the slice, if it runs
            if not store.project(PROJECT_BUDGET_S):
                if not journal.held:  # else a checkpoint pass had the connection: not caught up
                    self._caught_up_at = appended
                return  # caught up (perhaps without a word to SQLite: not a sign of health)
            self.store_worked()  # a slice committed
            behind = store.unprojected()
            if not behind:
                self._caught_up_at = appended
            spare = self._cpu_share < PROJECT_SPARE_CPU
            if slices == 1 and spare and behind > PROJECT_BEHIND_ENTRIES:
                slices = PROJECT_SLICES_BEHIND
            if slices > 1 and behind:
                asyncio.get_running_loop().call_soon(self.project, slices - 1)
        except SolverError as exc:
            self.store_failed(exc)

    def maybe_prune(self, now: Micros) -> None:
        """Go on with the store's pass over what it may forget (:meth:`Store.prune`), if one
        is due: :data:`PRUNE_BUDGET_S` a tick, none while the process is saturated; said in
        one line when the pass is done, if it deleted anything."""
        store, days = self.ports.store, self.ports.retain_days
        if store is None or days is None or self._stopping:
            return
        if self._prune_due is not None and now < self._prune_due:
            return
        if self._cpu_share >= PROJECT_SATURATED_CPU:
            return
        try:
            step = store.prune(from_micros(now - span(days * 86_400)), PRUNE_BUDGET_S)
        except SolverError as exc:
            self.store_failed(exc)
            self._prune_due = now + span(PRUNE_EVERY_S)
            return
        total = self._pruned
        total.add(step)
        if not step.done:
            self._prune_due = None  # the next tick goes on
            return
        self._prune_due = now + span(PRUNE_EVERY_S)
        if total.rows:
            log.info(
                "store: forgot what is older than %g days: %d quotes never traded, %d journal "
                "entries, %d balance snapshots, %d request samples",
                days, total.quotes, total.journal, total.balance_snapshots, total.requests,
            )  # fmt: skip
        self._pruned = Pruned()

    def measure_cpu(self) -> None:
        """The process's share of a core since the last tick."""
        wall, cpu = time.monotonic(), time.process_time()
        last_wall, last_cpu = self._cpu_mark
        if wall > last_wall:
            self._cpu_share = (cpu - last_cpu) / (wall - last_wall)
        self._cpu_mark = (wall, cpu)
