"""The desk's quote book and each quote's lifecycle (DESIGN "The quote path", "Settlement";
:mod:`solver.core.lifecycle` for the transition table).

The quote path: the request (a bus ``quote``, protocol-notes 6: the
:class:`~solver.core.market.QuoteRequest` itself is the event) →
:class:`~solver.core.quoting.QuotePipeline` decides and reserves →
:class:`~solver.core.actions.SignAndSend`; the executor signs and reports
``QuoteSigned`` (with the quote and its signed answer) → the ``QuoteOpened`` fact, journaled
before the answer leaves. Then the relay's reply, ``quote_status`` claims followed with
``get_status`` (one question in flight per claim), and past the deadline the nonce check or,
when no status can have been missed, LOST without one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
from solver.core.clock import Micros, span
from solver.core.inventory import Reservation
from solver.core.lifecycle import Claim, QuoteState, TrackedQuote
from solver.core.market import QuoteRequest
from solver.core.pauses import GLOBAL, STORE_ERROR
from solver.core.pnl import FillValue, usd_value
from solver.core.quoting import DUPLICATE_QUOTE_ID, Quote, Skip

if TYPE_CHECKING:
    from solver.core.desk import Desk

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


class QuoteLifecycle:
    """The desk's part for quotes: decides on requests, relay replies, statuses and deadlines;
    applies the quote facts."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        # The shared state this part reads and changes (the desk never replaces these objects).
        self.settings = desk.settings
        self.book = desk.book
        self.inventory = desk.inventory
        self.pipeline = desk.pipeline
        self.state = desk.state
        self.pnl = desk.pnl
        self.balances = desk.balances
        self.stats = desk.stats
        self.pair_book = desk.pair_book
        self._pairs = desk.pair_book.by_route
        """asset_in -> asset_out -> the pair's counters (:meth:`PairBook.of`, read inline on
        the quote path: one call less a request and an answer, issue 29)."""
        self.recent_fills = desk.recent_fills
        self.record = desk.record
        self.polling: dict[str, str] = {}
        """intent_hash -> quote_id: the claims still pending."""
        self.connected_since: Micros | None = None
        self._grace = span(self.settings.deadline_grace_s)
        self._claim_timeout = span(self.settings.claim_timeout_s)
        self._nonce_retry = span(self.settings.nonce_retry_s)
        self._poll_initial = span(self.settings.poll_initial_s)

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {
            QuoteRequest: self._quote_requested,  # the request is its own event (executor)
            ev.QuoteSigned: self._quote_signed,
            ev.QuoteNotSent: self._quote_not_sent,
            ev.RelayReplied: self._relay_replied,
            ev.ConnectionLost: self._connection_lost,
            ev.ConnectionRestored: self._connection_restored,
            ev.QuoteStatusSeen: self._quote_status,
            ev.IntentStatusSeen: self._intent_status,
            ev.NonceChecked: self._nonce_checked,
        }

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {
            f.QuoteOpened: self._apply_opened,
            f.QuoteMoved: self._apply_moved,
            f.QuotesLost: self._apply_lost,
            f.ClaimAdded: self._apply_claim_added,
            f.ClaimEnded: self._apply_claim_ended,
        }

    def due(self, now: Micros, actions: list[Action]) -> None:
        """The clock's part: claims to poll, quotes past their deadline."""
        self._due_polls(now, actions)
        self._due_deadlines(now, actions)

    # ------------------------------------------------------------------ deciding

    def _quote_requested(self, request: QuoteRequest, now: Micros) -> list[Action]:
        """One decision, one action. The executor hands the request itself: no wrapper is
        built per request."""
        self.stats.requests += 1
        quote_id = request.quote_id
        by_out = self._pairs.get(request.asset_in)  # PairBook.of, inline
        pair = by_out.get(request.asset_out) if by_out is not None else None
        if pair is not None:
            pair.requests += 1
        if quote_id in self.book.quotes:  # the relay's ids are unique: a repeat
            self.stats.skipped[DUPLICATE_QUOTE_ID] += 1
            return [Skip(DUPLICATE_QUOTE_ID, "a quote with this id is still open")]
        outcome = self.pipeline.decide(request, now)
        if type(outcome) is Skip:
            self.stats.skipped[outcome.reason] += 1
            return [outcome]
        assert isinstance(outcome, Quote)
        if self.settings.shadow:
            self.inventory.release(quote_id)
            self.stats.shadow_quotes += 1
            if pair is not None:
                pair.quotes += 1
            return [ShadowQuote(outcome)]
        salt = self.state.salt
        assert salt is not None  # decide() skips without a salt
        return [SignAndSend(outcome, salt)]

    def _quote_signed(self, event: ev.QuoteSigned, now: Micros) -> list[Action]:
        """The answer exists: its one fact, applied here (not through the desk's table of
        appliers: it is always this one) and handed back as the one action."""
        quote = event.quote
        request = quote.request
        fact = f.QuoteOpened(
            request.quote_id, event.quote_hash, request.asset_in, request.asset_out,
            quote.amount_in, quote.amount_out, quote.fee, quote.deadline, event.nonce, now,
            request.exact_in, request.partner_id, event.signed_data,
        )  # fmt: skip
        self._apply_opened(fact)
        return [Record(fact)]

    def _quote_not_sent(self, event: ev.QuoteNotSent, now: Micros) -> list[Action]:
        actions: list[Action] = []
        if self.book.get(event.quote_id) is not None:
            self._move(event.quote_id, QuoteState.REJECTED, now, actions, reason=event.reason)
        else:  # decided and reserved, never signed or never recorded
            self.inventory.release(event.quote_id)
        if event.store_error:
            self.stats.skipped["store_error"] += 1
            self.desk.risk.pause(GLOBAL, STORE_ERROR, event.reason, now, actions)
        return actions

    def _relay_replied(self, event: ev.RelayReplied, now: Micros) -> list[Action]:
        if event.ok:  # nothing to do (the bot feeds only refusals)
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

    def _connection_lost(self, event: ev.ConnectionLost, now: Micros) -> list[Action]:
        # Answers in flight stay OPEN: the relay holds them and can use them until deadline.
        self.connected_since = None
        return []

    def _connection_restored(self, event: ev.ConnectionRestored, now: Micros) -> list[Action]:
        self.connected_since = now
        return []

    def _quote_status(self, event: ev.QuoteStatusSeen, now: Micros) -> list[Action]:
        quote = self.book.find_hash(event.quote_hash)
        if quote is None:
            self.stats.stray_statuses += 1  # a hash we never signed, or already final
            return self.desk.gaps.stray_status(event.quote_hash, now)  # late: ask the verifier
        if event.intent_hash in quote.claims:
            self.stats.duplicate_statuses += 1
            return []
        actions: list[Action] = []
        self.record(f.ClaimAdded(quote.quote_id, event.intent_hash, event.tx_hash, now), actions)
        quote.claims[event.intent_hash].asking = True
        actions.append(PollIntent(event.intent_hash))
        return actions

    def _intent_status(self, event: ev.IntentStatusSeen, now: Micros) -> list[Action]:
        quote_id = self.polling.get(event.intent_hash)
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
            self.record(fact, actions)
        return actions

    def _nonce_checked(self, event: ev.NonceChecked, now: Micros) -> list[Action]:
        quote = self.book.get(event.quote_id)
        if quote is None:
            return self.desk.gaps.nonce_checked(event, now)  # closed already: a gap's question
        actions: list[Action] = []
        if event.used is None:
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
        now: Micros,
        actions: list[Action],
        *,
        intent_hash: str | None = None,
        tx_hash: str | None = None,
        reason: str | None = None,
    ) -> None:
        self._won(quote, now, actions, intent_hash, tx_hash, reason)
        p_in, p_out = self.desk.price(quote.asset_in), self.desk.price(quote.asset_out)
        prices = None
        if p_in is not None and p_out is not None:
            value = self.pnl.value(self._fill_value(quote), p_in, p_out)
            prices = f.FillPrices(p_in, p_out, value)
        fact = f.QuoteMoved(
            quote.quote_id, QuoteState.SETTLED, now, reason, intent_hash, tx_hash, prices
        )
        self.record(fact, actions)
        actions.append(RefreshBalances())

    def _won(
        self,
        quote: TrackedQuote,
        now: Micros,
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
        now: Micros,
        actions: list[Action],
        *,
        reason: str | None = None,
        intent_hash: str | None = None,
        tx_hash: str | None = None,
    ) -> None:
        self.record(f.QuoteMoved(quote_id, new, now, reason, intent_hash, tx_hash), actions)

    def _due_polls(self, now: Micros, actions: list[Action]) -> None:
        s = self.settings
        for intent_hash, quote_id in list(self.polling.items()):
            quote = self.book.get(quote_id)
            if quote is None:
                del self.polling[intent_hash]
                continue
            claim = quote.claims[intent_hash]
            if claim.asking or (claim.next_poll_at is not None and claim.next_poll_at > now):
                continue
            claim.asking = True
            claim.next_poll_at = now + span(claim.delay_s)
            claim.delay_s = min(claim.delay_s * 2, s.poll_max_s)
            actions.append(PollIntent(intent_hash))

    def _due_deadlines(self, now: Micros, actions: list[Action]) -> None:
        since = self.connected_since
        grace, open_ = self._grace, QuoteState.OPEN
        lost: list[str] = []
        for quote in self.book.past_deadline(now - grace):
            if (
                not quote.claims
                and quote.nonce_check_at is None
                and quote.state is open_
                and since is not None
                and since <= quote.created_at
            ):
                # Connected throughout its life and nobody named it: no status was missed, so
                # nobody used it. No RPC (most answers are lost: this is the common case, so it
                # is asked first; the checks below pass such a quote through to the same end).
                lost.append(quote.quote_id)
                continue
            if quote.pending_claims() and now < quote.deadline + grace + self._claim_timeout:
                continue  # a claim may still settle it: its polls decide
            if quote.nonce_check_at is not None and now - quote.nonce_check_at < self._nonce_retry:
                continue
            if (
                quote.state is open_
                and not quote.claims
                and since is not None
                and since <= quote.created_at
            ):
                lost.append(quote.quote_id)
                continue
            quote.nonce_check_at = now
            actions.append(CheckNonce(quote.quote_id, quote.nonce))
        for start in range(0, len(lost), LOST_PER_FACT):
            chunk = tuple(lost[start : start + LOST_PER_FACT])
            self.record(f.QuotesLost(chunk, now, "deadline passed, never named"), actions)

    @staticmethod
    def _fill_value(quote: TrackedQuote) -> FillValue:
        return FillValue(
            quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow
        )

    def _apply_opened(self, fact: f.QuoteOpened) -> None:
        self.book.add(
            TrackedQuote(
                fact.quote_id, fact.quote_hash, fact.asset_in, fact.asset_out, fact.amount_in,
                fact.amount_out, fact.fee, fact.deadline, fact.nonce, fact.created_at,
            )
        )  # fmt: skip
        by_out = self._pairs.get(fact.asset_in)  # PairBook.of, inline
        pair = by_out.get(fact.asset_out) if by_out is not None else None
        if pair is not None:
            pair.quotes += 1
        # Live, decide() reserved it already (no reservation is built again: one object less
        # an answer); from the journal, the exposure is restored whatever the balances say
        # (it was signed).
        if fact.quote_id not in self.inventory.reservations:
            outflow = fact.amount_out + fact.fee
            self.inventory.restore(
                [Reservation(fact.quote_id, fact.asset_out, outflow, fact.asset_in,
                             fact.amount_in, fact.deadline)]
            )  # fmt: skip

    def _apply_moved(self, fact: f.QuoteMoved) -> None:
        quote = self.book.get(fact.quote_id)
        if quote is None:
            self.desk.gaps.apply_late_fill(fact)  # a fill found after the quote was closed
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
                self.polling.pop(intent_hash, None)
        if new is QuoteState.SETTLED:
            self.recent_fills.append((quote, fact.fill))
            self.inventory.settle(fact.quote_id, fact.at)
            self.balances.settled(
                quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow,
                fact.at, quote.created_at,
            )  # fmt: skip
            if fact.fill is not None:
                self.pnl.record_fill(self._fill_value(quote), fact.at, fact.fill.realized_usd)
        elif new in (QuoteState.REJECTED, QuoteState.LOST, QuoteState.FAILED):
            self.inventory.release(fact.quote_id)

    def _apply_lost(self, fact: f.QuotesLost) -> None:
        """The quotes leave the book, their rows join the recently lost (no nonce check: a gap
        may ask), their reservations are released and the counts move: each a batch over the
        fact's quotes, one pass each (issue 29)."""
        lost: list[TrackedQuote] = []
        try:
            self.book.lose(fact.quote_ids, fact.at, fact.reason, lost)
        finally:  # an illegal move raises after the quotes before it: they are accounted
            if lost:
                self._lost(lost, fact.at)

    def _lost(self, lost: list[TrackedQuote], at: Micros) -> None:
        self.desk.gaps.recent_lost.add_many(lost, at)
        self.inventory.release_many([quote.quote_id for quote in lost])
        self.stats.outcomes["LOST"] += len(lost)
        # Counted by asset in, then out: no (in, out) tuple built and hashed per quote (~60 ns
        # less a lost quote, issue 29); then each direction's pair counts its share.
        routes: dict[str, dict[str, int]] = {}
        for quote in lost:
            asset_in = quote.asset_in
            outs = routes.get(asset_in)
            if outs is None:
                outs = routes[asset_in] = {}
            asset_out = quote.asset_out
            outs[asset_out] = outs.get(asset_out, 0) + 1
        pairs = self._pairs
        for asset_in, outs in routes.items():
            by_out = pairs.get(asset_in)
            if by_out is None:
                continue
            for asset_out, count in outs.items():
                pair = by_out.get(asset_out)
                if pair is not None:
                    pair.outcomes["LOST"] += count

    def _apply_claim_added(self, fact: f.ClaimAdded) -> None:
        quote = self.book.get(fact.quote_id)
        if quote is None or fact.intent_hash in quote.claims:
            return
        quote.add_claim(
            Claim(
                fact.intent_hash,
                fact.tx_hash,
                fact.at,
                next_poll_at=fact.at + self._poll_initial,
                delay_s=self.settings.poll_initial_s * 2,
            )
        )
        self.polling[fact.intent_hash] = fact.quote_id

    def _apply_claim_ended(self, fact: f.ClaimEnded) -> None:
        quote = self.book.get(fact.quote_id)
        claim = quote.claims.get(fact.intent_hash) if quote is not None else None
        if claim is not None:
            claim.ended, claim.status = True, fact.status
        self.polling.pop(fact.intent_hash, None)
