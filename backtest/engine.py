"""The replay: a recorded stream through the live bot's desk and executor, on a simulated clock.

The backtest is the second driver of the one executor (DESIGN "The shape"): the very
:class:`~solver.core.desk.Desk` the live bot runs, fed only through the live
:class:`~solver.runtime.executor.Executor`, whose actions are carried out by simulated ports
(:mod:`backtest.ports`; wired by :mod:`backtest.replay_wiring`, signing included). The replay
keeps only the stream, the clock and the desk's inputs at simulated time. Around it:

- **Clock**: the event timestamps. A request at ``ts`` reaches the desk (the ``QuoteRequest``,
  as live) at ``now = ts + latency`` (:class:`~backtest.fills.LatencyModel`); scheduled work
  (outcomes and the desk's ticks) runs in time order before the first event at or after its
  time. The clock never goes back: an event older than the clock is counted
  (``events.out_of_order``) and handled at the clock.
- **Ticks**: ``desk.tick(now)`` every :data:`TICK_S` of stream time (and at the end), as the
  live driver's timer does. Before each, the desk hears the ledger's balances (``BalancesSeen``),
  the salt and the config's ``static`` prices (``SaltSeen``, ``PriceSeen``), so these inputs are
  always fresh, as the live timers keep them. Stream prices reach it as they come
  (``PriceSeen``); the fee and the salt are the ledger's. ``ConnectionRestored`` once at the
  start: nothing is missed in a replay, so an answer past its deadline that nobody named ends
  LOST without a nonce check.
- **Outcomes** (:class:`~backtest.ports.SimulatedRelay`): an answer later than ``bus.wait_ms``
  loses; otherwise the fill model decides at
  ``ts + settlement_delay_ms`` (a ``competitor`` event for the request counts if it came before
  that). A won quote settles then on the sandbox ledger (:mod:`backtest.settle`: fees, balances,
  invariant — and with signing on, every verifier check), and the desk hears it as live:
  ``QuoteStatusSeen`` (a claim), ``IntentStatusSeen(SETTLED)``, then the ledger's balances
  (its ``RefreshBalances``). A lost quote is not reported: as live, the desk ends it LOST after
  its deadline, and its reservation holds until the first balance snapshot after the deadline.
- **A settlement the ledger refuses** is a taker's intent that failed on chain: the desk hears the
  claim and ``IntentStatusSeen(NOT_FOUND_OR_NOT_VALID)``, which ends that claim only. The quote
  stays open with its reservation (someone else could still use it) until its deadline; then the
  desk asks ``CheckNonce``, answered from the ledger (unused), and the quote is LOST.
- **Kill switch, PnL, markouts**: the desk's. A risk pause (daily loss, drawdown, stale data,
  reconciliation) marks the replay halted (when, and the desk's reason;
  :class:`~backtest.replay_result.RiskHalt` is the executor's alert port); quoting stays paused
  for the rest of the replay (nobody resumes it), settlement goes on.
  :mod:`backtest.measure.measurements` only observes (counts, fills with the
  desk's markouts, series sampled at ticks).

What differs from live, on purpose: the strategy's wall-clock budget is not enforced (a timing
would make runs differ; the bench measures speed instead), the response budget is not applied
(the latency model and ``bus.wait_ms`` decide lateness), nothing is journaled (the executor has
no journal port; its fact observers feed the measurements), nothing is counted in metrics,
the desk ticks every :data:`TICK_S` of stream time
rather than every 100 ms, and balances are read from the ledger without delay.

Deterministic: the same events, config and settings (seed included) give the same summary and
fills, signing on or off. Memory does not grow with the stream: pending work is bounded by the
open quotes and the markout horizon, measurements are fixed-size.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

from backtest.measure.fill_record import FillRecord
from backtest.measure.measurements import QUEUE_MAX
from backtest.ports import Pending
from backtest.replay_result import Progress, ReplayResult
from backtest.replay_start import check_header, collector_paced, lookahead, starting_balances
from backtest.replay_wiring import wire
from backtest.settings import BacktestSettings
from backtest.stream.events import Header, StreamEvent
from backtest.stream.read import StreamReader
from backtest.stream.records import (
    REC_COMPETITOR,
    REC_INFORMED,
    REC_PRICE,
    REC_REQUEST,
    Record,
    record,
)
from backtest.unobserved import require_competition
from solver.config import BotConfig
from solver.core.clock import Micros, from_micros, micros
from solver.core.events import BalancesSeen, ConnectionRestored, FeeSeen, PriceSeen, SaltSeen
from solver.core.inventory import Inventory
from solver.core.lifecycle import Quote
from solver.core.market import QuoteRequest

__all__ = ["TICK_S", "Replay"]

TICK_S = 1.0
"""The desk's clock in the replay: a tick every second of stream time (shorter if the config's
balance, price or salt max age is under two seconds, so inputs refreshed at ticks stay fresh)."""
PROGRESS_EVERY = 8192
"""``progress`` is called about this often (in records; at the end of a batch)."""


class Replay:
    def __init__(
        self,
        config: BotConfig,
        settings: BacktestSettings,
        *,
        on_fill: Callable[[FillRecord], None] | None = None,
        progress: Callable[[Progress], None] | None = None,
        observe: Callable[[float, str | None, bool], None] | None = None,
    ) -> None:
        """``on_fill`` gets every fill once its markouts are known (``fills.csv``);
        ``progress`` is called every :data:`PROGRESS_EVERY` events; ``observe`` gets the edge,
        the fill model's verdict (None: won, else why it lost) and whether a competitor was
        observed, for every answer in time (calibration)."""
        self.config = config
        self.settings = settings
        self.decimals = {asset: token.decimals for asset, token in config.tokens.items()}
        self.tokens = sorted(config.tokens)
        self.now: Micros = 0
        """The simulated clock: the time of the work being done (a request as it reaches the
        desk, an outcome, a tick)."""
        wired = wire(
            config,
            settings,
            clock=self._now,
            balances=self._balances,
            salt=self._salt,
            on_fill=on_fill,
            observe=observe,
        )
        self.desk, self.executor, self.settler = wired.desk, wired.executor, wired.settler
        self.relay, self.measures, self.latency = wired.relay, wired.measures, wired.latency
        self.halt = wired.halt  # the executor's alert port
        self.pipeline = self.desk.pipeline  # the live QuotePipeline (parity tests capture it)
        self.routes = self.pipeline.routes
        self.progress = progress
        self.relay.won = self._won
        self.competitors = self.relay.competitors  # what the relay's fill model will see
        pipeline = self.desk.settings.pipeline
        shortest = min(
            pipeline.balance_max_age_s, pipeline.price_max_age_s, pipeline.salt_max_age_s
        )
        self.tick_us = max(1, int(min(TICK_S, shortest / 2) * 1_000_000))
        self.static: dict[str, float] = {}
        for source in config.prices.sources:
            if source.kind == "static":
                self.static.update(source.prices)
        self._next_tick_us = 2**62
        self._latencies = self.latency.draws()  # (ms, µs) per request
        self._clock_us = -(2**62)
        self._started = False
        self._header: Header | None = None

    @property
    def inventory(self) -> Inventory:
        """The desk's inventory (confirmed balances, reservations)."""
        return self.desk.inventory

    # ------------------------------------------------------------------ running

    def run(self, events: Iterable[StreamEvent], header: Header) -> ReplayResult:
        """Replay ``events`` (in time order) and return what was measured. Once per Replay.

        A :class:`~backtest.stream.read.StreamReader` is read as records, a batch at a time
        (its fast path); any other iterable is taken one event at a time, as it comes."""
        if isinstance(events, StreamReader):
            return self.run_records(events.batches(), header)
        return self.run_records(([record(event)] for event in events), header)

    def run_records(self, batches: Iterable[Sequence[Record]], header: Header) -> ReplayResult:
        """:meth:`run` on batches of records (:mod:`backtest.stream.records`: what
        :meth:`StreamReader.batches` and :class:`~backtest.stream.prefetch.PrefetchReader`
        give); the same decisions and results as :meth:`run` on the events the records were
        made from. Once per Replay."""
        self._begin(header)
        it = iter(batches)
        buffered, first_prices = self._lookahead(it)
        start_us = buffered[0][1] if buffered else micros(header.created)
        start = self._setup(start_us, first_prices)
        with collector_paced():
            count = self._replay(itertools.chain((buffered,), it))
            return self._finish(count, start_us, start)

    def _replay(self, batches: Iterable[Sequence[Record]]) -> int:
        """The loop: each record at its time (the clock never goes back), after the work due
        before it; the number of records."""
        relay = self.relay
        resolves, resolve_due = relay.resolves, relay.resolve_due
        events = self.measures.events
        price, informed = self._price, self._informed
        # A request, inline (one call fewer per request): recorded at ``rec[1]``, replayed at
        # ``t_us`` (later only when it came out of order); the desk decides it ``latency``
        # later; the measurements queue what it became (Measurements.on_request, inline).
        latencies, ask = self._latencies, self.executor.request
        m = self.measures
        queue, fold = m.request_queue, m.fold_queues
        add_time, add_latency, add_skip = (
            m.request_times.append,
            m.request_latencies.append,
            m.request_skips.append,
        )
        book = self.competitors  # CompetitorBook.add, inline (a call per competitor record)
        best_of = book.best
        progress = self.progress
        count = competitors = 0
        next_progress = PROGRESS_EVERY
        clock = self._clock_us
        next_tick = self._next_tick_us  # moved by _run_due only
        for batch in batches:
            for rec in batch:
                t_us = rec[1]
                if t_us < clock:
                    events["out_of_order"] += 1
                    t_us = clock
                else:
                    clock = t_us
                if t_us >= next_tick:
                    self._run_due(t_us)
                    next_tick = self._next_tick_us
                elif resolves and resolves[0][0] <= t_us:
                    resolve_due(t_us)  # _run_due with no tick due: outcomes only
                kind = rec[0]
                if kind == REC_REQUEST:
                    latency, latency_us = next(latencies)
                    self.now = now = rec[1] + latency_us
                    relay.arrive_us, relay.latency_ms = t_us, latency
                    req: QuoteRequest = rec[2]
                    action = ask(req, now)
                    queue.append(req)
                    add_time(t_us)
                    add_latency(latency)
                    add_skip(getattr(action, "reason", None) if type(action) is not Quote else None)
                    if len(queue) >= QUEUE_MAX:
                        fold()
                elif kind == REC_COMPETITOR:
                    competitors += 1
                    best_of[rec[2]] = (rec[3], t_us)
                    book.newest_us = t_us
                elif kind == REC_PRICE:
                    price(rec[2], rec[3], rec[1], t_us)
                elif kind == REC_INFORMED:
                    informed(rec[2], t_us)
                else:
                    events["status"] += 1  # the recorder's own quotes: nothing to replay
            count += len(batch)
            if progress is not None and count >= next_progress:
                next_progress = (count // PROGRESS_EVERY + 1) * PROGRESS_EVERY
                if competitors:
                    events["competitor"] += competitors
                    competitors = 0
                progress(self._progress(count))
        self._clock_us = clock
        if competitors:
            events["competitor"] += competitors
        return count

    def _begin(self, header: Header) -> None:
        if self._started:
            raise RuntimeError("a Replay runs once: make a new one for another run")
        self._started = True
        self._check_header(header)
        if self.settings.fill.model == "competitor":
            require_competition(header, self.settings.fill.unobserved, f"stream {header.source!r}")
        self._header = header

    def _setup(self, start_us: int, first_prices: dict[str, float]) -> dict[str, int]:
        """Fund the ledger; tell the desk the fee, salt, static prices and first balances; the
        starting balances."""
        start = self._starting_balances(first_prices)
        self.settler.fund(start, self.tokens)
        feed = self.executor.feed
        self.now = start_us
        feed(FeeSeen(self.settler.fee_pips), start_us)
        feed(ConnectionRestored(), start_us)
        self._clock_us = start_us
        self.measures.start(start, {**self.static, **first_prices}, start_us / 1e6)
        self._tick(start_us)
        self._next_tick_us = start_us + self.tick_us
        return start

    def _finish(self, count: int, start_us: int, start: dict[str, int]) -> ReplayResult:
        m = self.measures
        m.first_ts = from_micros(start_us) if count else None
        m.last_ts = from_micros(self._clock_us) if count else None
        # The stream ended: the outcomes still pending are decided at their times, then the
        # desk ticks once more (no ticks in between: no price comes after the stream, and
        # markouts due after that last tick are not taken).
        resolves = self.relay.resolves
        end_us = resolves[-1][0] if resolves else self._clock_us
        self.relay.resolve_due(end_us)
        self._tick(max(end_us, self._clock_us))
        m.finish(end_us / 1e6 if count else None)
        self._counts()
        if self.progress is not None:
            self.progress(self._progress(count))
        return ReplayResult(
            m,
            self.desk,
            start,
            self.settler.balances(self.tokens),
            len(self.desk.book.quotes),
            self.halt.halted,
            self.relay.coverage,
            self._header,
        )

    def _counts(self) -> None:
        stats = self.desk.stats
        self.measures.counts(stats.requests, self.executor.outbox.sent, stats.skipped)

    def _progress(self, count: int) -> Progress:
        self._counts()
        m = self.measures
        return Progress(count, m.requests, m.quoted, m.won)

    def _check_header(self, header: Header) -> None:
        check_header(header, self.decimals)

    def _lookahead(self, it: Iterator[Sequence[Record]]) -> tuple[list[Record], dict[str, float]]:
        """Read ahead until every token that may be held has a price: the traded ones (for
        their default balance) and those given a balance (:func:`~backtest.replay_start.lookahead`,
        at most ``lookahead_events`` records)."""
        need = {a for pair in self.routes for a in pair}
        need |= {a for a, amount in self.settings.balances.items() if amount}
        need -= set(self.static)
        return lookahead(it, need, self.settings.lookahead_events)

    def _starting_balances(self, first_prices: dict[str, float]) -> dict[str, int]:
        return starting_balances(
            self.tokens,
            self.settings.balances,
            {a for pair in self.routes for a in pair},
            {**self.static, **first_prices},
            self.settings.starting_usd,
            self.decimals,
        )

    # ------------------------------------------------------------------ scheduled work

    def _run_due(self, t_us: int) -> None:
        """Run the outcomes and ticks due at or before ``t_us``, in time order (an outcome
        before a tick at the same time)."""
        resolve_due = self.relay.resolve_due
        while True:
            next_tick = self._next_tick_us
            resolve_due(t_us if t_us < next_tick else next_tick)
            if next_tick > t_us:
                return
            self._next_tick_us = next_tick + self.tick_us
            self._tick(next_tick)

    def _now(self) -> Micros:
        return self.now

    def _refresh(self, now: Micros) -> None:
        """What the live timers keep fresh: the balances, the salt, the static prices."""
        feed = self.executor.feed
        repriced = self.relay.repriced
        for asset, usd in self.static.items():
            feed(PriceSeen(asset, usd, now), now)
            repriced(asset)
        self._salt()
        self._balances()

    def _salt(self) -> None:
        self.executor.feed(SaltSeen(self.settler.salt, self.now), self.now)

    def _balances(self) -> None:
        now = self.now
        self.executor.feed(BalancesSeen(self.settler.balances(self.tokens), now), now)

    def _tick(self, t_us: int) -> None:
        self.now = now = t_us
        self._refresh(now)
        self.executor.tick(now)
        pnl = self.desk.pnl
        self.measures.on_tick(t_us / 1e6, pnl.pnl, pnl.drawdown_usd(), pnl.realized_usd)
        self.measures.flush(t_us)
        relay = self.relay  # what the relay keeps between ticks: bounded by a tick's work
        relay.competitors.sweep()
        relay.informed.sweep()
        relay.coverage.fold()

    def _won(self, pending: Pending, at_us: int) -> None:
        """A quote a taker took: settled at its time (the desk hears it then)."""
        self.now = at_us
        self.relay.settle(pending, at_us)

    # ------------------------------------------------------------------ records

    def _informed(self, quote_id: str, t_us: int) -> None:
        """A generator's label: this request was informed (markouts are split by it)."""
        self.measures.events["informed"] += 1
        self.relay.informed.add(quote_id, 1, t_us)

    def _price(self, asset: str, usd_text: str, ts_us: int, t_us: int) -> None:
        m = self.measures
        m.events["price"] += 1
        usd = float(usd_text)
        if not usd > 0:
            m.events["bad_price"] += 1
            return
        self.static.pop(asset, None)
        self.now = ts_us
        self.executor.feed(PriceSeen(asset, usd, ts_us), ts_us)
        self.relay.repriced(asset)
        m.on_price(asset, usd, t_us / 1e6)
        if self.desk.pnl.start_equity is None and self._all_priced():
            self._tick(t_us)  # the desk takes the starting equity once everything is priced

    def _all_priced(self) -> bool:
        prices = self.desk.state.prices
        return all(a in prices for a, amount in self.desk.inventory.confirmed.items() if amount)
