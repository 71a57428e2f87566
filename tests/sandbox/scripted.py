"""Scripted peers for sandbox integration tests: a solver on the real websocket and a user on
the real JSON-RPC endpoint. They use the same codec as the bot, and a ``tamper`` hook lets a
test send exactly the malformed answer it wants to see refused."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from sandbox.config import SandboxConfig, TokenSpec
from sandbox.ledger import VerifierLedger
from solver.protocol.intents import TokenDiff
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import sign_nep413

USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"


def sandbox_config(**bus: Any) -> SandboxConfig:
    return SandboxConfig(
        tokens={
            USDC: TokenSpec(symbol="USDC", decimals=6, usd=1.0),
            NEAR: TokenSpec(symbol="wNEAR", decimals=24, usd=3.0),
        },
        bus={"solver_wait_ms": 600, "settlement_delay_ms": 100, **bus},
        takers={"enabled": False},
        state_dir="var/test-sandbox",
    )


Answer = dict[str, Any]
Tamper = Callable[[dict[str, Any], Answer], Answer | None]


class ScriptedSolver:
    """Answers every quote event at a fixed price: ``amount_out = amount_in * rate`` (exact-in),
    or ``amount_in = amount_out / rate`` (exact-out). ``tamper`` may rewrite or drop answers."""

    def __init__(
        self,
        url: str,
        key: SecretKey,
        ledger: VerifierLedger,
        *,
        rate_num: int = 1,
        rate_den: int = 1,
        tamper: Tamper | None = None,
        delay_s: float = 0.0,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.url, self.key, self.ledger = url, key, ledger
        self.account = key.public_key.implicit_account_id()
        self.rate_num, self.rate_den = rate_num, rate_den
        self.tamper, self.delay_s = tamper, delay_s
        # Well-signed but wrong answers: recipient, deadline_ms, nonce, salt, extra_out.
        self.overrides = overrides or {}
        self.events: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.replies: dict[int, dict[str, Any]] = {}
        self.signed: dict[str, Answer] = {}
        self._ids = itertools.count(100)
        self._ws: ClientConnection | None = None
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Awaited in the reader the moment a quote_status arrives (before the next frame).
        self.on_status: Callable[[dict[str, Any]], Awaitable[None]] | None = None

    async def start(self, headers: dict[str, str] | None = None) -> None:
        self._ws = await connect(self.url, additional_headers=headers)
        await self._ws.send(
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": ["quote"]})
        )
        await self._ws.send(
            orjson.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "subscribe", "params": ["quote_status"]}
            )
        )
        self._task = asyncio.create_task(self._loop())
        await asyncio.wait_for(self._subscribed.wait(), 5)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._ws:
            await self._ws.close()

    async def send_raw(self, frame: str | bytes) -> None:
        assert self._ws is not None
        await self._ws.send(frame)

    async def _loop(self) -> None:
        assert self._ws is not None
        async for raw in self._ws:
            frame = orjson.loads(raw)
            if frame.get("method") == "event":
                data = frame["params"]["data"]
                if "quote_id" in data:
                    self.events.append(data)
                    asyncio.get_running_loop().create_task(self._answer(data))
                else:
                    self.statuses.append(data)
                    if self.on_status is not None:
                        await self.on_status(data)
            else:
                self.replies[frame.get("id") if isinstance(frame.get("id"), int) else -1] = frame
                if 1 in self.replies and 2 in self.replies:
                    self._subscribed.set()

    def build_answer(self, event: dict[str, Any]) -> Answer:
        asset_in, asset_out = event["core_asset_identifier_in"], event["core_asset_identifier_out"]
        if "exact_amount_in" in event:
            amount_in = int(event["exact_amount_in"])
            amount_out = amount_in * self.rate_num // self.rate_den
            output = {"amount_out": str(amount_out)}
        else:
            amount_out = int(event["exact_amount_out"])
            amount_in = -(-amount_out * self.rate_den // self.rate_num)
            output = {"amount_in": str(amount_in)}
        ov = self.overrides
        deadline_ms = ov.get("deadline_ms", event["min_deadline_ms"] + 5000)
        salt = bytes.fromhex(ov.get("salt", self.ledger.current_salt()))
        signed_in = amount_in + ov.get("extra_in", 0)
        signed = sign_nep413(
            self.key,
            signer_id=self.account,
            verifying_contract=ov.get("recipient", self.ledger.contract_id),
            deadline=datetime.now(UTC) + timedelta(milliseconds=deadline_ms),
            nonce=ov.get("nonce") or salted_nonce(salt),
            intents=[TokenDiff(diff={asset_in: signed_in, asset_out: -amount_out})],
        )
        return {
            "quote_id": event["quote_id"],
            "quote_output": output,
            "signed_data": signed.model_dump(mode="json", exclude_none=True),
        }

    async def _answer(self, event: dict[str, Any]) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        answer: Answer | None = self.build_answer(event)
        if self.tamper is not None and answer is not None:
            answer = self.tamper(event, answer)
        if answer is None:
            return
        request_id = next(self._ids)
        self.signed[event["quote_id"]] = answer
        assert self._ws is not None
        await self._ws.send(
            orjson.dumps(
                {"jsonrpc": "2.0", "id": request_id, "method": "quote_response", "params": [answer]}
            )
        )

    def reply_errors(self) -> list[str]:
        return [
            r["error"]["message"]
            for i, r in sorted(self.replies.items())
            if i >= 100 and "error" in r
        ]


async def rpc(client: httpx.AsyncClient, url: str, method: str, params: Any) -> dict[str, Any]:
    response = await client.post(
        url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": [params]}
    )
    body: dict[str, Any] = response.json()
    return body


def user_item(
    key: SecretKey,
    ledger: VerifierLedger,
    diff: dict[str, int],
    *,
    deadline_s: float = 60,
    recipient: str | None = None,
    nonce: bytes | None = None,
) -> dict[str, Any]:
    signed = sign_nep413(
        key,
        signer_id=key.public_key.implicit_account_id(),
        verifying_contract=recipient or ledger.contract_id,
        deadline=datetime.now(UTC) + timedelta(seconds=deadline_s),
        nonce=nonce or salted_nonce(bytes.fromhex(ledger.current_salt())),
        intents=[TokenDiff(diff=diff)],
    )
    return signed.model_dump(mode="json", exclude_none=True)
