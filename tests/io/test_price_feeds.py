"""Reference price sources against real servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI

from sandbox.server import Sandbox
from sandbox.serving import start_server
from solver.core.clock import micros
from solver.core.state import MarketState
from solver.io.bus_rpc import BusRpcClient
from solver.io.price_feeds import PriceFeeds, extract_json_path, into, parse_usd
from solver.protocol.keys import SecretKey
from tests.sandbox.scripted import NEAR, USDC, ScriptedSolver, sandbox_config

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
T0_US = micros(T0)
"""The feeds' clock: µs since the epoch (:mod:`solver.core.clock`)."""


def feeds(
    client: httpx.AsyncClient, bus: BusRpcClient | None = None, own: frozenset[str] = frozenset()
) -> PriceFeeds:
    state = MarketState(decimals={USDC: 6, NEAR: 24})
    return PriceFeeds(
        state,
        into(state),
        lambda: T0_US,
        client=client,
        bus=bus,
        own_quote_hashes=lambda: own,
        assets=[USDC, NEAR],
    )


def state_of(feed: PriceFeeds) -> MarketState:
    """The state the feed's prices went into (``into``): what the test reads."""
    assert isinstance(feed.state, MarketState)
    return feed.state


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(sandbox_config(), run_takers=False) as sb:
        yield sb


def test_json_path_and_price_parsing() -> None:
    doc = {"data": {"items": [{"price": "3.25"}]}}
    assert extract_json_path(doc, "data.items.0.price") == "3.25"
    with pytest.raises(KeyError):
        extract_json_path(doc, "data.missing")
    assert parse_usd("3.25") == 3.25 and parse_usd(2) == 2.0
    for bad in ("abc", "-1", "0", True, "NaN", "Infinity"):
        with pytest.raises(ValueError):
            parse_usd(bad)


def test_static_prices_are_restamped() -> None:
    state = MarketState(decimals={USDC: 6})
    feed = PriceFeeds(state, into(state), lambda: T0_US, client=httpx.AsyncClient())
    feed.poll_static({USDC: 1.0})
    assert state_of(feed).prices[USDC].usd == 1.0 and state_of(feed).prices[USDC].observed_at == T0
    assert state_of(feed).price_at[USDC] == T0_US  # what the desk's age checks read


async def test_sandbox_source_reads_every_configured_token(sandbox: Sandbox) -> None:
    async with httpx.AsyncClient() as client:
        feed = feeds(client)
        await feed.poll_sandbox(sandbox.urls()["prices"])
        assert state_of(feed).prices[NEAR].usd == pytest.approx(sandbox.prices.usd(NEAR))
        assert state_of(feed).prices[USDC].usd == pytest.approx(1.0)
        await feed.poll_sandbox(sandbox.urls()["prices"].replace("/prices", "/nothing"))
        assert feed.errors == {"sandbox:HTTPStatusError": 1}


async def test_http_json_source_and_its_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    app = FastAPI()
    seen_headers: list[str | None] = []

    @app.get("/ok")
    async def ok() -> dict[str, object]:
        return {"data": {"price": "3.5"}}

    @app.get("/garbage")
    async def garbage() -> dict[str, object]:
        return {"data": {"price": "n/a"}}

    @app.get("/auth")
    async def auth(x_api_key: str | None = None) -> dict[str, object]:
        seen_headers.append(x_api_key)
        return {"p": 4}

    running = await start_server(app)
    port = running.port
    try:
        async with httpx.AsyncClient() as client:
            feed = feeds(client)
            await feed.poll_http_json(f"http://127.0.0.1:{port}/ok", NEAR, "data.price", None)
            assert state_of(feed).prices[NEAR].usd == 3.5
            await feed.poll_http_json(f"http://127.0.0.1:{port}/garbage", NEAR, "data.price", None)
            await feed.poll_http_json(f"http://127.0.0.1:{port}/ok", NEAR, "data.nope", None)
            assert state_of(feed).prices[NEAR].usd == 3.5
            assert feed.errors == {"http_json:ValueError": 1, "http_json:KeyError": 1}
            monkeypatch.setenv("PRICE_HEADERS", '{"x-api-key": "abc"}')
            await feed.poll_http_json(f"http://127.0.0.1:{port}/auth", USDC, "p", "PRICE_HEADERS")
            assert state_of(feed).prices[USDC].usd == 4.0
    finally:
        await running.stop()


async def test_bus_quote_source_prices_from_other_solvers_only(sandbox: Sandbox) -> None:
    key_solver = ScriptedSolver(
        sandbox.urls()["relay_ws"],
        SecretKey.generate(),
        sandbox.ledger,
        rate_num=31 * 10**6,
        rate_den=10 * 10**24,
    )
    sandbox.ledger.deposit(key_solver.account, USDC, 10**12)
    await key_solver.start()
    try:
        async with (
            httpx.AsyncClient() as client,
            BusRpcClient(sandbox.urls()["relay_rpc"], client=client) as bus,
        ):
            feed = feeds(client, bus)
            state_of(feed).set_price(USDC, 1.0, T0_US)
            await feed.poll_bus_quote(NEAR, USDC, 10**24)
            assert state_of(feed).prices[NEAR].usd == pytest.approx(3.1)
            # Our own answers are excluded: with only our quote hash on offer, nothing is learned.
            mine = feeds(client, bus)
            state_of(mine).set_price(USDC, 1.0, T0_US)
            mine.own_quote_hashes = lambda: frozenset(sandbox.bus.quotes)  # every hash is "ours"
            await mine.poll_bus_quote(NEAR, USDC, 10**24)
            assert NEAR not in state_of(mine).prices
            assert mine.errors == {"bus_quote:no offers from others": 1}
    finally:
        await key_solver.stop()


async def test_several_sources_of_an_asset_are_combined_by_name(sandbox: Sandbox) -> None:
    """Each source keeps its own observation; the reference is their median, and sources that
    disagree leave the asset without a usable price (solver/core/state.py)."""
    async with httpx.AsyncClient() as client:
        feed = feeds(client)
        near = sandbox.prices.usd(NEAR)
        await feed.poll_sandbox(sandbox.urls()["prices"], "sandbox")
        feed.poll_static({NEAR: near * 1.01}, "backup")  # 100 bps off: within 200
        assert set(state_of(feed).observations[NEAR]) == {"sandbox", "backup"}
        assert state_of(feed).prices[NEAR].usd == pytest.approx(near * 1.005)
        feed.poll_static({NEAR: near * 1.05}, "backup")  # 500 bps off
        assert (
            "backup=" in state_of(feed).divergent[NEAR]
            and "sandbox=" in state_of(feed).divergent[NEAR]
        )
        assert state_of(feed).prices[NEAR].usd == pytest.approx(near * 1.005)  # the last agreed
        # Unnamed, two static sources are one ("static"): the later replaces the earlier.
        feed.poll_static({USDC: 1.0})
        feed.poll_static({USDC: 1.5})
        assert state_of(feed).observations[USDC].keys() == {"sandbox", "static"}
