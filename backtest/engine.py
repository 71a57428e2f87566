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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

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
from solver.core.quoting import Quote, QuotePipeline, Skip
from solver.core.risk import GLOBAL
from solver.core.state import MarketState
from solver.errors import ConfigError
from solver.protocol.quote_signing import SignedQuote

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_RESOLVE, _EXPIRE, _MARKOUT = 0, 1, 2
PROGRESS_EVERY = 8192


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
        self._seq = 0
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
        if self._started:
            raise RuntimeError("a Replay runs once: make a new one for another run")
        self._started = True
        self._check_header(header)
        it = iter(events)
        buffered, first_prices = self._lookahead(it)
        start_at = buffered[0].ts if buffered else header.created
        start = self._starting_balances(first_prices)
        self.settler.fund(start, self.tokens)
        self.state.fee_pips = self.settler.fee_pips
        self.state.set_salt(self.settler.salt, start_at)
        self.inventory.set_confirmed(self.settler.balances(self.tokens), start_at)
        for asset, usd in self.static.items():
            self.state.set_price(asset, usd, start_at)
        self.tracker.start(start, {**self.static, **first_prices}, micros(start_at) / 1e6)
        count = 0
        for event in _chain(buffered, it):
            t_us = micros(event.ts)
            if t_us < self._clock_us:
                self.tracker.events["out_of_order"] += 1
                t_us = self._clock_us
            self._clock_us = t_us
            heap = self._heap
            while heap and heap[0][0] <= t_us:
                self._run_scheduled(*heapq.heappop(heap))
            self._handlers[type(event)](event, t_us)
            count += 1
            if self.progress is not None and count % PROGRESS_EVERY == 0:
                self.progress(self._progress(count))
        self.tracker.first_ts = start_at if count else None
        self.tracker.last_ts = EPOCH + timedelta(microseconds=self._clock_us) if count else None
        while self._heap:  # the stream ended: settle and expire what is pending
            self._run_scheduled(*heapq.heappop(self._heap))
        self.tracker.finish()
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

    def _lookahead(self, it: Iterator[StreamEvent]) -> tuple[deque[StreamEvent], dict[str, float]]:
        """Read ahead until every token that may be held has a price: the traded ones (for
        their default balance, and to mark PnL from the start) and those given a balance."""
        need = {a for pair in self.routes for a in pair}
        need |= {a for a, amount in self.settings.balances.items() if amount}
        need -= set(self.static)
        buffered: deque[StreamEvent] = deque()
        first: dict[str, float] = {}
        while need and len(buffered) < self.settings.lookahead_events:
            event = next(it, None)
            if event is None:
                break
            buffered.append(event)
            if isinstance(event, PriceEvent) and event.asset not in first:
                usd = float(event.usd)
                if usd > 0:
                    first[event.asset] = usd
                    need.discard(event.asset)
        if not buffered:
            event = next(it, None)
            if event is not None:
                buffered.append(event)
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

    def _run_scheduled(self, at_us: int, _seq: int, kind: int, payload: Any) -> None:
        if kind == _RESOLVE:
            self._resolve(payload, at_us)
        elif kind == _EXPIRE:
            self.inventory.release(payload)
        else:
            record, horizon = payload
            if at_us <= self._clock_us:
                self.tracker.markout(record, horizon)
            elif horizon == HORIZONS_S[-1]:
                record.done = True  # past the end of the stream: no later price to mark at

    # ------------------------------------------------------------------ events

    def _on_request(self, event: RequestEvent, t_us: int) -> None:
        tracker = self.tracker
        tracker.requests += 1
        request = event.request
        latency = self.latency.sample()
        now = event.ts + timedelta(milliseconds=latency) if latency else event.ts
        self.inventory.confirmed_at = now  # the ledger is the snapshot: always fresh
        self.state.salt_at = now
        if self.static:
            for asset, usd in self.static.items():
                self.state.set_price(asset, usd, now)
        outcome = self.pipeline.decide(request, now)
        if isinstance(outcome, Skip):
            tracker.skips[outcome.reason] += 1
            return
        tracker.quoted += 1
        signed = self.settler.sign(outcome) if self.settler.signing else None
        prices = self.state.prices
        p_in, p_out = prices[request.asset_in].usd, prices[request.asset_out].usd
        s_in, s_out = tracker.scale[request.asset_in], tracker.scale[request.asset_out]
        pending = _Pending(
            outcome,
            signed,
            event.ts,
            edge_bps(outcome.amount_in, p_in / s_in, outcome.amount_out, p_out / s_out),
            outcome.amount_in * p_in / s_in,
        )
        if latency > self.wait_ms:
            self._lose(pending, LOST_LATE, t_us)
        else:
            self._push(t_us + self.delay_us, _RESOLVE, pending)

    def _on_price(self, event: PriceEvent, t_us: int) -> None:
        self.tracker.events["price"] += 1
        usd = float(event.usd)
        if not usd > 0:
            self.tracker.events["bad_price"] += 1
            return
        self.static.pop(event.asset, None)
        self.state.set_price(event.asset, usd, event.ts)
        self.tracker.on_price(event.asset, usd, t_us / 1e6)
        self._check_kill(event.ts)

    def _on_competitor(self, event: CompetitorEvent, t_us: int) -> None:
        self.tracker.events["competitor"] += 1
        self.competitors.add(event.quote_id, event.best_amount, t_us)

    def _on_status(self, event: StatusEvent, t_us: int) -> None:
        self.tracker.events["status"] += 1  # the recorder's own quotes: nothing to replay

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
        self.tracker.lost[reason] += 1
        self.tracker.on_resolved(pending.edge_bps, pending.notional_usd, won=False)
        quote_id = pending.quote.request.quote_id
        deadline_us = micros(pending.quote.deadline)
        if deadline_us < at_us:
            self.inventory.release(quote_id)
        else:  # live: released once the deadline passed with the nonce unused
            self._push(deadline_us + 1, _EXPIRE, quote_id)

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


def _no_time() -> float:
    """The pipeline's strategy timer in replay: wall-clock budgets are not enforced."""
    return 0.0


def _chain(buffered: deque[StreamEvent], rest: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    while buffered:
        yield buffered.popleft()
    yield from rest
