"""The ``prices`` section: where reference prices in USD come from (a list of sources, each of
one kind, told apart by ``kind``) and when they are too old or too far apart to use
(docs/bot.md, "Reference prices from several sources").

A section of its own because its sources are a family: the discriminated union the YAML is
validated with, and the kinds and models the checks across sections look a source up by
(:mod:`solver.config.bot`, :mod:`solver.config.problems`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

from solver.config.fields import (
    STRICT,
    EnvName,
    HttpUrl,
    Millis,
    PositiveAmount,
    Usd,
    json_path,
)
from solver.protocol.ids import AssetId

SourceName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")]


class _PriceSource(BaseModel):
    model_config = STRICT
    name: SourceName | None = None
    """Name of the source in logs and skip details; ``None``: ``sources.<index>``."""

    def label(self, index: int) -> str:
        """The name prices from this source are kept under (``index``: its place in the list)."""
        return self.name or f"sources.{index}"


class StaticPriceSource(_PriceSource):
    """Fixed USD prices (tests, stablecoins)."""

    kind: Literal["static"]
    prices: Annotated[dict[AssetId, Usd], Field(min_length=1)]
    """USD per whole unit of each asset."""


class SandboxPriceSource(_PriceSource):
    """The sandbox price feed: ``GET url`` returns USD prices of every sandbox token."""

    kind: Literal["sandbox"]
    url: HttpUrl
    refresh_ms: Millis = 1000


class HttpJsonPriceSource(_PriceSource):
    """Any HTTP JSON API: ``GET url``, the USD price of ``asset`` at ``json_path``."""

    kind: Literal["http_json"]
    url: HttpUrl
    asset: AssetId
    json_path: Annotated[str, AfterValidator(json_path)]
    """Dot path to the number in the response, like ``data.price`` (digits index lists)."""
    refresh_ms: Millis = 5000
    headers_env: EnvName | None = None
    """Name of an environment variable holding extra request headers as a JSON object."""


class BusQuotePriceSource(_PriceSource):
    """Price ``asset`` by asking the bus for a quote of ``probe_amount`` into ``quote_asset``."""

    kind: Literal["bus_quote"]
    asset: AssetId
    quote_asset: AssetId
    probe_amount: PositiveAmount
    """Amount of ``asset`` (smallest unit) the probe asks to sell."""
    refresh_ms: Millis = 5000

    @model_validator(mode="after")
    def _two_assets(self) -> BusQuotePriceSource:
        if self.asset == self.quote_asset:
            raise PydanticCustomError("pair", "asset and quote_asset must be different")
        return self


PriceSource = Annotated[
    StaticPriceSource | SandboxPriceSource | HttpJsonPriceSource | BusQuotePriceSource,
    Field(discriminator="kind"),
]
SOURCE_KINDS = ("static", "sandbox", "http_json", "bus_quote")


class PricesSpec(BaseModel):
    """Reference prices in USD: where they come from and when they are too old to use."""

    model_config = STRICT
    max_age_ms: Millis = 10_000
    """A price older than this is stale: pairs needing it skip."""
    history_size: Annotated[int, Field(ge=2, le=1_000_000)] = 512
    """Observations kept per asset (volatility estimates, markouts)."""
    max_divergence_bps: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] | None = 200.0
    """Fresh sources of one asset further apart than this (max / min − 1): its pairs skip
    (``price_divergence``); ``None``: no check. The reference price is their median."""
    sources: Annotated[list[PriceSource], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> PricesSpec:
        names = [source.name for source in self.sources if source.name is not None]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise PydanticCustomError(
                "names", "source names must be unique: {twice}", {"twice": twice}
            )
        return self


SOURCE_MODELS: dict[str, type[BaseModel]] = {
    "static": StaticPriceSource,
    "sandbox": SandboxPriceSource,
    "http_json": HttpJsonPriceSource,
    "bus_quote": BusQuotePriceSource,
}
