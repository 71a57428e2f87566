"""The desk's quote book: quotes in, and out past their deadline (DESIGN "The quote path",
"Settlement"; :mod:`solver.core.lifecycle` for the transition table).

The quote path: the request (a bus ``quote``, protocol-notes 6: the
:class:`~solver.core.market.QuoteRequest` itself is the event) →
:class:`~solver.core.quoting.QuotePipeline` decides and reserves → its
:class:`~solver.core.lifecycle.Quote` is the action; the executor signs and hands the signature
to :meth:`QuoteLifecycle.signed` (:attr:`Desk.signed <solver.core.desk.Desk.signed>`), which
opens the quote; its ``QuoteOpened`` fact (:func:`~solver.core.facts.opened_fact`) is journaled
before the answer leaves. Then the relay's reply (a refusal rejects the quote), and past the
deadline the nonce check or, when no status can have been missed, LOST without one: most answers
end so, a batch of them a fact.

What a user's claim makes of a quote (statuses, polls, the nonce check's answer) and the
bookkeeping of every move are :class:`~solver.core.desk_settlement.Settlement`'s: this module
holds the hot request path and the book's expiry, read apart from the rarer settlement.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, CheckNonce, Decision, RefreshSalt, ShadowQuote
from solver.core.clock import Micros, span
from solver.core.inventory import Reservation
from solver.core.lifecycle import Quote, QuoteState
from solver.core.market import QuoteRequest
from solver.core.pauses import GLOBAL, STORE_ERROR
from solver.core.quoting import DUPLICATE_QUOTE_ID, Skip

if TYPE_CHECKING:
    from solver.core.desk import Desk

_NEVER: Micros = 1 << 62
"""Later than any time: the connection's start while there is none, so that one comparison
a due quote tells both "connected" and "since before it was made" (issue 29)."""

_QUOTE_ID = attrgetter("quote_id")
"""A lost quote's id, for :meth:`Inventory.release_many`: mapped, no list of ids built."""

LOST_PER_FACT = 64
"""A ``QuotesLost`` fact names at most this many quotes; a tick that retires more records
several. The query tables apply a fact whole (:mod:`solver.io.store.projection`), ~17 µs a lost
quote: one fact per tick held the running bot's loop up to 4.4 ms at 2,000 answers/s, more
after a burst. 64 make each ~1.1 ms (64 × ~17 µs, computed from the per-quote cost)."""


