"""Avellaneda–Stoikov style pricing: skew the price against inventory, spread from volatility.

A pure spread quotes the same whichever way the book leans, so flow can drain one token. Here the
solver values each asset at a *reservation price* moved away from the reference in proportion
to how far its holding is from the target, so it pays less for what it already holds too much of
and asks more for what it is short of; and it widens the spread with volatility, since a riskier
pair costs more to hold over the horizon.

Formulas (per asset ``a``; all prices relative, so ``gamma`` is dimensionless):

- Inventory deviation, a fraction of the USD value ``V`` of the tracked portfolio (assets named
  in ``targets`` / ``target_amounts`` plus the two request assets, at fresh reference prices):
  ``q_a = value_a / V - targets[a]`` or ``q_a = (value_a - target_amounts[a] * p_a) / V``;
  ``q_a = 0`` for an untracked asset. Clamped to ``[-1, 1]``.
- Volatility: per-second variance of log returns from ``market.price_history(a)`` (samples at
  irregular times are fine): ``sigma2_a = sum(ln(p_i / p_{i-1})**2) / sum(t_i - t_{i-1})``.
  Only the latest ``max_history`` samples count (bounded hot-path cost, recent regime).
  With fewer than ``min_history`` returns the asset's variance is taken as 0, which falls back
  to ``min_spread_bps`` and no skew from that asset. (An annual volatility ``v`` corresponds to
  ``sigma2 = v**2 / 31_557_600``.)
- A–S reservation price ``r_a = p_a * (1 - q_a * gamma * sigma2_a * T)`` with ``T = horizon_s``;
  the rate out/in moves by ``skew = gamma * T * (q_out * sigma2_out - q_in * sigma2_in)``,
  clamped to ``±max_skew_bps``.
- A–S half-spread ``h = gamma * (sigma2_in + sigma2_out) * T / 2`` (the pair's log-ratio
  variance is the sum for independent assets), clamped to ``[min_spread_bps, max_spread_bps]``.
  The A–S order-arrival term ``(2/gamma) ln(1 + gamma/kappa)`` is not modelled: arrival intensity
  is not observable from a quote stream, and ``min_spread_bps`` plays its role as the floor.
- Exposure (``strategies.volatility``): the quote binds the solver for
  ``T_q = (min_deadline_ms + deadline_margin_ms) / 1000`` seconds, so
  ``exposure_vol_mult * √(sigma2_in + sigma2_out) * √T_q`` (in bps) is added to ``h`` before the
  clamp: ``exposure_vol_mult`` standard deviations of the pair's move while the user may fill.
  Default 0: off.

The quote multiplies the reference rate by ``mult = 1 + skew - h`` (linear, so the bound below is
exact): exact-in ``out`` = the largest int with ``out + fee(out) <= fair(in) * mult``; exact-out
``in = ceil(fair(out + fee(out)) / mult)``. The reference is the plain reference price, so the
stated edge is ``min_spread_bps - max_skew_bps`` — negative when the skew may quote through the
reference to rebalance, which this strategy then admits to the conformance kit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from solver.core.market import MarketView, QuoteRequest
from strategies.base import Strategy, StrategyConfig
from strategies.pricing import (
    BPS,
    as_quote,
    ceil_int,
    convert,
    fresh_price,
    gross_outflow,
    max_out_for_budget,
    request_ok,
    usd_value,
)
from strategies.volatility import (
    exposure_s,
    exposure_spread_bps,
    realised_variance,
)

__all__ = ["InventorySkewConfig", "InventorySkewStrategy", "SkewComponents", "realised_variance"]
# realised_variance lives in strategies.volatility; re-exported here, where it was first.


class InventorySkewConfig(StrategyConfig):
    """Knobs of :class:`InventorySkewStrategy` (spreads and skew in basis points)."""

    targets: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict,
        description="Wanted share of the tracked portfolio's USD value, per asset id (0 to 1 "
        "each, summing to at most 1). An asset in neither map has no inventory skew.",
        json_schema_extra={"unit": "fraction"},
    )
    target_amounts: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Wanted holding per asset id, instead of a share (an asset may not be in "
        "both maps).",
        json_schema_extra={"unit": "smallest units"},
    )
    gamma: float = Field(
        default=50.0,
        gt=0,
        description="Risk aversion, dimensionless (prices are relative): scales the volatility "
        "half-spread gamma*sigma2*T/2 and the inventory skew. 50 gives a half-spread of about "
        "10 bps on a pair of a stablecoin and a 60 %-a-year asset over a 1 h horizon; the "
        "A-S paper's 0.1 is in 1/USD of an absolute price and is inert here.",
        json_schema_extra={"unit": "dimensionless"},
    )
    horizon_s: float = Field(
        default=3600.0,
        gt=0,
        description="Holding horizon T of both A-S terms: how long inventory is expected to be "
        "held. Spread and skew grow linearly with it.",
        json_schema_extra={"unit": "s"},
    )
    min_spread_bps: float = Field(
        default=10.0,
        ge=0,
        lt=BPS,
        description="Floor of the half-spread (the A-S order-arrival term, not modelled).",
        json_schema_extra={"unit": "bps"},
    )
    max_spread_bps: float = Field(
        default=300.0,
        ge=0,
        lt=BPS,
        description="Ceiling of the half-spread; at least min_spread_bps.",
        json_schema_extra={"unit": "bps"},
    )
    max_skew_bps: float = Field(
        default=25.0,
        ge=0,
        lt=BPS,
        description="Largest move of the rate towards the inventory targets, either way; "
        "max_spread_bps + max_skew_bps stays below 10000.",
        json_schema_extra={"unit": "bps"},
    )
    min_history: int = Field(
        default=10,
        ge=2,
        description="Price returns needed before an asset's volatility counts; fewer: variance "
        "0 (minimum spread, no skew from that asset). Below max_history.",
        json_schema_extra={"unit": "count"},
    )
    max_history: int = Field(
        default=500,
        ge=3,
        description="Latest price samples used for the variance (bounded cost, recent regime).",
        json_schema_extra={"unit": "count"},
    )
    max_price_age_s: float = Field(
        default=30.0,
        gt=0,
        description="A reference price older than this counts as missing: no quote.",
        json_schema_extra={"unit": "s"},
    )
    exposure_vol_mult: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description=(
            "Standard deviations of the pair's price move over the quote's exposure time "
            "(min_deadline_ms + the solver's deadline margin) added to the half-spread, "
            "dimensionless; the volatility is the realised one of the price histories "
            "(bps per √s). 0: off."
        ),
        json_schema_extra={"unit": "dimensionless"},
    )

    @model_validator(mode="after")
    def _consistent(self) -> InventorySkewConfig:
        if sum(self.targets.values()) > 1 + 1e-9:
            raise ValueError("targets must sum to at most 1")
        both = set(self.targets) & set(self.target_amounts)
        if both:
            raise ValueError(f"assets in both targets and target_amounts: {sorted(both)}")
        if self.min_history >= self.max_history:
            raise ValueError("min_history must be below max_history")
        if self.min_spread_bps > self.max_spread_bps:
            raise ValueError("min_spread_bps must not exceed max_spread_bps")
        if self.max_spread_bps + self.max_skew_bps >= BPS:
            raise ValueError("max_spread_bps + max_skew_bps must stay below 10000")
        return self


@dataclass(frozen=True, slots=True)
class SkewComponents:
    """The intermediate values of one pricing decision, for logs, tests and tuning."""

    q_in: float
    q_out: float
    var_in: float
    var_out: float
    half_spread_bps: float
    skew_bps: float

    @property
    def multiplier(self) -> Fraction:
        """``1 + skew - h`` as an exact Fraction of the two clamped floats."""
        return 1 + (Fraction(self.skew_bps) - Fraction(self.half_spread_bps)) / BPS


def _clamp(value: float, low: float, high: float) -> float:
    if not math.isfinite(value):
        return high if value > 0 else low
    return min(max(value, low), high)


class InventorySkewStrategy(Strategy):
    """Reservation price skewed against inventory, volatility-driven spread (module doc)."""

    name: ClassVar[str] = "inventory_skew"
    Config: ClassVar[type[StrategyConfig]] = InventorySkewConfig
    config: InventorySkewConfig

    def _deviations(self, market: MarketView, assets: tuple[str, str]) -> tuple[float, float]:
        """``q`` for the two request assets (see module doc); 0 when the portfolio is empty."""
        cfg = self.config
        tracked = dict.fromkeys([*cfg.targets, *cfg.target_amounts, *assets])
        values: dict[str, Fraction] = {}
        prices: dict[str, Fraction] = {}
        for asset in tracked:
            price = fresh_price(market, asset, cfg.max_price_age_s)
            value = None if price is None else usd_value(market, asset, market.free(asset), price)
            if price is not None and value is not None:
                values[asset], prices[asset] = value, price
        total = sum(values.values(), Fraction(0))
        if total <= 0:
            return 0.0, 0.0

        def deviation(asset: str) -> float:
            value = values.get(asset, Fraction(0))
            if asset in cfg.targets:
                q = value / total - Fraction(cfg.targets[asset])
            elif asset in cfg.target_amounts and asset in prices:
                target = usd_value(market, asset, cfg.target_amounts[asset], prices[asset])
                q = (value - (target or 0)) / total
            else:
                return 0.0
            return _clamp(float(q), -1.0, 1.0)

        return deviation(assets[0]), deviation(assets[1])

    def _variance(self, market: MarketView, asset: str) -> float:
        history = market.price_history(asset)[-self.config.max_history :]
        return realised_variance(history, self.config.min_history)

    def components(self, request: QuoteRequest, market: MarketView) -> SkewComponents:
        """Inventory deviations, variances, half-spread and skew for this request."""
        cfg = self.config
        q_in, q_out = self._deviations(market, request.pair)
        var_in, var_out = (self._variance(market, asset) for asset in request.pair)
        half = cfg.gamma * (var_in + var_out) * cfg.horizon_s / 2 * BPS
        if cfg.exposure_vol_mult > 0:
            sigma = math.sqrt(var_in + var_out) * BPS  # bps per √s
            half += exposure_spread_bps(cfg.exposure_vol_mult, sigma, exposure_s(request, market))
        skew = cfg.gamma * cfg.horizon_s * (q_out * var_out - q_in * var_in) * BPS
        return SkewComponents(
            q_in=q_in,
            q_out=q_out,
            var_in=var_in,
            var_out=var_out,
            half_spread_bps=_clamp(half, cfg.min_spread_bps, cfg.max_spread_bps),
            skew_bps=_clamp(skew, -cfg.max_skew_bps, cfg.max_skew_bps),
        )

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        if not request_ok(request):
            return None
        age = self.config.max_price_age_s
        free_out = market.free(request.asset_out)
        if request.exact_in:
            fair = convert(market, request.amount, request.asset_in, request.asset_out, age)
            if fair is None:
                return None
            mult = self.components(request, market).multiplier
            out = max_out_for_budget(fair * mult, market.fee_pips)
            if gross_outflow(out, market.fee_pips) > free_out:
                return None
            return as_quote(out)
        gross = gross_outflow(request.amount, market.fee_pips)
        if gross > free_out:
            return None
        fair_in = convert(market, gross, request.asset_out, request.asset_in, age)
        if fair_in is None:
            return None
        return as_quote(ceil_int(fair_in / self.components(request, market).multiplier))

    def reference_amount(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        age = self.config.max_price_age_s
        if request.exact_in:
            return convert(market, request.amount, request.asset_in, request.asset_out, age)
        return convert(market, request.amount, request.asset_out, request.asset_in, age)

    def stated_edge_bps(self) -> float:
        # Rounded down, so float subtraction can never overstate the edge the quotes keep.
        exact = Fraction(self.config.min_spread_bps) - Fraction(self.config.max_skew_bps)
        edge = float(exact)
        return edge if Fraction(edge) <= exact else math.nextafter(edge, -math.inf)
