"""The taker model: no fill beyond the user's limit, under every fill model (issue 12)."""

from __future__ import annotations

import math
import statistics
from datetime import UTC, datetime
from pathlib import Path

import pytest

from backtest.fills import LOST_TAKER, FillModel, edge_bps, make_fill_model
from backtest.settings import FILL_MODELS, FillSpec, TakerSpec, UnobservedSpec, load_settings
from backtest.takers import TakerModel
from solver.core.clock import micros
from solver.core.lifecycle import Quote
from solver.core.market import QuoteRequest

USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
DEADLINE = micros(datetime(2026, 1, 5, 12, 1, tzinfo=UTC))


def sell_near(quote_id: str, usdc_out: int) -> Quote:
    """The user pays 1 wNEAR (3 USD at the reference) and gets ``usdc_out`` micro-USDC."""
    request = QuoteRequest(quote_id, NEAR, USDC, True, 10**24, 60_000)
    return Quote(
        request.quote_id,
        request.asset_in,
        request.asset_out,
        10**24,
        usdc_out,
        0,
        DEADLINE,
        request.exact_in,
    )


def edge_of(q: Quote) -> float:
    return edge_bps(q.amount_in, 3.0 / 1e24, q.amount_out, 1.0 / 1e6)


UNCONTESTED = UnobservedSpec(mode="uncontested")


def models(seed: int, taker: TakerSpec | None = None) -> list[FillModel]:
    spec = taker or TakerSpec()
    return [
        # Competition left out (uncontested): what is tested is the taker alone.
        make_fill_model(FillSpec(model=m, a=50.0, b=0.0, taker=spec, unobserved=UNCONTESTED), seed)
        for m in FILL_MODELS
    ]


def test_a_drained_amm_quote_never_fills_without_competition() -> None:
    """The issue's stream: no competitor line, an AMM whose inventory drained answers with
    next to nothing (edge -10,000 bps). The logistic here (a=50, b=0) would take anything."""
    drained = sell_near("drained", 1)
    edge = edge_of(drained)
    assert edge == pytest.approx(-10_000, abs=0.01)
    for seed in range(20):
        for model in models(seed):
            for i in range(50):
                q = sell_near(f"q{seed}-{i}", 1)
                assert model.decide(q, None, edge) == LOST_TAKER, (model.name, seed, i)
    # The widest limit the settings allow (5,000 bps) still refuses it.
    widest = TakerSpec(kind="fixed", tolerance_bps=5_000, max_bps=5_000)
    for model in models(0, widest):
        assert model.decide(drained, None, edge) == LOST_TAKER


def test_the_issue_overcharges_are_refused_and_fair_quotes_are_not() -> None:
    """5-76 % over the reference (the issue's 1,441 fills) never fills; 10 bps does."""
    for model in models(3):
        for overcharge in (0.05, 0.2, 0.76):
            q = sell_near("over", round(3e6 * (1 - overcharge)))
            assert model.decide(q, None, edge_of(q)) == LOST_TAKER
        fair = sell_near("fair", 2_997_000)  # 10 bps under the reference
        assert model.decide(fair, None, edge_of(fair)) is None, model.name


def test_an_edge_without_a_value_is_refused() -> None:
    for model in models(0):
        assert model.decide(sell_near("nan", 3_000_000), None, math.nan) == LOST_TAKER


def test_the_limit_belongs_to_the_request() -> None:
    """The same user (quote_id, seed) has the same limit whenever and in whatever order it is
    asked; another seed or another request gives another limit."""
    takers = TakerModel(TakerSpec(), 7)
    ids = [f"synth-7-{i:09d}" for i in range(200)]
    forward = [takers.limit_bps(i) for i in ids]
    backward = [TakerModel(TakerSpec(), 7).limit_bps(i) for i in reversed(ids)]
    assert forward == backward[::-1]
    assert forward != [TakerModel(TakerSpec(), 8).limit_bps(i) for i in ids]
    assert len(set(forward)) == len(forward)


def test_the_default_distribution_is_the_documented_one() -> None:
    takers = TakerModel(TakerSpec(), 0)
    limits = sorted(takers.limit_bps(f"r{i}") for i in range(20_000))
    assert statistics.median(limits) == pytest.approx(60, rel=0.03)
    assert limits[1_000] == pytest.approx(26.4, rel=0.05)  # 5th percentile
    assert limits[19_000] == pytest.approx(136.6, rel=0.05)  # 95th percentile
    capped = TakerModel(TakerSpec(sigma=3.0, max_bps=200), 0)
    assert max(capped.limit_bps(f"r{i}") for i in range(5_000)) == 200.0
    fixed = TakerModel(TakerSpec(kind="fixed", tolerance_bps=60), 0)
    assert fixed.accepts("x", -60.0) and not fixed.accepts("x", -60.001)


def test_the_limit_is_applied_at_its_edge_for_every_user() -> None:
    takers = TakerModel(TakerSpec(), 1)
    for i in range(500):
        limit = takers.limit_bps(f"u{i}")
        assert takers.accepts(f"u{i}", -limit) and not takers.accepts(f"u{i}", -limit - 1e-6)


def test_settings_read_the_taker_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bt.yaml"
    path.write_text("fill: {model: logistic, taker: {kind: fixed, tolerance_bps: 30}}\n")
    spec = load_settings(path, fill_model="competitor").fill
    assert spec.model == "competitor" and spec.taker == TakerSpec(kind="fixed", tolerance_bps=30)
    assert load_settings(None).fill.taker == TakerSpec()


def test_logistic_draws_do_not_depend_on_the_taker() -> None:
    """Tightening the takers changes which answers are refused, never the other verdicts."""

    def verdicts(tolerance: float) -> list[str | None]:
        taker = TakerSpec(kind="fixed", tolerance_bps=tolerance)
        model = make_fill_model(FillSpec(model="logistic", a=0.0, b=0.05, taker=taker), 5)
        return [model.decide(sell_near(f"q{i}", 1), None, -10.0 * (i % 4)) for i in range(400)]

    loose, tight = verdicts(100), verdicts(15)
    for i, (a, b) in enumerate(zip(loose, tight, strict=True)):
        assert b == (LOST_TAKER if i % 4 >= 2 else a)
