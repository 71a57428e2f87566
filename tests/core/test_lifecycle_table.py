"""The quote lifecycle: legal moves only, one terminal state, open-flow totals kept exactly;
and the desk moves a quote to WON only on a claim's PENDING status."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core import events as ev
from solver.core.clock import micros, span
from solver.core.inventory import Reservation
from solver.core.lifecycle import (
    ALLOWED,
    NO_CLAIMS,
    TERMINAL,
    Claim,
    IllegalTransition,
    Quote,
    QuoteBook,
    QuoteState,
)
from solver.core.risk import open_flow_totals
from tests.core.desk_helpers import answer, make_desk, quote_hash, state_of
from tests.core.desk_helpers import at as desk_at

T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
A, B = "nep141:a.near", "nep141:b.near"


def quote(i: int, out: int = 10, into: int = 3, fee: int = 1) -> Quote:
    return Quote(
        f"q{i}", B, A, into, out, fee, T0 + span(60), quote_hash=f"h{i}", nonce=bytes(32),
        created_at=T0,
    )  # fmt: skip


def test_legal_paths_and_terminal_exit() -> None:
    book = QuoteBook()
    book.add(quote(1))
    assert book.find_hash("h1") is book.get("q1")
    book.move("q1", QuoteState.WON, T0, intent_hash="i1")
    book.move("q1", QuoteState.SETTLING, T0, tx_hash="t1")
    tracked = book.get("q1")
    assert tracked is not None and tracked.state is QuoteState.SETTLING
    book.move("q1", QuoteState.SETTLED, T0 + span(1))
    assert (tracked.state, tracked.intent_hash, tracked.tx_hash, tracked.updated_at) == (
        QuoteState.SETTLED,
        "i1",
        "t1",
        T0 + span(1),
    )
    assert book.get("q1") is None and book.terminal_counts == {QuoteState.SETTLED: 1}
    with pytest.raises(IllegalTransition):
        book.move("q1", QuoteState.LOST, T0)


S = QuoteState
EXPECTED_TABLE = {
    S.OPEN: {S.WON, S.REJECTED, S.LOST},
    S.WON: {S.SETTLING, S.SETTLED, S.FAILED},
    S.SETTLING: {S.SETTLED, S.FAILED},
}


def test_the_table_is_exactly_the_documented_one() -> None:
    assert {old: set(new) for old, new in ALLOWED.items()} == EXPECTED_TABLE
    assert {S.SETTLED, S.FAILED, S.LOST, S.REJECTED} == TERMINAL
    assert not TERMINAL & set(ALLOWED)  # a terminal state has no way out


def _reach(book: QuoteBook, state: QuoteState) -> None:
    path = {S.OPEN: [], S.WON: [S.WON], S.SETTLING: [S.WON, S.SETTLING]}[state]
    for step in path:
        book.move("q1", step, T0)


@pytest.mark.parametrize("old", [S.OPEN, S.WON, S.SETTLING])
@pytest.mark.parametrize("new", list(QuoteState))
def test_every_move_outside_the_table_raises_and_changes_nothing(
    old: QuoteState, new: QuoteState
) -> None:
    book = QuoteBook()
    book.add(quote(1))
    _reach(book, old)
    tracked = book.get("q1")
    assert tracked is not None and tracked.state is old
    if new in EXPECTED_TABLE[old]:
        book.move("q1", new, T0 + span(1), reason="r")
        assert tracked.state is new and tracked.reason == "r"
        assert tracked.state is new and tracked.updated_at == T0 + span(1)
        assert (book.get("q1") is None) == (new in TERMINAL)
        return
    with pytest.raises(IllegalTransition, match="not allowed"):
        book.move("q1", new, T0)
    assert book.get("q1") is tracked and tracked.state is old
    assert book.open_outflow == {A: 11} and book.terminal_counts == {}


def test_every_settled_quote_passes_through_won() -> None:
    """A user took it before it settled: OPEN cannot jump to SETTLING or SETTLED (the desk
    moves it to WON first), so "won" counts every quote a user took."""
    book = QuoteBook()
    book.add(quote(1))
    for new in (S.SETTLING, S.SETTLED, S.FAILED):
        with pytest.raises(IllegalTransition):
            book.move("q1", new, T0)
    book.move("q1", S.WON, T0, intent_hash="i1")
    book.move("q1", S.SETTLED, T0, tx_hash="t1")
    assert book.get("q1") is None and book.terminal_counts == {S.SETTLED: 1}


def test_unknown_quotes_and_duplicates_raise() -> None:
    book = QuoteBook()
    with pytest.raises(IllegalTransition, match="unknown quote"):
        book.move("absent", S.WON, T0)
    book.add(quote(1))
    with pytest.raises(IllegalTransition, match="already tracked"):
        book.add(quote(1))


def test_past_deadline_lists_the_quotes_in_the_book_until_they_leave() -> None:
    book = QuoteBook()
    book.add(quote(1))
    book.add(quote(2))
    book.add(quote(3))
    book.move("q2", S.WON, T0)  # WON may still fail at its deadline: listed
    book.move("q3", S.LOST, T0)  # terminal: left the book
    due = book.past_deadline(T0 + span(61))
    assert [q.quote_id for q in due] == ["q1", "q2"]
    assert book.past_deadline(T0 + span(59)) == []
    # Still due at the next call (waiting for a nonce check or a claim), until they leave.
    assert [q.quote_id for q in book.past_deadline(T0 + span(62))] == ["q1", "q2"]
    book.move("q1", S.LOST, T0)
    assert [q.quote_id for q in book.past_deadline(T0 + span(62))] == ["q2"]


def test_the_desk_moves_a_quote_to_won_only_on_a_pending_claim() -> None:
    desk = make_desk()
    answer(desk, "q1", desk_at(1))
    quote_1 = desk.book.get("q1")
    assert quote_1 is not None
    # Being named by an intent moves nothing: a stray or forged status must not decide.
    desk.receive(ev.QuoteStatusSeen(quote_hash("q1"), "i1", "t1"), desk_at(1.1))
    assert state_of(quote_1) is S.OPEN and set(quote_1.claims) == {"i1"}
    desk.receive(ev.IntentStatusSeen("i1", None), desk_at(1.2))  # the poll failed
    assert state_of(quote_1) is S.OPEN
    desk.receive(ev.IntentStatusSeen("i1", "PENDING"), desk_at(1.3))
    assert state_of(quote_1) is S.WON and quote_1.intent_hash == "i1"
    desk.receive(ev.IntentStatusSeen("i1", "PENDING"), desk_at(1.4))  # again: no move
    assert state_of(quote_1) is S.WON
    # TX_BROADCASTED or SETTLED as the first status seen: through WON, in the same event.
    answer(desk, "q2", desk_at(2))
    desk.receive(ev.QuoteStatusSeen(quote_hash("q2"), "i2", None), desk_at(2.1))
    desk.receive(ev.IntentStatusSeen("i2", "TX_BROADCASTED", "t2"), desk_at(2.2))
    quote_2 = desk.book.get("q2")
    assert quote_2 is not None and state_of(quote_2) is S.SETTLING and quote_2.tx_hash == "t2"
    desk.receive(ev.IntentStatusSeen("i2", "PENDING"), desk_at(2.3))  # late: no step back
    assert state_of(quote_2) is S.SETTLING
    answer(desk, "q3", desk_at(3))
    desk.receive(ev.QuoteStatusSeen(quote_hash("q3"), "i3", None), desk_at(3.1))
    desk.receive(ev.IntentStatusSeen("i3", "SETTLED", "t3"), desk_at(3.2))
    assert desk.book.get("q3") is None and desk.stats.outcomes["SETTLED"] == 1
    assert desk.stats.outcomes["WON"] == 3 and desk.stats.outcomes["SETTLING"] == 1


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
            if target is not None and target in ALLOWED.get(current.state, frozenset()):
                book.move(key, target, T0)
        expected = open_flow_totals(
            Reservation(
                q.quote_id, q.asset_out, q.amount_out + q.fee, q.asset_in, q.amount_in, q.deadline
            )
            for q in book.quotes.values()
        )
        assert (book.open_outflow, book.open_inflow) == expected


def test_a_claimless_quote_shares_the_empty_claims_and_its_first_claim_gets_its_own() -> None:
    """No dict is built per answer: every claimless quote reads one shared empty dict, which
    refuses writes (a quote written through it would give every quote its claim)."""
    one, other = (
        Quote(q, A, B, 1, 2, 0, T0, quote_hash=f"h{q}", nonce=b"n", created_at=T0)
        for q in ("q1", "q2")
    )
    assert one.claims is NO_CLAIMS and other.claims is NO_CLAIMS and not one.claims
    assert one.claims == {} and one.pending_claims() == []
    with pytest.raises(TypeError):
        one.claims["i1"] = Claim("i1", None, T0)
    with pytest.raises(TypeError):
        one.claims.setdefault("i1", Claim("i1", None, T0))
    one.add_claim(Claim("i1", None, T0))
    assert list(one.claims) == ["i1"] and one.claims is not NO_CLAIMS
    assert other.claims is NO_CLAIMS and not NO_CLAIMS
