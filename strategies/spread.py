"""Reference price ± a spread that widens with size.

The plainest market-making rule: value the fixed side at the cached reference prices and keep a
spread. Larger trades carry more adverse selection and more inventory risk, so the spread grows
linearly with the USD notional of the fixed side; beyond ``max_spread_bps`` the size is more than
the strategy is willing to price and it declines (None) rather than quote an absurd rate.

The spread also widens with the quote's **exposure time**: a signed quote binds the solver
until its deadline, ``T = (min_deadline_ms + deadline_margin_ms) / 1000`` seconds, while the
price may move against it. ``exposure_vol_mult`` (``k``) standard deviations of that move add
``k * sigma * √T`` bps (``strategies.volatility``), with ``sigma`` the pair's volatility in bps
per √second: ``vol_bps_per_sqrt_s``, or with ``vol_from_history`` the larger of it and the
realised volatility of the two assets' reference-price histories. ``k = 0`` (the default): no
such term, and no cost.

With ``fair`` the fixed amount converted at reference prices (``strategies.pricing.convert``),
``s = (spread_bps + widen_bps_per_1k_usd * notional_usd / 1000 + k * sigma * √T) / 1e4`` and
the protocol fee ``ceil(out * fee_pips / 1e6)`` paid by the solver on its outflow:

- exact-in: ``out`` = the largest int with ``out + fee(out) <= fair(in) * (1 - s)``;
- exact-out: ``in = ceil(fair(out + fee(out)) / (1 - s))``.

Both keep ``s`` of the input's value for the solver. No quote when either reference price is
missing or older than ``max_price_age_s``, or when free inventory cannot cover the outflow plus
fee. The stated edge is ``spread_bps`` (widening only adds to it).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import ClassVar

from pydantic import Field, model_validator

from solver.core.market import MarketView, QuoteRequest
from strategies.base import Strategy, StrategyConfig
from strategies.pricing import (
    BPS,
    PIPS,
    U128_MAX,
    as_quote,
    ceil_int,
    conversion_rate,
    convert,
    fresh_price,
    gross_outflow,
    max_out_for_budget,
    request_ok,
    usd_value,
)
from strategies.volatility import exposure_s, exposure_spread_bps, pair_sigma_bps_per_sqrt_s

__all__ = ["SpreadConfig", "SpreadStrategy"]


class SpreadConfig(StrategyConfig):
    """Knobs of :class:`SpreadStrategy`; all spreads in basis points of the input's value."""

    spread_bps: float = Field(
        default=20.0,
        ge=0,
        lt=BPS,
        description="Spread kept from the input's value on the smallest trades; the stated edge.",
        json_schema_extra={"unit": "bps"},
    )
    widen_bps_per_1k_usd: float = Field(
        default=0.0,
        ge=0,
        description="Extra spread per 1,000 USD of the fixed side's notional (0: a flat spread).",
        json_schema_extra={"unit": "bps per 1,000 USD"},
    )
    max_spread_bps: float = Field(
        default=500.0,
        gt=0,
        lt=BPS,
        description="No quote when the widened spread would exceed this; at least spread_bps.",
        json_schema_extra={"unit": "bps"},
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
            "k: standard deviations of the pair's price move over the quote's exposure time "
            "(min_deadline_ms + the solver's deadline margin) added to the spread as "
            "k * sigma * sqrt(T) bps; dimensionless. 0: off."
        ),
        json_schema_extra={"unit": "dimensionless"},
    )
    vol_bps_per_sqrt_s: float = Field(
        default=0.0,
        ge=0,
        lt=BPS,
        allow_inf_nan=False,
        description=(
            "sigma: the pair's volatility, bps per sqrt(second) (an annual volatility a is "
            "a / sqrt(31557600) * 1e4; 60 % a year is about 1.07). With vol_from_history, a "
            "floor under the estimate."
        ),
        json_schema_extra={"unit": "bps per sqrt(s)"},
    )
    vol_from_history: bool = Field(
        default=False,
        description=(
            "Estimate sigma from the two assets' reference-price histories (realised "
            "variance of log returns, per second); the larger of it and vol_bps_per_sqrt_s "
            "applies. Costs a pass over up to vol_max_history samples per request."
        ),
        json_schema_extra={"unit": "flag"},
    )
    vol_min_history: int = Field(
        default=10,
        ge=2,
        description="Returns needed before the estimate counts, count.",
        json_schema_extra={"unit": "count"},
    )
    vol_max_history: int = Field(
        default=500,
        ge=3,
        description="Latest samples of each history used, count.",
        json_schema_extra={"unit": "count"},
    )

    @model_validator(mode="after")
    def _spread_within_max(self) -> SpreadConfig:
        if self.spread_bps > self.max_spread_bps:
            raise ValueError("spread_bps must not exceed max_spread_bps")
        if self.vol_min_history >= self.vol_max_history:
            raise ValueError("vol_min_history must be below vol_max_history")
        return self


