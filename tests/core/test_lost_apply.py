"""``QuotesLost`` applied to the desk: it releases the reservations of the quotes it closed and
no other (a decided quote not signed yet holds a reservation and no place in the book), and a
quote named twice is closed once."""

from __future__ import annotations

from solver.core import facts as f
from solver.core.lifecycle import Quote
from tests.core.desk_helpers import answer, at, make_desk, request


def test_a_lost_batch_releases_the_reservations_of_the_quotes_it_closed_only() -> None:
    desk = make_desk()
    answer(desk, "q1", at(1))
    answer(desk, "q2", at(1))
    decided = desk.decide(request("q3"), at(1))  # decided, not signed: reserved, not in the book
    assert isinstance(decided, Quote) and desk.book.get("q3") is None
    assert set(desk.inventory.reservations) == {"q1", "q2", "q3"}
    desk.apply(f.QuotesLost(("q1", "q3", "q1"), at(30), "deadline passed, never named"))
    assert set(desk.inventory.reservations) == {"q2", "q3"}
    assert list(desk.gaps.recent_lost.rows) == ["q1"]
    desk.apply(f.QuotesLost(("q2",), at(31), "deadline passed, never named"))
    assert set(desk.inventory.reservations) == {"q3"}
    assert list(desk.gaps.recent_lost.rows) == ["q1", "q2"]
