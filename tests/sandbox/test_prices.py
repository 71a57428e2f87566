"""The sandbox reference-price process (GBM), its amount helpers and its HTTP app."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import numpy as np
import pytest

from sandbox.config import PricesSpec, TokenSpec
from sandbox.prices import (
    SECONDS_PER_YEAR,
    PriceProcess,
    amount_to_usd,
    create_prices_app,
    format_usd,
    usd_to_amount,
)
from sandbox.serving import serving as serve

USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"
MT = "nep245:mt.sandbox:42"
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)

TOKENS = {
    USDC: TokenSpec(symbol="USDC", decimals=6, usd=1.0),
    WNEAR: TokenSpec(symbol="wNEAR", decimals=24, usd=3.2, volatility_annual=0.8),
    MT: TokenSpec(symbol="MT42", decimals=0, usd=12_345.678, volatility_annual=1.5),
}


class StepClock:
    """A clock that moves one second per read: updates get distinct, predictable stamps."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def make(seed: int = 1, tokens: dict[str, TokenSpec] | None = None) -> PriceProcess:
    return PriceProcess(tokens or TOKENS, seed=seed, clock=StepClock())


def test_same_seed_same_path_and_different_seed_differs() -> None:
    a, b, c = make(seed=5), make(seed=5), make(seed=6)
    for _ in range(50):
        for proc in (a, b, c):
            proc.step(60.0)
    assert [a.usd(x) for x in a.assets] == [b.usd(x) for x in b.assets]
    assert a.usd(WNEAR) != c.usd(WNEAR)
    assert a.steps == 50


def test_negative_seed_is_accepted() -> None:
    make(seed=-3).step(1.0)


def test_zero_volatility_is_constant_and_does_not_shift_others() -> None:
    proc = make()
    for _ in range(1000):
        proc.step(3600.0)
    assert proc.usd(USDC) == 1.0
    # Adding volatility to USDC must not change the path of the other tokens.
    volatile = dict(TOKENS)
    volatile[USDC] = TokenSpec(symbol="USDC", decimals=6, usd=1.0, volatility_annual=0.5)
    other = make(tokens=volatile)
    for _ in range(1000):
        other.step(3600.0)
    assert other.usd(WNEAR) == proc.usd(WNEAR)
    assert other.usd(USDC) != 1.0


def test_prices_stay_positive_under_extreme_volatility() -> None:
    tokens = {WNEAR: TokenSpec(symbol="W", decimals=24, usd=3.2, volatility_annual=10.0)}
    proc = make(tokens=tokens)
    for _ in range(2000):
        proc.step(86_400.0)
        assert proc.usd(WNEAR) > 0


def test_log_returns_have_zero_mean_and_sigma_sqrt_dt_spread() -> None:
    proc = make(seed=11)
    dt, n = 3600.0, 10_000
    logs = np.empty(n + 1)
    logs[0] = math.log(proc.usd(WNEAR))
    for i in range(n):
        proc.step(dt)
        logs[i + 1] = math.log(proc.usd(WNEAR))
    returns = np.diff(logs)
    expected_std = 0.8 * math.sqrt(dt / SECONDS_PER_YEAR)
    # Standard error of the mean is expected_std/sqrt(n); 5 of them is a tolerant bound.
    assert abs(returns.mean()) < 5 * expected_std / math.sqrt(n)
    # The sample std is within ~0.7 % here (1/sqrt(2n)); allow 3 %.
    assert returns.std(ddof=1) == pytest.approx(expected_std, rel=0.03)


def test_step_rejects_bad_dt() -> None:
    proc = make()
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            proc.step(bad)


def test_rate_is_out_per_in_in_whole_units() -> None:
    proc = make()
    assert proc.rate(WNEAR, USDC) == pytest.approx(3.2)
    assert proc.rate(USDC, WNEAR) == pytest.approx(1 / 3.2)
    with pytest.raises(KeyError):
        proc.usd("nep141:nope.sandbox")


def test_snapshot_shape_and_stamp() -> None:
    proc = make()
    proc.step(1.0)
    snap = proc.snapshot()
    assert snap["ts"] == "2026-03-01T12:00:02.123Z"  # construction read 1 s, the step 1 s more
    assert snap["prices"][USDC] == {"usd": "1", "symbol": "USDC", "decimals": 6}
    assert set(snap["prices"]) == set(TOKENS)
    assert float(snap["prices"][WNEAR]["usd"]) == pytest.approx(3.2, rel=1e-3)


def test_format_usd_is_plain_decimal_with_ten_digits() -> None:
    assert format_usd(1.0) == "1"
    assert format_usd(1e-5) == "0.00001"
    assert format_usd(1234567.891234) == "1234567.891"
    assert format_usd(2.5e12) == "2500000000000"
    assert format_usd(1 / 3) == "0.3333333333"


def test_usd_to_amount_is_integer_exact_and_rounds_down() -> None:
    assert usd_to_amount(50, 3.2, 24) == 15_625 * 10**21
    assert usd_to_amount(0.1, 1, 18) == 10**17
    assert usd_to_amount(1, 3, 6) == 333_333
    assert usd_to_amount("100000", "0.000001", 24) == 10**35
    assert usd_to_amount(0, 1, 6) == 0
    for bad_price in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError):
            usd_to_amount(1, bad_price, 6)
    with pytest.raises(ValueError):
        usd_to_amount(-1, 1, 6)


def test_amount_to_usd_inverts_usd_to_amount() -> None:
    amount = usd_to_amount(123.45, 3.2, 24)
    assert abs(amount_to_usd(amount, 24, 3.2) - Decimal("123.45")) < Decimal("1e-20")


async def test_run_ticks_until_stopped() -> None:
    proc = PriceProcess(TOKENS, seed=1, spec=PricesSpec(tick_ms=10))
    stop = asyncio.Event()
    task = asyncio.create_task(proc.run(stop))
    async with asyncio.timeout(10):  # three ticks of 10 ms, however busy the machine
        while proc.steps < 3:
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, timeout=10.0)
    steps = proc.steps
    await asyncio.sleep(0.03)
    assert proc.steps == steps


async def test_http_app_serves_all_and_one_price() -> None:
    proc = make()
    async with serve(create_prices_app(proc)) as base, httpx.AsyncClient(base_url=base) as http:
        everything = await http.get("/prices")
        assert everything.status_code == 200
        body = everything.json()
        assert body == proc.snapshot()
        assert body["ts"].endswith("Z")
        assert body["prices"][MT]["decimals"] == 0

        one = await http.get(f"/prices/{MT}")  # colons inside the path segment
        assert one.status_code == 200
        assert one.json() == {"asset": MT, "usd": "12345.678", "ts": body["ts"]}

        missing = await http.get("/prices/nep141:nope.sandbox")
        assert missing.status_code == 404
        assert missing.json() == {"error": "unknown asset nep141:nope.sandbox"}
