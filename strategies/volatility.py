"""Volatility for spreads: a realised variance from the reference-price history, and the
spread a quote's exposure time costs (DESIGN "The quote path"; docs/bot.md "Strategies").

A signed quote is binding until its deadline, ``min_deadline_ms + quote.deadline_margin_ms``
after it is made: for that long the user holds a free option on it. Over ``T`` seconds a price
with volatility ``sigma`` (per √second) moves by about ``sigma * √T`` (one standard deviation),
so a spread that should cover ``k`` standard deviations of that move adds

    exposure_bps = k * sigma_bps_per_sqrt_s * √T

Units: ``sigma_bps_per_sqrt_s`` is the standard deviation of the log price over one second, in
basis points; a per-second variance ``v`` of log returns is ``√v * 1e4`` of it, and an annual
volatility ``a`` (a fraction, 0.6 for 60 %) is ``a / √31_557_600 * 1e4`` — 60 % a year is about
1.07 bps/√s, so a 65 s exposure at ``k = 1`` adds about 8.6 bps. For a pair the variance of the
ratio is the sum of the two assets' (independent) variances.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from solver.core.market import MarketView, QuoteRequest

__all__ = [
    "SECONDS_PER_YEAR",
    "exposure_s",
    "exposure_spread_bps",
    "pair_sigma_bps_per_sqrt_s",
    "realised_variance",
]

SECONDS_PER_YEAR = 31_557_600
"""Julian year: an annual volatility ``a`` is ``a / √SECONDS_PER_YEAR`` per √second."""
_BPS = 10_000


def realised_variance(history: Sequence[tuple[datetime, float]], min_returns: int) -> float:
    """Per-second variance of log returns, or 0.0 with fewer than ``min_returns`` usable ones.

    ``sum(ln(p_i / p_{i-1})**2) / sum(t_i - t_{i-1})`` (samples at irregular times are fine).
    ``history`` is ``[(datetime, price), ...]`` oldest first; non-positive or non-finite prices
    and non-increasing timestamps are dropped.
    """
    if len(history) - 1 < min_returns:
        return 0.0
    try:
        data = np.array([(stamp.timestamp(), price) for stamp, price in history], dtype=float)
    except (TypeError, ValueError, AttributeError):
        return 0.0
    times, prices = data[:, 0], data[:, 1]
    usable = np.isfinite(times) & np.isfinite(prices) & (prices > 0)
    times, prices = times[usable], prices[usable]
    if len(times) > 1:  # keep only samples later than every earlier one
        later = np.concatenate(([True], times[1:] > np.maximum.accumulate(times)[:-1]))
        times, prices = times[later], prices[later]
    if len(prices) - 1 < min_returns:
        return 0.0
    returns = np.diff(np.log(prices))
    elapsed = float(times[-1] - times[0])
    variance = float(np.sum(returns * returns)) / elapsed
    return variance if math.isfinite(variance) else 0.0


def exposure_s(request: QuoteRequest, market: MarketView) -> float:
    """How long the quote binds the solver, seconds: ``min_deadline_ms`` plus the margin the
    solver adds (``market.deadline_margin_ms``; 0 for a view without it)."""
    margin = getattr(market, "deadline_margin_ms", 0)
    return max(0, request.min_deadline_ms + margin) / 1000


def pair_sigma_bps_per_sqrt_s(
    market: MarketView, assets: tuple[str, str], min_returns: int, max_samples: int
) -> float:
    """The pair's volatility from the two assets' reference-price histories (their latest
    ``max_samples`` each), bps per √second; 0 while a history is too short."""
    variance = sum(
        realised_variance(market.price_history(asset)[-max_samples:], min_returns)
        for asset in assets
    )
    return math.sqrt(variance) * _BPS


def exposure_spread_bps(mult: float, sigma_bps_per_sqrt_s: float, seconds: float) -> float:
    """``mult * sigma * √seconds``: the spread ``mult`` standard deviations of the move over
    the exposure time take, in bps (see the module doc)."""
    return mult * sigma_bps_per_sqrt_s * math.sqrt(max(seconds, 0.0))
