"""The ``rebalance`` section: the bands of each asset's balance and how the rebalancer swaps
inventory back into them (docs/rebalance.md).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from solver.config.fields import STRICT, Amount, NonNegativeUsd, Usd
from solver.protocol.ids import AssetId

_BAND_AMOUNT = ("min", "max", "target")
_BAND_USD = ("min_usd", "max_usd", "target_usd")


class BandSpec(BaseModel):
    """The band of one asset's balance: all three of ``min`` / ``max`` / ``target`` (smallest
    unit) or all three of ``min_usd`` / ``max_usd`` / ``target_usd`` (USD at the reference
    price), with ``min <= target <= max`` and ``min < max``."""

    model_config = STRICT
    min: Amount | None = None
    max: Amount | None = None
    target: Amount | None = None
    min_usd: NonNegativeUsd | None = None
    max_usd: NonNegativeUsd | None = None
    target_usd: NonNegativeUsd | None = None

    @model_validator(mode="after")
    def _one_unit(self) -> BandSpec:
        amounts = [getattr(self, name) for name in _BAND_AMOUNT]
        usds = [getattr(self, name) for name in _BAND_USD]
        given = [values for values in (amounts, usds) if any(v is not None for v in values)]
        if len(given) != 1 or any(v is None for v in given[0]):
            raise PydanticCustomError(
                "band",
                "give all of min, max, target (smallest unit, quoted strings) or all of "
                "min_usd, max_usd, target_usd, not a mix",
            )
        low, high, target = given[0]
        if not low <= target <= high or not low < high:
            raise PydanticCustomError("order", "a band needs min <= target <= max and min < max")
        return self

    @property
    def in_usd(self) -> bool:
        return self.min_usd is not None


class RebalanceSpec(BaseModel):
    """The rebalancer: swaps inventory back into its bands through the swap API."""

    model_config = STRICT
    enabled: bool = False
    dry_run: bool = True
    """Only log the plan: nothing is quoted, paid or persisted."""
    bands: dict[AssetId, BandSpec] = Field(default_factory=dict)
    counter_asset: AssetId | None = None
    """The other side of every rebalance: an asset above its band is sold for it, one below is
    bought with it. It has no band of its own."""
    max_swap_usd: Usd = 1000.0
    """Largest value one rebalance moves, USD."""
    min_interval_s: Annotated[float, Field(ge=0, le=7 * 86_400, allow_inf_nan=False)] = 900.0
    """Least time between the starts of two rebalances."""
    slippage_bps: Annotated[int, Field(ge=0, le=10_000)] = 50
    """``slippageTolerance`` of the quote request, basis points."""
    max_cost_bps: Annotated[int, Field(ge=0, le=10_000)] = 100
    """A quote whose ``amountOut`` is worth less than the input by more than this, at reference
    prices, is refused."""
    tick_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 5.0
    """Period of the rebalancer job (band checks, following swaps in flight)."""
    swap_deadline_s: Annotated[float, Field(ge=60, le=86_400, allow_inf_nan=False)] = 1800.0
    """``deadline`` of the quote request, from now: refunds begin after it."""
    deposit_deadline_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 120.0
    """Deadline of the signed ``transfer`` paying the deposit, from signing."""
    deposit_wait_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 60.0
    """How long one tick follows the deposit transfer before leaving it to the next tick."""

    @model_validator(mode="after")
    def _usable(self) -> RebalanceSpec:
        if self.counter_asset is not None and self.counter_asset in self.bands:
            raise PydanticCustomError(
                "counter", "counter_asset is what rebalances trade against: it cannot have a band"
            )
        if self.enabled and (self.counter_asset is None or not self.bands):
            raise PydanticCustomError(
                "enabled", "an enabled rebalancer needs counter_asset and at least one band"
            )
        return self
