"""Cached market state the quote path reads: reference prices with history, fee, salt.

The desk writes it from events (salt, prices, fee); the quote path only reads it, so a slow
or failing remote makes inputs *stale* — and the pair skip with a reason — instead of
blocking the loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from solver.core.inventory import Inventory
from solver.core.market import ReferencePrice


@dataclass
class MarketState:
    decimals: Mapping[str, int]
    history_size: int = 512
    prices: dict[str, ReferencePrice] = field(default_factory=dict)
    history: dict[str, deque[tuple[datetime, float]]] = field(default_factory=dict)
    fee_pips: int = 0
    salt: bytes | None = None
    salt_at: datetime | None = None

    def set_price(self, asset: str, usd: float, observed_at: datetime) -> None:
        if not usd > 0:
            return
        current = self.prices.get(asset)
        if current is not None and current.observed_at > observed_at:
            return
        self.prices[asset] = ReferencePrice(usd, observed_at)
        series = self.history.get(asset)
        if series is None:
            series = self.history[asset] = deque(maxlen=self.history_size)
        series.append((observed_at, usd))

    def set_salt(self, salt: bytes, observed_at: datetime) -> None:
        self.salt, self.salt_at = salt, observed_at


class LiveMarketView:
    """The :class:`~solver.core.market.MarketView` strategies get for one decision."""

    __slots__ = ("_inventory", "_state", "now")

    def __init__(self, state: MarketState, inventory: Inventory, now: datetime) -> None:
        self._state, self._inventory, self.now = state, inventory, now

    @property
    def fee_pips(self) -> int:
        return self._state.fee_pips

    def free(self, asset: str) -> int:
        return self._inventory.free(asset)

    def price(self, asset: str) -> ReferencePrice | None:
        return self._state.prices.get(asset)

    def decimals(self, asset: str) -> int:
        return self._state.decimals[asset]

    def price_history(self, asset: str) -> list[tuple[datetime, float]]:
        return list(self._state.history.get(asset, ()))
