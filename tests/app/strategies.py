"""Strategies for the live-bot tests, loaded by path (``"tests.app.strategies:Greedy"``)."""

from __future__ import annotations

from fractions import Fraction
from typing import ClassVar

from solver.core.market import MarketView, QuoteRequest
from strategies.base import Strategy
from strategies.pricing import BPS, as_quote, ceil_int, convert, floor_int


class Greedy(Strategy):
    """Reference price minus 25 bp, and *no* free-inventory check: it relies on the quote
    pipeline alone to refuse what the inventory cannot pay (the guard under test)."""

    name: ClassVar[str] = "greedy"
    KEEP: ClassVar[Fraction] = 1 - Fraction(25) / BPS

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        if request.exact_in:
            fair = convert(market, request.amount, request.asset_in, request.asset_out, None)
            return None if fair is None else as_quote(floor_int(fair * self.KEEP))
        fair = convert(market, request.amount, request.asset_out, request.asset_in, None)
        return None if fair is None else as_quote(ceil_int(fair / self.KEEP))
