"""The quote lifecycle as a pure state machine (DESIGN "Settlement"; spec 3.2).

::

    OPEN ──quote_status──▶ WON ──get_status TX_BROADCASTED──▶ SETTLING ──SETTLED──▶ SETTLED
      │                     │                                    └──NOT_FOUND_OR_NOT_VALID──▶ FAILED
      │                     └──NOT_FOUND_OR_NOT_VALID after broadcast / deadline──▶ FAILED
      ├──relay refused the answer──▶ REJECTED
      ├──deadline passed, nonce unused──▶ LOST
      └──deadline passed, nonce used (status missed while disconnected)──▶ WON ──▶ …

Every quote ends in exactly one terminal state: SETTLED, FAILED, LOST or REJECTED. Each
transition is returned as a :class:`Transition` so the caller can persist it; an illegal move
raises, because it means the bookkeeping is wrong, and that must never pass silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class QuoteState(StrEnum):
    OPEN = "OPEN"
    WON = "WON"
    SETTLING = "SETTLING"
    SETTLED = "SETTLED"
    FAILED = "FAILED"
    LOST = "LOST"
    REJECTED = "REJECTED"


TERMINAL = frozenset({QuoteState.SETTLED, QuoteState.FAILED, QuoteState.LOST, QuoteState.REJECTED})
ALLOWED: dict[QuoteState, frozenset[QuoteState]] = {
    QuoteState.OPEN: frozenset({QuoteState.WON, QuoteState.REJECTED, QuoteState.LOST}),
    QuoteState.WON: frozenset({QuoteState.SETTLING, QuoteState.SETTLED, QuoteState.FAILED}),
    QuoteState.SETTLING: frozenset({QuoteState.SETTLED, QuoteState.FAILED}),
}


class IllegalTransition(Exception):
    pass


@dataclass
class TrackedQuote:
    quote_id: str
    quote_hash: str
    asset_in: str
    asset_out: str
    amount_in: int
    amount_out: int
    fee: int
    deadline: datetime
    nonce: bytes
    created_at: datetime
    state: QuoteState = QuoteState.OPEN
    updated_at: datetime | None = None
    intent_hash: str | None = None
    tx_hash: str | None = None
    reason: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass(frozen=True, slots=True)
class Transition:
    quote_id: str
    quote_hash: str
    old: QuoteState
    new: QuoteState
    at: datetime
    reason: str | None = None
    intent_hash: str | None = None
    tx_hash: str | None = None


@dataclass
class QuoteBook:
    """Open quotes by id and by hash; terminal quotes leave the book (the store keeps them)."""

    quotes: dict[str, TrackedQuote] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)
    terminal_counts: dict[QuoteState, int] = field(default_factory=dict)
    # What the open quotes could still move, per asset, kept as quotes enter and leave: the
    # reconciliation needs these totals at every snapshot, without walking the whole book.
    open_outflow: dict[str, int] = field(default_factory=dict)
    open_inflow: dict[str, int] = field(default_factory=dict)

    def _account(self, quote: TrackedQuote, sign: int) -> None:
        out, into = quote.asset_out, quote.asset_in
        self.open_outflow[out] = self.open_outflow.get(out, 0) + sign * (
            quote.amount_out + quote.fee
        )
        self.open_inflow[into] = self.open_inflow.get(into, 0) + sign * quote.amount_in
        if not self.open_outflow[out]:
            del self.open_outflow[out]
        if not self.open_inflow[into]:
            del self.open_inflow[into]

    def add(self, quote: TrackedQuote) -> None:
        if quote.quote_id in self.quotes:
            raise IllegalTransition(f"quote {quote.quote_id} is already tracked")
        self.quotes[quote.quote_id] = quote
        self.by_hash[quote.quote_hash] = quote.quote_id
        self._account(quote, +1)

    def get(self, quote_id: str) -> TrackedQuote | None:
        return self.quotes.get(quote_id)

    def find_hash(self, quote_hash: str) -> TrackedQuote | None:
        quote_id = self.by_hash.get(quote_hash)
        return self.quotes.get(quote_id) if quote_id else None

    def move(
        self,
        quote_id: str,
        new: QuoteState,
        at: datetime,
        *,
        reason: str | None = None,
        intent_hash: str | None = None,
        tx_hash: str | None = None,
    ) -> Transition:
        quote = self.quotes.get(quote_id)
        if quote is None:
            raise IllegalTransition(f"unknown quote {quote_id}")
        if new not in ALLOWED.get(quote.state, frozenset()):
            raise IllegalTransition(f"{quote_id}: {quote.state} -> {new} is not allowed")
        old = quote.state
        quote.state, quote.updated_at = new, at
        quote.reason = reason or quote.reason
        quote.intent_hash = intent_hash or quote.intent_hash
        quote.tx_hash = tx_hash or quote.tx_hash
        if new in TERMINAL:
            del self.quotes[quote_id]
            self.by_hash.pop(quote.quote_hash, None)
            self._account(quote, -1)
            self.terminal_counts[new] = self.terminal_counts.get(new, 0) + 1
        return Transition(
            quote_id, quote.quote_hash, old, new, at, reason, quote.intent_hash, quote.tx_hash
        )

    def open_quotes(self) -> Iterator[TrackedQuote]:
        return iter(list(self.quotes.values()))

    def past_deadline(self, now: datetime) -> list[TrackedQuote]:
        """OPEN quotes whose deadline passed: to check with ``is_nonce_used``."""
        return [q for q in self.quotes.values() if q.state is QuoteState.OPEN and q.deadline < now]
