"""The replay: a recorded stream through the live bot's desk, on a simulated clock.

The backtest is the desk's second driver (DESIGN "one desk, two drivers"): the very
:class:`~solver.core.desk.Desk` the live bot runs, built by :func:`solver.runtime.wiring.build_desk`
from the bot's own YAML — its quote pipeline (filters, strategies, limits, reservations), quote
lifecycle, reconciliation, PnL and kill switch. The replay turns the stream into the desk's
events, carries out the actions it returns against a sandbox ledger, and changes the desk's state
in no other way. Around it:

- **Clock**: the event timestamps. A request at ``ts`` reaches the desk as ``QuoteRequested`` at
  ``now = ts + latency`` (:class:`~backtest.fills.LatencyModel`); scheduled work (outcomes and
  the desk's ticks) runs in time order before the first event at or after its time. The clock
  never goes back: an event older than the clock is counted (``events.out_of_order``) and handled
  at the clock.
- **Ticks**: ``desk.tick(now)`` every :data:`TICK_S` of stream time (and at the end), as the
  live driver's timer does. Before each, the desk hears the ledger's balances (``BalancesSeen``),
  the salt and the config's ``static`` prices (``SaltSeen``, ``PriceSeen``), so these inputs are
  always fresh, as the live timers keep them. Stream prices reach it as they come
  (``PriceSeen``); the fee and the salt are the ledger's. ``ConnectionRestored`` once at the
  start: nothing is missed in a replay, so an answer past its deadline that nobody named ends
  LOST without a nonce check.
- **Signing**: a ``SignAndSend`` is signed with the live :class:`QuoteSigner` when signing is on
  (:mod:`backtest.settle`), else given a deterministic stand-in hash and nonce; the desk hears
  ``QuoteSigned``.
- **Outcomes**: an answer later than ``bus.wait_ms`` loses; otherwise the fill model decides at
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
  reconciliation) marks the replay halted (when, and the desk's reason); quoting stays paused for
  the rest of the replay (nobody resumes it), settlement goes on.
  :mod:`backtest.measure.measurements` only
  observes (counts, fills with the desk's markouts, series sampled at ticks).

What differs from live, on purpose: the strategy's wall-clock budget is not enforced (a timing
would make runs differ; the bench measures speed instead), the response budget is not applied
(the latency model and ``bus.wait_ms`` decide lateness), nothing is journaled (the ``Record``
actions are read for measurements only), the desk ticks every :data:`TICK_S` of stream time
rather than every 100 ms, and balances are read from the ledger without delay.

Deterministic: the same events, config and settings (seed included) give the same summary and
fills, signing on or off. Memory does not grow with the stream: pending work is bounded by the
open quotes and the markout horizon, measurements are fixed-size.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from backtest.fills import LOST_LATE, CompetitorBook, LatencyModel, edge_bps, make_fill_model
from backtest.measure.detail import pair_names
from backtest.measure.measurements import FillRecord, Measurements
from backtest.settings import BacktestSettings
from backtest.settle import LedgerSettler, SettlementFailed
from backtest.stream.events import (
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    StreamEvent,
)
from solver.config import BotConfig
from solver.core import facts as f
from solver.core.actions import Action, CheckNonce, PauseChanged, RefreshBalances, SignAndSend
from solver.core.actions import Record as RecordAction
from solver.core.desk import NOT_FOUND, SETTLED, Desk
from solver.core.events import (
    BalancesSeen,
    ConnectionRestored,
    FeeSeen,
    IntentStatusSeen,
    NonceChecked,
    PriceSeen,
    QuoteNotSent,
    QuoteRequested,
    QuoteSigned,
    QuoteStatusSeen,
    SaltSeen,
)
from solver.core.inventory import Inventory
from solver.core.market import QuoteRequest
from solver.core.pauses import RISK_KINDS
from solver.core.quoting import Quote
from solver.errors import ConfigError
from solver.protocol.quote_signing import SignedQuote
from solver.runtime.wiring import build_desk

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
TICK_S = 1.0
"""The desk's clock in the replay: a tick every second of stream time (shorter if the config's
balance, price or salt max age is under two seconds, so inputs refreshed at ticks stay fresh)."""
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
    quote_hash: str
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
    measures: Measurements
    desk: Desk
    """The desk as the replay left it: PnL (``desk.pnl``), pauses, counters, open quotes."""
    start_inventory: dict[str, int]
    final_inventory: dict[str, int]
    open_at_end: int
    """Quotes the desk still held open when the replay ended (deadline not passed yet)."""
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
        self.desk = build_desk(config, kill_switch=settings.kill_switch, timer=_no_time)
        self.pipeline = self.desk.pipeline  # the live QuotePipeline (parity tests capture it)
        self.routes = self.pipeline.routes
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
        symbols = {asset: token.symbol for asset, token in config.tokens.items()}
        self.measures = Measurements(
            self.decimals,
            self.tokens,
            on_fill,
            pair_names=pair_names(((p.base, p.quote) for p in config.pairs), symbols),
            symbols=symbols,
        )
        self.progress = progress
        self.observe = observe
        self.wait_ms = float(config.bus.wait_ms)
        self.delay_us = settings.settlement_delay_ms * 1000
        pipeline = self.desk.settings.pipeline
        shortest = min(
            pipeline.balance_max_age_s, pipeline.price_max_age_s, pipeline.salt_max_age_s
        )
        self.tick_us = max(1, int(min(TICK_S, shortest / 2) * 1_000_000))
        self.static: dict[str, float] = {}
        for source in config.prices.sources:
            if source.kind == "static":
                self.static.update(source.prices)
        # Outcomes are due a constant delay after their request, so they come due in the order
        # they were scheduled: a FIFO, merged with the ticks by time (outcomes first on a tie).
        self._resolves: deque[tuple[int, _Pending]] = deque()
        self._next_tick_us = 2**62
        self._nonces = itertools.count(1)
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

    @property
    def inventory(self) -> Inventory:
        """The desk's inventory (confirmed balances, reservations)."""
        return self.desk.inventory

    # ------------------------------------------------------------------ running

    def run(self, events: Iterable[StreamEvent], header: Header) -> ReplayResult:
        """Replay ``events`` (in time order) and return what was measured. Once per Replay."""
        self._begin(header)
        it = iter(events)
        buffered, first_prices = self._lookahead(it, _event_price)
        start_at = buffered[0].ts if buffered else header.created
        start = self._setup(start_at, first_prices)
        count = 0
        resolves, handlers = self._resolves, self._handlers
        progress = self.progress
        last_ts: datetime | None = None
        t_us = clock = self._clock_us
        for event in _chain(buffered, it):
            ts = event.ts
            if ts is not last_ts:  # a competitor often shares its request's ts object
                last_ts, t_us = ts, micros(ts)
            if t_us < clock:
                self.measures.events["out_of_order"] += 1
                t_us = clock
            self._clock_us = clock = t_us
            if t_us >= self._next_tick_us or (resolves and resolves[0][0] <= t_us):
                self._run_due(t_us)
            handlers[type(event)](event, t_us)
            count += 1
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(self._progress(count))
        return self._finish(count, start_at, start)

    def run_records(self, batches: Iterable[Sequence[Record]], header: Header) -> ReplayResult:
        """:meth:`run` on compact records (:mod:`backtest.stream.prefetch`: a stream parsed in
        another
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
        resolves = self._resolves
        progress = self.progress
        events = self.measures.events
        on_request, on_price, on_competitor = self._request, self._price, self._competitor
        clock = self._clock_us
        for record in _chain(buffered, it):
            t_us = record[1]
            if t_us < clock:
                events["out_of_order"] += 1
                t_us = clock
            self._clock_us = clock = t_us
            if t_us >= self._next_tick_us or (resolves and resolves[0][0] <= t_us):
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
        """Fund the ledger; tell the desk the fee, salt, static prices and first balances; the
        starting balances."""
        start = self._starting_balances(first_prices)
        self.settler.fund(start, self.tokens)
        desk = self.desk
        desk.receive(FeeSeen(self.settler.fee_pips), start_at)
        desk.receive(ConnectionRestored(), start_at)
        start_us = self._clock_us = micros(start_at)
        self.measures.start(start, {**self.static, **first_prices}, start_us / 1e6)
        self._tick(start_us)
        self._next_tick_us = start_us + self.tick_us
        return start

    def _finish(self, count: int, start_at: datetime, start: dict[str, int]) -> ReplayResult:
        m = self.measures
        m.first_ts = start_at if count else None
        m.last_ts = _at(self._clock_us) if count else None
        # The stream ended: the outcomes still pending are decided at their times, then the
        # desk ticks once more (no ticks in between: no price comes after the stream, and
        # markouts due after that last tick are not taken).
        end_us = self._clock_us
        resolves = self._resolves
        while resolves:
            end_us, pending = resolves.popleft()
            self._resolve(pending, end_us)
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
            self.halted,
        )

    def _counts(self) -> None:
        stats = self.desk.stats
        self.measures.counts(stats.requests, stats.signed, stats.skipped)

    def _progress(self, count: int) -> Progress:
        self._counts()
        m = self.measures
        return Progress(count, m.requests, m.quoted, m.won)

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
        their default balance) and those given a balance. ``price_of`` gives an item's
        ``(asset, usd)`` if it is a price. The desk hears these prices only at their time."""
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

    # ------------------------------------------------------------------ scheduled work

    def _run_due(self, t_us: int) -> None:
        """Run the outcomes and ticks due at or before ``t_us``, in time order."""
        resolves, tick_us = self._resolves, self.tick_us
        while True:
            next_tick = self._next_tick_us
            if resolves and resolves[0][0] <= t_us and resolves[0][0] <= next_tick:
                at_us, pending = resolves.popleft()
                self._resolve(pending, at_us)
            elif next_tick <= t_us:
                self._next_tick_us = next_tick + tick_us
                self._tick(next_tick)
            else:
                return

    def _refresh(self, now: datetime) -> None:
        """What the live timers keep fresh: the balances, the salt, the static prices."""
        desk = self.desk
        for asset, usd in self.static.items():
            desk.receive(PriceSeen(asset, usd, now), now)
        desk.receive(SaltSeen(self.settler.salt, now), now)
        self._balances(now)

    def _balances(self, now: datetime) -> None:
        balances = self.settler.balances(self.tokens)
        self._carry_out(self.desk.receive(BalancesSeen(balances, now), now), now)

    def _tick(self, t_us: int) -> None:
        now = _at(t_us)
        self._refresh(now)
        desk = self.desk
        self._carry_out(desk.tick(now), now)
        pnl = desk.pnl
        self.measures.on_tick(t_us / 1e6, pnl.pnl, pnl.drawdown_usd(), pnl.realized_usd)
        self.measures.flush(t_us)

    def _carry_out(self, actions: list[Action], now: datetime) -> None:
        """The desk's actions off the quote path. ``PollIntent`` needs no answer: every claim
        is answered as soon as it is made (SETTLED or NOT_FOUND), so none is left to poll;
        ``Alert`` has nobody to tell (a risk pause halts the replay, recorded in the result)."""
        for action in actions:
            if type(action) is RecordAction:
                fact = action.fact
                if type(fact) is f.Markout:
                    self.measures.markout(fact.quote_id, fact.horizon_s, fact.value_usd)
            elif type(action) is PauseChanged:
                self._paused(action)
            elif type(action) is CheckNonce:
                self._check_nonce(action, now)
            elif type(action) is RefreshBalances:
                self._balances(now)

    def _paused(self, action: PauseChanged) -> None:
        pause = action.pause
        if action.active and pause.kind in RISK_KINDS and self.halted is None:
            self.halted = {
                "at": pause.at.isoformat(timespec="microseconds"),
                "reason": f"{pause.kind}: {pause.reason}",
            }

    def _check_nonce(self, action: CheckNonce, now: datetime) -> None:
        # Signing on: the verifier's own record. Off: nothing is signed, but every settlement
        # is reported to the desk as SETTLED at once, so a quote asked about never executed.
        used = self.settler.signing and self.settler.ledger.is_nonce_used(
            self.settler.solver, action.nonce
        )
        self._carry_out(self.desk.receive(NonceChecked(action.quote_id, used), now), now)

    # ------------------------------------------------------------------ events

    def _on_request(self, event: RequestEvent, t_us: int) -> None:
        self._request(event.request, event.ts, t_us)

    def _on_price(self, event: PriceEvent, t_us: int) -> None:
        self._price(event.asset, event.usd, event.ts, t_us)

    def _on_competitor(self, event: CompetitorEvent, t_us: int) -> None:
        self._competitor(event.quote_id, event.best_amount, t_us)

    def _on_status(self, event: StatusEvent, t_us: int) -> None:
        self.measures.events["status"] += 1  # the recorder's own quotes: nothing to replay

    def _request(self, request: QuoteRequest, ts: datetime, t_us: int) -> None:
        latency = self._fixed_latency
        if latency is None:
            latency = self.latency.sample()
        now = ts + timedelta(milliseconds=latency) if latency else ts
        desk = self.desk
        action = desk.receive(QuoteRequested(request), now)[0]
        on_request = self.measures.on_request
        if type(action) is not SignAndSend:  # a Skip: the desk counted it
            reason = getattr(action, "reason", type(action).__name__)
            on_request(request.asset_in, request.asset_out, t_us, latency, reason)
            return
        on_request(request.asset_in, request.asset_out, t_us, latency, None)
        quote = action.quote
        quote_id = request.quote_id
        if quote_id in desk.book.quotes:  # a repeated quote_id still open: cannot be signed
            self.measures.events["duplicate_quote_id"] += 1
            desk.receive(QuoteNotSent(quote_id, "duplicate quote_id"), now)
            return
        signed = self.settler.sign(quote) if self.settler.signing else None
        if signed is not None:
            quote_hash, nonce = signed.quote_hash, signed.nonce
        else:
            quote_hash, nonce = quote_id, next(self._nonces).to_bytes(32, "big")
        desk.receive(QuoteSigned(quote_id, quote_hash, nonce), now)
        prices, scale = desk.state.prices, self.measures.scale
        asset_in, asset_out = request.asset_in, request.asset_out
        v_in = prices[asset_in].usd / scale[asset_in]
        v_out = prices[asset_out].usd / scale[asset_out]
        amount_in = quote.amount_in
        pending = _Pending(
            quote,
            quote_hash,
            signed,
            ts,
            edge_bps(amount_in, v_in, quote.amount_out, v_out),
            amount_in * v_in,
        )
        if latency > self.wait_ms:
            self._lose(pending, LOST_LATE)
        else:
            self._resolves.append((t_us + self.delay_us, pending))

    def _price(self, asset: str, usd_text: str, ts: datetime, t_us: int) -> None:
        m = self.measures
        m.events["price"] += 1
        usd = float(usd_text)
        if not usd > 0:
            m.events["bad_price"] += 1
            return
        self.static.pop(asset, None)
        desk = self.desk
        desk.receive(PriceSeen(asset, usd, ts), ts)
        m.on_price(asset, usd, t_us / 1e6)
        if desk.pnl.start_equity is None and self._all_priced():
            self._tick(t_us)  # the desk takes the starting equity once everything is priced

    def _all_priced(self) -> bool:
        prices = self.desk.state.prices
        return all(a in prices for a, amount in self.desk.inventory.confirmed.items() if amount)

    def _competitor(self, quote_id: str, best_amount: int, t_us: int) -> None:
        self.measures.events["competitor"] += 1
        self.competitors.add(quote_id, best_amount, t_us)

    # ------------------------------------------------------------------ outcomes

    def _resolve(self, pending: _Pending, at_us: int) -> None:
        quote = pending.quote
        best = self.competitors.pop(quote.request.quote_id)
        lost = self.fill_model.decide(quote, best, pending.edge_bps)
        if self.observe is not None:
            self.observe(pending.edge_bps, lost is None)
        if lost is not None:
            self._lose(pending, lost)
        else:
            self._settle(pending, at_us)

    def _lose(self, pending: _Pending, reason: str) -> None:
        # Nothing to tell the desk: nobody names the quote, so it ends LOST after its deadline.
        m = self.measures
        m.lost[reason] += 1
        m.on_resolved(pending.edge_bps, pending.notional_usd, False)

    def _settle(self, pending: _Pending, at_us: int) -> None:
        quote = pending.quote
        request = quote.request
        quote_id = request.quote_id
        at = _at(at_us)
        m, desk = self.measures, self.desk
        intent_hash = "intent:" + quote_id
        try:
            fee = self.settler.settle(quote, pending.signed, at)
        except SettlementFailed as exc:
            m.settle_failed[exc.reason] += 1
            m.on_resolved(pending.edge_bps, pending.notional_usd, won=False)
            self._carry_out(desk.receive(QuoteStatusSeen(pending.quote_hash, intent_hash), at), at)
            self._carry_out(desk.receive(IntentStatusSeen(intent_hash, NOT_FOUND), at), at)
            return
        m.on_resolved(pending.edge_bps, pending.notional_usd, won=True)
        desk.receive(QuoteStatusSeen(pending.quote_hash, intent_hash), at)
        actions = desk.receive(IntentStatusSeen(intent_hash, SETTLED), at)
        # OPEN → WON → SETTLED: the SETTLED fact carries the fill's prices.
        prices = next(
            (
                a.fact.fill
                for a in actions
                if type(a) is RecordAction
                and type(a.fact) is f.QuoteMoved
                and a.fact.new == "SETTLED"
            ),
            None,
        )
        if prices is None:  # cannot happen: the quote is open until after its deadline
            raise AssertionError(f"{quote_id}: the desk did not take a settlement the ledger made")
        record = FillRecord(
            quote_id,
            pending.requested_at,
            at,
            request.asset_in,
            request.asset_out,
            request.exact_in,
            quote.amount_in,
            quote.amount_out,
            fee,
            prices.price_in,
            prices.price_out,
            pending.edge_bps,
            prices.realized_usd,
        )
        m.on_fill(record, at_us)
        self._carry_out(actions, at)  # RefreshBalances: the ledger's balances now
        m.on_balances(desk.inventory.confirmed, at_us / 1e6)


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
