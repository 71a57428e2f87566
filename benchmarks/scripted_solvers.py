"""Scripted solvers for the sandbox load test, all in one process of their own:
``python -m benchmarks.scripted_solvers --count 20 --info sandbox-info.json --out result.json``.

Like ``tests.sandbox.scripted.ScriptedSolver``, each is a real client of the relay's ``/ws``:
it subscribes to ``quote`` and ``quote_status`` and answers every quote event at once with a
signed ``token_diff`` at the reference rate minus a spread of 10..30 bps drawn per answer (so
the winner varies between solvers). It signs with the bot's :class:`QuoteSigner`, which also
gives the quote hash: a ``quote_status`` is checked against the solver's own quotes.

They run apart from the load generator so that neither steals the other's event loop. Once all
are subscribed the process prints one JSON line; on SIGTERM it closes every socket and writes
per-solver counts and every ``quote_status`` received (with whether it names one of that
solver's own quotes) to ``--out``, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import random
import signal
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from solver.core.clock import micros
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.quote_signing import QuoteSigner

USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
# Reference prices in micro-USD per whole token, and decimals: integer arithmetic end to end.
MICRO_USD = {USDC: 1_000_000, NEAR: 3_000_000, ETH: 3_000_000_000}
DECIMALS = {USDC: 6, NEAR: 24, ETH: 18}
SCALE: dict[str, int] = {asset: int(10**d) for asset, d in DECIMALS.items()}
DEADLINE_MARGIN = timedelta(seconds=5)


def solver_key(index: int) -> SecretKey:
    return SecretKey(hashlib.sha256(f"bench-solver:{index}".encode()).digest())


def user_key(index: int) -> SecretKey:
    return SecretKey(hashlib.sha256(f"bench-user:{index}".encode()).digest())


def price_out(asset_in: str, asset_out: str, amount_in: int, spread_bps: int) -> int:
    """Amount of ``asset_out`` for ``amount_in`` at the reference rate, less the spread, down."""
    num = amount_in * MICRO_USD[asset_in] * SCALE[asset_out] * (10_000 - spread_bps)
    return num // (MICRO_USD[asset_out] * SCALE[asset_in] * 10_000)


def price_in(asset_in: str, asset_out: str, amount_out: int, spread_bps: int) -> int:
    """Amount of ``asset_in`` asked for ``amount_out``, spread added, rounded up."""
    num = amount_out * MICRO_USD[asset_out] * SCALE[asset_in] * 10_000
    den = MICRO_USD[asset_in] * SCALE[asset_out] * (10_000 - spread_bps)
    return -(-num // den)


class BenchSolver:
    def __init__(self, index: int, url: str, contract: str, salt: bytes) -> None:
        self.index = index
        self.url = url
        key = solver_key(index)
        self.account = key.public_key.implicit_account_id()
        self.signer = QuoteSigner(key, self.account, contract)
        self.salt = salt
        self.rng = random.Random(index)
        self.own: set[str] = set()
        self.events = 0
        self.answers = 0
        self.replies_ok = 0
        self.reply_errors: Counter[str] = Counter()
        self.statuses: list[tuple[str, str, bool]] = []  # (quote_hash, intent_hash, own quote)
        self.bad_frames = 0
        self.ws: ClientConnection | None = None
        self.subscribed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._ids = 100

    async def start(self) -> None:
        self.ws = await connect(self.url, max_size=1 << 20)
        for i, kind in ((1, "quote"), (2, "quote_status")):
            frame = {"jsonrpc": "2.0", "id": i, "method": "subscribe", "params": [kind]}
            await self.ws.send(orjson.dumps(frame), text=True)
        self.task = asyncio.create_task(self._loop(self.ws))

    async def stop(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _loop(self, ws: ClientConnection) -> None:
        subscribed = 0
        with contextlib.suppress(ConnectionClosed):
            while True:
                frame = orjson.loads(await ws.recv(decode=False))
                if frame.get("method") == "event":
                    data = frame["params"]["data"]
                    if "quote_id" in data:
                        self.events += 1
                        await ws.send(self.answer(data), text=True)
                    elif "quote_hash" in data:
                        quote_hash = data["quote_hash"]
                        self.statuses.append(
                            (quote_hash, data.get("intent_hash", ""), quote_hash in self.own)
                        )
                    else:
                        self.bad_frames += 1
                elif frame.get("id") in (1, 2):
                    subscribed += 1
                    if subscribed == 2:
                        self.subscribed.set()
                elif "error" in frame:
                    message = (
                        frame["error"].get("message", "?")
                        if isinstance(frame["error"], dict)
                        else "?"
                    )
                    self.reply_errors[message.split(":")[0][:60]] += 1
                elif frame.get("result") == "OK":
                    self.replies_ok += 1
                else:
                    self.bad_frames += 1

    def answer(self, event: dict[str, Any]) -> bytes:
        asset_in = event["core_asset_identifier_in"]
        asset_out = event["core_asset_identifier_out"]
        spread = 10 + self.rng.randrange(21)
        if "exact_amount_in" in event:
            amount_in = int(event["exact_amount_in"])
            amount_out = price_out(asset_in, asset_out, amount_in, spread)
            output = {"amount_out": str(amount_out)}
        else:
            amount_out = int(event["exact_amount_out"])
            amount_in = price_in(asset_in, asset_out, amount_out, spread)
            output = {"amount_in": str(amount_in)}
        deadline = micros(
            datetime.now(UTC) + timedelta(milliseconds=event["min_deadline_ms"]) + DEADLINE_MARGIN
        )
        signed = self.signer.sign(
            deadline=deadline,
            nonce=salted_nonce(self.salt),
            asset_in=asset_in,
            amount_in=amount_in,
            asset_out=asset_out,
            amount_out=amount_out,
        )
        self.own.add(signed.quote_hash)
        self.answers += 1
        self._ids += 1
        params = {
            "quote_id": event["quote_id"],
            "quote_output": output,
            "signed_data": signed.signed_data,
        }
        return orjson.dumps(
            {"jsonrpc": "2.0", "id": self._ids, "method": "quote_response", "params": [params]}
        )

    def report(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "events": self.events,
            "answers": self.answers,
            "replies_ok": self.replies_ok,
            "reply_errors": dict(self.reply_errors),
            "bad_frames": self.bad_frames,
            "statuses": self.statuses,
        }


async def serve(count: int, info: dict[str, Any]) -> list[dict[str, Any]]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    salt = bytes.fromhex(info["current_salt"])
    solvers = [
        BenchSolver(i, info["relay_ws"], info["verifier_contract"], salt) for i in range(count)
    ]
    try:
        for solver in solvers:
            await solver.start()
        await asyncio.wait_for(asyncio.gather(*(s.subscribed.wait() for s in solvers)), 10)
        sys.stdout.write(orjson.dumps({"ready": count}).decode() + "\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        for solver in solvers:
            await solver.stop()
    return [s.report() for s in solvers]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--info", required=True, type=Path, help="the sandbox's JSON line")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    reports = asyncio.run(serve(args.count, orjson.loads(args.info.read_bytes())))
    args.out.write_bytes(orjson.dumps(reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
