"""Pricing plugins: the one-method interface, built-ins, a loader and a conformance kit.

``load_strategy("spread", {"spread_bps": 15})`` or ``load_strategy("pkg.mod:MyStrategy", {...})``
returns an object whose ``quote(request, market)`` the core calls on the hot path; run
``strategies.conformance.check(strategy)`` on any strategy before trusting it with inventory.
"""

from strategies.amm import AmmConfig, AmmStrategy
from strategies.base import Strategy, StrategyConfig
from strategies.inventory_skew import InventorySkewConfig, InventorySkewStrategy
from strategies.registry import BUILTINS, load_strategy, resolve_strategy
from strategies.spread import SpreadConfig, SpreadStrategy

__all__ = [
    "BUILTINS",
    "AmmConfig",
    "AmmStrategy",
    "InventorySkewConfig",
    "InventorySkewStrategy",
    "SpreadConfig",
    "SpreadStrategy",
    "Strategy",
    "StrategyConfig",
    "load_strategy",
    "resolve_strategy",
]
