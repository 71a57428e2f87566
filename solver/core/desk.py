"""The desk: every decision the bot makes, in one sans-I/O state machine (DESIGN "The shape").

Modelled on python-websockets' ``Protocol``: the desk is fed events with the time and read for
actions; it owns no socket, no clock and no task. It is the only owner of the quote book and each
quote's lifecycle (:mod:`solver.core.lifecycle`), the reservations, the expected balances and
the reconciliation, PnL and risk, and every pause (one writer; a pause has a scope and a
reason). The live driver (:mod:`solver.runtime`) and the backtest drive the same desk, so they
cannot drift.

Every change of state is a fact (:mod:`solver.core.facts`): handlers decide, write the facts
down as :class:`~solver.core.actions.Record` actions, and change state only through
:meth:`Desk.apply` — the same code that rebuilds the desk from the journal after a restart.
Market inputs (prices, salt, fee) and the quote path's rate limiter are not journaled: they are
refreshed at start.

The quote path: ``receive(QuoteRequested)`` → :class:`~solver.core.quoting.QuotePipeline`
decides and reserves → :class:`~solver.core.actions.SignAndSend`; the driver signs and reports
``QuoteSigned`` → the ``QuoteOpened`` fact, journaled before the answer leaves.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import (
    Action,
    Alert,
    CheckNonce,
    OperatorReply,
    PauseChanged,
    PollIntent,
    Record,
    RefreshBalances,
    RefreshSalt,
    ShadowQuote,
    SignAndSend,
)
from solver.core.inventory import Inventory, Reservation
from solver.core.lifecycle import Claim, QuoteBook, QuoteState, TrackedQuote
from solver.core.pauses import (
    GLOBAL,
    OPERATOR,
    RISK_KINDS,
    SHUTTING_DOWN,
    STORE_ERROR,
    Pause,
    Pauses,
)
from solver.core.pnl import MARKOUT_HORIZONS_S, FillValue, PnlBook
from solver.core.quoting import PipelineSettings, Quote, QuotePipeline, Route, Skip
from solver.core.reconciliation import Reconciliation
from solver.core.risk import Breach, RiskLimits, check_mismatch, check_pnl, check_stale
from solver.core.state import MarketState

PENDING, BROADCAST, SETTLED, NOT_FOUND = (
    "PENDING",
    "TX_BROADCASTED",
    "SETTLED",
    "NOT_FOUND_OR_NOT_VALID",
)


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


class Desk:
    def __init__(
        self,
        settings: DeskSettings,
        routes: Mapping[tuple[str, str], Route],
        decimals: Mapping[str, int],
        *,
        floors: Mapping[str, int] | None = None,
        symbols: Mapping[str, str] | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self.limits = settings.limits
        self.state = MarketState(decimals=dict(decimals), history_size=settings.history_size)
        self.inventory = Inventory(floors=dict(floors or {}))
        self.pauses = Pauses()
        self.pipeline = QuotePipeline(
            settings.pipeline, routes, self.inventory, self.state, self.pauses, timer=timer
        )
        self.book = QuoteBook()
        self.pnl = PnlBook(decimals, settings.markout_horizons_s)
        self.symbols = dict(symbols or {})
        self.stats = DeskStats()
        self.connected_since: datetime | None = None
        self._unsigned: dict[str, Quote] = {}  # decided and reserved, not signed yet
        self._polling: dict[str, str] = {}  # intent_hash -> quote_id, claims still pending
        self._pnl_recorded_at: datetime | None = None
        self._grace = timedelta(seconds=settings.deadline_grace_s)
        self._claim_timeout = timedelta(seconds=settings.claim_timeout_s)
        self._nonce_retry = timedelta(seconds=settings.nonce_retry_s)
        self.balances = Reconciliation(settings.limits)
        self._recorded_day: str | None = None
        self._handlers: dict[type, Callable[[Any, datetime], list[Action]]] = {
            ev.QuoteRequested: self._quote_requested,
            ev.QuoteSigned: self._quote_signed,
            ev.QuoteNotSent: self._quote_not_sent,
            ev.RelayReplied: self._relay_replied,
            ev.ConnectionLost: self._connection_lost,
            ev.ConnectionRestored: self._connection_restored,
            ev.QuoteStatusSeen: self._quote_status,
            ev.IntentStatusSeen: self._intent_status,
            ev.NonceChecked: self._nonce_checked,
            ev.BalancesSeen: self._balances,
            ev.PriceSeen: self._price_seen,
            ev.SaltSeen: self._salt_seen,
            ev.FeeSeen: self._fee_seen,
            ev.OwnFlowSettled: self._own_flow,
            ev.OperatorPause: self._operator_pause,
            ev.OperatorResume: self._operator_resume,
            ev.ShutdownStarted: self._shutdown,
        }
        self._appliers: dict[type, Callable[[Any], None]] = {
            f.QuoteOpened: self._apply_opened,
            f.QuoteMoved: self._apply_moved,
            f.ClaimAdded: self._apply_claim_added,
            f.ClaimEnded: self._apply_claim_ended,
            f.BalancesReconciled: self._apply_balances,
            f.OwnFlow: self._apply_own_flow,
            f.PnlMarked: self._apply_pnl,
            f.Markout: self._apply_markout,
            f.PauseSet: self._apply_pause_set,
            f.PauseCleared: self._apply_pause_cleared,
            f.BaselineAccepted: self._apply_baseline,
        }

    # ------------------------------------------------------------------ the interface

    def receive(self, event: ev.Event, now: datetime) -> list[Action]:
        """Take in one event at ``now``; what the driver must do, in order."""
        return self._handlers[type(event)](event, now)

    def apply(self, fact: f.Fact) -> None:
        """Change state by one fact: live, as it is decided; on start, from the journal."""
        self._appliers[type(fact)](fact)

    def _fact(self, fact: f.Fact, actions: list[Action]) -> None:
        self.apply(fact)
        actions.append(Record(fact))

    def price(self, asset: str) -> float | None:
        ref = self.state.prices.get(asset)
        return ref.usd if ref is not None else None

    # ------------------------------------------------------------------ the quote path

    def _quote_requested(self, event: ev.QuoteRequested, now: datetime) -> list[Action]:
        self.stats.requests += 1
        outcome = self.pipeline.decide(event.request, now, event.received_at)
        if type(outcome) is Skip:
            self.stats.skipped[outcome.reason] += 1
            return [outcome]
        assert isinstance(outcome, Quote)
        if self.settings.shadow:
            self.inventory.release(outcome.request.quote_id)
            self.stats.shadow_quotes += 1
            return [ShadowQuote(outcome)]
        self._unsigned[outcome.request.quote_id] = outcome
        salt = self.state.salt
        assert salt is not None  # decide() skips without a salt
        return [SignAndSend(outcome, salt)]

    def _quote_signed(self, event: ev.QuoteSigned, now: datetime) -> list[Action]:
        quote = self._unsigned.pop(event.quote_id, None)
        if quote is None:
            return []
        request = quote.request
        self.stats.signed += 1
        fact = f.QuoteOpened(
            request.quote_id, event.quote_hash, request.asset_in, request.asset_out,
            quote.amount_in, quote.amount_out, quote.fee, quote.deadline, event.nonce, now,
            request.exact_in, request.partner_id,
        )  # fmt: skip
        self.apply(fact)
        return [Record(fact)]

    def _quote_not_sent(self, event: ev.QuoteNotSent, now: datetime) -> list[Action]:
        actions: list[Action] = []
        if self._unsigned.pop(event.quote_id, None) is not None:
            self.inventory.release(event.quote_id)
        elif self.book.get(event.quote_id) is not None:
            self._move(event.quote_id, QuoteState.REJECTED, now, actions, reason=event.reason)
        if event.store_error:
            self.stats.skipped["store_error"] += 1
            self._pause(GLOBAL, STORE_ERROR, event.reason, now, actions)
        return actions

    def _relay_replied(self, event: ev.RelayReplied, now: datetime) -> list[Action]:
        if event.ok:
            self.stats.relay_ok += 1
            return []
        self.stats.rejected += 1
        actions: list[Action] = []
        quote = self.book.get(event.quote_id)
        if quote is not None and quote.state is QuoteState.OPEN and not quote.claims:
            reason = event.reason or "refused by the relay"
            self._move(event.quote_id, QuoteState.REJECTED, now, actions, reason=reason)
        if event.reason and "salt" in event.reason:
            self.state.salt_at = None  # skip until the salt is fetched again
            actions.append(RefreshSalt())
        return actions

    def _connection_lost(self, event: ev.ConnectionLost, now: datetime) -> list[Action]:
        # Answers in flight stay OPEN: the relay holds them and can use them until deadline.
        self.connected_since = None
        return []

    def _connection_restored(self, event: ev.ConnectionRestored, now: datetime) -> list[Action]:
        self.connected_since = now
        return []

    # ------------------------------------------------------------------ settlement

    def _quote_status(self, event: ev.QuoteStatusSeen, now: datetime) -> list[Action]:
        quote = self.book.find_hash(event.quote_hash)
        if quote is None:
            self.stats.stray_statuses += 1  # a hash we never signed, or already final
            return []
        if event.intent_hash in quote.claims:
            self.stats.duplicate_statuses += 1
            return []
        actions: list[Action] = []
        self._fact(f.ClaimAdded(quote.quote_id, event.intent_hash, event.tx_hash, now), actions)
        actions.append(PollIntent(event.intent_hash))
        return actions

    def _intent_status(self, event: ev.IntentStatusSeen, now: datetime) -> list[Action]:
        quote_id = self._polling.get(event.intent_hash)
        quote = self.book.get(quote_id) if quote_id is not None else None
        if quote is None or event.status is None:
            return []
        claim = quote.claims[event.intent_hash]
        claim.status = event.status
        actions: list[Action] = []
        tx = event.tx_hash or claim.tx_hash
        if event.status == SETTLED:
            self._settle(quote, now, actions, intent_hash=claim.intent_hash, tx_hash=tx)
        elif event.status == BROADCAST and quote.state in (QuoteState.OPEN, QuoteState.WON):
            self._move(
                quote.quote_id, QuoteState.SETTLING, now, actions,
                intent_hash=claim.intent_hash, tx_hash=tx,
            )  # fmt: skip
        elif event.status == PENDING and quote.state is QuoteState.OPEN:
            self._move(quote.quote_id, QuoteState.WON, now, actions, intent_hash=claim.intent_hash)
        elif event.status == NOT_FOUND:
            fact = f.ClaimEnded(quote.quote_id, claim.intent_hash, event.status, now)
            self._fact(fact, actions)
        return actions

    def _nonce_checked(self, event: ev.NonceChecked, now: datetime) -> list[Action]:
        quote = self.book.get(event.quote_id)
        actions: list[Action] = []
        if quote is None or event.used is None:
            return actions  # gone already, or ask again after nonce_retry_s
        if event.used:
            self._settle(quote, now, actions, reason="nonce used")
        else:
            new = QuoteState.LOST if quote.state is QuoteState.OPEN else QuoteState.FAILED
            self._move(quote.quote_id, new, now, actions, reason="deadline passed, nonce unused")
        return actions

    def _settle(
        self,
        quote: TrackedQuote,
        now: datetime,
        actions: list[Action],
        *,
        intent_hash: str | None = None,
        tx_hash: str | None = None,
        reason: str | None = None,
    ) -> None:
        p_in, p_out = self.price(quote.asset_in), self.price(quote.asset_out)
        prices = None
        if p_in is not None and p_out is not None:
            value = self.pnl.value(self._fill_value(quote), p_in, p_out)
            prices = f.FillPrices(p_in, p_out, value)
        fact = f.QuoteMoved(
            quote.quote_id, QuoteState.SETTLED, now, reason, intent_hash, tx_hash, prices
        )
        self._fact(fact, actions)
        actions.append(RefreshBalances())

    @staticmethod
    def _fill_value(quote: TrackedQuote) -> FillValue:
        return FillValue(
            quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow
        )

    def _move(
        self,
        quote_id: str,
        new: QuoteState,
        now: datetime,
        actions: list[Action],
        *,
        reason: str | None = None,
        intent_hash: str | None = None,
        tx_hash: str | None = None,
    ) -> None:
        self._fact(f.QuoteMoved(quote_id, new, now, reason, intent_hash, tx_hash), actions)

    # ------------------------------------------------------------------ the clock

    def tick(self, now: datetime) -> list[Action]:
        """What is due at ``now``: intent polls, deadline checks, markouts, PnL and the kill
        switch. The live driver calls it every ~100 ms; the backtest at its own times."""
        actions: list[Action] = []
        self._due_polls(now, actions)
        self._due_deadlines(now, actions)
        for fill, horizon, value in self.pnl.due_markouts(now, self.price):
            self._fact(f.Markout(fill.quote_id, horizon, value, now), actions)
        self._mark(now, actions)
        return actions

    def _due_polls(self, now: datetime, actions: list[Action]) -> None:
        s = self.settings
        for intent_hash, quote_id in list(self._polling.items()):
            quote = self.book.get(quote_id)
            if quote is None:
                del self._polling[intent_hash]
                continue
            claim = quote.claims[intent_hash]
            if claim.next_poll_at is not None and claim.next_poll_at > now:
                continue
            claim.next_poll_at = now + timedelta(seconds=claim.delay_s)
            claim.delay_s = min(claim.delay_s * 2, s.poll_max_s)
            actions.append(PollIntent(intent_hash))

    def _due_deadlines(self, now: datetime, actions: list[Action]) -> None:
        since = self.connected_since
        for quote in self.book.past_deadline(now - self._grace):
            if quote.pending_claims() and now < quote.deadline + self._grace + self._claim_timeout:
                continue  # a claim may still settle it: its polls decide
            if quote.nonce_check_at is not None and now - quote.nonce_check_at < self._nonce_retry:
                continue
            if (
                quote.state is QuoteState.OPEN
                and not quote.claims
                and since is not None
                and since <= quote.created_at
            ):
                # Connected throughout its life and nobody named it: no status was missed, so
                # nobody used it. No RPC (most answers are lost: this is the common case).
                reason = "deadline passed, never named"
                self._move(quote.quote_id, QuoteState.LOST, now, actions, reason=reason)
                continue
            quote.nonce_check_at = now
            actions.append(CheckNonce(quote.quote_id, quote.nonce))

    def _mark(self, now: datetime, actions: list[Action]) -> None:
        # Value in transit (an own move half seen) would mark a loss or gain that is not one.
        if not self.balances.own_settling:
            pnl = self.pnl
            changed = pnl.mark(now, self.inventory.confirmed, self.price)
            last = self._pnl_recorded_at
            if changed and (
                last is None
                or pnl.day != self._recorded_day
                or (now - last).total_seconds() >= self.settings.pnl_record_every_s
            ):
                self._record_pnl(now, actions)
            if pnl.pnl is not None and self.settings.kill_switch:
                for breach in check_pnl(self.limits, pnl.daily_loss_usd(), pnl.drawdown_usd()):
                    self._breach(breach, now, actions, halt=True)
        if self.settings.kill_switch:
            ages = [p.age_s(now) for p in self.state.prices.values()]
            balance_age = self.inventory.balance_age_s(now)
            for breach in check_stale(self.limits, balance_age, max(ages, default=None)):
                self._breach(breach, now, actions, halt=True)

    def _record_pnl(self, now: datetime, actions: list[Action]) -> None:
        pnl = self.pnl
        if pnl.start_equity is None or pnl.day is None:
            return
        fact = f.PnlMarked(now, pnl.start_equity, pnl.peak_pnl, pnl.day, pnl.day_start_pnl)
        self._fact(fact, actions)

    # ------------------------------------------------------------------ balances

    def _balances(self, event: ev.BalancesSeen, now: datetime) -> list[Action]:
        if self.balances.snapshot_at is not None and event.observed < self.balances.snapshot_at:
            return []  # older than the last one taken in: tells nothing new
        own = tuple(
            (r.quote_id, r.asset_out, r.amount_out, r.asset_in, r.amount_in) for r in event.own_open
        )
        actions: list[Action] = []
        fact = f.BalancesReconciled(event.observed, dict(event.balances), own, event.own_settling)
        self._fact(fact, actions)
        for breach in check_mismatch(self.limits, self.balances.found):
            self._breach(breach, now, actions, halt=self.limits.halt_on_mismatch)
        return actions

    def _own_flow(self, event: ev.OwnFlowSettled, now: datetime) -> list[Action]:
        actions: list[Action] = []
        e = event
        fact = f.OwnFlow(e.key, e.asset_in, e.amount_in, e.asset_out, e.outflow, now)
        self._fact(fact, actions)
        return actions

    # ------------------------------------------------------------------ market inputs

    def _price_seen(self, event: ev.PriceSeen, now: datetime) -> list[Action]:
        self.state.set_price(event.asset, event.usd, event.observed)
        return []

    def _salt_seen(self, event: ev.SaltSeen, now: datetime) -> list[Action]:
        self.state.set_salt(event.salt, event.observed)
        return []

    def _fee_seen(self, event: ev.FeeSeen, now: datetime) -> list[Action]:
        self.state.fee_pips = event.fee_pips
        return []

    # ------------------------------------------------------------------ pauses and operators

    def _breach(self, breach: Breach, now: datetime, actions: list[Action], *, halt: bool) -> None:
        if halt:
            self._pause(GLOBAL, breach.kind, breach.detail, now, actions)
        elif self.pauses.get(GLOBAL, breach.kind) is None:
            actions.append(Alert(breach.kind, breach.detail))

    def _pause(
        self, scope: str, kind: str, reason: str, now: datetime, actions: list[Action]
    ) -> None:
        if self.pauses.get(scope, kind) is not None:
            return
        self._fact(f.PauseSet(scope, kind, reason, now), actions)
        pause = self.pauses.get(scope, kind)
        assert pause is not None
        actions.append(PauseChanged(pause, active=True))
        if kind != OPERATOR:
            actions.append(Alert(kind, reason))

    def _unpause(self, pause: Pause, now: datetime, actions: list[Action], by: str) -> None:
        self._fact(f.PauseCleared(pause.scope, pause.kind, now, by), actions)
        actions.append(PauseChanged(pause, active=False))
        if pause.kind != OPERATOR:
            actions.append(Alert(pause.kind, f"{by}: {pause.reason}", resolved=True))

    def scopes(self, pair: str | None) -> list[str]:
        """Route keys of ``BASE/QUOTE`` (symbols or asset ids, both directions); ``*`` for None.
        Raises LookupError for a pair the bot does not trade."""
        if pair is None:
            return [GLOBAL]
        by_symbol = {symbol: asset for asset, symbol in self.symbols.items()}
        base_text, _, quote_text = pair.partition("/")
        base, quote = by_symbol.get(base_text, base_text), by_symbol.get(quote_text, quote_text)
        found = [
            r.key
            for r in self.pipeline.routes.values()
            if {r.asset_in, r.asset_out} == {base, quote}
        ]
        if not found:
            raise LookupError(f"the bot does not trade {pair}")
        return found

    def _operator_pause(self, event: ev.OperatorPause, now: datetime) -> list[Action]:
        try:
            scopes = self.scopes(event.pair)
        except LookupError as exc:
            return [OperatorReply(False, str(exc))]
        actions: list[Action] = []
        for scope in scopes:
            self._pause(scope, OPERATOR, event.reason or "paused by the operator", now, actions)
        actions.append(OperatorReply(True, f"paused {event.pair or 'everything'}"))
        return actions

    def _operator_resume(self, event: ev.OperatorResume, now: datetime) -> list[Action]:
        try:
            scopes = self.scopes(event.pair)
        except LookupError as exc:
            return [OperatorReply(False, str(exc))]
        actions: list[Action] = []
        notes: list[str] = []
        if event.accept_balances:
            problem = self._accept_balances(now, actions, notes)
            if problem is not None:
                return [OperatorReply(False, problem)]
        for pause in list(self.pauses):
            if pause.scope in scopes and pause.kind != SHUTTING_DOWN:
                self._unpause(pause, now, actions, by="operator")
        if event.pair is None and self.pnl.pnl is not None:
            # The kill switch measures from here: the loss so far is acknowledged.
            self.pnl.peak_pnl = self.pnl.pnl
            self.pnl.day_start_pnl = self.pnl.pnl
            self._record_pnl(now, actions)
        self._mark(now, actions)  # a condition still in force pauses again at once
        still = [p.describe() for p in self.pauses if p.scope in scopes or p.scope == GLOBAL]
        if still:
            message = "still paused: " + "; ".join(still)
            actions.append(OperatorReply(False, message, tuple(still)))
        else:
            done = f"resumed {event.pair or 'everything'}"
            actions.append(OperatorReply(True, "; ".join([done, *notes])))
        return actions

    def _accept_balances(
        self, now: datetime, actions: list[Action], notes: list[str]
    ) -> str | None:
        balances = self.balances.last
        if balances is None:
            return "no balance snapshot yet: nothing to accept"
        # What moved unexplained: the gaps found since the last resume (the reconciler absorbed
        # them already) and whatever the expected balances still differ by.
        expected, unresolved = self.balances.expected_now(), self.balances.unresolved
        difference = {a: balances[a] - expected.get(a, 0) + unresolved.get(a, 0) for a in balances}
        shift = 0.0
        for asset, delta in difference.items():
            if not delta:
                continue
            price, scale = self.price(asset), self.state.decimals.get(asset)
            if price is None or scale is None:
                return f"no price for {asset}: cannot value the move to accept it"
            shift += delta * price / 10.0**scale
        fact = f.BaselineAccepted(now, dict(balances), difference, shift)
        self._fact(fact, actions)
        moved = {a: d for a, d in difference.items() if d}
        notes.append(f"accepted balances (moved: {moved or 'nothing'}, {shift:+.2f} USD)")
        return None

    def _shutdown(self, event: ev.ShutdownStarted, now: datetime) -> list[Action]:
        # Not journaled: it ends with the process, and must not survive into the next one.
        self.pauses.add(Pause(GLOBAL, SHUTTING_DOWN, "the process is stopping", now))
        return []

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
        if quote.terminal:
            for intent_hash in quote.claims:
                self._polling.pop(intent_hash, None)
        if new is QuoteState.SETTLED:
            self.inventory.settle(fact.quote_id, fact.at)
            self.balances.settled(
                quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow,
                fact.at,
            )  # fmt: skip
            if fact.fill is not None:
                self.pnl.record_fill(self._fill_value(quote), fact.at, fact.fill.realized_usd)
        elif new in (QuoteState.REJECTED, QuoteState.LOST, QuoteState.FAILED):
            self.inventory.release(fact.quote_id)

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

    def _apply_pause_cleared(self, fact: f.PauseCleared) -> None:
        self.pauses.remove(fact.scope, fact.kind)
        if fact.scope == GLOBAL and fact.kind == "reconciliation":
            self.balances.unresolved.clear()  # acknowledged: the next snapshot reports afresh

    def _apply_baseline(self, fact: f.BaselineAccepted) -> None:
        self.balances.accept(fact.balances)
        self.pnl.shift_baseline(fact.equity_shift_usd)

    # ------------------------------------------------------------------ reading

    def risk_paused(self) -> bool:
        return any(p.kind in RISK_KINDS for p in self.pauses)
