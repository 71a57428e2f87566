"""Small in-memory streams and a bot config for the replay tests (no files, no reader)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from backtest.engine import Replay
from backtest.replay_result import ReplayResult
from backtest.settings import BacktestSettings, validate_settings
from backtest.stream.events import (
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StreamEvent,
    TokenInfo,
)
from solver.config import BotConfig, validate_bot_config
from solver.core.market import MarketView, QuoteRequest
from strategies.base import Strategy

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
E6, E24 = 10**6, 10**24
HEADER = Header(
    created=T0,
    source="test",
    tokens={USDC: TokenInfo("USDC", 6), NEAR: TokenInfo("wNEAR", 24)},
)


class Greedy(Strategy):
    """The reference rate, no spread, and no look at inventory: only the pipeline guards it."""

    name: ClassVar[str] = "greedy"

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        p_in, p_out = market.price(request.asset_in), market.price(request.asset_out)
        if p_in is None or p_out is None:
            return None
        scale_in = int(10 ** market.decimals(request.asset_in))
        scale_out = int(10 ** market.decimals(request.asset_out))
        usd_in, usd_out = round(p_in.usd * 1e6), round(p_out.usd * 1e6)
        if request.exact_in:
            return request.amount * usd_in * scale_out // (usd_out * scale_in)
        return -(-request.amount * usd_out * scale_in // (usd_in * scale_out))


def bot_config_data() -> dict[str, Any]:
    """The YAML of :func:`bot_config` as plain data."""
    return {
        "account": {"id": "solver.near", "key_env": "BACKTEST_TEST_KEY"},
        "verifier_contract": "intents.near",
        "bus": {"ws_url": "ws://127.0.0.1:1/ws", "rpc_url": "http://127.0.0.1:1/rpc"},
        "chain": {"rpc_url": "http://127.0.0.1:2/"},
        "tokens": {
            USDC: {"symbol": "USDC", "decimals": 6},
            NEAR: {"symbol": "wNEAR", "decimals": 24},
        },
        "pairs": [
            {
                "base": NEAR,
                "quote": USDC,
                "strategy": "spread",
                "params": {"spread_bps": 20},
                "min_notional_usd": 1.0,
                "max_notional_usd": 10_000.0,
            }
        ],
        "prices": {"sources": [{"kind": "sandbox", "url": "http://127.0.0.1:3/prices"}]},
        "risk": {"max_open_exposure_usd": 1e9, "max_quotes_per_s": 1e6},
    }


def bot_config(**overrides: Any) -> BotConfig:
    """NEAR/USDC, both ways, ``spread`` at 20 bps; generous limits unless overridden (dotted
    keys with ``__`` for the dot, as :meth:`BotConfig.with_overrides`)."""
    config = validate_bot_config(bot_config_data())
    return config.with_overrides(**overrides) if overrides else config


def settings(**values: Any) -> BacktestSettings:
    return validate_settings(values)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def price(seconds: float, asset: str, usd: str) -> PriceEvent:
    return PriceEvent(at(seconds), asset, usd)


def request(
    seconds: float,
    quote_id: str,
    amount: int,
    *,
    asset_in: str = NEAR,
    asset_out: str = USDC,
    exact_in: bool = True,
    min_deadline_ms: int = 10_000,
) -> RequestEvent:
    return RequestEvent(
        at(seconds),
        QuoteRequest(quote_id, asset_in, asset_out, exact_in, amount, min_deadline_ms),
    )


def competitor(seconds: float, quote_id: str, best: int) -> CompetitorEvent:
    return CompetitorEvent(at(seconds), quote_id, best)


def prices(seconds: float, near: str = "3.0", usdc: str = "1.0") -> list[StreamEvent]:
    return [price(seconds, USDC, usdc), price(seconds, NEAR, near)]


def flow(n: int, *, start: float = 1.0, every: float = 0.5, seed: int = 7) -> list[StreamEvent]:
    """``n`` requests of varying size and direction with a price tick every second."""
    import random

    rng = random.Random(seed)
    events: list[StreamEvent] = [*prices(0.0)]
    t = start
    tick = 1.0
    for i in range(n):
        while tick <= t:
            near = f"{3.0 * (1 + rng.uniform(-0.01, 0.01)):.6f}"
            events.extend(prices(tick, near=near))
            tick += 1.0
        kind = i % 4
        if kind == 0:
            events.append(request(t, f"q{i}", rng.randint(1, 200) * E24 // 10))
        elif kind == 1:
            events.append(
                request(t, f"q{i}", rng.randint(1, 500) * E6, asset_in=USDC, asset_out=NEAR)
            )
        elif kind == 2:
            events.append(request(t, f"q{i}", rng.randint(1, 300) * E6, exact_in=False))
        else:
            events.append(
                request(
                    t,
                    f"q{i}",
                    rng.randint(1, 100) * E24 // 10,
                    asset_in=USDC,
                    asset_out=NEAR,
                    exact_in=False,
                )
            )
        t += every
    return events


def run(
    events: Iterable[StreamEvent], config: BotConfig | None = None, **values: Any
) -> tuple[Replay, ReplayResult]:
    replay = Replay(config or bot_config(), settings(**values))
    return replay, replay.run(events, HEADER)
