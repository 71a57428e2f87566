"""Models ``slots`` and ``slots_str``: the desk's per-quote state in slot arrays (issue 29).

docs/performance.md ("What is left, and why") names one structural lever left for the replay's
cost a request: the desk's data model in slot arrays. These models measure it, doing the work
of :mod:`benchmarks.desk_layout_models.today` in that layout:

- one slot a quote through its life (decision, reservation, book), taken from a free list and
  given back when both the book and the inventory are done with it; a list a field, indexed
  by slot (no ``Quote``, no ``Reservation`` object an answer);
- quote id -> slot only where a lookup by id is needed (the duplicate check, the ids that the
  ``QuotesLost`` fact names): one dict where there were two (book and reservations);
- deadline buckets of slot ints (:mod:`.slot_buckets`): no ``(deadline, id)`` tuple an entry;
- ``slots``: assets interned to small ints (the pair's record would give them: no lookup a
  request) indexing lists of totals; ``slots_str`` (:class:`StrAssetsDesk`): the same with
  assets as names and dicts of totals (filled with every asset up front), to tell the share
  of the interning from the slot arrays'.

Models, not a design: claims, nonce checks and settlement are left out, as in ``today``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import compress
from typing import Any

from benchmarks.desk_layout_models.drive import EndState
from benchmarks.desk_layout_models.slot_buckets import SlotBuckets

_NEVER = 1 << 62
OPEN, LOST = "OPEN", "LOST"  # the states as module constants (an enum's members read once)
LOST_REASON = "deadline passed, never named"

Asset = Any
"""An asset: a small int in ``slots``, a name in ``slots_str``."""
Totals = Any
"""Per-asset totals indexed by :data:`Asset`: a ``list[int]`` or a ``dict[str, int]``."""

_FIELDS: tuple[tuple[str, object], ...] = (
    ("quote_id", None),
    ("asset_in", 0),
    ("asset_out", 0),
    ("amount_in", 0),
    ("amount_out", 0),
    ("fee", 0),
    ("deadline", 0),
    ("exact_in", True),
    ("partner_id", None),
    ("salt", b""),
    ("quote_hash", ""),
    ("nonce", b""),
    ("created_at", 0),
    ("state", None),
    ("updated_at", None),
    ("reason", None),
    ("claims", None),
    ("nonce_check_at", None),
    ("held", False),
    ("in_book", False),
)
"""The per-slot lists and what an unused slot holds."""


class Desk:
    """The per-quote state work in slot arrays, assets as small ints (model ``slots``)."""

    def __init__(
        self,
        assets: Sequence[str],
        confirmed: Sequence[int],
        usd: Sequence[float],
        unit: Sequence[float],
        capacity: int = 64,
    ) -> None:
        n = capacity  # slot 0 is never used: a slot is never false
        self.quote_id: list[Any] = [None] * n
        self.asset_in: list[Asset] = [0] * n
        self.asset_out: list[Asset] = [0] * n
        self.amount_in = [0] * n
        self.amount_out = [0] * n
        self.fee = [0] * n
        self.deadline = [0] * n
        self.exact_in = [True] * n
        self.partner_id: list[str | None] = [None] * n
        self.salt = [b""] * n
        self.quote_hash = [""] * n
        self.nonce = [b""] * n
        self.created_at = [0] * n
        self.state: list[str | None] = [None] * n
        self.updated_at: list[int | None] = [None] * n
        self.reason: list[str | None] = [None] * n
        self.claims: list[dict[str, object] | None] = [None] * n
        self.nonce_check_at: list[int | None] = [None] * n
        self.held = [False] * n  # the inventory's reservation of the slot
        self.in_book = [False] * n
        self.free_slots = list(range(n - 1, 0, -1))
        self.slots: dict[str, int] = {}  # quote id -> slot, while the slot is taken
        self.by_hash: dict[str, int] = {}
        self.names: Any = list(assets)  # an asset's name, by what the arrays hold
        self.marks = list(zip(usd, unit, strict=True))  # the same float terms as today's
        self._totals(assets, confirmed)
        self.book_deadlines = SlotBuckets(self.deadline)
        self.inv_deadlines = SlotBuckets(self.deadline)
        self._due: list[int] = []
        self.rows: dict[str, tuple[object, ...]] = {}
        self.lost_count = 0
        self.grace = 2_000_000
        self.connected_since: int | None = 0
        self.max_exposure = 1e18

    def _totals(self, assets: Sequence[str], confirmed: Sequence[int]) -> None:
        """The per-asset totals as lists indexed by the interned asset; ``held_totals`` is what
        the exposure walks (the reserved amounts in the marks' order)."""
        n = len(assets)
        self.confirmed: Totals = list(confirmed)
        self.floors: Totals = [0] * n
        self.reserved: Totals = [0] * n
        self.held_totals: Any = self.reserved
        self.open_outflow: Totals = [0] * n
        self.open_inflow: Totals = [0] * n
        self.pairs: Any = [[[0, 0, 0] for _ in range(n)] for _ in range(n)]  # req, quotes, lost

    def _grow(self) -> None:
        n = len(self.quote_id)
        for name, fill in _FIELDS:
            getattr(self, name).extend([fill] * n)  # in place: the buckets hold ``deadline``
        self.free_slots.extend(range(2 * n - 1, n - 1, -1))

    def decide(
        self,
        quote_id: str,
        asset_in: Asset,
        asset_out: Asset,
        amount_in: int,
        amount_out: int,
        fee: int,
        lead: int,
        now: int,
        salt: bytes,
    ) -> int:
        """As ``today``'s; the quote's slot, or 0. The reservation and the record are one."""
        counts = self.pairs[asset_in][asset_out]
        counts[0] += 1
        if quote_id in self.slots:  # the book's or a reservation's: one dict
            return 0
        outflow = amount_out + fee
        reserved = self.reserved
        exposure = 0.0
        for held, mark in zip(self.held_totals, self.marks, strict=True):
            if held:
                exposure += held * mark[0] / mark[1]
        if exposure > self.max_exposure:
            return 0
        free = self.confirmed[asset_out] - reserved[asset_out] - self.floors[asset_out]
        free = free if free > 0 else 0
        if outflow > free:
            return 0
        free_slots = self.free_slots
        if not free_slots:
            self._grow()
        slot = free_slots.pop()
        self.slots[quote_id] = slot
        deadline = now + lead
        self.quote_id[slot] = quote_id
        self.asset_in[slot] = asset_in
        self.asset_out[slot] = asset_out
        self.amount_in[slot] = amount_in
        self.amount_out[slot] = amount_out
        self.fee[slot] = fee
        self.deadline[slot] = deadline
        self.exact_in[slot] = True
        self.partner_id[slot] = None
        self.salt[slot] = salt
        self.held[slot] = True
        reserved[asset_out] += outflow
        self.inv_deadlines.file(deadline, slot)
        return slot

    def answer(self, slot: int) -> tuple[tuple[object, ...], tuple[object, ...]]:
        """What the executor's signing (asset names) and the relay read."""
        names = self.names
        signing = (
            self.deadline[slot],
            self.salt[slot],
            names[self.asset_in[slot]],
            self.amount_in[slot],
            names[self.asset_out[slot]],
            self.amount_out[slot],
            self.quote_id[slot],
            self.exact_in[slot],
        )
        return signing, (
            self.amount_in[slot],
            self.asset_in[slot],
            self.amount_out[slot],
            self.asset_out[slot],
            self.quote_id[slot],
        )

    def signed(self, slot: int, quote_hash: str, nonce: bytes, now: int) -> None:
        """The signature's fields and the book's ``add``: the slot enters the book."""
        self.quote_hash[slot], self.nonce[slot], self.created_at[slot] = quote_hash, nonce, now
        if self.in_book[slot]:
            raise ValueError(slot)
        self.in_book[slot] = True
        self.state[slot] = OPEN
        self.updated_at[slot] = self.reason[slot] = self.nonce_check_at[slot] = None
        self.claims[slot] = None
        self.by_hash[quote_hash] = slot
        asset_in, asset_out = self.asset_in[slot], self.asset_out[slot]
        self.open_outflow[asset_out] += self.amount_out[slot] + self.fee[slot]
        self.open_inflow[asset_in] += self.amount_in[slot]
        self.book_deadlines.file(self.deadline[slot], slot)
        self.pairs[asset_in][asset_out][1] += 1
        if not self.held[slot]:
            raise AssertionError(slot)

    def tick(self, now: int) -> None:
        self.release_expired(now)
        self.due(now)

    def release_expired(self, at: int) -> None:
        """The snapshot's release: a slot neither held nor in the book is given back."""
        held, deadline, asset_out = self.held, self.deadline, self.asset_out
        amount_out, fee, in_book = self.amount_out, self.fee, self.in_book
        reserved = self.reserved
        for slot in self.inv_deadlines.take_before(at):
            if held[slot] and deadline[slot] < at:
                held[slot] = False
                reserved[asset_out[slot]] -= amount_out[slot] + fee[slot]
                if not in_book[slot]:
                    del self.slots[self.quote_id[slot]]
                    self.free_slots.append(slot)

    def past_deadline(self, before: int) -> list[int]:
        """The book's slots due before ``before``, oldest deadline first (as
        ``QuoteBook.past_deadline``): stale and repeated slots dropped in C."""
        key = self.deadline.__getitem__
        taken = self.book_deadlines.take_before(before)
        due = list(dict.fromkeys(compress(taken, map(self.in_book.__getitem__, taken))))
        if self._due:
            due += [slot for slot in self._due if self.in_book[slot]]
        due.sort(key=key)
        cut = bisect_left(due, before, key=key)
        self._due = due[cut:]  # not due yet (or stale): kept for the next call
        return due[:cut] if cut < len(due) else due

    def due(self, now: int) -> None:
        since = self.connected_since
        if since is None:
            since = _NEVER
        lost: list[str] = []
        claims, ncheck, state, created, quote_id = (
            self.claims,
            self.nonce_check_at,
            self.state,
            self.created_at,
            self.quote_id,
        )
        for slot in self.past_deadline(now - self.grace):
            if (
                not claims[slot]
                and ncheck[slot] is None
                and state[slot] is OPEN
                and since <= created[slot]
            ):
                lost.append(quote_id[slot])
                continue
            raise AssertionError(slot)  # the model's quotes are never claimed
        for start in range(0, len(lost), 64):
            self.apply_lost(tuple(lost[start : start + 64]), now, LOST_REASON)

    def apply_lost(self, quote_ids: tuple[str, ...], at: int, reason: str) -> None:
        """``QuotesLost``: each id's slot leaves the book, its row is kept, its reservation
        (mostly released at the snapshot already) goes with it, and the slot is given back."""
        slots, get = self.slots, self.slots.get
        state, in_book, held, updated, reasons = (
            self.state,
            self.in_book,
            self.held,
            self.updated_at,
            self.reason,
        )
        asset_in, asset_out, amount_in, amount_out, fee = (
            self.asset_in,
            self.asset_out,
            self.amount_in,
            self.amount_out,
            self.fee,
        )
        quote_hash, deadline, nonce, created = (
            self.quote_hash,
            self.deadline,
            self.nonce,
            self.created_at,
        )
        open_outflow, open_inflow, reserved = self.open_outflow, self.open_inflow, self.reserved
        names, pairs, pop_hash = self.names, self.pairs, self.by_hash.pop
        rows, free_slots = self.rows, self.free_slots
        count = 0
        for qid in quote_ids:
            slot = get(qid)
            if slot is None or not in_book[slot]:
                continue
            if state[slot] is not OPEN:
                raise ValueError(qid)
            state[slot] = LOST
            updated[slot] = at
            if reason:
                reasons[slot] = reason
            in_book[slot] = False
            pop_hash(quote_hash[slot], None)
            a_in, a_out, amt_in, amt_out, f = (
                asset_in[slot],
                asset_out[slot],
                amount_in[slot],
                amount_out[slot],
                fee[slot],
            )
            open_outflow[a_out] -= amt_out + f
            open_inflow[a_in] -= amt_in
            pairs[a_in][a_out][2] += 1
            rows[qid] = (
                qid,
                quote_hash[slot],
                names[a_in],
                names[a_out],
                amt_in,
                amt_out,
                f,
                deadline[slot],
                nonce[slot],
                created[slot],
                at,
                reasons[slot],
                at,
            )
            if held[slot]:  # release_many
                held[slot] = False
                reserved[a_out] -= amt_out + f
            del slots[qid]
            free_slots.append(slot)
            count += 1
        self.lost_count += count

    def _by_name(self, totals: Totals) -> dict[str, int]:
        names = self.names
        items = totals.items() if isinstance(totals, dict) else enumerate(totals)
        return {names[a]: n for a, n in items if n}

    def end_state(self) -> EndState:
        """What every layout must end with (:class:`EndState`), in asset names."""
        names, pairs = self.names, self.pairs
        counts = (
            ((a, b), pairs[a][b])
            for a in (pairs if isinstance(pairs, dict) else range(len(pairs)))
            for b in (pairs[a] if isinstance(pairs[a], dict) else range(len(pairs[a])))
        )
        open_ = [self.quote_id[s] for s, inside in enumerate(self.in_book) if inside]
        held = [self.quote_id[s] for s, inside in enumerate(self.held) if inside]
        return EndState(
            open=sorted(open_),
            held=sorted(held),
            reserved=self._by_name(self.reserved),
            open_outflow=self._by_name(self.open_outflow),
            open_inflow=self._by_name(self.open_inflow),
            pairs={(names[a], names[b]): tuple(c) for (a, b), c in counts if any(c)},
            lost=self.lost_count,
            rows=list(self.rows.values()),
        )


class StrAssetsDesk(Desk):
    """Model ``slots_str``: the slot arrays with assets as names; the per-asset totals in dicts
    filled with every asset up front (no ``get`` with a default a request)."""

    def _totals(self, assets: Sequence[str], confirmed: Sequence[int]) -> None:
        self.names = {a: a for a in assets}
        self.confirmed = dict(zip(assets, confirmed, strict=True))
        self.floors = dict.fromkeys(assets, 0)
        self.reserved = dict.fromkeys(assets, 0)
        self.held_totals = self.reserved.values()  # a live view, in the marks' order
        self.open_outflow = dict.fromkeys(assets, 0)
        self.open_inflow = dict.fromkeys(assets, 0)
        self.pairs = {a: {b: [0, 0, 0] for b in assets} for a in assets}
