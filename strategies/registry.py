"""Find a strategy class by built-in name or ``"package.module:ClassName"`` path (STYLE 4).

YAML names a strategy and gives its parameters; this module turns that into a ready object and
turns every way that can go wrong — unknown name, unimportable module, a class that is not a
:class:`~strategies.base.Strategy`, a bad or unknown parameter — into a
:class:`~solver.errors.ConfigError` that names the culprit, at load time rather than at the
first quote.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from solver.errors import ConfigError
from strategies.amm import AmmStrategy
from strategies.base import Strategy, StrategyConfig
from strategies.inventory_skew import InventorySkewStrategy
from strategies.spread import SpreadStrategy

__all__ = ["BUILTINS", "load_strategy", "resolve_strategy"]

BUILTINS: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (AmmStrategy, SpreadStrategy, InventorySkewStrategy)
}
"""Built-in strategies by the name YAML uses."""


def resolve_strategy(spec: str) -> type[Strategy]:
    """The class named by ``spec``: a key of :data:`BUILTINS` or ``"package.module:Class"``."""
    if spec in BUILTINS:
        return BUILTINS[spec]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        known = ", ".join(sorted(BUILTINS))
        raise ConfigError(
            f"unknown strategy {spec!r}: use a built-in ({known}) or 'package.module:ClassName'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"strategy {spec!r}: cannot import module {module_name!r}: {exc}"
        ) from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"strategy {spec!r}: {module_name!r} has no {attr!r}") from None
    if not (inspect.isclass(obj) and issubclass(obj, Strategy)):
        raise ConfigError(f"strategy {spec!r} is not a Strategy subclass")
    if inspect.isabstract(obj):
        raise ConfigError(f"strategy {spec!r} is abstract (quote() not implemented)")
    if not (inspect.isclass(obj.Config) and issubclass(obj.Config, StrategyConfig)):
        raise ConfigError(f"strategy {spec!r}: Config must be a StrategyConfig subclass")
    return obj


def load_strategy(spec: str, params: Mapping[str, Any] | None = None) -> Strategy:
    """A configured strategy; bad parameters raise ConfigError naming the key."""
    if params is not None and not isinstance(params, Mapping):
        raise ConfigError(
            f"strategy {spec!r}: params must be a mapping, got {type(params).__name__}"
        )
    cls = resolve_strategy(spec)
    return cls.from_params(dict(params or {}))
