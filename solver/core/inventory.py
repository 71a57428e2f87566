"""Inventory: confirmed balances, reservations of open quotes, floors (DESIGN "Inventory and risk").

``free = confirmed − reserved − floor``. A signed quote reserves its outflow (amount_out plus
the protocol fee on it) until it settles, is known lost, or its deadline has passed *and* a
balance snapshot taken after that deadline has arrived. That last rule closes the race where a
quote executed before its deadline without us hearing of it: releasing on the deadline alone
would free funds the chain has already paid out until the next balance refresh. Pure: no I/O,
no clock reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from solver.core.clock import SECOND, Micros
from solver.core.deadlines import DeadlineBuckets
from solver.protocol.values import value


@value
class Reservation:
    """The outflow a signed quote may cause, and the inflow it would bring."""

    quote_id: str
    asset_out: str
    amount_out: int  # includes the protocol fee the solver pays on it
    asset_in: str
    amount_in: int
    deadline: Micros


class Inventory:
    def __init__(self, floors: Mapping[str, int] | None = None) -> None:
        self.floors: dict[str, int] = dict(floors or {})
        self.confirmed: dict[str, int] = {}
        self.confirmed_at: Micros | None = None
        self.reserved: dict[str, int] = {}
        self.reservations: dict[str, Reservation] = {}
        # (deadline, quote_id) of reservations: releasing the expired ones costs what is due,
        # not a walk of every open reservation at every snapshot.
        self._deadlines = DeadlineBuckets()
        # Settlements heard of (at the Micros) that no snapshot is known to include yet.
        self.unconfirmed_settlements: dict[str, tuple[Reservation, Micros]] = {}

    # ------------------------------------------------------------------ balances

    def set_confirmed(self, balances: Mapping[str, int], observed_at: Micros) -> int:
        """Take a fresh on-chain snapshot; release reservations whose deadline passed before it
        (how many: :meth:`release_expired`).

        ``observed_at`` must be a time *before* the balance request was sent, so the snapshot
        includes every execution up to then. Snapshots can arrive out of order (a scheduled
        refresh and a triggered one in flight together): one older than the current snapshot
        is ignored. A snapshot requested before we heard of a settlement may predate its
        execution, so that settlement's outflow is debited from it again (if it did include the
        execution, free inventory is only understated until the next snapshot).
        """
        if self.confirmed_at is not None and observed_at < self.confirmed_at:
            return 0
        self.confirmed.update(balances)
        self.confirmed_at = observed_at
        pending = self.unconfirmed_settlements
        for quote_id, (reservation, seen_at) in list(pending.items()) if pending else ():
            if seen_at <= observed_at:
                del pending[quote_id]  # this snapshot includes it
            elif reservation.asset_out in balances:
                out = reservation.asset_out
                self.confirmed[out] = self.confirmed[out] - reservation.amount_out
        return self.release_expired(observed_at)

    def balance_age_s(self, now: Micros) -> float | None:
        return None if self.confirmed_at is None else (now - self.confirmed_at) / SECOND

    def free(self, asset: str) -> int:
        value = (
            self.confirmed.get(asset, 0) - self.reserved.get(asset, 0) - self.floors.get(asset, 0)
        )
        return value if value > 0 else 0

    # ------------------------------------------------------------------ reservations

    def reserve(self, reservation: Reservation) -> bool:
        """Reserve the outflow if free inventory covers it; False (nothing changed) otherwise."""
        return self.reserve_within(reservation, self.free(reservation.asset_out))

    def reserve_within(self, reservation: Reservation, free: int) -> bool:
        """:meth:`reserve` for a caller that has just read ``free(reservation.asset_out)`` (the
        quote pipeline checks it first, for its own skip reason): the same checks without
        reading it again."""
        quote_id = reservation.quote_id
        reservations = self.reservations
        if quote_id in reservations:
            return False
        amount = reservation.amount_out
        if amount > free:
            return False
        reservations[quote_id] = reservation
        reserved = self.reserved
        asset = reservation.asset_out
        reserved[asset] = reserved.get(asset, 0) + amount
        self._deadlines.file(reservation.deadline, quote_id)
        return True

    def release(self, quote_id: str) -> Reservation | None:
        """Drop a reservation (rejected or lost quote); the balances are unchanged."""
        reservation = self.reservations.pop(quote_id, None)
        if reservation is not None:
            left = self.reserved.get(reservation.asset_out, 0) - reservation.amount_out
            if left > 0:
                self.reserved[reservation.asset_out] = left
            else:
                self.reserved.pop(reservation.asset_out, None)
        return reservation

    def settle(self, quote_id: str, seen_at: Micros | None = None) -> Reservation | None:
        """The quote executed: debit the outflow from the confirmed balance and release.

        The inflow is *not* credited: the last snapshot may already include this execution
        (it can land on chain before we hear of it), and crediting it again would overstate
        what we can pay. Debiting twice only understates it. The next snapshot sets both right.

        ``seen_at`` is when we heard of the execution: until a snapshot requested at or after
        it arrives, the debit is re-applied to older snapshots that land late (see
        :meth:`set_confirmed`); without it such a snapshot would undo the debit.
        """
        reservation = self.release(quote_id)
        if reservation is not None:
            out = reservation.asset_out
            self.confirmed[out] = self.confirmed.get(out, 0) - reservation.amount_out
            if seen_at is not None:
                self.unconfirmed_settlements[quote_id] = (reservation, seen_at)
        return reservation

    def release_many(self, quote_ids: Iterable[str]) -> None:
        """:meth:`release` of each id (a ``QuotesLost`` fact), the reserved totals changed once
        per asset (issue 29)."""
        pop = self.reservations.pop
        freed: dict[str, int] = {}
        for quote_id in quote_ids:
            reservation = pop(quote_id, None)
            if reservation is not None:
                out = reservation.asset_out
                freed[out] = freed.get(out, 0) + reservation.amount_out
        if freed:
            self._unreserve(freed)

    def _unreserve(self, freed: Mapping[str, int]) -> None:
        """Take released amounts off the reserved totals. A total that reaches 0 or less is
        dropped, as :meth:`release` drops it one at a time: totals only fall here, so one that
        is dropped part way would stay dropped."""
        reserved = self.reserved
        for asset, amount in freed.items():
            left = reserved.get(asset, 0) - amount
            if left > 0:
                reserved[asset] = left
            else:
                reserved.pop(asset, None)

    def release_expired(self, snapshot_at: Micros) -> int:
        """Release the reservations whose deadline is before ``snapshot_at``; how many. The
        reserved totals change once per asset (a snapshot releases tens at a time), and no list
        of what was released is built: nothing reads it (issue 29: an append per quote, nearly
        every one released here in the replay, whose balances come at every tick).

        An entry due names its reservation only if that is still held with the entry's
        deadline: one released already (its quote lost or settled; the second entry of an id
        filed twice) or of a reused id is passed over. What is released does not depend on the
        order the entries are seen in, so they are neither sorted nor split twice: one pass
        over them as taken, a lookup each (issue 29: a pass to keep the live ones, their sort
        and a pass to release them cost ~1.5 % of the replay, where nearly all are live)."""
        reservations = self.reservations
        held = len(reservations)
        get = reservations.get
        freed: dict[str, int] = {}
        for deadline, quote_id in self._deadlines.take_before(snapshot_at, ordered=False):
            reservation = get(quote_id)
            if reservation is not None and reservation.deadline == deadline:
                del reservations[quote_id]
                out = reservation.asset_out
                freed[out] = freed.get(out, 0) + reservation.amount_out
        if freed:
            self._unreserve(freed)
        return held - len(reservations)

    def restore(self, reservations: Iterable[Reservation]) -> None:
        """Rebuild reservations after a restart, without checking free inventory: they were
        signed already, so the exposure exists whatever the balances say now."""
        for reservation in reservations:
            if reservation.quote_id not in self.reservations:
                self.reservations[reservation.quote_id] = reservation
                asset = reservation.asset_out
                self.reserved[asset] = self.reserved.get(asset, 0) + reservation.amount_out
                self._deadlines.file(reservation.deadline, reservation.quote_id)

    def open_outflow(self) -> dict[str, int]:
        return dict(self.reserved)
