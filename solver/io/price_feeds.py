"""Reference price sources (issue 4 "Reference price sources"; DESIGN "The quote path").

Each source is polled by a scheduled job and publishes what it saw as a ``PriceSeen`` event with
its source's name (the live bot: into the executor, so the desk combines the sources itself, in
both drivers); the quote path only reads the cached value and its age, so a slow or dead source
makes prices *stale* (pairs skip) instead of blocking anything. Kinds:

- ``static``: fixed USD prices from YAML, re-stamped on every poll (they never go stale).
- ``sandbox``: the sandbox price endpoint, ``{"prices": {asset: {"usd": "..."}}}``.
- ``http_json``: any URL; the number at a dot path (digits index lists).
- ``bus_quote``: ask the bus's ``quote`` method for a small amount and price the asset from the
  best answer that is not our own, relative to the quote asset's reference price.

Each poll writes under its source's name (``source``: the config's
``prices.sources[i].label(i)``; by default one derived from the source's own arguments), so
several sources of one asset are combined by median with a divergence guard
(:mod:`solver.core.state`) instead of overwriting each other.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Collection, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import httpx

from solver.core.clock import Micros
from solver.core.events import PriceSeen
from solver.core.state import MarketState
from solver.errors import ConfigError, SolverError
from solver.io.bus_rpc import BusRpcClient

log = logging.getLogger("solver.prices")


def extract_json_path(document: Any, path: str) -> Any:
    """``data.items.0.price`` → document["data"]["items"][0]["price"]; KeyError if absent."""
    node = document
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            raise KeyError(path)
    return node


def parse_usd(value: Any) -> float:
    """A positive finite USD price from a JSON number or decimal string."""
    if isinstance(value, bool):
        raise ValueError("price is a boolean")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ValueError(f"price {str(value)[:40]!r} is not a number") from None
    if not number.is_finite() or number <= 0:
        raise ValueError(f"price {value!r} is not positive")
    return float(number)


def into(state: MarketState) -> Callable[[PriceSeen], None]:
    """``publish`` for a :class:`MarketState` of one's own (the recorder, which has no desk)."""

    def apply(seen: PriceSeen) -> None:
        state.set_price(seen.asset, seen.usd, seen.observed, seen.source)

    return apply


class PriceReading(Protocol):
    """What a bus probe is valued with: the desk's view, or a recorder's own state."""

    @property
    def decimals(self) -> Mapping[str, int]: ...

    def price(self, asset: str) -> float | None: ...


class PriceFeeds:
    """Polls the configured sources and publishes each price seen (``publish``); one method
    per source kind. ``state``: read only (a bus probe is valued with its quote asset's
    price)."""

    def __init__(
        self,
        state: PriceReading,
        publish: Callable[[PriceSeen], object],
        clock: Callable[[], Micros],
        *,
        client: httpx.AsyncClient,
        bus: BusRpcClient | None = None,
        own_quote_hashes: Callable[[], Collection[str]] = frozenset,
        assets: Collection[str] = (),
    ) -> None:
        self.state = state  # read only: the prices and decimals a bus probe is valued with
        self.publish = publish
        self.clock = clock
        self.client = client
        self.bus = bus
        self.own_quote_hashes = own_quote_hashes
        self.assets = set(assets)
        self.errors: dict[str, int] = {}

    def _error(self, source: str, reason: str) -> None:
        key = f"{source}:{reason}"
        self.errors[key] = self.errors.get(key, 0) + 1
        log.warning("price source %s failed: %s", source, reason)

    def poll_static(self, prices: dict[str, float], source: str = "static") -> None:
        now = self.clock()
        for asset, usd in prices.items():
            self.publish(PriceSeen(asset, usd, now, source))

    async def poll_sandbox(self, url: str, source: str = "sandbox") -> None:
        started = self.clock()
        try:
            response = await self.client.get(url)
            response.raise_for_status()
            body = response.json()
            prices = body["prices"]
            if not isinstance(prices, dict):
                raise TypeError("prices is not an object")
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self._error("sandbox", type(exc).__name__)
            return
        for asset, entry in prices.items():
            if self.assets and asset not in self.assets:
                continue
            try:
                self.publish(PriceSeen(asset, parse_usd(entry["usd"]), started, source))
            except (ValueError, KeyError, TypeError):
                self._error("sandbox", f"bad price for {asset}")

    async def poll_http_json(
        self,
        url: str,
        asset: str,
        json_path: str,
        headers_env: str | None,
        source: str | None = None,
    ) -> None:
        started = self.clock()
        headers: dict[str, str] = {}
        if headers_env:
            try:
                loaded = json.loads(os.environ.get(headers_env, "{}"))
                headers = {str(k): str(v) for k, v in loaded.items()}
            except (ValueError, AttributeError):
                raise ConfigError(f"{headers_env} must hold a JSON object of headers") from None
        try:
            response = await self.client.get(url, headers=headers)
            response.raise_for_status()
            usd = parse_usd(extract_json_path(response.json(), json_path))
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            self._error("http_json", type(exc).__name__)
            return
        self.publish(PriceSeen(asset, usd, started, source or f"http_json:{url}#{json_path}"))

    async def poll_bus_quote(
        self, asset: str, quote_asset: str, probe_amount: int, source: str | None = None
    ) -> None:
        if self.bus is None:
            return
        quote_usd = self.state.price(quote_asset)
        if quote_usd is None:
            self._error("bus_quote", f"no reference price for {quote_asset}")
            return
        started = self.clock()
        try:
            offers = await self.bus.quote(
                {
                    "core_asset_identifier_in": asset,
                    "core_asset_identifier_out": quote_asset,
                    "exact_amount_in": str(probe_amount),
                    "min_deadline_ms": 60_000,
                }
            )
        except SolverError as exc:
            self._error("bus_quote", type(exc).__name__)
            return
        own = self.own_quote_hashes()
        others = [o for o in offers if o.quote_hash not in own]
        if not others:
            self._error("bus_quote", "no offers from others")
            return
        best = max(o.amount_out for o in others)
        dec_in, dec_out = self.state.decimals[asset], self.state.decimals[quote_asset]
        usd = (
            Decimal(best) / Decimal(10) ** dec_out * Decimal(str(quote_usd))
            / (Decimal(probe_amount) / Decimal(10) ** dec_in)
        )  # fmt: skip
        self.publish(PriceSeen(asset, float(usd), started, source or f"bus_quote:{quote_asset}"))
