"""Rebalances as desk facts (issue 22, "nothing writes around the desk"): every step of a
rebalance is journaled with its whole record, the desk holds the unfinished ones with their
reservation and pause, and the journal alone (or a snapshot) brings all of it back."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import orjson

from solver.core import events as ev
from solver.core import fact_codec
from solver.core import facts as f
from solver.core.actions import OperatorReply
from solver.core.clock import from_micros
from solver.core.desk import Desk
from solver.core.desk_snapshot import restore, snapshot
from solver.core.rebalance_record import RebalanceRecord, RebalanceState
from solver.core.view import DeskView
from tests.core.desk_helpers import E6, E24, NEAR, USDC, at, make_desk, recorded

ROUTE = f"{NEAR}->{USDC}"
HELD = {ROUTE: "rebalancing: rebalancing (rb-1)"}


def when(seconds: float) -> datetime:
    """``at(seconds)`` as a rebalance record keeps it (a ``datetime``: an edge)."""
    return from_micros(at(seconds))


PLANNED = RebalanceRecord(
    "rb-1", when(1), when(1), RebalanceState.PLANNED, NEAR, NEAR, USDC, 100 * E24, {"side": "sell"}
)


def signed(record: RebalanceRecord) -> RebalanceRecord:
    """The record once its deposit is signed: what a restart needs to follow it."""
    return dataclasses.replace(
        record,
        state=RebalanceState.DEPOSIT_SENT,
        updated_at=when(2),
        quote_response={"quote": {"depositAddress": "dep-1", "amountOut": "300000000"}},
        quote_signature="ed25519:sig",
        deposit_address="dep-1",
        amount_out=300 * E6,
        min_amount_out=299 * E6,
        deposit_intent_hash="hash-1",
        deposit_signed={"standard": "nep413", "signature": "ed25519:x"},
        deposit_nonce=bytes(range(32)),
        deposit_deadline=when(62),
    )


def rebuilt(facts: list[f.Fact]) -> Desk:
    """A new process's desk: the journal's facts applied, through their encoding."""
    desk = make_desk()
    for fact in facts:
        desk.apply(
            fact_codec.decode(f.kind_of(fact), orjson.loads(orjson.dumps(fact_codec.encode(fact))))
        )
    return desk


def test_each_step_is_a_fact_and_the_desk_holds_the_open_record() -> None:
    desk = make_desk()
    view = DeskView(desk)
    actions = desk.receive(ev.RebalanceStarting(PLANNED, at(61), "sell 100 wNEAR"), at(1))
    assert next(a for a in actions if isinstance(a, OperatorReply)).ok
    started, planned = recorded(actions)
    assert isinstance(started, f.RebalanceStarted)
    assert planned == f.RebalanceStepped(PLANNED, "sell 100 wNEAR")
    assert view.rebalances == {"rb-1": PLANNED}
    assert view.inventory.reserved == {NEAR: 100 * E24} and view.pauses.as_dict() == HELD

    sent = signed(PLANNED)
    assert recorded(desk.receive(ev.RebalanceStepping(sent, "transfer hash-1"), at(2))) == [
        f.RebalanceStepped(sent, "transfer hash-1")
    ]
    assert view.rebalances == {"rb-1": sent}

    deposited = dataclasses.replace(sent, state=RebalanceState.DEPOSITED, updated_at=when(3))
    facts = recorded(desk.receive(ev.RebalanceStepping(deposited, "tx"), at(3)))
    assert facts == [f.RebalanceStepped(deposited, "tx"), f.RebalanceDeposited("rb-1", at(3))]
    assert view.inventory.reserved == {} and view.pauses.as_dict() == HELD

    done = dataclasses.replace(
        deposited, state=RebalanceState.SUCCESS, updated_at=when(4), finished_at=when(4)
    )
    facts = recorded(desk.receive(ev.RebalanceStepping(done, "received"), at(4)))
    assert facts == [
        f.RebalanceStepped(done, "received"),
        f.RebalanceEnded("rb-1", ROUTE, "SUCCESS", at(4)),
    ]
    assert view.rebalances == {} and view.pauses.as_dict() == {}


def test_a_rebalance_in_flight_comes_back_from_the_journal_and_from_a_snapshot() -> None:
    desk = make_desk()
    facts = recorded(desk.receive(ev.RebalanceStarting(PLANNED, at(61), "plan"), at(1)))
    facts += recorded(desk.receive(ev.RebalanceStepping(signed(PLANNED), "transfer"), at(2)))
    again = rebuilt(facts)
    view = DeskView(again)
    assert view.rebalances == {"rb-1": signed(PLANNED)}  # everything resume needs
    assert view.inventory.reserved == {NEAR: 100 * E24} and view.pauses.as_dict() == HELD
    from_snapshot = make_desk()
    restore(from_snapshot, orjson.loads(orjson.dumps(snapshot(again))))
    assert DeskView(from_snapshot).rebalances == view.rebalances
    assert from_snapshot.inventory.reservations == again.inventory.reservations


def test_a_snapshot_written_before_rebalances_were_facts_restores_none() -> None:
    doc = snapshot(make_desk())
    del doc["rebalances"]
    desk = make_desk()
    restore(desk, doc)
    assert desk.rebalancing.open == {}


def test_an_input_no_longer_free_starts_nothing() -> None:
    desk = make_desk()
    too_much = dataclasses.replace(PLANNED, amount_in=2_000 * E24)
    (reply,) = desk.receive(ev.RebalanceStarting(too_much, at(61)), at(1))
    assert isinstance(reply, OperatorReply) and not reply.ok and "no longer free" in reply.message
    assert desk.rebalancing.open == {} and not desk.pauses


def test_a_carried_deposit_of_an_older_store_gets_its_input_held_without_a_new_step() -> None:
    """Migration 10 carries an older store's unfinished row into the journal; the rebalancer
    then asks for the hold that store never journaled: held, and no step is repeated."""
    desk = rebuilt([f.RebalanceStepped(signed(PLANNED), None, carried=True)])
    assert desk.inventory.reserved == {}
    facts = recorded(desk.receive(ev.RebalanceStarting(signed(PLANNED), at(62)), at(5)))
    assert [type(x) for x in facts] == [f.RebalanceStarted]
    assert desk.inventory.reserved == {NEAR: 100 * E24} and desk.pauses.as_dict() == HELD
