"""The rebalancer's hold on the desk, as desk facts (docs/rebalance.md; issue 22).

A rebalance pays its input out of the inventory the quote path also promises from, and the bot
must not quote the route it is swapping meanwhile. So the desk, not the rebalancer, decides and
keeps both: the rebalancer asks with events, the desk answers with facts, and the journal brings
them back after a ``kill -9`` like every other fact.

- ``RebalanceStarting`` → the desk reserves the input if it is free (never what an open quote
  holds) and pauses the route (kind ``rebalancing``): fact ``RebalanceStarted``; the reply says
  whether it started.
- ``RebalanceDeposited`` → the deposit executed: the reservation is settled (the balance
  snapshot will show the input gone): fact ``RebalanceDeposited``.
- ``RebalanceEnding`` → it ended (success, refund, failure or abandoned): the reservation is
  released and the route's pause lifted: fact ``RebalanceEnded``.

The rebalancer's own steps (quotes, the signed deposit, the swap's status) stay in the store's
``rebalances`` tables; this part holds only what the desk must own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, OperatorReply, Record
from solver.core.inventory import Inventory, Reservation
from solver.core.pauses import Pause, Pauses

REBALANCING = "rebalancing"


def reservation_id(rebalance_id: str) -> str:
    """The inventory key of a rebalance's input (beside the quotes' ids)."""
    return f"rebalance:{rebalance_id}"


def pause_reason(rebalance_id: str) -> str:
    return f"rebalancing ({rebalance_id})"


class Rebalancing:
    """The desk's part for rebalances: decides and applies their facts over the inventory and
    the pauses it shares with the rest of the desk."""

    def __init__(self, inventory: Inventory, pauses: Pauses) -> None:
        self.inventory = inventory
        self.pauses = pauses

    def handlers(self) -> dict[type, Callable[[Any, datetime], list[Action]]]:
        return {
            ev.RebalanceStarting: self.starting,
            ev.RebalanceDeposited: self.deposited,
            ev.RebalanceEnding: self.ending,
        }

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {
            f.RebalanceStarted: self.apply_started,
            f.RebalanceDeposited: self.apply_deposited,
            f.RebalanceEnded: self.apply_ended,
        }

    # ------------------------------------------------------------------ deciding

    def starting(self, event: ev.RebalanceStarting, now: datetime) -> list[Action]:
        rid = reservation_id(event.rebalance_id)
        if rid in self.inventory.reservations:
            return [OperatorReply(False, f"rebalance {event.rebalance_id} holds its input already")]
        free = self.inventory.free(event.asset_in)
        if event.amount_in > free:
            return [OperatorReply(False, f"{event.asset_in} is no longer free ({free} free)")]
        fact = f.RebalanceStarted(
            event.rebalance_id, event.route, event.asset_in, event.amount_in, event.asset_out,
            event.deadline, now,
        )  # fmt: skip
        self.apply_started(fact)
        return [Record(fact), OperatorReply(True, f"rebalance {event.rebalance_id} started")]

    def deposited(self, event: ev.RebalanceDeposited, now: datetime) -> list[Action]:
        if reservation_id(event.rebalance_id) not in self.inventory.reservations:
            return []  # not ours (ended already, or started by older code and not restored)
        fact = f.RebalanceDeposited(event.rebalance_id, now)
        self.apply_deposited(fact)
        return [Record(fact)]

    def ending(self, event: ev.RebalanceEnding, now: datetime) -> list[Action]:
        fact = f.RebalanceEnded(event.rebalance_id, event.route, event.outcome, now)
        self.apply_ended(fact)
        return [Record(fact)]

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
