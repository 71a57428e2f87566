"""Model ``today``: the desk's per-quote state work in today's shapes (issue 29).

The book, the inventory, the quote record, the reservation and the deadline buckets are the
real ones (:mod:`solver.core.lifecycle`, :mod:`solver.core.inventory`,
:mod:`solver.core.deadlines`), so this model follows the code as it is. Only the glue around
them is written here: the state part of what a quote does on the replay's path
(``QuoteLifecycle.decide``'s pair count and duplicate check, ``QuotePipeline.decide``'s
exposure, free balance and reservation, the fields the executor's signing and the relay read,
``QuoteLifecycle.signed``) and what a tick does (the snapshot's ``release_expired``, then the
lifecycle's ``due`` -> ``QuoteBook.lose`` -> the recent-lost rows -> ``release_many``).
Signing, the relay, the strategies and the journal are left out: the same in every layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from benchmarks.desk_layout_models.drive import EndState
from solver.core.inventory import Inventory, Reservation
from solver.core.lifecycle import Quote, QuoteBook, QuoteState

_QUOTE_ID = attrgetter("quote_id")
_NEVER = 1 << 62
LOST_REASON = "deadline passed, never named"

Row = tuple[object, ...]


class Pair:
    """A pair's counters, as the desk's per-pair record keeps them."""

    __slots__ = ("outcomes", "quotes", "requests")

    def __init__(self) -> None:
        self.requests = self.quotes = 0
        self.outcomes = {"LOST": 0}


class Desk:
    """The per-quote state work in today's shapes: a ``Quote`` and a ``Reservation`` an answer,
    dicts by quote id and by asset name, ``(deadline, id)`` entries in two deadline indexes."""

    def __init__(
        self,
        assets: Sequence[str],
        confirmed: Sequence[int],
        usd: Sequence[float],
        unit: Sequence[float],
    ) -> None:
        self.inventory = Inventory()
        self.inventory.set_confirmed(dict(zip(assets, confirmed, strict=True)), 0)
        self.book = QuoteBook()
        self._open = self.book.quotes
        self._reservations = self.inventory.reservations
        self._marks = {a: (u, n) for a, u, n in zip(assets, usd, unit, strict=True)}
        self._pairs = {a: {b: Pair() for b in assets if b != a} for a in assets}
        self.rows: dict[str, Row] = {}
        self.outcomes = {"LOST": 0}
        self.grace = 2_000_000
        self.connected_since: int | None = 0
        self.max_exposure = 1e18

    def decide(
        self,
        quote_id: str,
        asset_in: str,
        asset_out: str,
        amount_in: int,
        amount_out: int,
        fee: int,
        lead: int,
        now: int,
        salt: bytes,
    ) -> Quote | None:
        """The decision's state part: the pair's count, the duplicate check, the exposure, the
        free balance and the reservation; the quote record, or None."""
        by_out = self._pairs.get(asset_in)
        pair = by_out.get(asset_out) if by_out is not None else None
        if pair is not None:
            pair.requests += 1
        if quote_id in self._open or quote_id in self._reservations:
            return None
        inventory = self.inventory
        outflow = amount_out + fee
        reserved = inventory.reserved
        marks = self._marks
        exposure = 0.0
        for asset, held in reserved.items():
            mark = marks.get(asset)
            if mark is not None:
                exposure += held * mark[0] / mark[1]
        if exposure > self.max_exposure:
            return None
        free = (
            inventory.confirmed.get(asset_out, 0)
            - reserved.get(asset_out, 0)
            - inventory.floors.get(asset_out, 0)
        )
        free = free if free > 0 else 0
        if outflow > free:
            return None
        deadline = now + lead
        if not inventory.reserve_within(
            Reservation(quote_id, asset_out, outflow, asset_in, amount_in, deadline), free
        ):
            return None
        return Quote(
            quote_id, asset_in, asset_out, amount_in, amount_out, fee, deadline, True, None, salt
        )

    def answer(self, quote: Quote) -> tuple[tuple[object, ...], tuple[object, ...]]:
        """What the executor's signing and the relay (send_answer, resolve_due) read."""
        signing = (
            quote.deadline,
            quote.salt,
            quote.asset_in,
            quote.amount_in,
            quote.asset_out,
            quote.amount_out,
            quote.quote_id,
            quote.exact_in,
        )
        return signing, (
            quote.amount_in,
            quote.asset_in,
            quote.amount_out,
            quote.asset_out,
            quote.quote_id,
        )

    def signed(self, quote: Quote, quote_hash: str, nonce: bytes, now: int) -> None:
        """The signature's fields, the book's ``add`` and the pair's count."""
        quote.quote_hash, quote.nonce, quote.created_at = quote_hash, nonce, now
        self.book.add(quote)
        by_out = self._pairs.get(quote.asset_in)
        pair = by_out.get(quote.asset_out) if by_out is not None else None
        if pair is not None:
            pair.quotes += 1
        if quote.quote_id not in self._reservations:
            raise AssertionError(quote.quote_id)

    def tick(self, now: int) -> None:
        """A snapshot's release of expired reservations, then the lifecycle's tick."""
        self.inventory.release_expired(now)
        self.due(now)

    def due(self, now: int) -> None:
        since = self.connected_since
        if since is None:
            since = _NEVER
        open_ = QuoteState.OPEN
        lost: list[str] = []
        book = self.book
        due = book.past_deadline(now - self.grace)
        for quote in due:
            if (
                not quote.claims
                and quote.nonce_check_at is None
                and quote.state is open_
                and since <= quote.created_at
            ):
                lost.append(quote.quote_id)
                continue
            raise AssertionError(quote.quote_id)  # the model's quotes are never claimed
        for start in range(0, len(lost), 64):
            self.apply_lost(tuple(lost[start : start + 64]), now, LOST_REASON)
        if len(lost) == len(due):
            book.due_closed()

    def apply_lost(self, quote_ids: tuple[str, ...], at: int, reason: str) -> None:
        lost: list[Quote] = []
        routes: dict[str, dict[str, list[int]]] = {}
        try:
            self.book.lose(quote_ids, at, reason, lost, routes)
        finally:
            if lost:
                self._lost(lost, routes, at)

    def _lost(self, lost: list[Quote], routes: dict[str, dict[str, list[int]]], at: int) -> None:
        """The recent-lost rows, the reservations' release and the outcome counts."""
        rows = self.rows
        added = {
            q.quote_id: (
                q.quote_id,
                q.quote_hash,
                q.asset_in,
                q.asset_out,
                q.amount_in,
                q.amount_out,
                q.fee,
                q.deadline,
                q.nonce,
                q.created_at,
                q.updated_at,
                q.reason,
                at,
            )
            for q in lost
        }
        rows.update(added)
        self.inventory.release_many(map(_QUOTE_ID, lost))
        self.outcomes["LOST"] += len(lost)
        pairs = self._pairs
        for asset_in, outs in routes.items():
            by_out = pairs.get(asset_in)
            if by_out is None:
                continue
            for asset_out, sums in outs.items():
                pair = by_out.get(asset_out)
                if pair is not None:
                    pair.outcomes["LOST"] += sums[0]

    def end_state(self) -> EndState:
        """What every layout must end with (:class:`EndState`)."""
        pairs = {
            (a, b): (p.requests, p.quotes, p.outcomes["LOST"])
            for a, by_out in self._pairs.items()
            for b, p in by_out.items()
            if p.requests or p.quotes or p.outcomes["LOST"]
        }
        book = self.book
        return EndState(
            open=sorted(self._open),
            held=sorted(self._reservations),
            reserved={a: n for a, n in self.inventory.reserved.items() if n},
            open_outflow={a: n for a, n in book.open_outflow.items() if n},
            open_inflow={a: n for a, n in book.open_inflow.items() if n},
            pairs=pairs,
            lost=self.outcomes["LOST"],
            rows=list(self.rows.values()),
        )
