"""The desk's market inputs: reference prices (each with its source), the salt, the protocol fee
(DESIGN "The quote path").

Not journaled: they are fetched again at start. Several sources of one asset are combined by
median with a divergence guard in :class:`~solver.core.state.MarketState`, in both drivers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solver.core import events as ev
from solver.core.actions import Action
from solver.core.clock import Micros
from solver.core.state import MarketState


class MarketInputs:
    def __init__(self, state: MarketState) -> None:
        self.state = state

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {
            ev.PriceSeen: self.price_seen,
            ev.SaltSeen: self.salt_seen,
            ev.FeeSeen: self.fee_seen,
        }

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {}

    def price_seen(self, event: ev.PriceSeen, now: Micros) -> list[Action]:
        self.state.set_price(event.asset, event.usd, event.observed, event.source)
        return []

    def salt_seen(self, event: ev.SaltSeen, now: Micros) -> list[Action]:
        self.state.set_salt(event.salt, event.observed)
        return []

    def fee_seen(self, event: ev.FeeSeen, now: Micros) -> list[Action]:
        self.state.fee_pips = event.fee_pips
        return []
