"""What a strategy sees: the request and a read-only view of the market (DESIGN "The quote path").

Everything a pricing decision needs is cached here by scheduled jobs — free inventory, reference
prices with their age, the protocol fee, token decimals and the time — so the hot path never
does network I/O. Amounts are ints in the token's smallest unit; prices are USD per whole unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from solver.protocol.quote_request import QuoteRequest

__all__ = [
    "MAX_DECIMALS",
    "MarketView",
    "QuoteRequest",
    "ReferencePrice",
    "StaticMarket",
    "decimals_ok",
]
"""The strategy API: a strategy imports the request and the market's view from here. The
request record itself is the wire vocabulary's (:mod:`solver.protocol.quote_request`), parsed
once where it arrives."""


@dataclass(frozen=True, slots=True)
class ReferencePrice:
    """USD price of one whole unit of an asset and when it was observed."""

    usd: float
    observed_at: datetime

    def age_s(self, now: datetime) -> float:
        return (now - self.observed_at).total_seconds()


class MarketView(Protocol):
    """Read-only market state handed to strategies. Implementations must not do I/O."""

    @property
    def now(self) -> datetime: ...

    @property
    def fee_pips(self) -> int: ...

    @property
    def deadline_margin_ms(self) -> int:
        """What the solver adds to the request's ``min_deadline_ms`` to set the deadline: a
        quote is binding for ``min_deadline_ms + deadline_margin_ms`` (its exposure time).
        Views written before it existed may lack it; ``strategies.volatility.exposure_s``
        reads it with a default of 0."""
        ...

    def free(self, asset: str) -> int:
        """Spendable balance: confirmed − reserved by open quotes − configured floor (≥ 0)."""
        ...

    def price(self, asset: str) -> ReferencePrice | None:
        """The latest reference price, or None when there is none."""
        ...

    def decimals(self, asset: str) -> int: ...

    def price_history(self, asset: str) -> list[tuple[datetime, float]]:
        """Recent reference prices, oldest first (for volatility estimates)."""
        ...


MAX_DECIMALS = 255
"""NEP-141 metadata stores a token's decimals as a u8."""


def decimals_ok(d_from: object, d_to: object) -> bool:
    """Both are token decimals a conversion can use: ints (not bools) within a u8. One check
    for ``strategies.pricing.conversion_rate`` and the desk's cached rate, which must agree bit
    for bit."""
    return not (
        isinstance(d_from, bool)
        or not isinstance(d_from, int)
        or not 0 <= d_from <= MAX_DECIMALS
        or isinstance(d_to, bool)
        or not isinstance(d_to, int)
        or not 0 <= d_to <= MAX_DECIMALS
    )


@dataclass(frozen=True, slots=True)
class StaticMarket:
    """A plain MarketView from values: for tests, the conformance kit and the backtest."""

    now: datetime
    balances: Mapping[str, int]
    prices: Mapping[str, ReferencePrice]
    token_decimals: Mapping[str, int]
    fee_pips: int = 0
    history: Mapping[str, list[tuple[datetime, float]]] | None = None
    deadline_margin_ms: int = 0

    def free(self, asset: str) -> int:
        return max(0, self.balances.get(asset, 0))

    def price(self, asset: str) -> ReferencePrice | None:
        return self.prices.get(asset)

    def decimals(self, asset: str) -> int:
        return self.token_decimals[asset]

    def price_history(self, asset: str) -> list[tuple[datetime, float]]:
        return list((self.history or {}).get(asset, []))
