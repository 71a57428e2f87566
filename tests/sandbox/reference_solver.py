"""A solver that behaves like the reference TypeScript AMM solver's quickstart, for the sandbox.

Written from the protocol notes and the public behaviour of that solver (no third-party code):

- connects to ``{relay}/ws``, subscribes to ``quote`` then ``quote_status`` (protocol-notes 6);
- reads the vendor spelling of the asset fields, ``defuse_asset_identifier_in/out``;
- prices with a constant-product curve over its reserves on the verifier, read with
  ``mt_batch_balance_of`` through the ledger RPC (``query`` / ``call_function``, finality
  ``optimistic``), minus a margin in percent, and re-reads the reserves on ``quote_status``;
- signs a NEP-413 ``token_diff`` whose message is ``JSON.stringify({signer_id, deadline,
  intents})`` (that key order, ``toISOString()`` deadline, positive amounts without a sign),
  deadline ``min_deadline_ms`` plus an extra, under a **legacy nonce** (no salt) derived from
  its reserves as the reference solver's quoter does: the sha256 of ``reserves:<r1>:<r2>…``,
  computed when the reserves are read and **reused until they change**;
- re-reads its reserves when a ``quote_status`` arrives and on a timer (15 s, the reference
  solver's cron), one read at a time: a read asked for while one is in flight joins it when
  that read began after every ``quote_status`` seen, and follows it otherwise (a read begun
  before a notification may not show that notification's batch).

That nonce is why the order of the relay's events matters: a solver notified before its quote
executed reads unmoved reserves, keeps a nonce the batch then uses up, and has every answer
refused (``nonce was already used``) until its timer fires (issue 23).

Legacy nonces are accepted only by a sandbox with ``nonces: deployed``; under ``spec`` every
answer is refused with ``invalid salt``, which :attr:`ReferenceStyleSolver.errors` records.

Each answer is recorded with whether it was *settled-view* (:attr:`ReferenceStyleSolver.answers`):
signed when every ``quote_status`` seen had been followed by a completed re-read, with no
``quote_status`` arriving before its reply. The relay's frames reach a connection in order, and
a batch's notification is pushed when it executes, so an answer refused because a batch used
its nonce has that batch's notification arrive before its reply, or after a re-read that
should have shown the batch. Under the right order a settled-view answer is never refused for
its nonce, however slow the machine; under the old order (notified before execution) the
re-read shows unmoved reserves and the answers after it are (issue 23). The other answers
race a notification or a re-read, more of them the busier the machine.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from solver.protocol.keys import SecretKey
from solver.protocol.signing import sign_nep413_message

PREFIX = "defuse"
EXTRA_DEADLINE_MS = 5_000


class ReferenceStyleSolver:
    def __init__(
        self,
        relay_ws: str,
        chain_rpc: str,
        contract: str,
        key: SecretKey,
        tokens: list[str],
        *,
        margin_percent: float = 0.3,
        reserves_period_s: float = 15.0,
    ) -> None:
        self.relay_ws, self.chain_rpc, self.contract = relay_ws, chain_rpc, contract
        self.key = key
        self.account = key.public_key.implicit_account_id()
        self.tokens = tokens
        self.margin_bips = int(margin_percent * 100)
        self.reserves: dict[str, int] = {}
        self.nonce = b""
        self.reserves_period_s = reserves_period_s
        self.reserve_reads = 0
        self._reading: asyncio.Task[None] | None = None
        self._reading_from = 0  # statuses seen when the read in flight (or the last) began
        self.fresh_upto = 0
        """Statuses seen when the last completed read began: their batches are in the reserves."""
        self.answers: list[tuple[bool, str | None]] = []
        """Each answer: settled-view or not (the module's docstring), and its refusal (None:
        accepted)."""
        self.answered = 0
        self.accepted = 0
        self.errors: list[str] = []
        self.statuses: list[dict[str, Any]] = []
        self._ids = itertools.count(10)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._subs: dict[str, str] = {}
        self._ws: ClientConnection | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.update_reserves()
        self._ws = await connect(self.relay_ws)
        self._reader = asyncio.create_task(self._read())
        self._spawn(self._reserves_timer())
        for kind in ("quote", "quote_status"):
            sub_id = await self._request("subscribe", [kind])
            assert isinstance(sub_id, str), sub_id
            self._subs[sub_id] = kind

    async def stop(self) -> None:
        extra = [t for t in (self._reader, self._reading) if t is not None]
        for task in [*self._tasks, *extra]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._ws is not None:
            await self._ws.close()

    async def update_reserves(self) -> None:
        """Re-read the reserves, one read at a time: a read in flight that began after every
        status seen is joined; one that began before the latest is followed by a new one."""
        seen, before = len(self.statuses), self._reading
        if before is not None and not before.done() and self._reading_from >= seen:
            reading = before
        else:
            reading = self._reading = asyncio.create_task(self._read_reserves(before, seen))
            self._reading_from = seen
        await asyncio.shield(reading)

    async def _reserves_timer(self) -> None:
        while True:
            await asyncio.sleep(self.reserves_period_s)
            await self.update_reserves()

    async def _read_reserves(self, before: asyncio.Task[None] | None, seen: int) -> None:
        """Read the reserves after the read ``before`` (if any) ended; ``seen``: the statuses
        seen when this read was asked for."""
        if before is not None:
            with contextlib.suppress(Exception):  # its own callers see how it failed
                await before
        args = {"account_id": self.account, "token_ids": self.tokens}
        body = {
            "jsonrpc": "2.0",
            "id": "dontcare",
            "method": "query",
            "params": {
                "request_type": "call_function",
                "finality": "optimistic",
                "account_id": self.contract,
                "method_name": "mt_batch_balance_of",
                "args_base64": base64.b64encode(json.dumps(args).encode()).decode(),
            },
        }
        async with httpx.AsyncClient(timeout=5) as http:
            answer = (await http.post(self.chain_rpc, json=body)).json()
        balances = json.loads(bytes(answer["result"]["result"]))
        self.reserve_reads += 1
        self.fresh_upto = max(self.fresh_upto, seen)
        reserves = {t: int(b) for t, b in zip(self.tokens, balances, strict=True)}
        if reserves != self.reserves:
            self.reserves = reserves
            seed = "reserves:" + ":".join(str(reserves[t]) for t in self.tokens)
            self.nonce = hashlib.sha256(seed.encode()).digest()

    # ------------------------------------------------------------------ frames

    async def _request(self, method: str, params: list[Any]) -> Any:
        assert self._ws is not None
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        await self._ws.send(
            orjson.dumps({"id": request_id, "jsonrpc": "2.0", "method": method, "params": params})
        )
        reply = await asyncio.wait_for(future, 5)
        if "error" in reply:
            raise RuntimeError(str(reply["error"].get("message")))
        return reply["result"]

    async def _read(self) -> None:
        assert self._ws is not None
        async for raw in self._ws:
            frame = orjson.loads(raw)
            if isinstance(frame.get("id"), int) and frame["id"] in self._pending:
                self._pending.pop(frame["id"]).set_result(frame)
            elif frame.get("method") == "event":
                kind = self._subs.get(frame["params"]["subscription"])
                data = frame["params"]["data"]
                if kind == "quote":
                    self._spawn(self._on_quote(data))
                elif kind == "quote_status":
                    self.statuses.append(data)
                    self._spawn(self.update_reserves())

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ quoting

    def price(self, event: dict[str, Any]) -> tuple[int, int] | None:
        """``(amount_in, amount_out)`` on the constant-product curve with the margin, or None."""
        token_in, token_out = (
            event[f"{PREFIX}_asset_identifier_in"],
            event[f"{PREFIX}_asset_identifier_out"],
        )
        reserve_in, reserve_out = self.reserves.get(token_in), self.reserves.get(token_out)
        if not reserve_in or not reserve_out:
            return None
        keep = 10_000 - self.margin_bips
        if "exact_amount_in" in event:
            amount_in = int(event["exact_amount_in"])
            with_fee = amount_in * keep
            amount_out = with_fee * reserve_out // (reserve_in * 10_000 + with_fee)
        else:
            amount_out = int(event["exact_amount_out"])
            if amount_out >= reserve_out:
                return None
            amount_in = -(-reserve_in * amount_out * 10_000 // ((reserve_out - amount_out) * keep))
        if amount_in <= 0 or amount_out <= 0 or amount_out >= reserve_out:
            return None
        return amount_in, amount_out

    async def _on_quote(self, event: dict[str, Any]) -> None:
        seen = len(self.statuses)
        settled_view = self.fresh_upto == seen  # priced and signed below without a wait
        priced = self.price(event)
        if priced is None:
            return
        amount_in, amount_out = priced
        token_in = event[f"{PREFIX}_asset_identifier_in"]
        token_out = event[f"{PREFIX}_asset_identifier_out"]
        deadline = datetime.now(UTC) + timedelta(
            milliseconds=int(event["min_deadline_ms"]) + EXTRA_DEADLINE_MS
        )
        message = json.dumps(
            {
                "signer_id": self.account,
                "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%S.")
                + f"{deadline.microsecond // 1000:03d}Z",
                "intents": [
                    {
                        "intent": "token_diff",
                        "diff": {token_in: str(amount_in), token_out: f"-{amount_out}"},
                    }
                ],
            },
            separators=(",", ":"),
        )
        signed = sign_nep413_message(self.key, message, self.nonce, self.contract)
        output = (
            {"amount_out": str(amount_out)}
            if "exact_amount_in" in event
            else {"amount_in": str(amount_in)}
        )
        answer = {
            "quote_id": event["quote_id"],
            "quote_output": output,
            "signed_data": signed.model_dump(mode="json", exclude_none=True),
        }
        self.answered += 1
        refusal: str | None = None
        try:
            await self._request("quote_response", [answer])
        except (RuntimeError, TimeoutError) as exc:
            refusal = str(exc)
            self.errors.append(refusal)
        else:
            self.accepted += 1
        self.answers.append((settled_view and len(self.statuses) == seen, refusal))
