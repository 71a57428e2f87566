"""Constant-product pricing on the solver's own free balances (the protocol's reference AMM solver).

The two free balances are the pool: ``x = free(asset_in)``, ``y = free(asset_out)``,
``x * y = k``. This needs no price feed at all — the price is whatever the inventory says, and
every fill moves it against the side that was just bought, so the solver rebalances itself. The
curve also makes it impossible to quote more than the pool holds.

With margin ``m = margin_bps / 1e4`` taken from the input (so the solver keeps ``m`` of what it
receives in both directions) and fee ``f = fee_pips / 1e6`` paid by the solver on its outflow:

- exact-in: ``budget = y * a / (x + a)`` with ``a = in * (1 - m)``; ``out`` is the largest int
  with ``out + ceil(out * f) <= budget`` (rounded down);
- exact-out: ``g = out + ceil(out * f)``; None if ``g >= y``; otherwise
  ``in = ceil(x * g / ((y - g) * (1 - m)))`` (rounded up).

The reference is the pool's marginal price (``in * y / x`` or ``out * x / y``) and the stated
edge is ``margin_bps``: the curve's price impact only adds to it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import ClassVar

from pydantic import Field

from solver.core.market import MarketView, QuoteRequest
from strategies.base import Strategy, StrategyConfig
from strategies.pricing import (
    BPS,
    PIPS,
    as_quote,
    gross_outflow,
    request_ok,
)

__all__ = ["AmmConfig", "AmmStrategy"]


class AmmConfig(StrategyConfig):
    """``margin_bps``: the solver's cut of every input, in basis points (must be < 100 %)."""

    margin_bps: float = Field(
        default=30.0,
        ge=0,
        lt=BPS,
        description="The solver's cut of every input, on top of the curve's own price impact; "
        "the stated edge.",
        json_schema_extra={"unit": "bps"},
    )


class AmmStrategy(Strategy):
    """``x * y = k`` over free inventory, margin from the input, protocol fee priced in."""

    name: ClassVar[str] = "amm"
    Config: ClassVar[type[StrategyConfig]] = AmmConfig
    config: AmmConfig

    def _keep(self) -> Fraction:
        """The fraction of the input that trades against the curve: ``1 - m``."""
        return 1 - Fraction(self.config.margin_bps) / BPS

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        if not request_ok(request):
            return None
        x = market.free(request.asset_in)
        y = market.free(request.asset_out)
        if x <= 0 or y <= 0:
            return None
        # keep = 1 - m as an integer ratio: the same exact rationals as the formulas above,
        # without a Fraction (and its gcd) per operation; identical results.
        mn, md = self.config.margin_bps.as_integer_ratio()
        keep_n, keep_d = BPS * md - mn, BPS * md
        fee_pips = market.fee_pips
        if request.exact_in:
            a = request.amount * keep_n  # effective input, times keep_d
            whole = (y * a) // (x * keep_d + a)  # floor(y * eff / (x + eff))
            return as_quote((whole * PIPS) // (PIPS + max(fee_pips, 0)) if whole > 0 else 0)
        gross = gross_outflow(request.amount, fee_pips)
        if gross >= y:
            return None
        # ceil(x * g / ((y - g) * keep))
        return as_quote(-((-x * gross * keep_d) // ((y - gross) * keep_n)))

    def reference_amount(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        x = market.free(request.asset_in)
        y = market.free(request.asset_out)
        if x <= 0 or y <= 0:
            return None
        if request.exact_in:
            return Fraction(request.amount * y, x)
        return Fraction(request.amount * x, y)

    def stated_edge_bps(self) -> float:
        return self.config.margin_bps
