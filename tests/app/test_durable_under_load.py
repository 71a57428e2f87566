"""Durable before sent, under load (issue 11): ``kill -9`` of the bot at saturation, then
every answer the relay received is in the journal, with its nonce.

The bot runs as a child process (``solver run``) against a relay played by this test (a real
websocket server on 127.0.0.1 port 0) that sends quote events as fast as the bot takes them,
answers every ``quote_response`` with ``OK`` and keeps what it received; chain RPC and prices
come from a sandbox. After a second of saturation the bot is killed with SIGKILL mid-flow.
The group commit happens before a batch's answers are written to the socket, so nothing the
relay holds can be missing from the store: the test reads the journal back and checks each
answer's quote id, quote hash and nonce.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve

from solver.core import facts as f
from solver.io.store.sqlite_store import Store
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import PREFIX_LEN
from solver.protocol.signing import parse_signed, verify_signed
from tests.app.harness import (
    DEFAULT_BALANCES,
    E24,
    NEAR,
    USDC,
    bot_overrides,
    eventually,
    fund,
    running_sandbox,
)
from tests.app.test_cli_run import write_config

KEY_ENV = "SOLVER_DURABLE_TEST_KEY"
IN_FLIGHT = 64


class FloodRelay:
    """Confirms subscriptions, keeps ``IN_FLIGHT`` quote events outstanding, answers OK."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []
        self.sent = 0
        self.subscribed = asyncio.Event()
        self.flood = asyncio.Event()

    async def handler(self, ws: ServerConnection) -> None:
        pump = asyncio.create_task(self._pump(ws))
        try:
            async for raw in ws:
                frame = orjson.loads(raw)
                method = frame.get("method")
                if method == "subscribe":
                    sub = "sub-quote" if frame["params"][0] == "quote" else "sub-status"
                    await ws.send(
                        orjson.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": sub})
                    )
                    if sub == "sub-status":
                        self.subscribed.set()
                elif method == "quote_response":
                    self.answers.append(frame["params"][0])
                    await ws.send(
                        orjson.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": "OK"})
                    )
        except Exception:
            pass
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pump(self, ws: ServerConnection) -> None:
        await self.flood.wait()
        while True:
            while self.sent - len(self.answers) < IN_FLIGHT:
                self.sent += 1
                data = {
                    "quote_id": f"q{self.sent}",
                    "core_asset_identifier_in": NEAR,
                    "core_asset_identifier_out": USDC,
                    "exact_amount_in": str(E24 // 2 + self.sent),
                    "min_deadline_ms": 60_000,
                }
                params = {"subscription": "sub-quote", "data": data, "metadata": {}}
                await ws.send(orjson.dumps({"jsonrpc": "2.0", "method": "event", "params": params}))
            await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def flood_relay() -> AsyncIterator[tuple[FloodRelay, str]]:
    relay = FloodRelay()
    async with serve(relay.handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield relay, f"ws://127.0.0.1:{port}/ws"


async def test_kill_9_at_saturation_loses_no_answer_the_relay_received(tmp_path: Path) -> None:
    async with running_sandbox(tmp_path) as sandbox, flood_relay() as (relay, url):
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        fund(sandbox, account, DEFAULT_BALANCES)
        db = tmp_path / "solver.sqlite"
        overrides = {
            **bot_overrides(sandbox, account, KEY_ENV, db, relay_ws=url),
            "risk.max_quotes_per_s": 100_000,
            "risk.max_open_exposure_usd": 1e12,
            "log.level": "WARNING",
        }
        config = write_config(tmp_path / "bot.yaml", overrides)
        env = {**os.environ, KEY_ENV: key.to_text()}
        log = tmp_path / "bot.log"
        with log.open("wb") as out:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "solver.cli", "run", "--config", str(config),
                env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        try:
            await asyncio.wait_for(relay.subscribed.wait(), 20)
            relay.flood.set()
            await eventually(lambda: len(relay.answers) >= 1_000, "a saturated flow", 20)
            child.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(child.wait(), 5) == -signal.SIGKILL
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
    received = list(relay.answers)
    assert len(received) >= 1_000, log.read_text()
    with Store(db, create=False, checkpoint_every_s=None) as store:
        prefixes = store.nonce_prefixes(account)
        _, facts = store.journal.load()
        opened = {fact.quote_id: fact for fact in facts if isinstance(fact, f.QuoteOpened)}
        missing = [a["quote_id"] for a in received if a["quote_id"] not in opened]
        assert missing == [], f"{len(missing)} answers the relay holds are not in the journal"
        for answer in received[:: max(1, len(received) // 200)]:  # a sample, verified for real
            fact = opened[answer["quote_id"]]
            item = verify_signed(parse_signed(answer["signed_data"]))
            assert item.nonce == fact.nonce
            # Its nonce is ``salt ‖ prefix ‖ counter``, under the prefix this run claimed.
            assert fact.nonce[4 : 4 + PREFIX_LEN] in prefixes
    # More were journaled than received (the last batch was committed, then killed mid-send).
    assert len(opened) >= len(received)
    assert len(prefixes) == 1 and len({fact.nonce for fact in opened.values()}) == len(opened)
