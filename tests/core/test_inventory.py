"""Inventory: free = confirmed − reserved − floor; reservations released only when safe."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core.clock import micros, span
from solver.core.inventory import Inventory, Reservation

T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
A, B = "nep141:a.near", "nep141:b.near"


def res(quote_id: str, out: int, deadline_s: float = 60, into: int = 1) -> Reservation:
    return Reservation(quote_id, A, out, B, into, T0 + span(deadline_s))


def test_free_accounts_for_reservations_and_floors() -> None:
    inv = Inventory(floors={A: 100})
    inv.set_confirmed({A: 1000, B: 0}, T0)
    assert inv.free(A) == 900
    assert inv.reserve(res("q1", 500))
    assert inv.free(A) == 400
    assert not inv.reserve(res("q2", 401))
    assert inv.free(A) == 400
    assert inv.reserve(res("q2", 400))
    assert inv.free(A) == 0
    assert inv.release("q1") is not None
    assert inv.free(A) == 500
    assert inv.release("q1") is None


def test_duplicate_quote_id_is_refused() -> None:
    inv = Inventory()
    inv.set_confirmed({A: 1000}, T0)
    assert inv.reserve(res("q", 10))
    assert not inv.reserve(res("q", 10))
    assert inv.reserved[A] == 10


def test_settle_debits_the_outflow_but_waits_for_a_snapshot_to_credit() -> None:
    inv = Inventory()
    inv.set_confirmed({A: 1000, B: 5}, T0)
    inv.reserve(res("q", 300, into=70))
    inv.settle("q")
    # Conservative both ways: the snapshot may or may not include the execution already.
    assert (inv.confirmed[A], inv.confirmed[B], inv.free(A)) == (700, 5, 700)
    assert inv.reservations == {}


def test_deadline_releases_only_with_a_later_snapshot() -> None:
    inv = Inventory()
    inv.set_confirmed({A: 1000}, T0)
    inv.reserve(res("q", 300, deadline_s=10))
    # A snapshot from before the deadline cannot prove the quote did not execute.
    assert inv.set_confirmed({A: 1000}, T0 + span(9)) == 0
    assert inv.free(A) == 700
    assert inv.set_confirmed({A: 1000}, T0 + span(11)) == 1
    assert "q" not in inv.reservations
    assert inv.free(A) == 1000


def test_restore_rebuilds_exposure_even_beyond_balance() -> None:
    inv = Inventory()
    inv.set_confirmed({A: 100}, T0)
    inv.restore([res("q1", 80), res("q2", 80)])
    assert inv.reserved[A] == 160 and inv.free(A) == 0


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reserve", "release", "settle"]),
            st.integers(0, 9),
            st.integers(1, 500),
        ),
        max_size=60,
    )
)
def test_reservations_never_exceed_free_inventory(ops: list[tuple[str, int, int]]) -> None:
    inv = Inventory(floors={A: 50})
    inv.set_confirmed({A: 1000, B: 0}, T0)
    for op, ident, amount in ops:
        key = f"q{ident}"
        if op == "reserve":
            before, existed = inv.free(A), key in inv.reservations
            assert inv.reserve(res(key, amount)) == (not existed and amount <= before)
        elif op == "release":
            inv.release(key)
        else:
            inv.settle(key)
        assert sum(r.amount_out for r in inv.reservations.values()) == inv.reserved.get(A, 0)
        assert inv.reserved.get(A, 0) <= inv.confirmed[A] - 50
        assert inv.free(A) == inv.confirmed[A] - 50 - inv.reserved.get(A, 0)


def test_a_late_snapshot_from_before_a_settlement_cannot_undo_its_debit() -> None:
    inv = Inventory()
    inv.set_confirmed({A: 1000, B: 5}, T0)
    inv.reserve(res("q", 300, into=70))
    # Heard of the execution at +2 s; a balance request sent at +1 s (it may have been
    # answered before the execution) lands only now.
    inv.settle("q", T0 + span(2))
    inv.set_confirmed({A: 1000, B: 5}, T0 + span(1))
    assert (inv.confirmed[A], inv.free(A)) == (700, 700)
    # Out of order: a +1.5 s snapshot after a +1 s one is still re-debited, an older one ignored.
    inv.set_confirmed({A: 1000, B: 5}, T0 + span(1.5))
    assert inv.set_confirmed({A: 1000, B: 5}, T0 + span(1.2)) == 0
    assert inv.confirmed_at == T0 + span(1.5) and inv.free(A) == 700
    # A request sent after we heard of it includes the execution: it is the truth, once.
    inv.set_confirmed({A: 700, B: 75}, T0 + span(3))
    assert inv.confirmed == {A: 700, B: 75} and inv.unconfirmed_settlements == {}
    inv.set_confirmed({A: 700, B: 75}, T0 + span(4))
    assert inv.confirmed == {A: 700, B: 75}
