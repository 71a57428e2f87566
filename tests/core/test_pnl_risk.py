"""PnL (realized, markouts, marked equity) and the reconciliation / kill-switch rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core.clock import MILLI, MINUTE, micros, span
from solver.core.inventory import Reservation
from solver.core.pnl import FillValue, PnlBook
from solver.core.risk import RiskLimits, check_mismatch, check_pnl, check_stale, mismatches

T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
HOUR = 60 * MINUTE
USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
E6, E24 = 10**6, 10**24


def fill_value(quote_id: str = "q") -> FillValue:
    # We receive 1 NEAR and give 2.97 USDC + 0.01 fee.
    return FillValue(quote_id, NEAR, E24, USDC, 2_970_000 + 10_000)


def test_realized_edge_and_markouts() -> None:
    prices = {USDC: 1.0, NEAR: 3.0}
    book = PnlBook({USDC: 6, NEAR: 24})
    fill = fill_value()
    realized = book.value(fill, prices[NEAR], prices[USDC])
    assert realized == pytest.approx(0.02, abs=1e-12)
    book.record_fill(fill, T0, realized)
    assert (book.fills, book.realized_usd) == (1, realized)
    prices[NEAR] = 2.9
    assert book.due_markouts(T0 + span(0.5), prices.get) == []
    due = book.due_markouts(T0 + span(11), prices.get)
    assert [(f.quote_id, h) for f, h, _ in due] == [("q", 1), ("q", 10)]
    assert [v for _, _, v in due] == pytest.approx([-0.08, -0.08], abs=1e-12)
    assert book.due_markouts(T0 + span(11), prices.get) == []  # each one once
    for _, horizon, value in due:
        book.add_markout(horizon, value)
    book.add_markout(7, 1.0)  # not a horizon of this book: ignored
    assert book.mean_markouts() == pytest.approx({1: -0.08, 10: -0.08}, abs=1e-12)


def test_a_markout_due_without_a_price_is_dropped_and_memory_stays_flat() -> None:
    book = PnlBook({USDC: 6, NEAR: 24}, horizons_s=(1, 10))
    for i in range(1_000):
        book.record_fill(fill_value(f"q{i}"), T0 + i * MILLI, 0.01)
    prices: dict[str, float] = {USDC: 1.0}  # no NEAR price when the first horizon is due
    assert book.due_markouts(T0 + span(5), prices.get) == []
    prices[NEAR] = 3.0
    due = book.due_markouts(T0 + span(20), prices.get)
    assert {h for _, h, _ in due} == {10} and len(due) == 1_000  # the 1 s ones are gone
    assert all(not queue for queue in book._due.values())
    assert book.fills == 1_000 and book.realized_usd == pytest.approx(10.0)


def test_marked_pnl_peak_drawdown_and_daily_loss() -> None:
    prices = {USDC: 1.0, NEAR: 3.0}
    book = PnlBook({USDC: 6, NEAR: 24})
    balances = {USDC: 100 * E6, NEAR: 10 * E24}
    assert (book.pnl, book.start_equity) == (None, None)
    assert book.drawdown_usd() == book.daily_loss_usd() == 0.0
    assert book.mark(T0, balances, prices.get)  # the starting equity was taken
    assert (book.start_equity, book.pnl, book.day) == (130.0, 0.0, "2026-11-22")
    prices[NEAR] = 4.0
    assert book.mark(T0 + HOUR, balances, prices.get)  # a new peak
    assert book.pnl == pytest.approx(10.0) and book.peak_pnl == pytest.approx(10.0)
    prices[NEAR] = 2.0
    assert not book.mark(T0 + 2 * HOUR, balances, prices.get)  # nothing to keep
    assert book.pnl == pytest.approx(-10.0)
    assert book.drawdown_usd() == pytest.approx(20.0)
    assert book.daily_loss_usd() == pytest.approx(10.0)
    breaches = check_pnl(RiskLimits(5.0, 15.0, {}), book.daily_loss_usd(), book.drawdown_usd())
    assert [b.kind for b in breaches] == ["daily_loss", "drawdown"]
    assert "daily loss 10.00 USD > 5.0" in breaches[0].detail
    assert check_pnl(RiskLimits(10.0, 20.0, {}), 10.0, 20.0) == []  # at the limit: no breach
    # Without a price nothing is marked, and the last mark stands.
    assert not book.mark(T0, {USDC: 1, NEAR: 1}, lambda asset: None)
    assert book.pnl == pytest.approx(-10.0)
    # An asset held at zero needs no price.
    assert PnlBook({USDC: 6}).equity_usd({USDC: 5 * E6, NEAR: 0}, {USDC: 1.0}.get) == 5.0
    assert PnlBook({USDC: 6}).equity_usd({NEAR: 1}, {NEAR: 1.0}.get) is None  # no decimals


def test_a_new_utc_day_restarts_the_daily_loss() -> None:
    prices = {USDC: 1.0, NEAR: 3.0}
    book = PnlBook({USDC: 6, NEAR: 24})
    balances = {USDC: 100 * E6, NEAR: 10 * E24}
    book.mark(T0, balances, prices.get)
    prices[NEAR] = 2.0
    book.mark(T0 + HOUR, balances, prices.get)
    assert book.daily_loss_usd() == pytest.approx(10.0)
    assert book.mark(T0 + 12 * HOUR, balances, prices.get)  # the next UTC day
    assert book.day == "2026-11-23" and book.day_start_pnl == pytest.approx(-10.0)
    assert book.daily_loss_usd() == 0.0 and book.drawdown_usd() == pytest.approx(10.0)


def test_a_deposit_is_not_a_profit_and_references_survive_a_restore() -> None:
    prices = {USDC: 1.0}
    book = PnlBook({USDC: 6})
    book.mark(T0, {USDC: 100 * E6}, prices.get)
    book.mark(T0 + span(1), {USDC: 150 * E6}, prices.get)  # 50 USDC deposited
    assert book.pnl == pytest.approx(50.0)
    book.shift_baseline(50.0)  # the operator accepted the new balances
    assert book.pnl == pytest.approx(0.0) and book.start_equity == pytest.approx(150.0)
    book.mark(T0 + span(2), {USDC: 150 * E6}, prices.get)
    assert book.pnl == pytest.approx(0.0)
    restored = PnlBook({USDC: 6})
    restored.restore(150.0, book.peak_pnl, "2026-11-22", book.day_start_pnl)
    assert not restored.mark(T0 + span(2), {USDC: 140 * E6}, prices.get)
    assert restored.pnl == pytest.approx(-10.0) and restored.daily_loss_usd() == pytest.approx(10)


def _res(asset_out: str, out: int, asset_in: str, into: int) -> Reservation:
    return Reservation("q", asset_out, out, asset_in, into, T0)


def test_open_quotes_explain_balance_moves_but_nothing_else() -> None:
    expected = {USDC: 1000, NEAR: 50}
    open_quotes = [_res(USDC, 300, NEAR, 7)]
    # The quote executed: USDC down 300, NEAR up 7 — explained.
    assert mismatches(expected, {USDC: 700, NEAR: 57}, open_quotes) == {USDC: 0, NEAR: 0}
    # It did not execute — also explained.
    assert mismatches(expected, {USDC: 1000, NEAR: 50}, open_quotes) == {USDC: 0, NEAR: 0}
    # 200 USDC left the account that no quote explains.
    found = mismatches(expected, {USDC: 500, NEAR: 57}, open_quotes)
    assert found == {USDC: -200, NEAR: 0}
    (breach,) = check_mismatch(RiskLimits(1, 1, {USDC: 199}), found, lambda a, n: f"{n} u")
    assert breach.kind == "reconciliation"
    assert breach.detail == f"{USDC}: on-chain balance off by -200 u (-200 in smallest units)"
    assert check_mismatch(RiskLimits(1, 1, {USDC: 200}), found, lambda a, n: str(n)) == []


@settings(max_examples=200)
@given(
    st.integers(0, 10**30),
    st.lists(st.tuples(st.integers(1, 10**20), st.integers(1, 10**20), st.booleans()), max_size=8),
)
def test_any_subset_of_open_quotes_executing_is_never_a_mismatch(
    start: int, quotes: list[tuple[int, int, bool]]
) -> None:
    expected = {USDC: start + sum(q[0] for q in quotes), NEAR: start}
    open_quotes = [_res(USDC, out, NEAR, into) for out, into, _ in quotes]
    actual = {
        USDC: expected[USDC] - sum(out for out, _, ran in quotes if ran),
        NEAR: expected[NEAR] + sum(into for _, into, ran in quotes if ran),
    }
    assert mismatches(expected, actual, open_quotes) == {USDC: 0, NEAR: 0}


def test_stale_inputs_breach_after_the_limit() -> None:
    limits = RiskLimits(1, 1, {}, max_stale_s=60)
    assert check_stale(limits, 10.0, 59.0) == []
    assert [b.kind for b in check_stale(limits, 61.0, None)] == ["stale_data"]


def test_reconciler_follows_settlements_whenever_the_snapshot_sees_them() -> None:
    from solver.core.risk import Reconciler

    rec = Reconciler()
    assert rec.on_snapshot({USDC: 1000, NEAR: 50}, []) == {USDC: 0, NEAR: 0}
    quote = _res(USDC, 300, NEAR, 7)
    # The snapshot already shows the execution while the quote is still open: explained.
    assert rec.on_snapshot({USDC: 700, NEAR: 57}, [quote]) == {USDC: 0, NEAR: 0}
    rec.on_settled(NEAR, 7, USDC, 300)
    assert rec.on_snapshot({USDC: 700, NEAR: 57}, []) == {USDC: 0, NEAR: 0}
    # Someone took 100 USDC: reported once, then absorbed.
    assert rec.on_snapshot({USDC: 600, NEAR: 57}, []) == {USDC: -100, NEAR: 0}
    assert rec.on_snapshot({USDC: 600, NEAR: 57}, []) == {USDC: 0, NEAR: 0}


@pytest.mark.parametrize(
    ("limits", "start_equity", "kinds"),
    [
        # 2 % of 1,000 USD = 20 USD, tighter than 100 USD: a 25 USD loss breaches it.
        (RiskLimits(100.0, 1e9, {}, max_daily_loss_pct=2.0), 1_000.0, ["daily_loss"]),
        # 5 % of 1,000 = 50 USD is looser than 10 USD: the USD limit applies.
        (RiskLimits(10.0, 1e9, {}, max_daily_loss_pct=5.0), 1_000.0, ["daily_loss"]),
        (RiskLimits(100.0, 1e9, {}, max_daily_loss_pct=5.0), 1_000.0, []),
        (RiskLimits(1e9, 100.0, {}, max_drawdown_pct=3.0), 1_000.0, ["drawdown"]),
        (RiskLimits(1e9, 100.0, {}, max_drawdown_pct=4.0), 1_000.0, []),  # 40 USD: at the limit
        # No starting equity yet, or none to take a share of: the USD limits alone.
        (RiskLimits(100.0, 100.0, {}, max_daily_loss_pct=1.0), None, []),
        (RiskLimits(100.0, 100.0, {}, max_drawdown_pct=1.0), 0.0, []),
    ],
)
def test_loss_limits_as_a_share_of_starting_equity(
    limits: RiskLimits, start_equity: float | None, kinds: list[str]
) -> None:
    breaches = check_pnl(limits, 25.0, 40.0, start_equity)
    assert [b.kind for b in breaches] == kinds


def test_a_percent_breach_says_which_limit() -> None:
    limits = RiskLimits(100.0, 1e9, {}, max_daily_loss_pct=2.0)
    (breach,) = check_pnl(limits, 25.0, 0.0, 1_000.0)
    assert breach.detail == "daily loss 25.00 USD > 20.00 (2 % of starting equity 1000.00 USD)"


@settings(max_examples=300, deadline=None)
@given(
    amounts=st.lists(st.integers(0, 10**32), min_size=2, max_size=2),
    prices=st.lists(st.floats(1e-9, 1e9), min_size=4, max_size=4),
)
def test_a_value_is_the_exact_decimal_one_whatever_price_came_before(
    amounts: list[int], prices: list[float]
) -> None:
    """The scaled prices kept between values (issue 29) give the value the plain decimal
    product gives, when a price changes, and for amounts too long for the fast path."""
    from solver.core.pnl import _decimal_value

    book = PnlBook({USDC: 6, NEAR: 24})
    fill = FillValue("q", NEAR, amounts[0], USDC, amounts[1])
    for p_in, p_out in ((prices[0], prices[1]), (prices[2], prices[3]), (prices[0], prices[3])):
        exact = _decimal_value(fill.amount_in, 24, p_in) - _decimal_value(fill.outflow, 6, p_out)
        assert book.value(fill, p_in, p_out) == float(exact)
        # The same price as another float object: kept or not, the same value.
        assert book.value(fill, float(repr(p_in)), p_out) == float(exact)


def test_the_reconciliation_report_is_the_snapshot_s_whenever_it_is_read() -> None:
    """The report is built when read (issue 29): what a later fill or accept changes in the
    gaps must not change the report of a snapshot taken before."""
    from solver.core.reconciliation import Reconciliation

    bal = Reconciliation(RiskLimits(1e9, 1e9, {USDC: 0}))
    bal.reconcile({USDC: 1000, NEAR: 50}, T0, [], False, ({}, {}))
    bal.reconcile({USDC: 900, NEAR: 50}, T0 + MINUTE, [], False, ({}, {}))  # 100 USDC gone
    first = {"at": "2026-11-22T12:01:00.000+00:00", "ok": False, "mismatches": {USDC: "-100"}}
    bal.late_fill("q", {USDC: -40, NEAR: 2}, T0 + 2 * MINUTE, T0)  # explains 40 of it
    assert bal.unresolved == {USDC: -60}
    assert bal.report == first and bal.report is bal.report
    bal.reconcile({USDC: 890, NEAR: 52}, T0 + 3 * MINUTE, [], False, ({}, {}), held=True)
    held = {"at": "2026-11-22T12:03:00.000+00:00", "ok": False, "mismatches": {USDC: "-60"}}
    assert bal.report == {**held, "held": {USDC: "-10"}}
    bal.accept({USDC: 890, NEAR: 52}, T0 + 4 * MINUTE)
    assert bal.report == {**held, "ok": True, "mismatches": {}, "held": {USDC: "-10"}}
    bal.report = first  # restored from a snapshot
    assert bal.report == first
