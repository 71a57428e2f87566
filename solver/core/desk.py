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

import functools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import (
    Action,
    CheckNonce,
    PollIntent,
    Record,
    RefreshBalances,
    RefreshSalt,
    ShadowQuote,
    SignAndSend,
)
from solver.core.desk_risk import DeskRisk
from solver.core.desk_state import DeskSettings, DeskStats
from solver.core.lifecycle import QuoteState, TrackedQuote
from solver.core.pauses import GLOBAL, RISK_KINDS, STORE_ERROR
from solver.core.quoting import DUPLICATE_QUOTE_ID, Quote, Skip

LOST_PER_FACT = 64
"""A ``QuotesLost`` fact names at most this many quotes; a tick that retires more records
several. The query tables apply a fact whole (:mod:`solver.io.store.projection`), ~17 µs a lost
quote: one fact per tick held the running bot's loop up to 4.4 ms at 2,000 answers/s, more
after a burst. 64 make each ~1.1 ms (64 × ~17 µs, computed from the per-quote cost)."""

PENDING, BROADCAST, SETTLED, NOT_FOUND = (
    "PENDING",
    "TX_BROADCASTED",
    "SETTLED",
    "NOT_FOUND_OR_NOT_VALID",
)


__all__ = ["Desk", "DeskSettings", "DeskStats"]


class Desk(DeskRisk):
    """Built as :class:`~solver.core.desk_state.DeskState` is (``pairs``: the configured
    ``(base, quote)`` pairs, which name the per-pair stats)."""

    @functools.cached_property
    def _handlers(self) -> dict[type, Callable[[Any, datetime], list[Action]]]:
        """Which method takes which event (built once, on the first event)."""
        return {
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
            ev.RebalanceStarting: self.rebalancing.starting,
            ev.RebalanceDeposited: self.rebalancing.deposited,
            ev.RebalanceEnding: self.rebalancing.ending,
        }

    # ------------------------------------------------------------------ the interface

    def receive(self, event: ev.Event, now: datetime) -> list[Action]:
        """Take in one event at ``now``; what the driver must do, in order."""
        return self._handlers[type(event)](event, now)

    # ------------------------------------------------------------------ the quote path

    def _quote_requested(self, event: ev.QuoteRequested, now: datetime) -> list[Action]:
        self.stats.requests += 1
        request = event.request
        pair = self.pair_book.of(request.asset_in, request.asset_out)
        if pair is not None:
            pair.requests += 1
        if request.quote_id in self.book.quotes:  # the relay's ids are unique: a repeat
            self.stats.skipped[DUPLICATE_QUOTE_ID] += 1
            return [Skip(DUPLICATE_QUOTE_ID, "a quote with this id is still open")]
        outcome = self.pipeline.decide(request, now, event.received_at)
        if type(outcome) is Skip:
            self.stats.skipped[outcome.reason] += 1
            return [outcome]
        assert isinstance(outcome, Quote)
        if self.settings.shadow:
            self.inventory.release(outcome.request.quote_id)
            self.stats.shadow_quotes += 1
            if pair is not None:
                pair.quotes += 1
            return [ShadowQuote(outcome)]
        salt = self.state.salt
        assert salt is not None  # decide() skips without a salt
        return [SignAndSend(outcome, salt)]

    def _quote_signed(self, event: ev.QuoteSigned, now: datetime) -> list[Action]:
        quote = event.quote
        request = quote.request
        self.stats.signed += 1
        fact = f.QuoteOpened(
            request.quote_id, event.quote_hash, request.asset_in, request.asset_out,
            quote.amount_in, quote.amount_out, quote.fee, quote.deadline, event.nonce, now,
            request.exact_in, request.partner_id, event.signed_data,
        )  # fmt: skip
        self.apply(fact)
        return [Record(fact)]

    def _quote_not_sent(self, event: ev.QuoteNotSent, now: datetime) -> list[Action]:
        actions: list[Action] = []
        if self.book.get(event.quote_id) is not None:
            self._move(event.quote_id, QuoteState.REJECTED, now, actions, reason=event.reason)
        else:  # decided and reserved, never signed or never recorded
            self.inventory.release(event.quote_id)
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
        quote.claims[event.intent_hash].asking = True
        actions.append(PollIntent(event.intent_hash))
        return actions

    def _intent_status(self, event: ev.IntentStatusSeen, now: datetime) -> list[Action]:
        quote_id = self._polling.get(event.intent_hash)
        quote = self.book.get(quote_id) if quote_id is not None else None
        if quote is None:
            return []
        claim = quote.claims[event.intent_hash]
        claim.asking = False
        if event.status is None:
            return []  # the question failed: asked again at its next poll
        claim.status = event.status
        actions: list[Action] = []
        tx = event.tx_hash or claim.tx_hash
        if event.status == SETTLED:
            self._settle(quote, now, actions, intent_hash=claim.intent_hash, tx_hash=tx)
        elif event.status in (PENDING, BROADCAST):
            self._won(quote, now, actions, claim.intent_hash, tx)
            if event.status == BROADCAST and quote.state is QuoteState.WON:
                self._move(
                    quote.quote_id, QuoteState.SETTLING, now, actions,
                    intent_hash=claim.intent_hash, tx_hash=tx,
                )  # fmt: skip

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
        self._won(quote, now, actions, intent_hash, tx_hash, reason)
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

    def _won(
        self,
        quote: TrackedQuote,
        now: datetime,
        actions: list[Action],
        intent_hash: str | None,
        tx_hash: str | None,
        reason: str | None = None,
    ) -> None:
        """A user took the quote: OPEN → WON (once), before any later state."""
        if quote.state is QuoteState.OPEN:
            self._move(
                quote.quote_id, QuoteState.WON, now, actions, reason=reason,
                intent_hash=intent_hash, tx_hash=tx_hash,
            )  # fmt: skip

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
            if claim.asking or (claim.next_poll_at is not None and claim.next_poll_at > now):
                continue
            claim.asking = True
            claim.next_poll_at = now + timedelta(seconds=claim.delay_s)
            claim.delay_s = min(claim.delay_s * 2, s.poll_max_s)
            actions.append(PollIntent(intent_hash))

    def _due_deadlines(self, now: datetime, actions: list[Action]) -> None:
        since = self.connected_since
        lost: list[str] = []
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
                lost.append(quote.quote_id)
                continue
            quote.nonce_check_at = now
            actions.append(CheckNonce(quote.quote_id, quote.nonce))
        for start in range(0, len(lost), LOST_PER_FACT):
            chunk = tuple(lost[start : start + LOST_PER_FACT])
            self._fact(f.QuotesLost(chunk, now, "deadline passed, never named"), actions)

    # ------------------------------------------------------------------ reading

    def risk_paused(self) -> bool:
        return any(p.kind in RISK_KINDS for p in self.pauses)
