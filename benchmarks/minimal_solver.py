"""Issue 11's minimal solver: the floor the bot is measured against (``quote_path``).

What any solver must do per request and nothing more: parse the ``quote`` event (orjson), price
it at fixed USD rates minus a spread, sign the mirror ``token_diff`` (NEP-413, ed25519) with
the bot's own :class:`~solver.protocol.quote_signing.QuoteSigner` so that the signing is
identical, and send the ``quote_response`` (orjson, websockets, uvloop). No validation models,
no limits, no book, no persistence, no logging per request. The relay's replies are read and
ignored.

The steps are methods of their own where py-spy could not tell them apart otherwise (it sees
Python frames, not the C calls inside them): :meth:`Minimal._read` parses the frame,
:meth:`Minimal.answer` prices it and signs, :meth:`Minimal.response` builds the JSON. The
benchmark profiles this solver beside the bot and gives each step in µs per answer
(:data:`benchmarks.quote_path_profile.MINIMAL_STAGES`); the one more call costs well under a
µs of the tens an answer takes.

Run by the benchmark as a child process:

``python -m benchmarks.minimal_solver --url WS --account ID --contract ID --salt HEX
--prices JSON`` with the secret key in ``BENCH_SOLVER_KEY``; SIGTERM stops it (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

import orjson
import uvloop
from websockets.asyncio.client import connect

from solver.core.clock import now_micros
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.quote_signing import QuoteSigner

KEY_ENV = "BENCH_SOLVER_KEY"
SPREAD = 0.9975  # 25 bps, as the bot's ``spread`` strategy in the benchmark
DECIMALS = {"nep141:usdc.sandbox": 6, "nep141:wrap.sandbox": 24, "nep141:eth.sandbox": 18}


class Minimal:
    def __init__(self, signer: QuoteSigner, salt: bytes, prices: dict[str, float]) -> None:
        self.signer = signer
        self.salt = salt
        # USD per smallest unit of each asset: one float multiply per side.
        self.unit_usd = {a: prices[a] / 10**d for a, d in DECIMALS.items()}
        self.next_id = 0

    def answer(self, data: dict[str, Any]) -> bytes:
        """The ``quote_response`` frame for one ``quote`` event's data."""
        asset_in = data["core_asset_identifier_in"]
        asset_out = data["core_asset_identifier_out"]
        rate = self.unit_usd[asset_in] / self.unit_usd[asset_out] * SPREAD  # out per in
        if "exact_amount_in" in data:
            amount_in = int(data["exact_amount_in"])
            amount_out = int(amount_in * rate)
            output = {"amount_out": str(amount_out)}
        else:
            amount_out = int(data["exact_amount_out"])
            amount_in = int(amount_out / rate) + 1
            output = {"amount_in": str(amount_in)}
        deadline = now_micros() + data.get("min_deadline_ms", 1000) * 1000
        signed = self.signer.sign(
            deadline=deadline,
            nonce=salted_nonce(self.salt),
            asset_in=asset_in,
            amount_in=amount_in,
            asset_out=asset_out,
            amount_out=amount_out,
        )
        return self.response(data["quote_id"], output, signed.signed_data)

    def response(self, quote_id: str, output: dict[str, str], signed_data: dict[str, Any]) -> bytes:
        """The ``quote_response`` frame (JSON), apart so that a profile shows its cost."""
        self.next_id += 1
        params = {"quote_id": quote_id, "quote_output": output, "signed_data": signed_data}
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": "quote_response"}
        frame["params"] = [params]
        return orjson.dumps(frame)

    async def run(self, url: str, stop: asyncio.Event) -> None:
        async with connect(url, max_size=1 << 20, compression=None) as ws:  # as the bot
            for i, kind in enumerate(("quote", "quote_status")):
                subscribe = {"jsonrpc": "2.0", "id": -1 - i, "method": "subscribe"}
                await ws.send(orjson.dumps({**subscribe, "params": [kind]}), text=True)
            reader = asyncio.create_task(self._read(ws))
            await stop.wait()
            reader.cancel()

    async def _read(self, ws: Any) -> None:
        async for raw in ws:
            frame = orjson.loads(raw)
            if frame.get("method") == "event":
                data = frame["params"]["data"]
                if "quote_id" in data:
                    await ws.send(self.answer(data), text=True)


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    signer = QuoteSigner(SecretKey.from_text(os.environ[KEY_ENV]), args.account, args.contract)
    solver = Minimal(signer, bytes.fromhex(args.salt), orjson.loads(args.prices))
    await solver.run(args.url, stop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--url", "--account", "--contract", "--salt", "--prices"):
        parser.add_argument(name, required=True)
    uvloop.run(main(parser.parse_args()))
