"""The sandbox with its swap and history APIs and liquidity on the bus, for the tests of the
swap clients, the rebalancer and ``solver swap`` (spec 4.1–4.5).

:func:`swap_sandbox` starts a :class:`~sandbox.server.Sandbox` (three tokens at constant prices,
see :func:`tests.app.harness.sandbox_config`) and a :class:`~tests.sandbox.scripted.ScriptedSolver`
market maker on its real websocket, funded on its ledger, answering every quote at ``rate``
(output per input, in smallest units). :meth:`SwapSandbox.swap` runs a whole swap for another
user through the real API (quote, simulated deposit, execution), which is how history records
are made.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from solver.protocol.swap import format_timestamp
from tests.app.harness import E6, E18, E24, ETH, NEAR, USDC, fund, running_sandbox
from tests.sandbox.scripted import ScriptedSolver

PRICES = {USDC: 1.0, NEAR: 3.0, ETH: 3000.0}
DECIMALS = {USDC: 6, NEAR: 24, ETH: 18}
FAIR = (3 * E6, E24)
"""3 USDC (smallest units) per NEAR (smallest units): the reference price, no spread."""
MAKER_BALANCES = {USDC: 10_000_000 * E6, NEAR: 10_000_000 * E24, ETH: 10_000 * E18}


@dataclass
class SwapSandbox:
    sandbox: Sandbox
    maker: ScriptedSolver
    token: str
    http: httpx.AsyncClient

    @property
    def swap_url(self) -> str:
        return self.sandbox.urls()["swap_api"]

    @property
    def history_url(self) -> str:
        return self.sandbox.urls()["history_api"]

    def balances(self, account: str) -> dict[str, int]:
        assets = [USDC, NEAR, ETH]
        values = self.sandbox.ledger.mt_batch_balance_of(account, assets)
        return dict(zip(assets, values, strict=True))

    def quote_body(self, account: str, amount_in: int, **changes: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "dry": False,
            "swapType": "EXACT_INPUT",
            "slippageTolerance": 50,
            "originAsset": NEAR,
            "depositType": "INTENTS",
            "destinationAsset": USDC,
            "amount": str(amount_in),
            "refundTo": account,
            "refundType": "INTENTS",
            "recipient": account,
            "recipientType": "INTENTS",
            "deadline": format_timestamp(datetime.now(UTC) + timedelta(minutes=30)),
        }
        body.update(changes)
        return body

    async def swap(self, account: str, amount_in: int) -> dict[str, Any]:
        """A whole swap of ``amount_in`` NEAR to USDC for ``account`` (deposit simulated by
        the sandbox); returns its final status answer."""
        headers = {"authorization": f"Bearer {self.token}"}
        quoted = await self.http.post(
            self.swap_url + "/v0/quote", json=self.quote_body(account, amount_in), headers=headers
        )
        assert quoted.status_code == 200, quoted.text
        address = quoted.json()["quote"]["depositAddress"]
        deposited = await self.http.post(
            self.swap_url + "/sandbox/deposit",
            json={"depositAddress": address, "amount": str(amount_in)},
        )
        assert deposited.status_code == 200, deposited.text
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = await self.http.get(
                self.swap_url + "/v0/status", params={"depositAddress": address}, headers=headers
            )
            body: dict[str, Any] = status.json()
            if body["status"] in ("SUCCESS", "REFUNDED", "FAILED"):
                return body
            await asyncio.sleep(0.02)
        raise AssertionError(f"swap {address} did not finish")


@asynccontextmanager
async def swap_sandbox(
    tmp_path: Path,
    *,
    rate: tuple[int, int] = FAIR,
    maker_balances: Mapping[str, int] = MAKER_BALANCES,
    **bus: Any,
) -> AsyncIterator[SwapSandbox]:
    async with running_sandbox(tmp_path, **bus) as sandbox, httpx.AsyncClient(timeout=10) as http:
        key = SecretKey.generate()
        fund(sandbox, key.public_key.implicit_account_id(), maker_balances)
        maker = ScriptedSolver(
            sandbox.urls()["relay_ws"], key, sandbox.ledger, rate_num=rate[0], rate_den=rate[1]
        )
        await maker.start()
        try:
            token = sandbox.swap.keys.issue_token("solver-tests")
            yield SwapSandbox(sandbox, maker, token, http)
        finally:
            await maker.stop()
