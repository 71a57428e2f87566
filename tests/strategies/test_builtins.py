"""The built-in strategies: hand-computed examples, rounding direction, fee, inventory, skew."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core.market import QuoteRequest, ReferencePrice, StaticMarket
from strategies import (
    AmmConfig,
    AmmStrategy,
    InventorySkewConfig,
    InventorySkewStrategy,
    SpreadConfig,
    SpreadStrategy,
)
from strategies.inventory_skew import realised_variance
from strategies.pricing import U128_MAX, fee_on, gross_outflow, max_out_for_budget
from strategies.volatility import exposure_s

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
USDC, ETH, WNEAR = "nep141:usdc.t", "nep141:eth.t", "nep141:wrap.t"
DECIMALS = {USDC: 6, ETH: 18, WNEAR: 24}
# 2.5 and 2000.0 are exact binary floats, so the expected values below are exact decimals.
PRICES = {USDC: 1.0, ETH: 2000.0, WNEAR: 2.5}


def market(
    balances: dict[str, int],
    *,
    fee_pips: int = 0,
    age_s: float = 1.0,
    prices: dict[str, float] | None = None,
    history: dict[str, list[tuple[datetime, float]]] | None = None,
) -> StaticMarket:
    stamp = NOW - timedelta(seconds=age_s)
    return StaticMarket(
        now=NOW,
        balances=balances,
        prices={a: ReferencePrice(p, stamp) for a, p in (prices or PRICES).items()},
        token_decimals=DECIMALS,
        fee_pips=fee_pips,
        history=history,
    )


def req(asset_in: str, asset_out: str, amount: int, *, exact_in: bool = True) -> QuoteRequest:
    return QuoteRequest("q", asset_in, asset_out, exact_in, amount, 60_000)


# --------------------------------------------------------------------------------------- amm

X, Y = 10_000 * 10**6, 5 * 10**18  # 10k USDC and 5 ETH of free inventory
AMM_POOL = market({USDC: X, ETH: Y})


def test_amm_exact_in_by_hand() -> None:
    amm = AmmStrategy(AmmConfig(margin_bps=30))
    amount_in = 100 * 10**6
    effective = amount_in * (1 - Fraction(30, 10_000))
    expected = math.floor(Y * effective / (X + effective))
    assert expected == 49_357_901_719_853_064
    assert amm.quote(req(USDC, ETH, amount_in), AMM_POOL) == expected
    assert amm.reference_amount(req(USDC, ETH, amount_in), AMM_POOL) == Fraction(amount_in * Y, X)


def test_amm_exact_out_by_hand_rounds_up() -> None:
    amm = AmmStrategy(AmmConfig(margin_bps=30))
    out = 10**18
    exact = Fraction(X * out) / ((Y - out) * (1 - Fraction(30, 10_000)))
    assert exact == Fraction(2_500_000_000_000, 997)  # 2507522567.70…, not an integer
    assert amm.quote(req(USDC, ETH, out, exact_in=False), AMM_POOL) == 2_507_522_568


def test_amm_exact_in_rounds_down() -> None:
    amm = AmmStrategy(AmmConfig(margin_bps=0))
    pool = market({USDC: 3, ETH: 10})
    # budget = 10 * 1 / (3 + 1) = 2.5 -> 2
    assert amm.quote(req(USDC, ETH, 1), pool) == 2
    # exact-out 2: in = ceil(3 * 2 / 8) = ceil(0.75) = 1
    assert amm.quote(req(USDC, ETH, 2, exact_in=False), pool) == 1


def test_amm_prices_in_the_fee() -> None:
    amm = AmmStrategy(AmmConfig(margin_bps=30))
    pool = market({USDC: X, ETH: Y}, fee_pips=100)
    out = amm.quote(req(USDC, ETH, 100 * 10**6), pool)
    budget = 49_357_901_719_853_064  # the fee-free answer above
    assert out == budget * 10**6 // (10**6 + 100) == 49_352_966_423_210_742
    assert out + fee_on(out, 100) <= budget < (out + 1) + fee_on(out + 1, 100)
    # exact-out: the curve must release the amount plus its fee
    gross = gross_outflow(10**18, 100)
    expected = math.ceil(Fraction(X * gross) / ((Y - gross) * Fraction(9970, 10_000)))
    assert amm.quote(req(USDC, ETH, 10**18, exact_in=False), pool) == expected


@pytest.mark.parametrize(
    ("balances", "request_"),
    [
        ({USDC: 0, ETH: Y}, req(USDC, ETH, 10**6)),
        ({USDC: X, ETH: 0}, req(USDC, ETH, 10**6)),
        ({USDC: X, ETH: Y}, req(USDC, ETH, Y, exact_in=False)),  # the pool cannot pay it all
        ({USDC: X, ETH: Y}, req(USDC, ETH, Y + 1, exact_in=False)),
        ({USDC: 1, ETH: 1}, req(USDC, ETH, 1)),  # rounds to 0 -> no quote
    ],
)
def test_amm_declines(balances: dict[str, int], request_: QuoteRequest) -> None:
    assert AmmStrategy().quote(request_, market(balances)) is None


def test_amm_huge_amounts_stay_u128() -> None:
    amm = AmmStrategy()
    pool = market({USDC: 2**127, ETH: 2**127}, fee_pips=100)
    out = amm.quote(req(USDC, ETH, U128_MAX), pool)
    assert out is not None and 1 <= out < 2**127
    assert amm.quote(req(USDC, ETH, 2**127 - 1, exact_in=False), pool) is None


balance = st.integers(min_value=0, max_value=2**127)
size = st.integers(min_value=1, max_value=U128_MAX)


@settings(max_examples=200, deadline=None)
@given(
    x=balance,
    y=balance,
    a=size,
    b=size,
    margin=st.integers(min_value=0, max_value=1000),
    fee=st.integers(min_value=0, max_value=10_000),
)
def test_amm_properties(x: int, y: int, a: int, b: int, margin: int, fee: int) -> None:
    """Within the pool, monotonic, with a worsening average price, and consistent both ways."""
    amm = AmmStrategy(AmmConfig(margin_bps=margin))
    pool = market({USDC: x, ETH: y}, fee_pips=fee)
    small, big = sorted((a, b))
    out_small = amm.quote(req(USDC, ETH, small), pool) or 0
    out_big = amm.quote(req(USDC, ETH, big), pool) or 0
    assert gross_outflow(out_big, fee) <= y and gross_outflow(out_small, fee) <= y
    assert out_big >= out_small
    # the average price gets worse with size. Compared on the gross outflow (what the curve
    # releases), which loses at most 2 units to rounding: out rounds down, the fee rounds up.
    assert gross_outflow(out_big, fee) * small <= (gross_outflow(out_small, fee) + 2) * big
    # exact-out is monotonic too, and paying what it asks buys at least the amount
    if out_small:
        in_small = amm.quote(req(USDC, ETH, out_small, exact_in=False), pool)
        assert in_small is not None
        if out_big > out_small:
            in_big = amm.quote(req(USDC, ETH, out_big, exact_in=False), pool)
            assert in_big is not None and in_big >= in_small
        assert (amm.quote(req(USDC, ETH, in_small), pool) or 0) >= out_small


# ------------------------------------------------------------------------------------ spread

BOOK = {USDC: 1_000_000 * 10**6, ETH: 100 * 10**18, WNEAR: 1_000_000 * 10**24}


def test_spread_exact_in_by_hand() -> None:
    spread = SpreadStrategy(SpreadConfig(spread_bps=20))
    # 1000 USDC at $1 into wNEAR at $2.5 = 400 wNEAR; keep 20 bp -> 399.2 wNEAR
    request = req(USDC, WNEAR, 1000 * 10**6)
    assert spread.reference_amount(request, market(BOOK)) == 400 * 10**24
    assert spread.quote(request, market(BOOK)) == 399_200_000_000_000_000_000_000_000


def test_spread_exact_out_by_hand_rounds_up() -> None:
    spread = SpreadStrategy(SpreadConfig(spread_bps=20))
    # 100 wNEAR = $250 = 250e6 USDC units; / 0.998 = 250501002.004… -> 250501003
    request = req(USDC, WNEAR, 100 * 10**24, exact_in=False)
    assert Fraction(250 * 10**6) / Fraction(998, 1000) == Fraction(125_000_000_000, 499)
    assert spread.quote(request, market(BOOK)) == 250_501_003


def test_spread_exact_in_rounds_down() -> None:
    spread = SpreadStrategy(SpreadConfig(spread_bps=0))
    # 1 unit of wNEAR (1e-24 wNEAR = $2.5e-24) is 2.5e-18 USDC units: rounds to nothing
    assert spread.quote(req(WNEAR, USDC, 1), market(BOOK)) is None
    # 7e8 wei = $1.4e-6 = 1.4 USDC units -> 1; 1e9 - 1 wei = 1.999999998 units -> 1
    assert spread.quote(req(ETH, USDC, 7 * 10**8), market(BOOK)) == 1
    assert spread.quote(req(ETH, USDC, 10**9 - 1), market(BOOK)) == 1
    assert spread.quote(req(ETH, USDC, 10**9), market(BOOK)) == 2
    # exact-out of 1 USDC unit costs 5e8 wei exactly at zero spread, 1 more wei at 1 bp
    assert spread.quote(req(ETH, USDC, 1, exact_in=False), market(BOOK)) == 5 * 10**8
    one_bp = SpreadStrategy(SpreadConfig(spread_bps=1))
    # 5e8 / 0.9999 = 500050005.0005… -> rounds up
    assert one_bp.quote(req(ETH, USDC, 1, exact_in=False), market(BOOK)) == 500_050_006


def test_spread_fee_and_widening() -> None:
    cfg = SpreadConfig(spread_bps=20, widen_bps_per_1k_usd=10)
    request = req(USDC, WNEAR, 1000 * 10**6)  # $1000 -> 20 + 10 = 30 bp
    assert SpreadStrategy(cfg).quote(request, market(BOOK)) == 398_800_000 * 10**18
    with_fee = SpreadStrategy(cfg).quote(request, market(BOOK, fee_pips=100))
    assert with_fee == max_out_for_budget(398_800_000 * 10**18, 100)
    assert with_fee is not None and with_fee < 398_800_000 * 10**18
    # $100k widens by 1000 bp, beyond max_spread_bps=500: declined
    assert SpreadStrategy(cfg).quote(req(USDC, WNEAR, 100_000 * 10**6), market(BOOK)) is None


def test_spread_declines_stale_missing_and_short() -> None:
    spread = SpreadStrategy(SpreadConfig(max_price_age_s=10))
    request = req(USDC, ETH, 1000 * 10**6)
    assert spread.quote(request, market(BOOK, age_s=5)) is not None
    assert spread.quote(request, market(BOOK, age_s=11)) is None
    assert spread.quote(request, market(BOOK, prices={USDC: 1.0})) is None
    assert spread.quote(request, market(BOOK, prices={USDC: 1.0, ETH: float("nan")})) is None
    assert spread.quote(request, market({**BOOK, ETH: 10**17})) is None  # 0.5 ETH needed
    exact_out = req(USDC, ETH, 10**18, exact_in=False)
    assert spread.quote(exact_out, market({**BOOK, ETH: 10**18})) is not None
    assert spread.quote(exact_out, market({**BOOK, ETH: 10**18}, fee_pips=1)) is None


# ------------------------------------------------------------------- spread: exposure time


def test_spread_widens_with_the_exposure_time_by_hand() -> None:
    cfg = SpreadConfig(spread_bps=20, exposure_vol_mult=2, vol_bps_per_sqrt_s=1.5)
    spread = SpreadStrategy(cfg)
    book = replace(market(BOOK), deadline_margin_ms=4_000)
    request = req(USDC, WNEAR, 1000 * 10**6)  # min_deadline_ms 60,000: T = 64 s, √T = 8
    assert exposure_s(request, book) == 64.0
    assert spread.exposure_bps(request, book) == 24.0  # 2 * 1.5 bps/√s * 8
    # 400 wNEAR fair, keep 20 + 24 = 44 bp -> 398.24 wNEAR
    assert spread.quote(request, book) == 398_240_000 * 10**18
    exact_out = req(USDC, WNEAR, 100 * 10**24, exact_in=False)  # $250 / 0.9956, rounded up
    expected = math.ceil(Fraction(250 * 10**6) / (1 - Fraction(44, 10_000)))
    assert spread.quote(exact_out, book) == expected == 251_104_862
    # A shorter deadline, less spread; a view without a margin counts min_deadline_ms alone.
    shorter = QuoteRequest("q", USDC, WNEAR, True, 1000 * 10**6, 12_000)  # T = 16 s
    assert spread.exposure_bps(shorter, book) == 12.0
    assert spread.exposure_bps(request, market(BOOK)) == pytest.approx(2 * 1.5 * math.sqrt(60))
    # Off by default: the figures of a plain spread.
    plain = SpreadStrategy(SpreadConfig(spread_bps=20, vol_bps_per_sqrt_s=1.5))
    assert plain.exposure_bps(request, book) == 0.0
    assert plain.quote(request, book) == 399_200_000_000_000_000_000_000_000


def test_spread_exposure_with_size_widening_and_beyond_the_max() -> None:
    cfg = SpreadConfig(
        spread_bps=20, widen_bps_per_1k_usd=10, exposure_vol_mult=1, vol_bps_per_sqrt_s=1
    )
    book = replace(market(BOOK), deadline_margin_ms=4_000)
    request = req(USDC, WNEAR, 1000 * 10**6)  # 20 + 10 + 1 * 1 * 8 = 38 bp
    assert SpreadStrategy(cfg).spread_bps(request, book) == 38
    assert SpreadStrategy(cfg).quote(request, book) == 398_480_000 * 10**18
    # Too volatile to price within max_spread_bps: declined, on either path.
    wild = SpreadConfig(spread_bps=20, exposure_vol_mult=3, vol_bps_per_sqrt_s=21)  # +504
    assert SpreadStrategy(wild).quote(request, book) is None
    assert (
        SpreadStrategy(wild.model_copy(update={"widen_bps_per_1k_usd": 1})).quote(request, book)
        is None
    )


def test_spread_exposure_from_the_price_history() -> None:
    sigma2 = 1e-8  # per second: 1 bp/√s
    history = {ETH: gbm(sigma2, 400, 60.0, seed=3), USDC: gbm(1e-10, 400, 60.0, seed=4)}
    book = replace(market(BOOK, history=history), deadline_margin_ms=4_000)
    request = req(USDC, ETH, 1000 * 10**6)
    cfg = SpreadConfig(spread_bps=20, exposure_vol_mult=2, vol_from_history=True)
    variance = realised_variance(history[ETH], 10) + realised_variance(history[USDC], 10)
    expected = 2 * math.sqrt(variance) * 10_000 * 8
    got = SpreadStrategy(cfg).exposure_bps(request, book)
    assert got == pytest.approx(expected) and got == pytest.approx(16.0, rel=0.15)
    # vol_bps_per_sqrt_s is a floor under the estimate, and stands in while history is short.
    floored = cfg.model_copy(update={"vol_bps_per_sqrt_s": 5.0})
    assert SpreadStrategy(floored).exposure_bps(request, book) == 80.0
    short = replace(book, history={ETH: history[ETH][:5]})
    assert SpreadStrategy(cfg).exposure_bps(request, short) == 0.0
    assert SpreadStrategy(floored).exposure_bps(request, short) == 80.0
    with pytest.raises(ValueError, match="vol_min_history"):
        SpreadConfig(vol_min_history=50, vol_max_history=50)


def test_skew_half_spread_widens_with_the_exposure_time() -> None:
    history = {ETH: gbm(1e-8, 200, 60.0)}
    base = InventorySkewConfig(min_spread_bps=0, max_spread_bps=300, gamma=0.1, horizon_s=60)
    book = replace(market(BOOK, history=history), deadline_margin_ms=4_000)
    request = req(USDC, ETH, 1000 * 10**6)
    without = InventorySkewStrategy(base).components(request, book)
    exposed = base.model_copy(update={"exposure_vol_mult": 1.5})
    with_exposure = InventorySkewStrategy(exposed).components(request, book)
    sigma_bps = math.sqrt(without.var_in + without.var_out) * 10_000
    assert with_exposure.half_spread_bps - without.half_spread_bps == pytest.approx(
        1.5 * sigma_bps * 8
    )
    out_without = InventorySkewStrategy(base).quote(request, book)
    out_with = InventorySkewStrategy(exposed).quote(request, book)
    assert out_without is not None and out_with is not None and out_with < out_without


# ---------------------------------------------------------------------------- inventory_skew


def gbm(sigma2_per_s: float, n: int, dt: float, seed: int = 1) -> list[tuple[datetime, float]]:
    rng = np.random.default_rng(seed)
    path = np.cumsum(rng.normal(0, math.sqrt(sigma2_per_s * dt), n))
    start = NOW - timedelta(seconds=n * dt)
    return [(start + timedelta(seconds=dt * i), 100 * math.exp(v)) for i, v in enumerate(path)]


def test_realised_variance_estimates_per_second_variance() -> None:
    sigma2 = 0.8**2 / 31_557_600  # 80 % a year
    estimate = realised_variance(gbm(sigma2, 3000, 60.0), 10)
    assert estimate == pytest.approx(sigma2, rel=0.1)
    assert realised_variance(gbm(sigma2, 5, 60.0), 10) == 0.0
    messy = [(NOW, 1.0), (NOW, 2.0), (NOW - timedelta(1), 3.0), (NOW, float("nan"))]
    assert realised_variance(messy, 1) == 0.0


def test_skew_without_history_is_min_spread() -> None:
    skew = InventorySkewStrategy(InventorySkewConfig(min_spread_bps=20, targets={USDC: 0.5}))
    plain = SpreadStrategy(SpreadConfig(spread_bps=20))
    for request in (req(USDC, ETH, 1000 * 10**6), req(USDC, ETH, 10**17, exact_in=False)):
        assert skew.quote(request, market(BOOK)) == plain.quote(request, market(BOOK))


def test_skew_leans_against_inventory() -> None:
    history = {a: gbm(1e-8, 200, 60.0, seed=i) for i, a in enumerate(DECIMALS)}
    cfg = InventorySkewConfig(targets={USDC: 0.5, ETH: 0.5}, max_skew_bps=50, max_spread_bps=300)
    skew = InventorySkewStrategy(cfg)
    request = req(USDC, ETH, 1000 * 10**6)  # the user sells USDC, buys ETH
    balanced = market({USDC: 200_000 * 10**6, ETH: 100 * 10**18}, history=history)
    usdc_heavy = market({USDC: 380_000 * 10**6, ETH: 10 * 10**18}, history=history)
    eth_heavy = market({USDC: 20_000 * 10**6, ETH: 190 * 10**18}, history=history)
    parts = skew.components(request, usdc_heavy)
    assert parts.q_in > 0 > parts.q_out and parts.skew_bps < 0
    out_balanced = skew.quote(request, balanced)
    out_usdc_heavy = skew.quote(request, usdc_heavy)
    out_eth_heavy = skew.quote(request, eth_heavy)
    assert out_balanced is not None and out_usdc_heavy is not None and out_eth_heavy is not None
    # short of ETH and long USDC: pays less ETH; long ETH: pays more (rebalancing flow)
    assert out_usdc_heavy < out_balanced < out_eth_heavy
    components = skew.components(request, balanced)
    assert components.skew_bps == pytest.approx(0.0, abs=1e-9)
    assert cfg.min_spread_bps <= components.half_spread_bps <= cfg.max_spread_bps


def test_skew_spread_grows_with_volatility_and_is_clamped() -> None:
    cfg = InventorySkewConfig(min_spread_bps=5, max_spread_bps=80, gamma=50, horizon_s=3600)
    skew = InventorySkewStrategy(cfg)
    request = req(USDC, ETH, 1000 * 10**6)
    calm = market(BOOK, history={ETH: gbm(1e-9, 200, 60.0)})
    wild = market(BOOK, history={ETH: gbm(1e-8, 200, 60.0)})
    extreme = market(BOOK, history={ETH: gbm(1e-6, 200, 60.0)})
    h_calm = skew.components(request, calm).half_spread_bps
    h_wild = skew.components(request, wild).half_spread_bps
    assert cfg.min_spread_bps <= h_calm < h_wild < cfg.max_spread_bps
    assert h_wild == pytest.approx(
        50 * realised_variance(wild.price_history(ETH), 10) * 3600 / 2 * 10_000
    )
    assert skew.components(request, extreme).half_spread_bps == cfg.max_spread_bps


def test_skew_target_amounts_and_stated_edge() -> None:
    cfg = InventorySkewConfig(target_amounts={ETH: 50 * 10**18}, min_spread_bps=10)
    skew = InventorySkewStrategy(cfg)
    short = market({USDC: 100_000 * 10**6, ETH: 10 * 10**18})
    assert skew.components(req(USDC, ETH, 10**6), short).q_out < 0
    assert skew.stated_edge_bps() == -15.0
    odd = InventorySkewStrategy(InventorySkewConfig(min_spread_bps=0.3, max_skew_bps=0.1))
    assert Fraction(odd.stated_edge_bps()) <= Fraction(0.3) - Fraction(0.1)
