"""PnL (realized, markouts, marked equity) and the reconciliation / kill-switch rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core.inventory import Reservation
from solver.core.pnl import PnlTracker
from solver.core.risk import RiskLimits, check_mismatch, check_pnl, check_stale, mismatches

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
E6, E24 = 10**6, 10**24


def test_realized_edge_and_markouts() -> None:
    prices = {USDC: 1.0, NEAR: 3.0}
    tracker = PnlTracker({USDC: 6, NEAR: 24})
    # We receive 1 NEAR (3 USD) and give 2.99 USDC + 0.01 fee: +0.00 edge... use round numbers.
    fill = tracker.record_fill(
        quote_id="q",
        at=T0,
        asset_in=NEAR,
        amount_in=E24,
        asset_out=USDC,
        amount_out=2_970_000,
        fee=10_000,
        price=prices.get,
    )
    assert fill is not None and fill.realized_usd == Decimal("0.02")
    prices[NEAR] = 2.9
    assert tracker.due_markouts(T0 + timedelta(seconds=0.5), prices.get) == []
    changed = tracker.due_markouts(T0 + timedelta(seconds=11), prices.get)
    assert changed == [fill]
    assert fill.markouts_usd == {1: Decimal("-0.08"), 10: Decimal("-0.08")}
    assert tracker.mean_markouts()[1] == Decimal("-0.08")


def test_marked_pnl_peak_drawdown_and_daily_loss() -> None:
    prices = {USDC: 1.0, NEAR: 3.0}
    tracker = PnlTracker({USDC: 6, NEAR: 24})
    balances = {USDC: 100 * E6, NEAR: 10 * E24}
    assert tracker.mark(T0, balances, prices.get) == Decimal(0)
    prices[NEAR] = 4.0
    assert tracker.mark(T0 + timedelta(hours=1), balances, prices.get) == Decimal(10)
    prices[NEAR] = 2.0
    pnl = tracker.mark(T0 + timedelta(hours=2), balances, prices.get)
    assert pnl == Decimal(-10)
    assert tracker.drawdown_usd(pnl) == Decimal(20)
    assert tracker.daily_loss_usd(pnl) == Decimal(10)
    breaches = check_pnl(
        RiskLimits(5.0, 15.0, {}), tracker.daily_loss_usd(pnl), tracker.drawdown_usd(pnl)
    )
    assert [b.kind for b in breaches] == ["daily_loss", "drawdown"]
    assert tracker.mark(T0, {USDC: 1}, lambda asset: None) is None


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
    assert [b.kind for b in check_mismatch(RiskLimits(1, 1, {USDC: 199}), found)] == [
        "reconciliation"
    ]
    assert check_mismatch(RiskLimits(1, 1, {USDC: 200}), found) == []


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
