"""Reference prices of the sandbox: one seeded geometric Brownian motion per token, in USD.

The spec has no price feed (its only USD notions are the history filters ``minUsdPrice`` /
``maxUsdPrice`` of 4.5); the sandbox needs one so that simulated takers can judge the quotes
the bus returns (4.7: "accept good ones") and so that a demo solver has a reference to quote
around. Both read the same process, so "good" means the same thing on both sides.

Why GBM: prices stay positive and returns scale with ``sqrt(dt)``, which is what a spread
strategy must survive; ``volatility_annual = 0`` gives a constant price for tests and demos.
The process is a martingale in price (drift ``-σ²/2`` in log), so no token trends on average.

Determinism: :meth:`PriceProcess.step` draws all its normals from one ``numpy`` Generator in
the sorted order of the assets, one per asset per step, so a seed and a sequence of ``dt``
fix the whole path. :meth:`PriceProcess.run` only adds the wall clock (the measured time
between ticks, so realised volatility per wall-clock second matches the configured one even
when the event loop is late).

Amounts: sizes are chosen in USD and converted to smallest units with :func:`usd_to_amount`,
in ``Decimal`` with a wide context: a float cannot hold a 24-decimal u128 amount exactly.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import ROUND_DOWN, Context, Decimal, InvalidOperation
from typing import Any

import numpy as np
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from sandbox.config import PricesSpec, TokenSpec
from sandbox.ledger import utc_now
from solver.protocol.intents import format_deadline

SECONDS_PER_YEAR = 365.25 * 86_400
MAX_TICK_DT_S = 60.0  # a suspended laptop must not produce one giant jump
_CTX = Context(prec=80)  # u128 has 39 digits; 80 leaves room for decimals and USD factors


def seeded_rng(seed: int, stream: str) -> np.random.Generator:
    """A Generator for ``(seed, stream)``: independent streams (prices, takers) from one seed,
    and any int seed (numpy refuses negative ones) maps to a valid 64-bit seed."""
    digest = hashlib.sha256(f"{stream}:{seed}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def to_decimal(value: float | int | str | Decimal) -> Decimal:
    """A finite Decimal; floats go through ``repr`` (shortest round-trip, no binary noise)."""
    try:
        result = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    if not result.is_finite():
        raise ValueError(f"{value!r} is not finite")
    return result


def usd_to_amount(
    size_usd: float | str | Decimal, usd_price: float | str | Decimal, decimals: int
) -> int:
    """Smallest units of a token worth ``size_usd`` at ``usd_price``, rounded down."""
    price = to_decimal(usd_price)
    if price <= 0:
        raise ValueError("usd_price must be positive")
    size = to_decimal(size_usd)
    if size < 0:
        raise ValueError("size_usd must be non-negative")
    units = _CTX.multiply(_CTX.divide(size, price), Decimal(10) ** decimals)
    return int(units.to_integral_value(rounding=ROUND_DOWN))


def amount_to_usd(amount: int, decimals: int, usd_price: float | str | Decimal) -> Decimal:
    """USD value of ``amount`` smallest units (exact up to the 80-digit context)."""
    return _CTX.multiply(
        _CTX.divide(Decimal(amount), Decimal(10) ** decimals), to_decimal(usd_price)
    )


def format_usd(value: float) -> str:
    """About 10 significant digits as a plain decimal string (never exponent notation)."""
    return format(Decimal(f"{value:.10g}"), "f")


class PriceProcess:
    """USD prices of the sandbox tokens, advanced by :meth:`step` or :meth:`run`.

    ``clock`` is the one wall-clock read (injected, style 3): it stamps each update.
    """

    def __init__(
        self,
        tokens: Mapping[str, TokenSpec],
        *,
        seed: int,
        spec: PricesSpec | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if not tokens:
            raise ValueError("at least one token is needed")
        self.tokens = dict(tokens)
        self.spec = spec or PricesSpec()
        self.clock = clock
        self._assets = sorted(self.tokens)
        self._rng = seeded_rng(seed, "prices")
        self._sigma_s = np.array(
            [self.tokens[a].volatility_annual / math.sqrt(SECONDS_PER_YEAR) for a in self._assets]
        )
        self._prices = np.array([self.tokens[a].usd for a in self._assets], dtype=np.float64)
        self._index = {a: i for i, a in enumerate(self._assets)}
        self.updated_at = clock()
        self.steps = 0

    @property
    def assets(self) -> list[str]:
        return list(self._assets)

    def step(self, dt_s: float) -> None:
        """Advance every price by ``dt_s`` seconds of GBM; no I/O, no clock besides the stamp.

        One normal per asset is drawn even for zero-volatility tokens, so adding volatility to
        one token never changes the path of the others for the same seed.
        """
        if not dt_s >= 0 or not math.isfinite(dt_s):
            raise ValueError("dt_s must be finite and non-negative")
        z = self._rng.standard_normal(len(self._assets))
        sigma = self._sigma_s
        log_return = -0.5 * sigma * sigma * dt_s + sigma * math.sqrt(dt_s) * z
        moving = sigma > 0
        self._prices[moving] *= np.exp(log_return[moving])
        self.steps += 1
        self.updated_at = self.clock()

    def usd(self, asset_id: str) -> float:
        """USD per whole token; ``KeyError`` for an unknown asset."""
        return float(self._prices[self._index[asset_id]])

    def rate(self, asset_in: str, asset_out: str) -> float:
        """Whole units of ``asset_out`` worth one whole unit of ``asset_in``."""
        return self.usd(asset_in) / self.usd(asset_out)

    def snapshot(self) -> dict[str, Any]:
        """``{"ts": ..., "prices": {asset: {"usd", "symbol", "decimals"}}}``, JSON-ready."""
        return {
            "ts": format_deadline(self.updated_at),
            "prices": {
                asset: {
                    "usd": format_usd(self.usd(asset)),
                    "symbol": self.tokens[asset].symbol,
                    "decimals": self.tokens[asset].decimals,
                }
                for asset in self._assets
            },
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Step every ``tick_ms`` until ``stop`` is set, with the measured elapsed time."""
        loop = asyncio.get_running_loop()
        tick_s = self.spec.tick_ms / 1000
        last = loop.time()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=tick_s)
            except TimeoutError:
                pass
            else:
                return
            now = loop.time()
            self.step(min(max(now - last, 0.0), MAX_TICK_DT_S))
            last = now


def create_prices_app(process: PriceProcess) -> FastAPI:
    """``GET /prices`` (all tokens) and ``GET /prices/{asset_id}`` (one), read-only."""
    app = FastAPI(title="sandbox reference prices", docs_url=None, redoc_url=None)

    @app.get("/prices")
    async def all_prices() -> dict[str, Any]:
        return process.snapshot()

    @app.get("/prices/{asset_id:path}", response_model=None)
    async def one_price(asset_id: str) -> dict[str, Any] | JSONResponse:
        if asset_id not in process.tokens:
            return JSONResponse({"error": f"unknown asset {asset_id}"}, status_code=404)
        return {
            "asset": asset_id,
            "usd": format_usd(process.usd(asset_id)),
            "ts": format_deadline(process.updated_at),
        }

    return app
