"""Realistic market snapshots the conformance kit runs every strategy against.

They are chosen to hit the places where pricing code breaks in practice rather than to look
typical: token decimals of 0, 6, 18 and 24 (float64 is inexact past 2**53, and 10**24 units of
wNEAR is one coin), a protocol fee, lopsided and empty inventories, stale and missing prices,
balances near 2**127, and with and without price history for volatility estimates. All are
plain :class:`~solver.core.market.StaticMarket` values built from ``seed``, so a run is
reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from solver.core.market import MarketView, ReferencePrice, StaticMarket
from strategies.pricing import scale

__all__ = ["NOW", "TOKENS", "Scenario", "TokenInfo", "default_scenarios"]

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
"""The clock of every default scenario."""

_SECONDS_PER_YEAR = 365.25 * 24 * 3600


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A test token: decimals, USD price and annual volatility for its synthetic history."""

    decimals: int
    usd: float
    volatility_annual: float


TOKENS: Mapping[str, TokenInfo] = {
    "nep141:usdc.conformance": TokenInfo(decimals=6, usd=1.0, volatility_annual=0.01),
    "nep141:eth.conformance": TokenInfo(decimals=18, usd=3150.25, volatility_annual=0.6),
    "nep141:wrap.conformance": TokenInfo(decimals=24, usd=3.2, volatility_annual=0.9),
    "nep245:mt.conformance:7": TokenInfo(decimals=0, usd=12.5, volatility_annual=1.5),
}


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named market and the assets to build requests between (every ordered pair)."""

    name: str
    market: MarketView
    assets: tuple[str, ...]

    @classmethod
    def of(cls, name: str, market: StaticMarket) -> Scenario:
        """Wrap a StaticMarket, taking its assets from ``token_decimals``."""
        return cls(name=name, market=market, assets=tuple(market.token_decimals))


def _units(usd: float, token: TokenInfo) -> int:
    """About ``usd`` dollars of ``token`` in smallest units (exact enough for a fixture)."""
    return round(usd / token.usd * 1e6) * scale(token.decimals) // 10**6


def _history(rng: np.random.Generator, token: TokenInfo) -> list[tuple[datetime, float]]:
    """Two hours of one-minute geometric-Brownian prices ending at the token's price."""
    steps, dt = 120, 60.0
    sigma = token.volatility_annual * np.sqrt(dt / _SECONDS_PER_YEAR)
    path = np.cumsum(rng.normal(0.0, sigma, steps))
    prices = token.usd * np.exp(path - path[-1])
    start = NOW - timedelta(seconds=dt * steps)
    return [(start + timedelta(seconds=dt * (i + 1)), float(p)) for i, p in enumerate(prices)]


def default_scenarios(seed: int = 0) -> list[Scenario]:
    """The built-in scenario set (see module doc)."""
    rng = np.random.default_rng(seed)
    decimals = {asset: t.decimals for asset, t in TOKENS.items()}
    fresh = {a: ReferencePrice(t.usd, NOW - timedelta(seconds=2)) for a, t in TOKENS.items()}
    stale = {a: ReferencePrice(t.usd, NOW - timedelta(days=1)) for a, t in TOKENS.items()}
    history = {a: _history(rng, t) for a, t in TOKENS.items()}
    balanced = {a: _units(100_000, t) for a, t in TOKENS.items()}
    usdc, eth, wnear, mt = TOKENS
    lopsided = {usdc: _units(1_000_000, TOKENS[usdc]), eth: 10**15, wnear: 0, mt: 1}
    whale = dict.fromkeys(TOKENS, 2**127)
    empty = dict.fromkeys(TOKENS, 0)

    def market(
        balances: Mapping[str, int],
        prices: Mapping[str, ReferencePrice] = fresh,
        fee_pips: int = 0,
        with_history: bool = True,
    ) -> StaticMarket:
        return StaticMarket(
            now=NOW,
            balances=dict(balances),
            prices=dict(prices),
            token_decimals=decimals,
            fee_pips=fee_pips,
            history=history if with_history else None,
        )

    return [
        Scenario.of("balanced", market(balanced)),
        Scenario.of("fee_1bp", market(balanced, fee_pips=100)),
        Scenario.of("fee_1pct", market(balanced, fee_pips=10_000)),
        Scenario.of("lopsided", market(lopsided, fee_pips=100)),
        Scenario.of("empty", market(empty)),
        Scenario.of("stale_prices", market(balanced, prices=stale)),
        Scenario.of("missing_prices", market(balanced, prices={usdc: fresh[usdc]})),
        Scenario.of("no_history", market(balanced, with_history=False)),
        Scenario.of("whale", market(whale, fee_pips=100)),
    ]
