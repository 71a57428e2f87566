"""The quote lifecycle: legal moves only, one terminal state, open-flow totals kept exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core.inventory import Reservation
from solver.core.risk import open_flow_totals
from solver.core.lifecycle import IllegalTransition, QuoteBook, QuoteState, TrackedQuote

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
A, B = "nep141:a.near", "nep141:b.near"


def quote(i: int, out: int = 10, into: int = 3, fee: int = 1) -> TrackedQuote:
    return TrackedQuote(
        f"q{i}", f"h{i}", B, A, into, out, fee, T0 + timedelta(seconds=60), bytes(32), T0
    )


def test_legal_paths_and_terminal_exit() -> None:
    book = QuoteBook()
    book.add(quote(1))
    assert book.find_hash("h1") is book.get("q1")
    book.move("q1", QuoteState.WON, T0, intent_hash="i1")
    book.move("q1", QuoteState.SETTLING, T0, tx_hash="t1")
    t = book.move("q1", QuoteState.SETTLED, T0)
    assert (t.old, t.new, t.intent_hash, t.tx_hash) == (
        QuoteState.SETTLING,
        QuoteState.SETTLED,
        "i1",
        "t1",
    )
    assert book.get("q1") is None and book.terminal_counts == {QuoteState.SETTLED: 1}
    with pytest.raises(IllegalTransition):
        book.move("q1", QuoteState.LOST, T0)


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([], QuoteState.SETTLING),
        ([QuoteState.WON], QuoteState.LOST),
        ([QuoteState.WON], QuoteState.REJECTED),
    ],
)
def test_illegal_moves_raise(path: list[QuoteState], bad: QuoteState) -> None:
    book = QuoteBook()
    book.add(quote(1))
    for state in path:
        book.move("q1", state, T0)
    with pytest.raises(IllegalTransition):
        book.move("q1", bad, T0)


def test_past_deadline_lists_only_open_quotes() -> None:
    book = QuoteBook()
    book.add(quote(1))
    book.add(quote(2))
    book.move("q2", QuoteState.WON, T0)
    assert [q.quote_id for q in book.past_deadline(T0 + timedelta(seconds=61))] == ["q1"]
    assert book.past_deadline(T0 + timedelta(seconds=59)) == []


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 15),
            st.sampled_from(["add", "won", "settle", "lose", "reject"]),
            st.integers(1, 10**30),
        ),
        max_size=60,
    )
)
def test_open_flow_totals_always_equal_the_open_quotes(ops: list[tuple[int, str, int]]) -> None:
    book = QuoteBook()
    for i, op, amount in ops:
        key = f"q{i}"
        current = book.get(key)
        if (
            op == "add"
            and current is None
            and key not in {q.quote_id for q in book.quotes.values()}
        ):
            if book.terminal_counts.get(QuoteState.SETTLED, 0) + len(book.quotes) < 100:
                book.add(quote(i, out=amount, into=amount // 7 + 1))
        elif current is not None:
            target = {
                "won": QuoteState.WON,
                "settle": QuoteState.SETTLED,
                "lose": QuoteState.LOST,
                "reject": QuoteState.REJECTED,
            }.get(op)
            if target is not None and target in {
                QuoteState.OPEN: {QuoteState.WON, QuoteState.LOST, QuoteState.REJECTED},
                QuoteState.WON: {QuoteState.SETTLED},
            }.get(current.state, set()):
                book.move(key, target, T0)
        expected = open_flow_totals(
            Reservation(
                q.quote_id, q.asset_out, q.amount_out + q.fee, q.asset_in, q.amount_in, q.deadline
            )
            for q in book.quotes.values()
        )
        assert (book.open_outflow, book.open_inflow) == expected
