"""The desk's part for what becomes of an answer once a user names it (DESIGN "Settlement";
:mod:`solver.core.lifecycle` for the transition table).

A ``quote_status`` names a quote with an intent: a claim (a quote may have several; a hash the
book does not hold goes to :class:`~solver.core.desk_gaps.GapDesk`). Each pending claim is
followed with ``get_status``, one question in flight per claim, its polls backing off from
``poll_initial_s`` to ``poll_max_s``: PENDING or TX_BROADCASTED make the quote WON (then
SETTLING), SETTLED settles it, NOT_FOUND ends only that claim. Past the deadline, the nonce
check that :class:`~solver.core.desk_quotes.QuoteLifecycle` asks answers for a status that may
have been missed: a used nonce settles the quote, an unused one loses it (fails it, if won).

Every ``QuoteMoved`` is applied here, whoever decided it, because a move is mostly what it
settles: the book's move and the counts, the claims' polls stopped, and for a fill the
inventory, the expected balances and the PnL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, PollIntent, RefreshBalances
from solver.core.clock import Micros, span
from solver.core.lifecycle import Claim, Quote, QuoteState
from solver.core.pnl import FillValue, usd_value

if TYPE_CHECKING:
    from solver.core.desk import Desk

PENDING, BROADCAST, SETTLED, NOT_FOUND = (
    "PENDING",
    "TX_BROADCASTED",
    "SETTLED",
    "NOT_FOUND_OR_NOT_VALID",
)


_STATES = {state.value: state for state in QuoteState}
"""A fact's state text to its state, and back (issue 29: a dict read, not the enum's call and
its ``value`` property, at every move)."""
_TEXTS = {state: state.value for state in QuoteState}
# The members read once: ``QuoteState.WON`` costs ~200 ns a read on Python 3.11 (the enum's
# class attribute lookup), about ten reads a fill (issue 29).
_OPEN, _WON, _SETTLING, _SETTLED = (
    QuoteState.OPEN, QuoteState.WON, QuoteState.SETTLING, QuoteState.SETTLED,
)  # fmt: skip
_LOST, _FAILED = QuoteState.LOST, QuoteState.FAILED
_RELEASED = frozenset({QuoteState.REJECTED, QuoteState.LOST, QuoteState.FAILED})
"""The states that end a quote without a fill: its reservation is released."""


class Settlement:
    """The desk's part for claims and settlement: decides on statuses, polls and nonce checks;
    applies the moves and the claim facts."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        # The shared state this part reads and changes (the desk never replaces these objects).
        self.settings = desk.settings
        self.book = desk.book
        self.inventory = desk.inventory
        self.state = desk.state
        self.pnl = desk.pnl
        self.balances = desk.balances
        self.stats = desk.stats
        self.pair_book = desk.pair_book
        self.recent_fills = desk.recent_fills
        self.record = desk.record
        self.polling: dict[str, str] = {}
        """intent_hash -> quote_id: the claims still pending."""
        self._poll_initial = span(self.settings.poll_initial_s)

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {
            ev.QuoteStatusSeen: self._quote_status,
            ev.IntentStatusSeen: self._intent_status,
            ev.NonceChecked: self._nonce_checked,
        }

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {
            f.QuoteMoved: self._apply_moved,
            f.ClaimAdded: self._apply_claim_added,
            f.ClaimEnded: self._apply_claim_ended,
        }

    def due(self, now: Micros, actions: list[Action]) -> None:
        """The clock's part: claims to poll."""
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

    # ------------------------------------------------------------------ deciding

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
            if event.status == BROADCAST and quote.state is _WON:
                self._move(
                    quote.quote_id, _SETTLING, now, actions,
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
            new = _LOST if quote.state is _OPEN else _FAILED
            self._move(quote.quote_id, new, now, actions, reason="deadline passed, nonce unused")
        return actions

    def _settle(
        self,
        quote: Quote,
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
        fact = f.QuoteMoved(quote.quote_id, _SETTLED, now, reason, intent_hash, tx_hash, prices)
        self.record(fact, actions)
        actions.append(RefreshBalances())

    def _won(
        self,
        quote: Quote,
        now: Micros,
        actions: list[Action],
        intent_hash: str | None,
        tx_hash: str | None,
        reason: str | None = None,
    ) -> None:
        """A user took the quote: OPEN → WON (once), before any later state."""
        if quote.state is _OPEN:
            self._move(
                quote.quote_id, _WON, now, actions, reason=reason,
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

    @staticmethod
    def _fill_value(quote: Quote) -> FillValue:
        return FillValue(
            quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow
        )

    # ------------------------------------------------------------------ applying

    def _apply_moved(self, fact: f.QuoteMoved) -> None:
        quote = self.book.get(fact.quote_id)
        if quote is None:
            self.desk.gaps.apply_late_fill(fact)  # a fill found after the quote was closed
            return
        new = _STATES.get(fact.new) or QuoteState(fact.new)
        self.book.move(
            fact.quote_id, new, fact.at, reason=fact.reason, intent_hash=fact.intent_hash,
            tx_hash=fact.tx_hash,
        )  # fmt: skip
        text = _TEXTS[new]
        self.stats.outcomes[text] += 1
        pair = self.pair_book.of(quote.asset_in, quote.asset_out)
        if pair is not None:
            pair.outcomes[text] += 1
            if new is _WON:
                pair.won += 1
            elif new is _SETTLED:
                pair.settled += 1
                if fact.fill is not None:
                    pair.realized_usd += fact.fill.realized_usd
                    decimals = self.state.decimals.get(quote.asset_in)
                    if decimals is not None:
                        pair.volume_usd += usd_value(quote.amount_in, decimals, fact.fill.price_in)
        if quote.terminal:
            for intent_hash in quote.claims:
                self.polling.pop(intent_hash, None)
        if new is _SETTLED:
            self.recent_fills.append((quote, fact.fill))
            self.inventory.settle(fact.quote_id, fact.at)
            self.balances.settled(
                quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow,
                fact.at, quote.created_at,
            )  # fmt: skip
            if fact.fill is not None:
                self.pnl.record_fill(self._fill_value(quote), fact.at, fact.fill.realized_usd)
        elif new in _RELEASED:
            self.inventory.release(fact.quote_id)

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
