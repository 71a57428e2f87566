"""Deliberately broken strategies: each breaks exactly one promise the conformance kit checks.

Like freqtrade's ``tests/strategy/strats``: they prove the kit catches each kind of bug, and
they double as loader targets (``"tests.strategies.broken:Raising"``). They all start from
:class:`HonestHalf`, a correct strategy, and change one thing.
"""

from __future__ import annotations

from fractions import Fraction
from typing import ClassVar

from solver.core.market import MarketView, QuoteRequest
from strategies.base import Strategy, StrategyConfig
from strategies.pricing import (
    as_quote,
    ceil_int,
    convert,
    floor_int,
    gross_outflow,
    max_out_for_budget,
    request_ok,
)


class HonestHalf(Strategy):
    """Correct: quotes half the reference value (a 50 % spread), fee and inventory checked."""

    def reference_amount(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        return self.fair(request, market)

    def fair(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        """The non-fixed side at reference prices (no age limit)."""
        fixed, other = (
            (request.asset_in, request.asset_out)
            if request.exact_in
            else (request.asset_out, request.asset_in)
        )
        return convert(market, request.amount, fixed, other, None)

    def stated_edge_bps(self) -> float:
        return 100.0

    def unchecked(self, request: QuoteRequest, market: MarketView) -> int | None:
        """The honest amount without the inventory check."""
        if not request_ok(request):
            return None
        if request.exact_in:
            fair = self.fair(request, market)
            return None if fair is None else as_quote(max_out_for_budget(fair / 2, market.fee_pips))
        gross = gross_outflow(request.amount, market.fee_pips)
        fair_in = convert(market, gross, request.asset_out, request.asset_in, None)
        return None if fair_in is None else as_quote(ceil_int(fair_in * 2))

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        amount = self.unchecked(request, market)
        given = amount if request.exact_in else request.amount
        if amount is None or given is None:
            return None
        if gross_outflow(given, market.fee_pips) > market.free(request.asset_out):
            return None
        return amount


class RaisingConfig(StrategyConfig):
    message: str = "boom"
    above: int = 2**100


class Raising(HonestHalf):
    """Raises on huge amounts — the classic unguarded overflow path."""

    Config: ClassVar[type[StrategyConfig]] = RaisingConfig
    config: RaisingConfig

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        if request.amount > self.config.above:
            raise RuntimeError(self.config.message)
        return super().quote(request, market)


class Nondeterministic(HonestHalf):
    """Keeps hidden state: every other call declines."""

    def __init__(self, config: StrategyConfig | None = None) -> None:
        super().__init__(config)
        self.calls = 0

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        self.calls += 1
        return super().quote(request, market) if self.calls % 2 else None


class OverInventory(HonestHalf):
    """Forgets to check free inventory."""

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        return self.unchecked(request, market)


class IgnoresSpread(HonestHalf):
    """States a 100 bp edge but quotes the reference itself."""

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        fair = self.fair(request, market)
        if fair is None or not request_ok(request):
            return None
        amount = floor_int(fair) if request.exact_in else ceil_int(fair)
        given = amount if request.exact_in else request.amount
        if gross_outflow(given, market.fee_pips) > market.free(request.asset_out):
            return None
        return as_quote(amount)


class RoundsWrongWay(HonestHalf):
    """Zero edge, but rounds amount_out UP and amount_in DOWN: a unit to the user each time."""

    def stated_edge_bps(self) -> float:
        return 0.0

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        fair = self.fair(request, market)
        if fair is None or not request_ok(request):
            return None
        amount = ceil_int(fair) if request.exact_in else floor_int(fair)
        given = amount if request.exact_in else request.amount
        if gross_outflow(given, market.fee_pips) > market.free(request.asset_out):
            return None
        return as_quote(amount)


class ReturnsFloat(HonestHalf):
    """Returns the honest amount as a float."""

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        amount = super().quote(request, market)
        return None if amount is None else float(amount)  # type: ignore[return-value]


class ReturnsNegative(HonestHalf):
    """Returns the honest amount negated (a sign error in a delta)."""

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        amount = super().quote(request, market)
        return None if amount is None else -amount


class NeverQuotes(HonestHalf):
    """Trivially safe and useless."""

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        return None


class BadEdge(HonestHalf):
    """States a NaN edge."""

    def stated_edge_bps(self) -> float:
        return float("nan")


class NotAStrategy:
    """A class that is not a Strategy, for the loader."""


class EdgeRaises(HonestHalf):
    """Cannot even state its edge."""

    def stated_edge_bps(self) -> float:
        raise ValueError("no idea")


class BadReference(HonestHalf):
    """Returns its reference as text."""

    def reference_amount(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        return "12.5"  # type: ignore[return-value]
