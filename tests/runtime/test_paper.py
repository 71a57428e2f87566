"""solver.runtime.paper: the paper book of shadow mode, synchronous (time is an argument)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest
from prometheus_client import generate_latest

from backtest.settings import FillSpec, TakerSpec
from solver.config.shadow import ShadowFillSpec, ShadowSpec, ShadowTakerSpec
from solver.core.clock import MINUTE, micros
from solver.core.lifecycle import Quote
from solver.core.market import QuoteRequest
from solver.core.pnl import FillValue, PnlBook
from solver.io.metrics import Metrics
from solver.io.paper_metrics import PaperMetrics, PaperSnapshot
from solver.runtime.paper import LOST_INVENTORY, PaperBook, fill_spec

USDC, NEAR = "nep141:usdc", "nep141:wrap"
DECIMALS = {USDC: 6, NEAR: 24}
E6, E24 = 10**6, 10**24
NOW = micros(datetime(2025, 1, 1, tzinfo=UTC))
PRICES = {USDC: 1.0, NEAR: 3.0}
CONFIRMED = {USDC: 1_000 * E6, NEAR: 100 * E24}


def spec(model: str = "always", tolerance_bps: float = 60.0, **fill: float) -> ShadowSpec:
    taker = {"kind": "fixed", "tolerance_bps": tolerance_bps}
    return ShadowSpec.model_validate({"fill": {"model": model, "taker": taker, **fill}})


def sell_near(quote_id: str, near: int, usdc: int, fee: int = 0) -> Quote:
    """The user sells ``near`` wNEAR (our amount_in) for ``usdc`` USDC (our amount_out)."""
    request = QuoteRequest(quote_id, NEAR, USDC, True, near, 60_000, None)
    return Quote(
        request.quote_id,
        request.asset_in,
        request.asset_out,
        near,
        usdc,
        fee,
        NOW + MINUTE,
        request.exact_in,
    )


def test_a_taken_quote_books_its_flows_and_its_realized_edge() -> None:
    book = PaperBook(spec(), DECIMALS)
    # 10 wNEAR (30 USD) for 29.925 USDC and a 0.01 USDC fee: 25 bp of spread, 0.065 USD edge.
    fill = book.on_quote(sell_near("q1", 10 * E24, 29_925_000, 10_000), NOW, PRICES.get, CONFIRMED)
    assert fill is not None
    assert fill.edge_bps == pytest.approx(-25.0)
    expected = PnlBook(DECIMALS, ()).value(FillValue("q1", NEAR, 10 * E24, USDC, 29_935_000), 3, 1)
    assert fill.realized_usd == expected == pytest.approx(0.065)
    assert book.flows == {NEAR: 10 * E24, USDC: -29_935_000}
    assert book.balance(USDC, CONFIRMED) == 1_000 * E6 - 29_935_000
    assert book.marked_usd(PRICES.get) == pytest.approx(0.065)
    # wNEAR rises to 3.3 USD: the 10 wNEAR we hold are worth 3 USD more.
    assert book.marked_usd({USDC: 1.0, NEAR: 3.3}.get) == pytest.approx(3.065)
    assert book.marked_usd({USDC: 1.0}.get) is None  # an unpriced holding: unknown
    doc = book.doc([NEAR, USDC], CONFIRMED, PRICES.get)
    assert (doc["fills"], doc["quotes"], doc["fill_rate"]) == (1, 1, 1.0)
    assert doc["recent_fills"][0]["amount_in"] == str(10 * E24)
    assert doc["balances"][NEAR] == str(110 * E24)
    ((direction, (count, realized)),) = book.by_direction.items()
    assert (direction, count, realized) == ((NEAR, USDC), 1, expected)


def test_the_taker_refuses_a_price_beyond_its_limit_and_an_unpriced_answer() -> None:
    book = PaperBook(spec(tolerance_bps=20), DECIMALS)
    assert book.on_quote(sell_near("q1", 10 * E24, 29_925_000), NOW, PRICES.get, CONFIRMED) is None
    assert book.on_quote(sell_near("q2", 10 * E24, 29_970_000), NOW, PRICES.get, CONFIRMED)
    assert (
        book.on_quote(sell_near("q3", 10 * E24, 30 * E6), NOW, {USDC: 1.0}.get, CONFIRMED) is None
    )
    assert (book.quotes, book.fills, dict(book.lost)) == (3, 1, {"taker_limit": 2})


def test_paper_inventory_limits_what_is_paid_out_above_the_floor() -> None:
    book = PaperBook(spec(), DECIMALS, floors={USDC: 990 * E6})
    # 10 USDC above the floor: a 6 USDC payout fits once, not twice.
    assert book.on_quote(sell_near("q1", 2 * E24, 5_990_000), NOW, PRICES.get, CONFIRMED)
    assert book.on_quote(sell_near("q2", 2 * E24, 5_990_000), NOW, PRICES.get, CONFIRMED) is None
    assert dict(book.lost) == {LOST_INVENTORY: 1}


@pytest.mark.parametrize(("a", "fills"), [(50.0, 20), (-50.0, 0)])
def test_the_logistic_model_decides_with_its_calibrated_odds(a: float, fills: int) -> None:
    book = PaperBook(spec("logistic", a=a, b=0.05), DECIMALS)
    for i in range(20):
        book.on_quote(sell_near(f"q{i}", E24, 2_990_000), NOW, PRICES.get, CONFIRMED)
    assert book.fills == fills
    assert book.lost.get("model", 0) == 20 - fills


def test_logistic_draws_are_reproducible_for_a_seed() -> None:
    def run(seed: int) -> list[bool]:
        s = spec("logistic", a=0.0, b=0.05).model_copy(update={"seed": seed})
        book = PaperBook(s, DECIMALS)
        quotes = [sell_near(f"q{i}", E24, 2_990_000) for i in range(40)]
        return [book.on_quote(q, NOW, PRICES.get, CONFIRMED) is not None for q in quotes]

    assert run(7) == run(7)
    assert 0 < sum(run(7)) < 40


def test_the_shadow_section_mirrors_the_backtest_fill_settings() -> None:
    """The config does not import the backtest; the field names and defaults must agree."""
    # ``unobserved`` and ``race`` belong to the competitor model, which shadow mode does not
    # offer.
    competitor_only = {"unobserved", "race"}
    assert set(ShadowFillSpec.model_fields) == set(FillSpec.model_fields) - competitor_only
    assert set(ShadowTakerSpec.model_fields) == set(TakerSpec.model_fields)
    assert fill_spec(ShadowSpec()) == FillSpec(model="logistic")
    custom = spec("logistic", tolerance_bps=33, a=1.5, b=0.2)
    assert fill_spec(custom) == FillSpec(
        model="logistic", a=1.5, b=0.2, taker=TakerSpec(kind="fixed", tolerance_bps=33)
    )


def test_the_fill_models_import_neither_the_runtime_nor_the_sandbox() -> None:
    """DESIGN: runtime may use the backtest's models only while they stay pure."""
    code = (
        "import sys, backtest.fills, backtest.takers\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'sandbox' or "
        "m.startswith(('solver.runtime', 'solver.cli')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_paper_metrics_follow_the_book() -> None:
    metrics = Metrics()
    paper = PaperMetrics(metrics.registry)
    snapshot = PaperSnapshot(
        fills=3,
        lost={"taker_limit": 2},
        pnl_marked_usd=None,
        pnl_realized_usd=0.25,
        inventory={USDC: 1_500_000},
        decimals=DECIMALS,
    )
    paper.refresh(snapshot)
    paper.refresh(snapshot)  # cumulative totals: counted once
    text = generate_latest(metrics.registry).decode()
    assert "solver_paper_fills_total 3.0" in text
    assert 'solver_paper_lost_total{reason="taker_limit"} 2.0' in text
    assert "solver_paper_pnl_marked_usd NaN" in text
    assert "solver_paper_pnl_realized_usd 0.25" in text
    assert f'solver_paper_inventory{{asset="{USDC}"}} 1.5' in text