class QuoteLifecycle:
    """The desk's part for the quote book: decides on requests, relay replies and deadlines;
    applies the opened and lost quotes."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        # The shared state this part reads and changes (the desk never replaces these objects).
        self.settings = desk.settings
        self.book = desk.book
        self.inventory = desk.inventory
        self.pipeline = desk.pipeline
        self.state = desk.state
        self.stats = desk.stats
        self._pairs = desk.pair_book.by_route
        """asset_in -> asset_out -> the pair's counters (:meth:`PairBook.of`, read inline on
        the quote path: one call less a request and an answer, issue 29)."""
        self.record = desk.record
        # Read per request: the book's and the inventory's dicts (never replaced) and the
        # shadow flag (issue 29).
        self._open = desk.book.quotes
        self._reservations = desk.inventory.reservations
        self._shadow = desk.settings.shadow
        self.connected_since: Micros | None = None
        self._grace = span(self.settings.deadline_grace_s)
        self._claim_timeout = span(self.settings.claim_timeout_s)
        self._nonce_retry = span(self.settings.nonce_retry_s)

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {
            QuoteRequest: self._quote_requested,  # the request is its own event (executor)
            ev.QuoteNotSent: self._quote_not_sent,
            ev.RelayReplied: self._relay_replied,
            ev.ConnectionLost: self._connection_lost,
            ev.ConnectionRestored: self._connection_restored,
        }

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {
            f.QuoteOpened: self._apply_opened,
            f.QuotesLost: self._apply_lost,
        }

    # ------------------------------------------------------------------ deciding

    def _quote_requested(self, request: QuoteRequest, now: Micros) -> list[Action]:
        """The request as an event (:meth:`Desk.receive <solver.core.desk.Desk.receive>`):
        its one action, in a list as every handler's."""
        return [self.decide(request, now)]

    def decide(self, request: QuoteRequest, now: Micros) -> Decision:
        """One decision, one action: the quote path's (:attr:`Desk.decide
        <solver.core.desk.Desk.decide>`). The executor hands the request itself and takes the
        action itself: no wrapper and no list per request (issue 29)."""
        stats = self.stats
        stats.requests += 1
        quote_id = request.quote_id
        by_out = self._pairs.get(request.asset_in)  # PairBook.of, inline
        pair = by_out.get(request.asset_out) if by_out is not None else None
        if pair is not None:
            pair.requests += 1
        # The relay's ids are unique: a repeat. Decided and not yet signed (a batch of one
        # read, a remote signer) it holds a reservation and no place in the book yet.
        if quote_id in self._open or quote_id in self._reservations:
            stats.skipped[DUPLICATE_QUOTE_ID] += 1
            return Skip(DUPLICATE_QUOTE_ID, "a quote with this id is still open")
        outcome = self.pipeline.decide(request, now)
        if isinstance(outcome, Skip):
            stats.skipped[outcome.reason] += 1
            return outcome
        if self._shadow:
            self.inventory.release(quote_id)
            stats.shadow_quotes += 1
            if pair is not None:
                pair.quotes += 1
            return ShadowQuote(outcome)
        return outcome  # the action: signed under the salt the decision checked

    def _quote_not_sent(self, event: ev.QuoteNotSent, now: Micros) -> list[Action]:
        actions: list[Action] = []
        if self.book.get(event.quote_id) is not None:
            self._reject(event.quote_id, now, actions, event.reason)
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
            self._reject(event.quote_id, now, actions, reason)
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

    def _reject(self, quote_id: str, now: Micros, actions: list[Action], reason: str) -> None:
        self.record(f.QuoteMoved(quote_id, QuoteState.REJECTED, now, reason), actions)

    def due(self, now: Micros, actions: list[Action]) -> None:
        """The clock's part: quotes past their deadline."""
        since = self.connected_since
        if since is None:  # not connected: no quote was connected throughout its life
            since = _NEVER
        grace, open_ = self._grace, QuoteState.OPEN
        lost: list[str] = []
        book = self.book
        due = book.past_deadline(now - grace)
        for quote in due:
            if (
                not quote.claims
                and quote.nonce_check_at is None
                and quote.state is open_
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
            if quote.state is open_ and not quote.claims and since <= quote.created_at:
                lost.append(quote.quote_id)
                continue
            quote.nonce_check_at = now
            actions.append(CheckNonce(quote.quote_id, quote.nonce))
        for start in range(0, len(lost), LOST_PER_FACT):
            chunk = tuple(lost[start : start + LOST_PER_FACT])
            self.record(f.QuotesLost(chunk, now, "deadline passed, never named"), actions)
        if len(lost) == len(due):  # every one closed LOST (recorded: each left the book)
            book.due_closed()

    # ------------------------------------------------------------------ applying

    def _apply_opened(self, fact: f.QuoteOpened) -> None:
        self.signed(
            Quote(
                fact.quote_id, fact.asset_in, fact.asset_out, fact.amount_in, fact.amount_out,
                fact.fee, fact.deadline, fact.exact_in, fact.partner_id,
            ),
            fact.quote_hash, fact.nonce, fact.created_at,
        )  # fmt: skip

    def signed(self, quote: Quote, quote_hash: str, nonce: bytes, now: Micros) -> None:
        """The answer exists (the executor signed ``quote`` under ``nonce`` at ``now``), or the
        journal replays its ``QuoteOpened`` (:meth:`_apply_opened`): the quote opens. The
        record the decision built is the one the book files, its signature filled in (issue
        29: no copy of ten fields an answer); the quote joins the book, its pair counts it, its
        reservation is restored when none holds. One method for both ways in, so the quote
        path pays one call for it, not two (issue 29). The fact is the executor's to build
        (:func:`~solver.core.facts.opened_fact`), and only for whom reads it: the journal,
        before the answer leaves, and its observers; a replay has neither and builds none."""
        quote.quote_hash, quote.nonce, quote.created_at = quote_hash, nonce, now
        self.book.add(quote)
        by_out = self._pairs.get(quote.asset_in)  # PairBook.of, inline
        pair = by_out.get(quote.asset_out) if by_out is not None else None
        if pair is not None:
            pair.quotes += 1
        # Live, decide() reserved it already (no reservation is built again: one object less
        # an answer); from the journal, the exposure is restored whatever the balances say
        # (it was signed).
        if quote.quote_id not in self._reservations:
            self.inventory.restore(
                [Reservation(quote.quote_id, quote.asset_out, quote.amount_out + quote.fee,
                             quote.asset_in, quote.amount_in, quote.deadline)]
            )  # fmt: skip

    def _apply_lost(self, fact: f.QuotesLost) -> None:
        """The quotes leave the book, their rows join the recently lost (no nonce check: a gap
        may ask), their reservations are released and the counts move: each a batch over the
        fact's quotes, one pass each (issue 29)."""
        lost: list[Quote] = []
        routes: dict[str, dict[str, list[int]]] = {}
        try:
            self.book.lose(fact.quote_ids, fact.at, fact.reason, lost, routes)
        finally:  # an illegal move raises after the quotes before it: they are accounted
            if lost:
                self._lost(lost, routes, fact.at)

    def _lost(self, lost: list[Quote], routes: dict[str, dict[str, list[int]]], at: Micros) -> None:
        """The lost quotes' rows, reservations and counts. Each direction's pair counts its
        share from the book's sums by route (:meth:`QuoteBook.lose`): no (in, out) tuple
        built and hashed, and no pass over the batch, per quote (issue 29)."""
        self.desk.gaps.recent_lost.add_many(lost, at)
        self.inventory.release_many(map(_QUOTE_ID, lost))
        self.stats.outcomes["LOST"] += len(lost)
        pairs = self._pairs
        for asset_in, outs in routes.items():
            by_out = pairs.get(asset_in)
            if by_out is None:
                continue
            for asset_out, sums in outs.items():
                pair = by_out.get(asset_out)
                if pair is not None:
                    pair.outcomes["LOST"] += sums[0]
