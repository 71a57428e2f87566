"""The conformance kit: every built-in passes, every deliberately broken strategy fails by name."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from solver.core.market import ReferencePrice, StaticMarket
from strategies import (
    AmmConfig,
    AmmStrategy,
    InventorySkewConfig,
    InventorySkewStrategy,
    SpreadConfig,
    SpreadStrategy,
    Strategy,
)
from strategies.conformance import Check, Failure, check
from strategies.scenarios import TOKENS, Scenario, default_scenarios
from tests.strategies import broken

USDC, ETH, WNEAR, MT = TOKENS

BUILTIN_CONFIGS: list[Strategy] = [
    AmmStrategy(),
    AmmStrategy(AmmConfig(margin_bps=0)),
    AmmStrategy(AmmConfig(margin_bps=9_999)),
    SpreadStrategy(),
    SpreadStrategy(SpreadConfig(spread_bps=0, max_spread_bps=1)),
    SpreadStrategy(SpreadConfig(spread_bps=12.3, widen_bps_per_1k_usd=0.7)),
    SpreadStrategy(SpreadConfig(spread_bps=5, exposure_vol_mult=2, vol_bps_per_sqrt_s=1.3)),
    SpreadStrategy(
        SpreadConfig(
            spread_bps=5,
            widen_bps_per_1k_usd=0.2,
            exposure_vol_mult=1,
            vol_bps_per_sqrt_s=0.5,
            vol_from_history=True,
        )
    ),
    InventorySkewStrategy(),
    InventorySkewStrategy(
        InventorySkewConfig(
            targets={USDC: 0.4, ETH: 0.3, WNEAR: 0.2},
            target_amounts={MT: 1000},
            gamma=500,
            max_skew_bps=80,
            min_spread_bps=0.5,
            exposure_vol_mult=2,
        )
    ),
]


@pytest.mark.parametrize(
    "strategy", BUILTIN_CONFIGS, ids=[f"{s.name}-{i}" for i, s in enumerate(BUILTIN_CONFIGS)]
)
def test_builtins_conform(strategy: Strategy) -> None:
    report = check(strategy)
    report.assert_ok()
    assert report.quotes > 100 and report.edge_unchecked == 0


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (broken.Raising, Check.RAISED),
        (broken.Nondeterministic, Check.NONDETERMINISTIC),
        (broken.OverInventory, Check.EXCEEDS_INVENTORY),
        (broken.IgnoresSpread, Check.EDGE_VIOLATED),
        (broken.RoundsWrongWay, Check.EDGE_VIOLATED),
        (broken.ReturnsFloat, Check.BAD_TYPE),
        (broken.ReturnsNegative, Check.OUT_OF_RANGE),
        (broken.NeverQuotes, Check.NO_QUOTES),
        (broken.BadEdge, Check.BAD_EDGE),
        (broken.EdgeRaises, Check.RAISED),
        (broken.BadReference, Check.BAD_TYPE),
    ],
)
def test_broken_strategies_fail_by_name(cls: type[Strategy], expected: Check) -> None:
    report = check(cls())
    assert not report.ok
    assert report.failed_checks == {expected}, report.summary()
    with pytest.raises(AssertionError, match=str(expected)):
        report.assert_ok()


def test_honest_reference_strategy_passes() -> None:
    check(broken.HonestHalf()).assert_ok()


def test_rounding_the_wrong_way_is_caught_even_by_one_unit() -> None:
    report = check(broken.RoundsWrongWay())
    failures = [f for f in report.failures if f.request is not None]
    assert {f.request.exact_in for f in failures if f.request} == {True, False}


def test_over_inventory_is_caught_in_both_directions() -> None:
    failures = check(broken.OverInventory()).failures
    assert {f.request.exact_in for f in failures if f.request} == {True, False}
    assert any(f.scenario == "empty" for f in failures)


def test_check_is_deterministic_and_seeded() -> None:
    a, b = check(SpreadStrategy(), seed=3), check(SpreadStrategy(), seed=3)
    assert (a.requests, a.quotes) == (b.requests, b.quotes)
    assert check(broken.RoundsWrongWay(), seed=3) == check(broken.RoundsWrongWay(), seed=3)


def test_custom_markets_and_bare_static_market() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    market = StaticMarket(
        now=now,
        balances={USDC: 10**12, ETH: 10**21},
        prices={USDC: ReferencePrice(1.0, now), ETH: ReferencePrice(3000.0, now)},
        token_decimals={USDC: 6, ETH: 18},
    )
    report = check(AmmStrategy(), markets=[market, Scenario("named", market, (ETH, USDC))])
    report.assert_ok()
    assert report.requests > 0
    only = [market]
    assert check(broken.OverInventory(), markets=only).failed_checks == {Check.EXCEEDS_INVENTORY}
    assert check(broken.IgnoresSpread(), markets=only).failed_checks == {Check.EDGE_VIOLATED}


def test_default_scenarios_cover_the_edge_cases() -> None:
    scenarios = {s.name: s for s in default_scenarios()}
    assert {"balanced", "empty", "stale_prices", "missing_prices", "whale"} <= set(scenarios)
    decimals = {scenarios["balanced"].market.decimals(a) for a in TOKENS}
    assert {6, 18, 24} <= decimals
    assert any(s.market.fee_pips > 0 for s in scenarios.values())
    assert all(scenarios["empty"].market.free(a) == 0 for a in TOKENS)


def test_failure_text_names_the_request() -> None:
    report = check(broken.Raising())
    text = str(report.failures[0])
    assert text.startswith("raised: ") and "exact-" in text and "boom" in text
    assert isinstance(report.failures[0], Failure)
    assert "raised x" in report.summary()
