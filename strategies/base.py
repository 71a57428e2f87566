"""The strategy interface: one pure pricing method and a frozen config (STYLE 4).

A strategy answers one question — "for this request, given this market, how much of the
other side?" — and nothing else: no I/O, no clock reads (``market.now`` is the time), no
mutable state that changes the answer for equal input. The same object serves live quoting, the
backtest and the conformance kit (``strategies.conformance``), which is why determinism and the
rounding rules below are part of the contract and not a convention.

Contract of :meth:`Strategy.quote`:

- return the NON-fixed amount in smallest units: ``amount_out`` for exact-in,
  ``amount_in`` for exact-out; or None for "no quote";
- a returned amount is a Python ``int`` in ``[1, 2**128 - 1]``;
- round in the solver's favour at the last unit: amount_out DOWN, amount_in UP
  (``strategies.pricing.floor_int`` / ``ceil_int`` on exact Fractions);
- never promise more than free inventory: the solver's gross outflow of ``asset_out``
  (amount_out plus the protocol fee, ``strategies.pricing.gross_outflow``) stays within
  ``market.free(asset_out)``;
- never quote better for the user than ``reference_amount`` adjusted by ``stated_edge_bps``.

The core still guards every call (STYLE 5): an exception or a nonsense value becomes a skipped
request with a logged reason, never a dead loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from solver.core.market import MarketView, QuoteRequest
from solver.errors import ConfigError

__all__ = ["Strategy", "StrategyConfig", "config_error"]


class StrategyConfig(BaseModel):
    """Base of every strategy config: frozen, no unknown keys, no NaN/inf.

    Unknown keys are errors rather than silently ignored, so a typo in YAML (``spred_bps``)
    fails at load time instead of quoting with the default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def config_error(strategy: str, exc: ValidationError) -> ConfigError:
    """Translate a pydantic error into a ConfigError that names every bad key (STYLE 7)."""
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<config>"
        parts.append(f"{key!r}: {err['msg']}")
    return ConfigError(f"strategy {strategy!r}: bad parameter " + "; ".join(parts))


class Strategy(ABC):
    """A pricing plugin. Subclasses set ``name``, ``Config`` and implement :meth:`quote`.

    ``config`` is an instance of ``Config``; subclasses narrow its annotation
    (``config: SpreadConfig``) for typed access.
    """

    Config: ClassVar[type[StrategyConfig]] = StrategyConfig
    name: ClassVar[str]
    config: StrategyConfig

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def __init__(self, config: StrategyConfig | None = None) -> None:
        expected = type(self).Config
        if config is None:
            try:
                config = expected()
            except ValidationError as exc:
                raise config_error(type(self).name, exc) from None
        if not isinstance(config, expected):
            raise ConfigError(
                f"strategy {type(self).name!r} needs a {expected.__name__}, "
                f"got {type(config).__name__}"
            )
        self.config = config

    @classmethod
    def from_params(cls, params: dict[str, Any] | None = None) -> Strategy:
        """Build from a plain mapping (YAML), translating validation errors to ConfigError."""
        try:
            config = cls.Config.model_validate(params or {})
        except ValidationError as exc:
            raise config_error(cls.name, exc) from None
        return cls(config)

    @abstractmethod
    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        """The non-fixed amount in smallest units, or None for "no quote" (see module doc)."""

    def reference_amount(self, request: QuoteRequest, market: MarketView) -> Fraction | None:
        """The strategy's own fair value of the non-fixed side, before spread and fee.

        The conformance kit checks every quote against it. None means "no opinion": the edge
        check is then skipped for that request (and counted as unchecked in the report).
        """
        return None

    def stated_edge_bps(self) -> float:
        """The minimum edge promised versus :meth:`reference_amount`, in basis points.

        Exact-in: ``amount_out <= reference * (1 - edge)``; exact-out:
        ``amount_in >= reference * (1 + edge)``. May be negative for a strategy that
        deliberately quotes through the reference (an inventory skew), which it then admits.
        """
        return 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"
