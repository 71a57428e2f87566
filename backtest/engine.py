"""The replay engine: a recorded stream through the live quote pipeline, on a simulated clock.

The pipeline is the live one — :class:`~solver.core.quoting.QuotePipeline` built with
:func:`solver.app.build_routes` and :func:`solver.app.pipeline_settings` from the bot's own
YAML — with its filters, strategies, limits and inventory reservations. Around it:

- **Clock**: the event timestamps. A request at ``ts`` is decided at ``now = ts + latency``
  (:class:`~backtest.fills.LatencyModel`); scheduled work (settlements, expiries, markouts) runs
  in time order before the first event at or after its time. The clock never goes back: an
  event older than the clock is counted (``events.out_of_order``) and handled at the clock.
- **Cached inputs**: prices come from ``price`` events into :class:`MarketState` (plus any
  ``static`` price source of the config, always fresh, until the stream prices that asset); the
  salt and fee are the ledger's; the balance snapshot is always fresh (the inventory's confirmed
  balances are the ledger's after every settlement, and its age is zero at every decision).
- **Outcomes**: an answer later than ``bus.wait_ms`` loses; otherwise the fill model decides at
  ``ts + settlement_delay_ms`` (a ``competitor`` event for the request counts if it came before
  that). A won quote settles then on the sandbox ledger (:mod:`backtest.settle`: fees, balances,
  invariant — and with signing on, every verifier check); a lost one keeps its reservation until
  its deadline, as live. A refused settlement releases the reservation and is counted by reason.
- **Kill switch**: as live, drawdown or daily loss beyond ``risk.max_drawdown_usd`` /
  ``risk.max_daily_loss_usd`` pauses quoting (for the rest of the replay: nobody resumes it).

What differs from live, on purpose: the strategy's wall-clock budget is not enforced (a timing
would make runs differ; the bench measures speed instead), nothing is journaled, and the
reconciliation has nothing to find.

Deterministic: the same events, config and settings (seed included) give the same summary and
fills, signing on or off. Memory does not grow with the stream: pending work is bounded by the
open quotes and the markout horizon, measurements are fixed-size (:mod:`backtest.tracker`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar, cast

from backtest.events import (
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    StreamEvent,
)
from backtest.fills import LOST_LATE, CompetitorBook, LatencyModel, edge_bps, make_fill_model
from backtest.settings import BacktestSettings
from backtest.settle import LedgerSettler, SettlementFailed
from backtest.tracker import HORIZONS_S, FillRecord, Tracker
from solver.app import build_routes, pipeline_settings
from solver.config import BotConfig
from solver.core.inventory import Inventory
from solver.core.market import QuoteRequest
from solver.core.quoting import Quote, QuotePipeline, Skip
from solver.core.risk import GLOBAL
from solver.core.state import MarketState
from solver.errors import ConfigError
from solver.protocol.quote_signing import SignedQuote

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_END_OF_TIME = 2**63
_EXPIRE, _MARKOUT = 1, 2
PROGRESS_EVERY = 8192
REC_REQUEST, REC_PRICE, REC_COMPETITOR, REC_STATUS = 0, 1, 2, 3
"""Kinds of compact records (:meth:`Replay.run_records`)."""
Record = tuple[Any, ...]
_T = TypeVar("_T")


def micros(moment: datetime) -> int:
    return (moment - EPOCH) // _US


@dataclass(slots=True)
class _Pending:
    quote: Quote
    signed: SignedQuote | None
    requested_at: datetime
    edge_bps: float
    notional_usd: float


@dataclass(frozen=True)
class Progress:
    events: int
    requests: int
    quoted: int
    won: int


@dataclass
class ReplayResult:
    tracker: Tracker
    start_inventory: dict[str, int]
    final_inventory: dict[str, int]
    open_at_end: int
    halted: dict[str, str] | None


class Replay:
    def __init__(
        self,
        config: BotConfig,
        settings: BacktestSettings,
        *,
        on_fill: Callable[[FillRecord], None] | None = None,
        progress: Callable[[Progress], None] | None = None,
        observe: Callable[[float, bool], None] | None = None,
    ) -> None:
        """``on_fill`` gets every fill once its markouts are known (``fills.csv``);
        ``progress`` is called every :data:`PROGRESS_EVERY` events; ``observe`` gets the edge and
        the fill model's verdict of every answer in time (calibration)."""
        self.config = config
        self.settings = settings
        self.decimals = {asset: token.decimals for asset, token in config.tokens.items()}
        self.tokens = sorted(config.tokens)
        self.state = MarketState(decimals=self.decimals, history_size=config.prices.history_size)
        self.inventory = Inventory(floors=dict(config.risk.floors))
        self.routes = build_routes(config)
        self.pipeline = QuotePipeline(
            pipeline_settings(config), self.routes, self.inventory, self.state, timer=_no_time
        )
        self.settler = LedgerSettler(
            contract=config.verifier_contract,
            solver_account=config.account.id,
            user_account=settings.user_account,
            fee_pips=settings.fee_pips,
            sign=settings.sign,
            nonce_layout=config.nonce.layout,
            seed=settings.seed,
        )
        self.fill_model = make_fill_model(settings.fill, settings.seed)
        self.latency = LatencyModel(settings.latency, settings.seed)
        self.tracker = Tracker(self.decimals, self.tokens, on_fill)
        self.progress = progress
        self.observe = observe
        self.wait_ms = float(config.bus.wait_ms)
        self.delay_us = settings.settlement_delay_ms * 1000
        self.static: dict[str, float] = {}
        for source in config.prices.sources:
            if source.kind == "static":
                self.static.update(source.prices)
        self._heap: list[tuple[int, int, int, Any]] = []
        # Resolutions are due a constant delay after their request, so they come due in the
        # order they were scheduled: a FIFO, merged with the heap by (time, sequence).
        self._resolves: deque[tuple[int, int, _Pending]] = deque()
        self._seq = 0
        self._fixed_latency = settings.latency.ms if settings.latency.kind == "fixed" else None
        self._clock_us = -(2**62)
        self.competitors = CompetitorBook(
            (int(self.wait_ms) + settings.settlement_delay_ms + 60_000) * 1000
        )
        self.halted: dict[str, str] | None = None
        self._started = False
        self._handlers: dict[type, Callable[[Any, int], None]] = {
            RequestEvent: self._on_request,
            PriceEvent: self._on_price,
            CompetitorEvent: self._on_competitor,
            StatusEvent: self._on_status,
        }

    # ------------------------------------------------------------------ running

    def run(self, events: Iterable[StreamEvent], header: Header) -> ReplayResult:
        """Replay ``events`` (in time order) and return what was measured. Once per Replay."""
        self._begin(header)
        it = iter(events)
        buffered, first_prices = self._lookahead(it, _event_price)
        start_at = buffered[0].ts if buffered else header.created
        start = self._setup(start_at, first_prices)
        count = 0
        heap, resolves, handlers = self._heap, self._resolves, self._handlers
        progress = self.progress
        last_ts: datetime | None = None
        t_us = clock = self._clock_us
        for event in _chain(buffered, it):
            ts = event.ts
            if ts is not last_ts:  # a competitor often shares its request's ts object
                last_ts, t_us = ts, micros(ts)
            if t_us < clock:
                self.tracker.events["out_of_order"] += 1
                t_us = clock
            self._clock_us = clock = t_us
            if (resolves and resolves[0][0] <= t_us) or (heap and heap[0][0] <= t_us):
                self._run_due(t_us)
            handlers[type(event)](event, t_us)
            count += 1
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(self._progress(count))
        return self._finish(count, start_at, start)

    def run_records(self, batches: Iterable[Sequence[Record]], header: Header) -> ReplayResult:
        """:meth:`run` on compact records (:mod:`backtest.prefetch`: a stream parsed in another
        process), in batches; the same decisions and results as :meth:`run` on the events the
        records were made from. Once per Replay.

        A record is ``(kind, t_us, ...)`` with ``t_us`` the event time in µs since the epoch:
        ``(REC_REQUEST, t_us, quote_id, asset_in, asset_out, exact_in, amount, min_deadline_ms,
        partner_id)``, ``(REC_PRICE, t_us, asset, usd)``, ``(REC_COMPETITOR, t_us, quote_id,
        best_amount)``, ``(REC_STATUS, t_us)``.
        """
        self._begin(header)
        it = itertools.chain.from_iterable(batches)
        buffered, first_prices = self._lookahead(it, _record_price)
        start_at = _at(buffered[0][1]) if buffered else header.created
        start = self._setup(start_at, first_prices)
        count = 0
        heap, resolves = self._heap, self._resolves
        progress = self.progress
        events = self.tracker.events
        on_request, on_price, on_competitor = self._request, self._price, self._competitor
        clock = self._clock_us
        for record in _chain(buffered, it):
            t_us = record[1]
            if t_us < clock:
                events["out_of_order"] += 1
                t_us = clock
            self._clock_us = clock = t_us
            if (resolves and resolves[0][0] <= t_us) or (heap and heap[0][0] <= t_us):
                self._run_due(t_us)
            kind = record[0]
            if kind == REC_REQUEST:
                on_request(QuoteRequest(*record[2:]), _at(record[1]), t_us)
            elif kind == REC_COMPETITOR:
                on_competitor(record[2], record[3], t_us)
            elif kind == REC_PRICE:
                on_price(record[2], record[3], _at(record[1]), t_us)
            else:
                events["status"] += 1
            count += 1
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(self._progress(count))
        return self._finish(count, start_at, start)

    def _begin(self, header: Header) -> None:
        if self._started:
            raise RuntimeError("a Replay runs once: make a new one for another run")
        self._started = True
        self._check_header(header)

    def _setup(self, start_at: datetime, first_prices: dict[str, float]) -> dict[str, int]:
        """Fund the ledger, take the first snapshot and prices; the starting balances."""
        start = self._starting_balances(first_prices)
        self.settler.fund(start, self.tokens)
        self.state.fee_pips = self.settler.fee_pips
        self.state.set_salt(self.settler.salt, start_at)
        self.inventory.set_confirmed(self.settler.balances(self.tokens), start_at)
        for asset, usd in self.static.items():
            self.state.set_price(asset, usd, start_at)
        self.tracker.start(start, {**self.static, **first_prices}, micros(start_at) / 1e6)
        return start

    def _finish(self, count: int, start_at: datetime, start: dict[str, int]) -> ReplayResult:
        self.tracker.first_ts = start_at if count else None
        self.tracker.last_ts = EPOCH + timedelta(microseconds=self._clock_us) if count else None
        self._run_due(None)  # the stream ended: settle and expire what is pending
        self.tracker.finish(self._clock_us / 1e6 if count else None)
        if self.progress is not None:
            self.progress(self._progress(count))
        return ReplayResult(
            self.tracker,
            start,
            self.settler.balances(self.tokens),
            len(self.inventory.reservations),
            self.halted,
        )

    def _progress(self, count: int) -> Progress:
        t = self.tracker
        return Progress(count, t.requests, t.quoted, t.won)

    def _check_header(self, header: Header) -> None:
        for asset, info in header.tokens.items():
            ours = self.decimals.get(asset)
            if ours is not None and ours != info.decimals:
                raise ConfigError(
                    f"{asset}: the stream says {info.decimals} decimals, the config {ours}"
                )

    def _lookahead(
        self, it: Iterator[_T], price_of: Callable[[_T], tuple[str, str] | None]
    ) -> tuple[deque[_T], dict[str, float]]:
        """Read ahead until every token that may be held has a price: the traded ones (for
        their default balance, and to mark PnL from the start) and those given a balance.
        ``price_of`` gives an item's ``(asset, usd)`` if it is a price."""
        need = {a for pair in self.routes for a in pair}
        need |= {a for a, amount in self.settings.balances.items() if amount}
        need -= set(self.static)
        buffered: deque[_T] = deque()
        first: dict[str, float] = {}
        while need and len(buffered) < self.settings.lookahead_events:
            item = next(it, None)
            if item is None:
                break
            buffered.append(item)
            price = price_of(item)
            if price is not None and price[0] not in first:
                usd = float(price[1])
                if usd > 0:
                    first[price[0]] = usd
                    need.discard(price[0])
        if not buffered:
            item = next(it, None)
            if item is not None:
                buffered.append(item)
        return buffered, first

    def _starting_balances(self, first_prices: dict[str, float]) -> dict[str, int]:
        explicit = self.settings.balances
        traded = {a for pair in self.routes for a in pair}
        prices = {**self.static, **first_prices}
        balances: dict[str, int] = {}
        for asset in self.tokens:
            if asset in explicit:
                balances[asset] = explicit[asset]
            elif asset in traded and asset in prices:
                usd = Decimal(repr(self.settings.starting_usd))
                whole = usd / Decimal(repr(prices[asset]))
                balances[asset] = int(whole.scaleb(self.decimals[asset]))
            else:
                balances[asset] = 0
        return balances

    def _push(self, at_us: int, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at_us, self._seq, kind, payload))

    def _run_due(self, t_us: int | None) -> None:
        """Run the scheduled work due at or before ``t_us`` (None: all of it) in (time,
        sequence) order: the resolution FIFO and the heap merged."""
        heap, resolves = self._heap, self._resolves
        heappop = heapq.heappop
        release = self.inventory.release
        limit = _END_OF_TIME if t_us is None else t_us
        while True:
            if resolves and resolves[0][0] <= limit:
                if heap and heap[0][0] <= limit and heap[0][:2] < resolves[0][:2]:
                    item = heappop(heap)
                else:
                    at_us, _seq, pending = resolves.popleft()
                    self._resolve(pending, at_us)
                    continue
            elif heap and heap[0][0] <= limit:
                item = heappop(heap)
            else:
                return
            if item[2] == _EXPIRE:
                release(item[3])
            else:
                self._run_scheduled(*item)

    def _run_scheduled(self, at_us: int, _seq: int, kind: int, payload: Any) -> None:
        if kind == _EXPIRE:
            self.inventory.release(payload)
        else:
            record, horizon = payload
            if at_us <= self._clock_us:
                self.tracker.markout(record, horizon)
            elif horizon == HORIZONS_S[-1]:
                record.done = True  # past the end of the stream: no later price to mark at

    # ------------------------------------------------------------------ events

    def _on_request(self, event: RequestEvent, t_us: int) -> None:
        self._request(event.request, event.ts, t_us)

    def _on_price(self, event: PriceEvent, t_us: int) -> None:
        self._price(event.asset, event.usd, event.ts, t_us)

    def _on_competitor(self, event: CompetitorEvent, t_us: int) -> None:
        self._competitor(event.quote_id, event.best_amount, t_us)

    def _on_status(self, event: StatusEvent, t_us: int) -> None:
        self.tracker.events["status"] += 1  # the recorder's own quotes: nothing to replay

    def _request(self, request: QuoteRequest, ts: datetime, t_us: int) -> None:
        tracker = self.tracker
        tracker.requests += 1
        latency = self._fixed_latency
        if latency is None:
            latency = self.latency.sample()
        now = ts + timedelta(milliseconds=latency) if latency else ts
        self.inventory.confirmed_at = now  # the ledger is the snapshot: always fresh
        self.state.salt_at = now
        if self.static:
            for asset, usd in self.static.items():
                self.state.set_price(asset, usd, now)
        outcome = self.pipeline.decide(request, now)
        if type(outcome) is Skip:
            tracker.skips[outcome.reason] += 1
            return
        outcome = cast(Quote, outcome)
        tracker.quoted += 1
        signed = self.settler.sign(outcome) if self.settler.signing else None
        prices = self.state.prices
        scale = tracker.scale
        asset_in, asset_out = request.asset_in, request.asset_out
        v_in = prices[asset_in].usd / scale[asset_in]
        v_out = prices[asset_out].usd / scale[asset_out]
        amount_in = outcome.amount_in
        pending = _Pending(
            outcome,
            signed,
            ts,
            edge_bps(amount_in, v_in, outcome.amount_out, v_out),
            amount_in * v_in,
        )
        if latency > self.wait_ms:
            self._lose(pending, LOST_LATE, t_us)
        else:
            self._seq += 1
            self._resolves.append((t_us + self.delay_us, self._seq, pending))

    def _price(self, asset: str, usd_text: str, ts: datetime, t_us: int) -> None:
        self.tracker.events["price"] += 1
        usd = float(usd_text)
        if not usd > 0:
            self.tracker.events["bad_price"] += 1
            return
        self.static.pop(asset, None)
        self.state.set_price(asset, usd, ts)
        self.tracker.on_price(asset, usd, t_us / 1e6)
        self._check_kill(ts)

    def _competitor(self, quote_id: str, best_amount: int, t_us: int) -> None:
        self.tracker.events["competitor"] += 1
        self.competitors.add(quote_id, best_amount, t_us)

    # ------------------------------------------------------------------ outcomes

    def _resolve(self, pending: _Pending, at_us: int) -> None:
        quote = pending.quote
        best = self.competitors.pop(quote.request.quote_id)
        lost = self.fill_model.decide(quote, best, pending.edge_bps)
        if self.observe is not None:
            self.observe(pending.edge_bps, lost is None)
        if lost is not None:
            self._lose(pending, lost, at_us)
        else:
            self._settle(pending, at_us)

    def _lose(self, pending: _Pending, reason: str, at_us: int) -> None:
        tracker = self.tracker
        tracker.lost[reason] += 1
        tracker.on_resolved(pending.edge_bps, pending.notional_usd, False)
        quote = pending.quote
        quote_id = quote.request.quote_id
        deadline_us = (quote.deadline - EPOCH) // _US
        if deadline_us < at_us:
            self.inventory.release(quote_id)
        else:  # live: released once the deadline passed with the nonce unused
            self._seq += 1
            heapq.heappush(self._heap, (deadline_us + 1, self._seq, _EXPIRE, quote_id))

    def _settle(self, pending: _Pending, at_us: int) -> None:
        quote = pending.quote
        request = quote.request
        at = EPOCH + timedelta(microseconds=at_us)
        tracker = self.tracker
        try:
            fee = self.settler.settle(quote, pending.signed, at)
        except SettlementFailed as exc:
            tracker.settle_failed[exc.reason] += 1
            tracker.on_resolved(pending.edge_bps, pending.notional_usd, won=False)
            self.inventory.release(request.quote_id)
            return
        self.inventory.settle(request.quote_id)
        balances = self.settler.balances((request.asset_in, request.asset_out))
        self.inventory.confirmed.update(balances)
        tracker.won += 1
        tracker.on_resolved(pending.edge_bps, pending.notional_usd, won=True)
        t = at_us / 1e6
        tracker.on_balances(balances, t)
        p_in, p_out = tracker.marks[request.asset_in], tracker.marks[request.asset_out]
        record = FillRecord(
            request.quote_id,
            pending.requested_at,
            at,
            request.asset_in,
            request.asset_out,
            request.exact_in,
            quote.amount_in,
            quote.amount_out,
            fee,
            p_in,
            p_out,
            pending.edge_bps,
            0.0,
        )
        record.realized_usd = tracker.fill_value(record, p_in, p_out)
        tracker.on_fill(record)
        for horizon in HORIZONS_S:
            self._push(at_us + horizon * 1_000_000, _MARKOUT, (record, horizon))
        self._check_kill(at)

    def _check_kill(self, at: datetime) -> None:
        if not self.settings.kill_switch or self.halted is not None:
            return
        risk = self.config.risk
        reason = self.tracker.breach(risk.max_drawdown_usd, risk.max_daily_loss_usd)
        if reason is not None:
            self.state.paused.setdefault(GLOBAL, reason)
            self.halted = {"at": at.isoformat(timespec="microseconds"), "reason": reason}


def _event_price(event: StreamEvent) -> tuple[str, str] | None:
    return (event.asset, event.usd) if type(event) is PriceEvent else None


def _record_price(record: Record) -> tuple[str, str] | None:
    return (record[2], record[3]) if record[0] == REC_PRICE else None


def _at(t_us: int) -> datetime:
    return EPOCH + timedelta(microseconds=t_us)


def _no_time() -> float:
    """The pipeline's strategy timer in replay: wall-clock budgets are not enforced."""
    return 0.0


def _chain(buffered: deque[_T], rest: Iterator[_T]) -> Iterator[_T]:
    while buffered:
        yield buffered.popleft()
    yield from rest
