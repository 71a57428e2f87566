"""Shared harness of the swap-API and history-API tests: a real sandbox on loopback with a
scripted solver on the bus, an httpx client, quote bodies and polling helpers.

``async with swap_world() as w:`` gives a :class:`SwapWorld`; other test modules wrap it in
their own fixture. The two tests at the bottom check the harness itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from sandbox.config import SandboxConfig, SwapSpec
from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.sandbox.scripted import NEAR, USDC, ScriptedSolver, sandbox_config

E6 = 10**6
E24 = 10**24
RATE_NUM, RATE_DEN = 3 * E6, E24  # the scripted solver: 3 USDC per NEAR
FINAL = ("SUCCESS", "REFUNDED", "FAILED")
_TLS = ssl.create_default_context()  # built once: loading CA certificates per client is slow


def swap_config(**swap: Any) -> SandboxConfig:
    base = sandbox_config()
    spec = {
        "min_deadline_ms": 0,
        "poll_interval_ms": 40,
        "jwt_secret_env": None,
        "service_key_env": None,
        **swap,
    }
    return base.model_copy(update={"swap": SwapSpec.model_validate(spec)})


def future(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def quote_body(**overrides: Any) -> dict[str, Any]:
    """A valid EXACT_INPUT quote request for 2 NEAR → USDC; keys in wire (camelCase) names."""
    body: dict[str, Any] = {
        "dry": False,
        "swapType": "EXACT_INPUT",
        "slippageTolerance": 100,
        "originAsset": NEAR,
        "depositType": "ORIGIN_CHAIN",
        "destinationAsset": USDC,
        "amount": str(2 * E24),
        "refundTo": "alice.near",
        "refundType": "INTENTS",
        "recipient": "bob.near",
        "recipientType": "INTENTS",
        "deadline": future(30),
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


@dataclass
class SwapWorld:
    sb: Sandbox
    client: httpx.AsyncClient
    solver: ScriptedSolver
    base: str
    api: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def quote(
        self, headers: dict[str, str] | None = None, **overrides: Any
    ) -> httpx.Response:
        return await self.client.post(
            self.base + "/v0/quote", json=quote_body(**overrides), headers=headers
        )

    async def ok_quote(self, headers: dict[str, str] | None = None, **overrides: Any) -> Any:
        response = await self.quote(headers, **overrides)
        assert response.status_code == 200, response.text
        return response.json()

    async def status(self, address: str, memo: str | None = None) -> httpx.Response:
        params = {"depositAddress": address}
        if memo is not None:
            params["depositMemo"] = memo
        return await self.client.get(self.base + "/v0/status", params=params)

    async def deposit(self, address: str, amount: int, memo: str | None = None) -> Any:
        body: dict[str, Any] = {"depositAddress": address, "amount": str(amount)}
        if memo is not None:
            body["depositMemo"] = memo
        response = await self.client.post(self.base + "/sandbox/deposit", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    async def wait_status(
        self,
        address: str,
        want: tuple[str, ...] = FINAL,
        memo: str | None = None,
        within_s: float = 6,
    ) -> Any:
        loop = asyncio.get_running_loop()
        until = loop.time() + within_s
        body: Any = None
        while loop.time() < until:
            body = (await self.status(address, memo)).json()
            if body["status"] in want:
                return body
            await asyncio.sleep(0.03)
        raise AssertionError(f"status never reached {want}: {body}")

    def balance(self, account: str, asset: str) -> int:
        return self.sb.ledger.mt_balance_of(account, asset)

    async def add_solver(self, **kwargs: Any) -> ScriptedSolver:
        return await _start_solver(self.sb, **kwargs)


async def _start_solver(sb: Sandbox, **kwargs: Any) -> ScriptedSolver:
    """A funded scripted solver on the bus (3 USDC per NEAR unless told otherwise)."""
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    sb.ledger.deposit(account, USDC, 1_000_000 * E6)
    sb.ledger.deposit(account, NEAR, 1_000_000 * E24)
    kwargs.setdefault("rate_num", RATE_NUM)
    kwargs.setdefault("rate_den", RATE_DEN)
    solver = ScriptedSolver(sb.urls()["relay_ws"], key, sb.ledger, **kwargs)
    await solver.start()
    return solver


@contextlib.asynccontextmanager
async def swap_world(
    config: SandboxConfig | None = None, **solver: Any
) -> AsyncIterator[SwapWorld]:
    async with (
        Sandbox(config or swap_config(), run_takers=False) as sb,
        httpx.AsyncClient(timeout=10, verify=_TLS) as client,
    ):
        urls = sb.urls()
        solver_account = await _start_solver(sb, **solver)
        world = SwapWorld(sb, client, solver_account, urls["swap_api"], urls["history_api"], "")
        world.token = sb.swap.keys.issue_token("test-partner")
        try:
            yield world
        finally:
            await world.solver.stop()


async def test_harness_serves_both_apis_and_lists_them() -> None:
    async with swap_world() as w:
        info = w.sb.info()
        assert info["swap_api"] == w.base and info["history_api"] == w.api
        assert info["swap_service_public_key"].startswith("ed25519:")
        assert (await w.client.get(w.base + "/openapi.json")).status_code == 200
        assert (await w.client.get(w.api + "/openapi.json")).status_code == 200


async def test_harness_quote_and_swap_round_trip() -> None:
    async with swap_world() as w:
        quote = await w.ok_quote()
        address = quote["quote"]["depositAddress"]
        await w.deposit(address, 2 * E24)
        done = await w.wait_status(address)
        assert done["status"] == "SUCCESS"
        assert w.balance("bob.near", USDC) == int(quote["quote"]["amountOut"])
