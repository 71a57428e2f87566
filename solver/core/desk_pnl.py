"""The desk's PnL: marked to market on the clock, recorded at most once a second (the kill
switch's references survive a restart), and markouts of fills as their horizons come due
(DESIGN "Settlement"; :mod:`solver.core.pnl` for the accounting)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from solver.core import facts as f
from solver.core.actions import Action
from solver.core.clock import SECOND, Micros

if TYPE_CHECKING:
    from solver.core.desk import Desk


class PnlMarks:
    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self.pnl = desk.pnl
        self.recorded_at: Micros | None = None
        self.recorded_day: str | None = None

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {}

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {f.PnlMarked: self._apply_pnl, f.Markout: self._apply_markout}

    def mark(self, now: Micros, actions: list[Action]) -> bool:
        """Mark PnL to market now, unless value is in transit; False when it was not marked.

        Value in transit would mark a loss or gain that is not one: an own move half seen, or a
        settlement whose outflow the inventory has debited (on purpose, to never overstate what
        can be paid) while its inflow waits for the next snapshot. A rebalance's deposit of
        5,000 wNEAR marked -15,000 USD and tripped the kill switch."""
        desk = self.desk
        if desk.balances.own_settling or desk.inventory.unconfirmed_settlements:
            return False
        pnl = self.pnl
        changed = pnl.mark(now, desk.inventory.confirmed, desk.price)
        last = self.recorded_at
        if changed and (
            last is None
            or pnl.day != self.recorded_day
            or now - last >= desk.settings.pnl_record_every_s * SECOND
        ):
            self.record(now, actions)
        return True

    def record(self, now: Micros, actions: list[Action]) -> None:
        """Record the kill switch's references (starting equity, peak, day start)."""
        pnl = self.pnl
        if pnl.start_equity is None or pnl.day is None:
            return
        fact = f.PnlMarked(now, pnl.start_equity, pnl.peak_pnl, pnl.day, pnl.day_start_pnl)
        self.desk.record(fact, actions)

    def markouts(self, now: Micros, actions: list[Action]) -> None:
        for fill, horizon, value in self.pnl.due_markouts(now, self.desk.price):
            self.desk.record(f.Markout(fill.quote_id, horizon, value, now), actions)

    def _apply_pnl(self, fact: f.PnlMarked) -> None:
        self.pnl.restore(fact.start_equity, fact.peak_pnl, fact.day, fact.day_start_pnl)
        self.recorded_at, self.recorded_day = fact.at, fact.day

    def _apply_markout(self, fact: f.Markout) -> None:
        self.pnl.add_markout(fact.horizon_s, fact.value_usd)
        self.pnl.drop_due(fact.horizon_s, fact.at)  # replayed: not to be taken again
