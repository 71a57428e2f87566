"""The desk's memory: what it owns, changed only by facts (DESIGN "Persistence is the desk's
journal").

:class:`DeskState` holds the quote book, reservations, market inputs, reconciliation, PnL and
pauses, and :meth:`DeskState.apply` is the one way they change: live as the desk decides, and
on start from the journal (:mod:`solver.core.facts`). The deciding layers build on it:
:class:`solver.core.desk_risk.DeskRisk` (balances, the kill switch, operator commands) and
:class:`solver.core.desk.Desk` (the quote path, settlement, the clock).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from solver.core import facts as f
from solver.core.actions import Action, Record
from solver.core.inventory import Inventory, Reservation
from solver.core.lifecycle import Claim, QuoteBook, QuoteState, TrackedQuote
from solver.core.pair_stats import PairBook, PairStats
from solver.core.pauses import GLOBAL, Pause, Pauses
from solver.core.pnl import MARKOUT_HORIZONS_S, FillValue, PnlBook, usd_value
from solver.core.quoting import PipelineSettings, QuotePipeline, Route
from solver.core.readable import Readable
from solver.core.rebalancing import Rebalancing
from solver.core.reconciliation import Reconciliation
from solver.core.risk import RiskLimits
from solver.core.state import MarketState


@dataclass(frozen=True)
class DeskSettings:
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    limits: RiskLimits = field(default_factory=lambda: RiskLimits(1e12, 1e12, {}))
    kill_switch: bool = True
    shadow: bool = False
    deadline_grace_s: float = 2.0
    """A transaction included just before the deadline must reach finality before its nonce
    tells the truth."""
    claim_timeout_s: float = 60.0
    """A claim still pending this long after the deadline no longer holds back the nonce check."""
    nonce_retry_s: float = 5.0
    poll_initial_s: float = 0.1
    poll_max_s: float = 5.0
    pnl_record_every_s: float = 1.0
    markout_horizons_s: tuple[int, ...] = MARKOUT_HORIZONS_S
    history_size: int = 512


@dataclass
class DeskStats:
    requests: int = 0
    signed: int = 0
    shadow_quotes: int = 0
    rejected: int = 0
    relay_ok: int = 0
    stray_statuses: int = 0
    duplicate_statuses: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    pairs: dict[str, PairStats] = field(default_factory=dict)
    """Per configured pair (``wNEAR/USDC``): see :mod:`solver.core.pair_stats`."""


class DeskState:
    def __init__(
        self,
        settings: DeskSettings,
        routes: Mapping[tuple[str, str], Route],
        decimals: Mapping[str, int],
        *,
        floors: Mapping[str, int] | None = None,
        symbols: Mapping[str, str] | None = None,
        pairs: Iterable[tuple[str, str]] = (),
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self.limits = settings.limits
        self.state = MarketState(decimals=dict(decimals), history_size=settings.history_size)
        self.inventory = Inventory(floors=dict(floors or {}))
        self.pauses = Pauses()
        self.rebalancing = Rebalancing(self.inventory, self.pauses)
        self.pipeline = QuotePipeline(
            settings.pipeline, routes, self.inventory, self.state, self.pauses, timer=timer
        )
        self.book = QuoteBook()
        self.pnl = PnlBook(decimals, settings.markout_horizons_s)
        self.symbols = dict(symbols or {})
        self.readable = Readable(self.symbols, self.state.decimals)  # amounts for people
        self.stats = DeskStats()
        self.pair_book = PairBook(pairs, routes, self.symbols)
        # The last fills, for people (the fill log line, status): display only, never decided on.
        self.recent_fills: deque[tuple[TrackedQuote, f.FillPrices | None]] = deque(maxlen=64)
        self.stats.pairs = self.pair_book.stats
        self.connected_since: datetime | None = None
        self._polling: dict[str, str] = {}  # intent_hash -> quote_id, claims still pending
        self._pnl_recorded_at: datetime | None = None
        self._grace = timedelta(seconds=settings.deadline_grace_s)
        self._claim_timeout = timedelta(seconds=settings.claim_timeout_s)
        self._nonce_retry = timedelta(seconds=settings.nonce_retry_s)
        self.balances = Reconciliation(settings.limits)
        self._recorded_day: str | None = None
        # Open alert-only incidents, so their recovery is told once (not journaled: a stale
        # pause restored from the journal sets stale_open again through its PauseSet).
        self.stale_open = False
        self.mismatch_open = False
        self._appliers: dict[type, Callable[[Any], None]] = {
            f.QuoteOpened: self._apply_opened,
            f.QuoteMoved: self._apply_moved,
            f.QuotesLost: self._apply_lost,
            f.ClaimAdded: self._apply_claim_added,
            f.ClaimEnded: self._apply_claim_ended,
            f.BalancesReconciled: self._apply_balances,
            f.OwnFlow: self._apply_own_flow,
            f.PnlMarked: self._apply_pnl,
            f.Markout: self._apply_markout,
            f.PauseSet: self._apply_pause_set,
            f.PauseCleared: self._apply_pause_cleared,
            f.BaselineAccepted: self._apply_baseline,
            f.RebalanceStarted: self.rebalancing.apply_started,
            f.RebalanceDeposited: self.rebalancing.apply_deposited,
            f.RebalanceEnded: self.rebalancing.apply_ended,
        }

    # ------------------------------------------------------------------ facts

    def apply(self, fact: f.Fact) -> None:
        """Change state by one fact: live, as it is decided; on start, from the journal."""
        self._appliers[type(fact)](fact)

    def _fact(self, fact: f.Fact, actions: list[Action]) -> None:
        self.apply(fact)
        actions.append(Record(fact))

    def price(self, asset: str) -> float | None:
        ref = self.state.prices.get(asset)
        return ref.usd if ref is not None else None

    @staticmethod
    def _fill_value(quote: TrackedQuote) -> FillValue:
        return FillValue(
            quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow
        )

    # ------------------------------------------------------------------ applying facts

    def _apply_opened(self, fact: f.QuoteOpened) -> None:
        self.book.add(
            TrackedQuote(
                fact.quote_id, fact.quote_hash, fact.asset_in, fact.asset_out, fact.amount_in,
                fact.amount_out, fact.fee, fact.deadline, fact.nonce, fact.created_at,
            )
        )  # fmt: skip
        # Live, decide() reserved it already; from the journal, the exposure is restored
        # whatever the balances say (it was signed).
        outflow = fact.amount_out + fact.fee
        pair = self.pair_book.of(fact.asset_in, fact.asset_out)
        if pair is not None:
            pair.quotes += 1
        self.inventory.restore(
            [Reservation(fact.quote_id, fact.asset_out, outflow, fact.asset_in, fact.amount_in,
                         fact.deadline)]
        )  # fmt: skip

    def _apply_moved(self, fact: f.QuoteMoved) -> None:
        quote = self.book.get(fact.quote_id)
        if quote is None:
            return
        new = QuoteState(fact.new)
        self.book.move(
            fact.quote_id, new, fact.at, reason=fact.reason, intent_hash=fact.intent_hash,
            tx_hash=fact.tx_hash,
        )  # fmt: skip
        self.stats.outcomes[new.value] += 1
        pair = self.pair_book.of(quote.asset_in, quote.asset_out)
        if pair is not None:
            pair.outcomes[new.value] += 1
            if new is QuoteState.WON:
                pair.won += 1
            elif new is QuoteState.SETTLED:
                pair.settled += 1
                if fact.fill is not None:
                    pair.realized_usd += fact.fill.realized_usd
                    decimals = self.state.decimals.get(quote.asset_in)
                    if decimals is not None:
                        pair.volume_usd += usd_value(quote.amount_in, decimals, fact.fill.price_in)
        if quote.terminal:
            for intent_hash in quote.claims:
                self._polling.pop(intent_hash, None)
        if new is QuoteState.SETTLED:
            self.recent_fills.append((quote, fact.fill))
            self.inventory.settle(fact.quote_id, fact.at)
            self.balances.settled(
                quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow,
                fact.at,
            )  # fmt: skip
            if fact.fill is not None:
                self.pnl.record_fill(self._fill_value(quote), fact.at, fact.fill.realized_usd)
        elif new in (QuoteState.REJECTED, QuoteState.LOST, QuoteState.FAILED):
            self.inventory.release(fact.quote_id)

    def _apply_lost(self, fact: f.QuotesLost) -> None:
        book, inventory, outcomes = self.book, self.inventory, self.stats.outcomes
        for quote_id in fact.quote_ids:
            quote = book.get(quote_id)
            if quote is None:
                continue
            book.move(quote_id, QuoteState.LOST, fact.at, reason=fact.reason)
            inventory.release(quote_id)
            outcomes["LOST"] += 1
            pair = self.pair_book.of(quote.asset_in, quote.asset_out)
            if pair is not None:
                pair.outcomes["LOST"] += 1

    def _apply_claim_added(self, fact: f.ClaimAdded) -> None:
        quote = self.book.get(fact.quote_id)
        if quote is None or fact.intent_hash in quote.claims:
            return
        quote.claims[fact.intent_hash] = Claim(
            fact.intent_hash,
            fact.tx_hash,
            fact.at,
            next_poll_at=fact.at + timedelta(seconds=self.settings.poll_initial_s),
            delay_s=self.settings.poll_initial_s * 2,
        )
        self._polling[fact.intent_hash] = fact.quote_id

    def _apply_claim_ended(self, fact: f.ClaimEnded) -> None:
        quote = self.book.get(fact.quote_id)
        claim = quote.claims.get(fact.intent_hash) if quote is not None else None
        if claim is not None:
            claim.ended, claim.status = True, fact.status
        self._polling.pop(fact.intent_hash, None)

    def _apply_balances(self, fact: f.BalancesReconciled) -> None:
        own = [Reservation(k, o, a, i, b, fact.observed) for k, o, a, i, b in fact.own_open]
        book = self.book
        totals = (book.open_outflow, book.open_inflow)
        self.balances.reconcile(fact.balances, fact.observed, own, fact.own_settling, totals)
        self.inventory.set_confirmed(fact.balances, fact.observed)

    def _apply_own_flow(self, fact: f.OwnFlow) -> None:
        self.balances.settled(
            fact.key, fact.asset_in, fact.amount_in, fact.asset_out, fact.outflow, fact.at
        )

    def _apply_pnl(self, fact: f.PnlMarked) -> None:
        self.pnl.restore(fact.start_equity, fact.peak_pnl, fact.day, fact.day_start_pnl)
        self._pnl_recorded_at, self._recorded_day = fact.at, fact.day

    def _apply_markout(self, fact: f.Markout) -> None:
        self.pnl.add_markout(fact.horizon_s, fact.value_usd)
        self.pnl.drop_due(fact.horizon_s, fact.at)  # replayed: not to be taken again

    def _apply_pause_set(self, fact: f.PauseSet) -> None:
        self.pauses.add(Pause(fact.scope, fact.kind, fact.reason, fact.at))
        if fact.scope == GLOBAL and fact.kind == "stale_data":
            self.stale_open = True

    def _apply_pause_cleared(self, fact: f.PauseCleared) -> None:
        self.pauses.remove(fact.scope, fact.kind)
        if fact.scope == GLOBAL and fact.kind == "stale_data":
            self.stale_open = False  # its recovery was told by the pause lifted
        if fact.scope == GLOBAL and fact.kind == "reconciliation":
            self.balances.unresolved.clear()  # acknowledged: the next snapshot reports afresh

    def _apply_baseline(self, fact: f.BaselineAccepted) -> None:
        self.balances.accept(fact.balances)
        self.pnl.shift_baseline(fact.equity_shift_usd)