class SpreadStrategy(Strategy):
    """Reference price minus a size-dependent spread, protocol fee priced in."""

    name: ClassVar[str] = "spread"
    Config: ClassVar[type[StrategyConfig]] = SpreadConfig
    config: SpreadConfig

    def spread_bps(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        """The total spread for this request, or None when it exceeds ``max_spread_bps``."""
        cfg = self.config
        fixed_asset = request.asset_in if request.exact_in else request.asset_out
        spread = Fraction(cfg.spread_bps)
        if cfg.widen_bps_per_1k_usd > 0:
            price = fresh_price(market, fixed_asset, cfg.max_price_age_s)
            if price is None:
                return None
            notional = usd_value(market, fixed_asset, request.amount, price)
            if notional is None:
                return None
            spread += Fraction(cfg.widen_bps_per_1k_usd) * notional / 1000
        if cfg.exposure_vol_mult > 0:
            spread += Fraction(self.exposure_bps(request, market))
        if spread > Fraction(cfg.max_spread_bps):
            return None
        return spread

    def exposure_bps(self, request: QuoteRequest, market: MarketView) -> float:
        """The spread the quote's exposure time adds, bps (module doc); 0 when off."""
        cfg = self.config
        if cfg.exposure_vol_mult <= 0:
            return 0.0
        sigma = cfg.vol_bps_per_sqrt_s
        if cfg.vol_from_history:
            estimate = pair_sigma_bps_per_sqrt_s(
                market, request.pair, cfg.vol_min_history, cfg.vol_max_history
            )
            sigma = max(sigma, estimate)
        extra = exposure_spread_bps(cfg.exposure_vol_mult, sigma, exposure_s(request, market))
        return extra if math.isfinite(extra) else float(BPS)

    def __init__(self, config: StrategyConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._flat_keep: tuple[int, int] | None = None
        """``1 - spread / BPS`` as integers when the spread is one constant (the config is
        frozen): worked out once, not per request."""
        if (
            not cfg.widen_bps_per_1k_usd > 0
            and cfg.spread_bps <= cfg.max_spread_bps
            and not cfg.exposure_vol_mult > 0
        ):
            sn, sd = cfg.spread_bps.as_integer_ratio()
            self._flat_keep = (BPS * sd - sn, BPS * sd)

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        amount = request.amount
        # request_ok, its common case inline: a plain int in range and two different assets.
        if (
            type(amount) is not int
            or not 1 <= amount <= U128_MAX
            or request.asset_in == request.asset_out
        ) and not request_ok(request):
            return None
        cfg = self.config
        # A spread independent of size: the same exact rationals as :meth:`_quote_widening`,
        # as one integer numerator and denominator each (no Fraction for a constant spread,
        # no gcd): identical results.
        flat = self._flat_keep
        if flat is not None:
            keep_n, keep_d = flat
        elif cfg.widen_bps_per_1k_usd > 0 or not cfg.spread_bps <= cfg.max_spread_bps:
            return self._quote_widening(request, market)
        else:  # constant in size, with the exposure term
            total = Fraction(cfg.spread_bps) + Fraction(self.exposure_bps(request, market))
            if total > Fraction(cfg.max_spread_bps):
                return None
            sn, sd = total.numerator, total.denominator
            keep_n, keep_d = BPS * sd - sn, BPS * sd  # keep = 1 - spread / BPS, > 0
        free_out = market.free(request.asset_out)
        age = cfg.max_price_age_s
        fee_pips = market.fee_pips
        # gross_outflow and as_quote inline below: the same integer expressions.
        # conversion_rate's own dispatch, here: a view with the exact method is asked directly
        # (one call less a quote, issue 29); any other goes through the shared helper.
        exact = getattr(market, "exact_conversion_rate", None)
        if request.exact_in:
            rate = (
                exact(request.asset_in, request.asset_out, age)
                if exact is not None
                else conversion_rate(market, request.asset_in, request.asset_out, age)
            )
            if rate is None:
                return None
            num, den = rate
            whole = (amount * num * keep_n) // (den * keep_d)  # floor(fair * keep)
            if whole <= 0:
                return None  # out = 0: no quote (as_quote)
            # (whole * PIPS) // (PIPS + max(fee_pips, 0)), which is whole itself without a fee
            out = whole if fee_pips <= 0 else (whole * PIPS) // (PIPS + fee_pips)
            gross = out - ((-out * fee_pips) // PIPS) if fee_pips > 0 and out > 0 else out
            if gross > free_out:
                return None
            return out if 1 <= out <= U128_MAX else None
        gross = amount - ((-amount * fee_pips) // PIPS) if fee_pips > 0 else amount
        if gross > free_out:
            return None
        rate = (
            exact(request.asset_out, request.asset_in, age)
            if exact is not None
            else conversion_rate(market, request.asset_out, request.asset_in, age)
        )
        if rate is None:
            return None
        num, den = rate
        # ceil(fair_in / keep)
        amount_in = -((-gross * num * keep_d) // (den * keep_n))
        return amount_in if 1 <= amount_in <= U128_MAX else None

    def _quote_widening(self, request: QuoteRequest, market: MarketView) -> int | None:
        """The general path, in Fractions (a spread that widens with size)."""
        spread = self.spread_bps(request, market)
        if spread is None:
            return None
        keep = 1 - spread / BPS
        free_out = market.free(request.asset_out)
        age = self.config.max_price_age_s
        if request.exact_in:
            fair = convert(market, request.amount, request.asset_in, request.asset_out, age)
            if fair is None:
                return None
            out = max_out_for_budget(fair * keep, market.fee_pips)
            if gross_outflow(out, market.fee_pips) > free_out:
                return None
            return as_quote(out)
        gross = gross_outflow(request.amount, market.fee_pips)
        if gross > free_out:
            return None
        fair_in = convert(market, gross, request.asset_out, request.asset_in, age)
        if fair_in is None:
            return None
        return as_quote(ceil_int(fair_in / keep))

    def reference_amount(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        fixed, other = request.pair if request.exact_in else request.pair[::-1]
        return convert(market, request.amount, fixed, other, self.config.max_price_age_s)

    def stated_edge_bps(self) -> float:
        return self.config.spread_bps  # widening, for size or exposure, only adds to it
