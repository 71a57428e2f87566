"""A desk snapshot made in slices (issue 29): the text is the document
:func:`~solver.core.desk_snapshot.snapshot` makes, of the desk as it was at the capture, and
the upkeep stores it with the journal position of the capture, so that a restart (the
snapshot, then the facts after it) rebuilds the desk as it is at the end."""

from __future__ import annotations

from pathlib import Path

import orjson

from solver.core import events as ev
from solver.core.actions import Action, Record
from solver.core.desk import Desk
from solver.core.desk_snapshot import capture, restore, snapshot
from solver.core.lifecycle import Claim
from solver.io.store.sqlite_store import Store
from solver.runtime.snapshot_slices import SnapshotInSlices
from tests.core.desk_helpers import BALANCES, answer, at, feed, make_desk


def busy_desk() -> Desk:
    """Open quotes (one with a claim), reservations, and quotes lost past their deadline (the
    recently lost rows), at 60 s."""
    desk = make_desk()
    desk.receive(ev.ConnectionRestored(), at(0))  # connected throughout: lost without a check
    for i in range(12):
        answer(desk, f"early-{i}", at(1), 1)  # 10 s deadlines
    desk.tick(at(60))
    feed(desk, at(60), BALANCES)  # fresh prices
    for i in range(9):
        answer(desk, f"open-{i}", at(60), 1)
    quote = desk.book.quotes["open-3"]
    quote.add_claim(Claim("intent-1", "tx-1", at(60), "PENDING"))
    assert len(desk.gaps.recent_lost.rows) == 12 and len(desk.inventory.reservations) == 9
    return desk


def text_of(desk: Desk) -> object:
    return orjson.loads(orjson.dumps(snapshot(desk)))


def test_the_text_made_in_slices_is_the_snapshot_document() -> None:
    desk = busy_desk()
    making = SnapshotInSlices(capture(desk), seq=0, at=at(60), facts=0, chunk=5)
    text = None
    while text is None:
        text = making.step(0.0)  # one chunk a slice
    assert making.slices == 3 + 2 + 3 + 1  # quotes, reservations, lost rows; then the splice
    assert orjson.loads(text) == text_of(desk)


def test_an_empty_desk_makes_the_same_document_too() -> None:
    desk = make_desk()
    text = SnapshotInSlices(capture(desk), seq=0, at=at(1), facts=0).finish()
    assert orjson.loads(text) == text_of(desk)


def test_what_the_desk_does_after_the_capture_is_not_in_it() -> None:
    desk = busy_desk()
    before = text_of(desk)
    making = SnapshotInSlices(capture(desk), seq=0, at=at(60), facts=0, chunk=4)
    assert making.step(0.0) is None
    desk.book.quotes["open-3"].claims["intent-1"].status = "SETTLED"
    desk.tick(at(120))  # every open quote lost: rows added, reservations released
    feed(desk, at(120), BALANCES)
    answer(desk, "later", at(120), 1)
    assert text_of(desk) != before
    assert orjson.loads(making.finish()) == before


def test_a_restart_from_a_sliced_snapshot_rebuilds_the_desk(tmp_path: Path) -> None:
    """Stored with the position of its capture, the facts decided while it was being made
    are applied after it: the rebuilt desk is the desk at the end."""
    desk = busy_desk()
    store = Store(tmp_path / "bot.sqlite")
    try:
        journal = store.journal
        seen = {"facts": 0}

        def journal_all(actions: list[Action]) -> None:
            for action in actions:
                if isinstance(action, Record):
                    journal.append(action.fact)
                    seen["facts"] += 1

        journal_all(desk.receive(ev.BalancesSeen({}, at(60)), at(60)))  # something journaled
        position = journal.snapshot_position()
        assert position is not None  # no checkpoint pass here
        making = SnapshotInSlices(capture(desk), position, at(60), 0, chunk=3)
        seen["facts"] = 0  # journaled after the capture
        text = None
        while text is None:  # the desk goes on between slices
            journal_all(answer(desk, f"meanwhile-{making.slices}", at(61), 1))
            text = making.step(0.0)
        journal_all(desk.tick(at(120)))
        journal.store_snapshot(text, making.at, making.seq)
        journal.commit()
        doc, after = journal.load()
        assert doc is not None and len(after) == seen["facts"] > 0
        rebuilt = make_desk()
        restore(rebuilt, doc)
        for fact in after:
            rebuilt.apply(fact)
        assert text_of(rebuilt) == text_of(desk)
    finally:
        store.close()


def test_a_slice_stops_at_its_budget() -> None:
    """A clock that moves 1 s a reading: with no budget a slice makes one chunk of one entry,
    with 2.5 s it makes three."""

    def slices(budget_s: float) -> int:
        ticks = iter(range(10_000))
        making = SnapshotInSlices(
            capture(busy_desk()), 0, at(60), 0, clock=lambda: float(next(ticks)), chunk=1
        )
        while making.step(budget_s) is None:
            pass
        return making.slices

    entries = 9 + 9 + 12  # open quotes, reservations, recently lost rows
    assert slices(0.0) == entries + 2  # a chunk a slice, then the splice, then the text
    assert slices(2.5) == -(-(entries + 2) // 3)
