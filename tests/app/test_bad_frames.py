"""Bad frames are skipped with a counted reason and the bot keeps running (issue 4, item 6).

The bot's websocket goes to a tiny raw relay in the test (a real peer on 127.0.0.1:0); chain
RPC and prices come from a sandbox. The relay confirms the subscriptions, sends every kind of
malformed event, then a good one with the extra fields real relays add, and checks the bot's
``quote_response`` with the protocol's own verifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve

from solver.core.quoting import UNKNOWN_PAIR
from solver.protocol.amounts import U128_MAX
from solver.protocol.intents import TokenDiff
from solver.protocol.signing import parse_signed, verify_signed
from tests.app.harness import E24, NEAR, USDC, eventually, live_bot, running_sandbox

QUOTE_SUB = "sub-1"
GOOD = {
    "quote_id": "q-good",
    "core_asset_identifier_in": NEAR,
    "core_asset_identifier_out": USDC,
    "exact_amount_in": str(2 * E24),
    "min_deadline_ms": 30_000,
}


def event(data: dict[str, Any], **envelope: Any) -> bytes:
    params = {"subscription": QUOTE_SUB, "data": data, "metadata": {"partner_id": "test"}}
    frame = {"jsonrpc": "2.0", "method": "event", "params": {**params, **envelope}}
    return json.dumps(frame).encode()  # stdlib json: integers past 64 bits too


def bad(**changes: Any) -> bytes:
    data = {**GOOD, "quote_id": "q-bad"}
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return event(data)


# (frame, where it is counted): a bad_frames reason of the ws client, or a skip of the engine.
BAD_FRAMES: list[tuple[bytes, str]] = [
    (b'{"jsonrpc": "2.0", "method": "event", "params": {', "invalid_json"),
    (b"\xff\xfe not even utf-8", "invalid_json"),
    (b"[1, 2, 3]", "not_object"),
    (bad(core_asset_identifier_in="nep141:unknown.sandbox"), f"skip:{UNKNOWN_PAIR}"),
    (bad(exact_amount_out="5"), "quote.exact_amount"),  # both exact amounts
    (bad(exact_amount_in=None), "quote.exact_amount"),  # neither
    (bad(exact_amount_in="0"), "quote.amount"),
    (bad(exact_amount_in=str(U128_MAX + 1)), "quote.amount"),
    (bad(exact_amount_in=2 * E24), "quote.amount"),  # a JSON number, not a string
    (bad(exact_amount_in="-5"), "quote.amount"),
    (bad(min_deadline_ms=-1), "quote.min_deadline_ms"),
    (bad(quote_id=None), "quote.quote_id"),
    (event({**GOOD, "quote_id": "q-big", "pad": "x" * (1 << 20)}), "too_large"),  # > 1 MiB
]


class RawRelay:
    """Confirms both subscriptions, then sends what the test queues; records what arrives."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.received: list[dict[str, Any]] = []
        self.connections = 0

    async def handler(self, ws: ServerConnection) -> None:
        self.connections += 1
        sender = asyncio.create_task(self._send(ws))
        try:
            async for raw in ws:
                frame = orjson.loads(raw)
                self.received.append(frame)
                method = frame.get("method")
                if method == "subscribe":
                    kind = frame["params"][0]
                    sub_id = QUOTE_SUB if kind == "quote" else "sub-2"
                    reply = {"jsonrpc": "2.0", "id": frame["id"], "result": sub_id}
                else:
                    reply = {"jsonrpc": "2.0", "id": frame["id"], "result": "OK"}
                await ws.send(orjson.dumps(reply).decode())
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

    async def _send(self, ws: ServerConnection) -> None:
        while True:
            frame = await self.outbox.get()
            try:
                text = frame.decode("utf-8")
            except UnicodeDecodeError:
                await ws.send(frame)  # not UTF-8: only a binary frame can carry it
            else:
                await ws.send(text)

    def responses(self) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("method") == "quote_response"]


@contextlib.asynccontextmanager
async def raw_relay() -> AsyncIterator[tuple[RawRelay, str]]:
    relay = RawRelay()
    async with serve(relay.handler, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield relay, f"ws://127.0.0.1:{port}/ws"


async def test_bad_frames_are_counted_and_skipped_and_the_good_quote_is_answered(
    tmp_path: Path,
) -> None:
    async with (
        running_sandbox(tmp_path) as sandbox,
        raw_relay() as (relay, url),
        live_bot(tmp_path, sandbox=sandbox, relay_ws=url) as bot,
    ):
        app = bot.app
        counters = app.ws.counters
        for frame, _ in BAD_FRAMES:
            relay.outbox.put_nowait(frame)
        expected: dict[str, int] = {}
        for _, reason in BAD_FRAMES:
            expected[reason] = expected.get(reason, 0) + 1
        skips = {k: v for k, v in expected.items() if k.startswith("skip:")}
        frames = {k: v for k, v in expected.items() if not k.startswith("skip:")}

        def counted() -> bool:
            engine_skips = {f"skip:{k}": v for k, v in app.desk.stats.skipped.items()}
            return counters.bad_frames == frames and engine_skips == skips

        await eventually(counted, f"every bad frame counted: {expected}")
        assert app.desk.stats.requests == 1  # only the unknown pair got as far as the engine
        assert app.executor.outbox.sent == 0 and relay.responses() == []

        # Still connected, on the same socket: the loop kept running.
        assert app.ws.connected and relay.connections == 1 and counters.disconnects == 0

        # A good request with the fields real relays add (flat envelope this time).
        extra = {
            "min_wait_ms": 100,
            "max_wait_ms": 1500,
            "protocol_fee_included": True,
            "trusted_metadata": {"source": "test", "nested": [1, 2]},
        }
        sent_at = datetime.now(UTC)
        relay.outbox.put_nowait(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "event",
                    "params": {"subscription": QUOTE_SUB, **GOOD, **extra},
                }
            )
        )
        await eventually(lambda: len(relay.responses()) == 1, "the bot's quote_response")
        (response,) = relay.responses()
        (answer,) = response["params"]
        assert answer["quote_id"] == "q-good"
        verified = verify_signed(parse_signed(answer["signed_data"]))
        assert verified.message.signer_id == verified.key_owner == app.account
        assert verified.recipient == sandbox.ledger.contract_id
        assert verified.public_key == bot.key.public_key.to_text()
        (intent,) = verified.message.intents
        assert isinstance(intent, TokenDiff)
        amount_out = int(answer["quote_output"]["amount_out"])
        assert intent.diff == {NEAR: 2 * E24, USDC: -amount_out}
        assert 5_900_000 < amount_out < 6_000_000  # 2 wNEAR at 3 USD, minus the 25 bp spread
        assert verified.message.deadline >= sent_at + timedelta(milliseconds=30_000)
        assert verified.nonce[:4].hex() == sandbox.ledger.current_salt()
        # The relay's "OK" came back and was matched to the quote.
        await eventually(lambda: counters.responses_ok == 1, "the OK to be matched")
        assert app.executor.outbox.sent == 1 and app.desk.stats.rejected == 0
        assert counters.bad_frames == frames  # nothing new went wrong
