"""Rebalances as desk facts: the hold on the desk and every step (docs/rebalance.md; issue 22).

A rebalance pays its input out of the inventory the quote path also promises from, and the bot
must not quote the route it is swapping meanwhile. So the desk, not the rebalancer, decides and
keeps both, and it keeps each step too: the rebalancer tells it with events, the desk records
facts, and the journal brings them back after a ``kill -9`` like every other fact.

- ``RebalanceStarting`` → the desk reserves the input if it is free (never what an open quote
  holds) and pauses the route (kind ``rebalancing``): facts ``RebalanceStarted`` and the
  ``PLANNED`` step; the reply says whether it started.
- ``RebalanceStepping`` → fact ``RebalanceStepped`` with the record after the step; when the
  deposit executed (``DEPOSITED``) the reservation is settled (``RebalanceDeposited``: the
  balance snapshot will show the input gone); when it ended (success, refund, failure or
  abandoned) the reservation is released and the route's pause lifted (``RebalanceEnded``).

The open records (:attr:`Rebalancing.open`) are what the rebalancer takes up after a restart;
the ``rebalances`` / ``rebalance_steps`` tables are projected from the step facts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, OperatorReply, Record
from solver.core.clock import Micros
from solver.core.inventory import Inventory, Reservation
from solver.core.pauses import Pause, Pauses
from solver.core.rebalance_record import TERMINAL, RebalanceRecord, RebalanceState

REBALANCING = "rebalancing"


def reservation_id(rebalance_id: str) -> str:
    """The inventory key of a rebalance's input (beside the quotes' ids)."""
    return f"rebalance:{rebalance_id}"


def pause_reason(rebalance_id: str) -> str:
    return f"rebalancing ({rebalance_id})"


class Rebalancing:
    """The desk's part for rebalances: decides and applies their facts over the inventory and
    the pauses it shares with the rest of the desk, and holds the records not finished yet."""

    def __init__(self, inventory: Inventory, pauses: Pauses) -> None:
        self.inventory = inventory
        self.pauses = pauses
        self.open: dict[str, RebalanceRecord] = {}
        """The rebalances not finished yet, by id: what the rebalancer takes up."""
        self._appliers = self.appliers()

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {ev.RebalanceStarting: self.starting, ev.RebalanceStepping: self.stepping}

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {
            f.RebalanceStarted: self.apply_started,
            f.RebalanceDeposited: self.apply_deposited,
            f.RebalanceEnded: self.apply_ended,
            f.RebalanceStepped: self.apply_stepped,
        }

    # ------------------------------------------------------------------ deciding

    def starting(self, event: ev.RebalanceStarting, now: Micros) -> list[Action]:
        record = event.record
        rid = reservation_id(record.id)
        if rid in self.inventory.reservations:
            return [OperatorReply(False, f"rebalance {record.id} holds its input already")]
        free = self.inventory.free(record.asset_in)
        if record.amount_in > free:
            return [OperatorReply(False, f"{record.asset_in} is no longer free ({free} free)")]
        actions: list[Action] = []
        started = f.RebalanceStarted(
            record.id, record.route, record.asset_in, record.amount_in, record.asset_out,
            event.deadline, now,
        )  # fmt: skip
        self._record(started, actions)
        if record.id not in self.open:  # a new one (else a deposit of an older store, held)
            self._record(f.RebalanceStepped(record, event.detail), actions)
        actions.append(OperatorReply(True, f"rebalance {record.id} started"))
        return actions

    def stepping(self, event: ev.RebalanceStepping, now: Micros) -> list[Action]:
        record = event.record
        actions: list[Action] = []
        self._record(f.RebalanceStepped(record, event.detail), actions)
        held = reservation_id(record.id) in self.inventory.reservations
        if record.state == RebalanceState.DEPOSITED and held:
            self._record(f.RebalanceDeposited(record.id, now), actions)
        if record.state in TERMINAL:
            outcome = str(record.state)
            self._record(f.RebalanceEnded(record.id, record.route, outcome, now), actions)
        return actions

    def _record(self, fact: f.Fact, actions: list[Action]) -> None:
        self._appliers[type(fact)](fact)
        actions.append(Record(fact))

    # ------------------------------------------------------------------ applying

    def apply_started(self, fact: f.RebalanceStarted) -> None:
        self.inventory.restore(
            [Reservation(reservation_id(fact.rebalance_id), fact.asset_in, fact.amount_in,
                         fact.asset_out, 0, fact.deadline)]
        )  # fmt: skip
        self.pauses.add(Pause(fact.route, REBALANCING, pause_reason(fact.rebalance_id), fact.at))

    def apply_deposited(self, fact: f.RebalanceDeposited) -> None:
        self.inventory.settle(reservation_id(fact.rebalance_id), fact.at)

    def apply_ended(self, fact: f.RebalanceEnded) -> None:
        self.inventory.release(reservation_id(fact.rebalance_id))
        held = self.pauses.get(fact.route, REBALANCING)
        if held is not None and held.reason == pause_reason(fact.rebalance_id):
            self.pauses.remove(fact.route, REBALANCING)

    def apply_stepped(self, fact: f.RebalanceStepped) -> None:
        record = fact.record
        if record.finished_at is None:
            self.open[record.id] = record
        else:
            self.open.pop(record.id, None)
