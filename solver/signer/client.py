"""The bot's side of the signer process (issue 28): the deferred quote signer and the intent
signer, over the owner-only Unix socket (:mod:`.wire`).

:class:`RemoteQuoteSigner` is the executor's signer port when the key is elsewhere. It never
blocks the loop: requests of one loop turn are sent as one batch at the end of the turn (a
frame of at most ``batch_max``), and each answer comes back through its ``reply`` in the order
the requests came (the signer answers a connection's batches in order). A signer that does not
answer a batch within ``timeout_s``, or with ``max_in_flight`` requests already waiting, makes
requests skip with ``signer_busy``; a signer that is gone makes them skip with ``signer_down``
at once while a task reconnects. Each change of the link is reported through ``on_alert``
(raised, then resolved). A late answer of a batch given up is dropped: it was never sent.

:class:`RemoteIntentSigner` signs one NEP-413 message at a time for the operator commands and
the rebalancer (rare, not on the quote path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from solver.errors import RemoteError, SolverError, TransportError
from solver.protocol.encoding import b58decode, b58encode, b64decode, b64encode
from solver.protocol.intents import format_deadline_us
from solver.protocol.keys import PublicKey
from solver.protocol.quote_signing import SignedQuote, token_diff_message
from solver.protocol.signing import nep413_digest
from solver.signer.wire import frame, read_frame

log = logging.getLogger("solver.signer.client")

SIGNER_BUSY = "signer_busy"
SIGNER_DOWN = "signer_down"
SignReply = Callable[[SignedQuote | str], None]
"""A signed quote, or the reason it was not signed (``signer_busy``, ``signer_down``,
``signer_refused:<rule>``)."""
AlertHook = Callable[[str, str, bool], None]
"""``(kind, detail, resolved)``."""


async def open_link(
    socket: Path, account: str, verifier: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, PublicKey]:
    """Connect and say hello; refuse a signer of another account or verifier."""
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket))
    except OSError as exc:
        raise TransportError(f"signer socket {socket}: {exc.strerror or exc}") from None
    writer.write(frame({"b": [{"k": "hello"}]}))
    body = await read_frame(reader)
    hello = body["b"][0]
    if hello.get("account") != account or hello.get("verifier") != verifier:
        await _close(writer)
        raise RemoteError(
            f"signer socket {socket} signs for {hello.get('account')} at "
            f"{hello.get('verifier')}, not {account} at {verifier}"
        )
    return reader, writer, PublicKey.from_text(hello["public_key"])


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


class _Batch:
    __slots__ = ("abandoned", "items", "timer")

    def __init__(self, items: list[tuple[dict[str, Any], SignReply]]) -> None:
        self.items = items
        self.abandoned = False
        self.timer: asyncio.TimerHandle | None = None


class RemoteQuoteSigner:
    """The deferred signer port (see the module's docstring)."""

    deferred = True

    def __init__(
        self,
        socket: Path,
        account: str,
        verifier: str,
        *,
        timeout_s: float = 0.25,
        batch_max: int = 256,
        max_in_flight: int = 4096,
        reconnect_s: float = 0.25,
        on_alert: AlertHook | None = None,
    ) -> None:
        self.socket = socket
        self.account = account
        self.verifier = verifier
        self.timeout_s = timeout_s
        self.batch_max = batch_max
        self.max_in_flight = max_in_flight
        self.reconnect_s = reconnect_s
        self.on_alert = on_alert
        self.public_key: str | None = None
        self.counts = {"signed": 0, SIGNER_BUSY: 0, SIGNER_DOWN: 0, "refused": 0}
        self._writer: asyncio.StreamWriter | None = None
        self._queue: list[tuple[dict[str, Any], SignReply]] = []
        self._pending: deque[_Batch] = deque()
        self._waiting = 0
        self._send_scheduled = False
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._down_alerted = False
        self._busy_alerted = False
        self._connected = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def start(self, wait_s: float = 5.0) -> None:
        """Run the link; wait up to ``wait_s`` for a first connection (quoting skips with
        ``signer_down`` until there is one)."""
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name="signer-link")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), wait_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._drop_pending(SIGNER_DOWN)

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def _run(self) -> None:
        while True:
            try:
                reader, writer, public = await open_link(self.socket, self.account, self.verifier)
            except (SolverError, OSError, KeyError, TypeError) as exc:
                self._alert_down(f"cannot reach the signer: {exc}")
                await asyncio.sleep(self.reconnect_s)
                continue
            self.public_key = public.to_text()
            self._writer = writer
            self._connected.set()
            if self._down_alerted:
                self._down_alerted = False
                self._hook(SIGNER_DOWN, f"signer {self.socket} is back", True)
            try:
                await self._read(reader)
            except (SolverError, OSError) as exc:
                log.warning("signer link lost: %s", exc)
            except Exception as exc:  # a malformed answer: drop the link, never the task
                log.error("signer link dropped: %s in an answer", type(exc).__name__)
            finally:
                self._writer = None
                self._connected.clear()
                await _close(writer)
            self._drop_pending(SIGNER_DOWN)
            self._alert_down(f"signer {self.socket} went away")

    def _alert_down(self, detail: str) -> None:
        if not self._down_alerted:
            self._down_alerted = True
            log.error("%s: quotes skip with signer_down", detail)
            self._hook(SIGNER_DOWN, detail, False)

    def _hook(self, kind: str, detail: str, resolved: bool) -> None:
        if self.on_alert is not None:
            self.on_alert(kind, detail, resolved)

    # ------------------------------------------------------------------ the port

    def sign_later(
        self,
        *,
        quote_id: str,
        deadline: int,
        nonce: bytes,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        amount_out: int,
        reply: SignReply,
    ) -> None:
        """Ask for a quote's signature; ``reply`` gets the signed quote or a skip reason,
        never before this returns on the happy path, at once when the signer is down/busy."""
        if self._writer is None:
            self.counts[SIGNER_DOWN] += 1
            reply(SIGNER_DOWN)
            return
        if self._waiting >= self.max_in_flight:
            self.counts[SIGNER_BUSY] += 1
            self._alert_busy(f"{self._waiting} signatures waiting")
            reply(SIGNER_BUSY)
            return
        request = {
            "k": "q",
            "q": quote_id,
            "d": format_deadline_us(deadline),
            "n": b64encode(nonce),
            "r": self.verifier,
            "ai": asset_in,
            "a": str(amount_in),
            "ao": asset_out,
            "b": str(amount_out),
        }
        self._queue.append((request, reply))
        self._waiting += 1
        if not self._send_scheduled:
            self._send_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._send)

    def _send(self) -> None:
        """End of the loop turn: the turn's requests leave as batches of ``batch_max``."""
        self._send_scheduled = False
        queue, self._queue = self._queue, []
        writer = self._writer
        if writer is None:
            self._fail(queue, SIGNER_DOWN)
            return
        assert self._loop is not None
        for start in range(0, len(queue), self.batch_max):
            batch = _Batch(queue[start : start + self.batch_max])
            batch.timer = self._loop.call_later(self.timeout_s, self._timed_out, batch)
            self._pending.append(batch)
            expires = time.time() + self.timeout_s  # the signer skips what we gave up on
            writer.write(frame({"b": [request for request, _ in batch.items], "x": expires}))

    def _timed_out(self, batch: _Batch) -> None:
        if batch.abandoned:
            return
        batch.abandoned = True
        self._alert_busy(f"no answer within {self.timeout_s * 1000:.0f} ms")
        self._fail(batch.items, SIGNER_BUSY)

    def _alert_busy(self, detail: str) -> None:
        if not self._busy_alerted:
            self._busy_alerted = True
            log.error("signer busy (%s): quotes skip with signer_busy", detail)
            self._hook(SIGNER_BUSY, detail, False)

    def _fail(self, items: list[tuple[dict[str, Any], SignReply]], reason: str) -> None:
        self._waiting -= len(items)
        self.counts[reason] += len(items)
        for _, reply in items:
            reply(reason)

    def _drop_pending(self, reason: str) -> None:
        pending, self._pending = self._pending, deque()
        for batch in pending:
            if batch.timer is not None:
                batch.timer.cancel()
            if not batch.abandoned:
                batch.abandoned = True
                self._fail(batch.items, reason)
        queue, self._queue = self._queue, []
        self._fail(queue, reason)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            body = await read_frame(reader)
            if not self._pending:
                raise TransportError("the signer answered a batch never sent")
            batch = self._pending.popleft()
            if batch.abandoned:
                continue  # given up (signer_busy): these answers were never used
            if batch.timer is not None:
                batch.timer.cancel()
            batch.abandoned = True
            if self._busy_alerted and not self._pending:
                self._busy_alerted = False
                self._hook(SIGNER_BUSY, "the signer answers in time again", True)
            self._waiting -= len(batch.items)
            for (request, reply), answer in zip(batch.items, body["b"], strict=True):
                reply(self._answer(request, answer))

    def _answer(self, request: dict[str, Any], answer: dict[str, Any]) -> SignedQuote | str:
        signature = answer.get("s")
        if signature is None:
            self.counts["refused"] += 1
            return f"signer_refused:{answer.get('e')}: {answer.get('m')}"
        self.counts["signed"] += 1
        deadline = datetime.fromisoformat(request["d"])
        message = token_diff_message(
            self.account,
            deadline,
            request["ai"],
            int(request["a"]),
            request["ao"],
            int(request["b"]),
        )
        nonce_text = request["n"]
        nonce = b64decode(nonce_text)
        digest = nep413_digest(message, nonce, self.verifier)
        signed = {
            "standard": "nep413",
            "payload": {"message": message, "nonce": nonce_text, "recipient": self.verifier},
            "public_key": self.public_key,
            "signature": "ed25519:" + signature,
        }
        return SignedQuote(signed, b58encode(digest), nonce, message, self.account)


class RemoteIntentSigner:
    """One NEP-413 message at a time through the signer (operator commands, the rebalancer):
    a connection per call, so a restarted signer needs nothing special."""

    def __init__(self, socket: Path, account: str, verifier: str) -> None:
        self.socket = socket
        self.account = account
        self.verifier = verifier

    async def public_key(self) -> str:
        _, writer, public = await open_link(self.socket, self.account, self.verifier)
        await _close(writer)
        return public.to_text()

    async def sign_message(self, message: str, nonce: bytes, recipient: str) -> tuple[str, bytes]:
        """``(public key text, 64-byte signature)``, or raise :class:`RemoteError` naming the
        rule the signer's policy refused it by."""
        reader, writer, public = await open_link(self.socket, self.account, self.verifier)
        try:
            request = {"k": "m", "m": message, "n": b64encode(nonce), "r": recipient}
            writer.write(frame({"b": [request]}))
            answer = (await read_frame(reader))["b"][0]
        finally:
            await _close(writer)
        if "s" not in answer:
            raise RemoteError(f"the signer refused ({answer.get('e')}): {answer.get('m')}")
        return public.to_text(), b58decode(answer["s"], length=64, what="signature")
