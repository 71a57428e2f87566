"""The solver side of the message bus: one websocket, kept alive (protocol-notes 6; spec 4.7).

:class:`BusWsClient` connects to ``{relay}/ws`` (``Authorization: Bearer <key>`` when a key is
configured), subscribes to ``quote`` and ``quote_status``, turns event frames into typed
objects for the callbacks, and sends ``quote_response`` requests. It is a thin adapter
(STYLE 1): it decides nothing about prices; it parses, dispatches and sends.

Robustness rules:

- **Reconnect forever** (STYLE 8): :meth:`BusWsClient.run` loops over a :func:`backoff`
  generator; :func:`classify` stops it only on a fatal error (bad URL, 401/403, a refused
  subscription), which it raises as a :mod:`solver.errors` type. The backoff restarts after
  every session that got subscribed. Subscriptions are re-made on every connection.
- **Bad frames never kill the loop**: malformed JSON, non-objects, events whose data fails
  validation (both or neither exact amount, JSON-number / zero / over-u128 amounts, negative
  ``min_deadline_ms``, unknown asset format) and frames above ``max_frame_bytes`` are counted
  in ``counters.bad_frames[reason]`` and skipped with a debug log. Unknown extra fields in
  events are tolerated (real relays add ``min_wait_ms``, ``max_wait_ms``,
  ``protocol_fee_included``, ``trusted_metadata``). Frames above ``transport_max_bytes`` cannot
  be skipped — the websocket library closes the connection (1009) — and count as
  ``too_large`` too before the reconnect.
- **The hot path never waits**: a message reaches :meth:`BusWsClient.handle_frame` while the
  socket's bytes are parsed (:class:`~solver.io.ws_link.QuoteLink`), frames are parsed with
  orjson from bytes, a callback returning an awaitable runs as its own task, and
  :meth:`send_quote_response` writes the frame to the socket before it returns; the
  relay's reply (``"OK"`` or an error with a reason) is matched by id later and reported to
  ``on_response(quote_id, ok, reason)``. Only a reply is reported: an answer whose reply never
  came (the connection dropped, or too many were awaited) is *unanswered*, not refused — the
  relay may hold it and use it until its deadline — and is only counted
  (``counters.unanswered``). No per-frame logging above debug.

The client is the I/O half: the connection's lifecycle (connect, subscribe, watch, close,
reconnect) and the writing of requests. What the frames say (events, replies, the
subscriptions' confirmations, the counters and the connection state) is handled by the
sans-I/O :class:`~solver.io.bus_ws_receive.BusReceiver` the client owns (:attr:`receiver`);
its :meth:`~solver.io.bus_ws_receive.BusReceiver.handle_frame` is the client's
:attr:`BusWsClient.handle_frame`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
from pydantic import BaseModel

from solver.core.lifecycle import Quote
from solver.errors import ConfigError, ProtocolError, TransportError
from solver.io.backoff import Jitter, backoff, classify
from solver.io.bus_connect import LinkOptions, connect_error, open_link, sleep_unless
from solver.io.bus_state import CONNECTING, DISCONNECTED, STOPPED, PendingReply, WsCounters
from solver.io.bus_ws_receive import (
    BatchCallback,
    BusReceiver,
    QuoteCallback,
    ResponseCallback,
    StateCallback,
    StatusCallback,
)
from solver.io.conn_notes import display_url, next_attempt
from solver.io.ws_link import QuoteLink
from solver.protocol.bus import (
    JSONRPC,
)
from solver.protocol.quote_signing import SignedQuote

log = logging.getLogger("solver.io.bus_ws")

MIB = 1 << 20
MAX_PENDING_REPLIES = 10_000
_ANSWER = (
    b'{"jsonrpc":"2.0","id":%%d,"method":"quote_response","params":[{"quote_id":%%b,'
    b'"quote_output":{"%s":"%%d"},"signed_data":%%b}]}'
)
_ANSWER_OUT = _ANSWER % b"amount_out"
"""An exact-in request's answer frame: id, quote id (JSON), ``amount_out``, ``signed_data``
(JSON); the request :func:`~solver.protocol.bus.quote_response` and orjson would write."""
_ANSWER_IN = _ANSWER % b"amount_in"
"""An exact-out request's: ``amount_in`` is the side it left open."""


class BusWsClient:
    """A self-healing solver connection to the relay. Start it with ``await run(stop)``.

    ``handle_frame``, ``counters``, ``connected`` and ``state`` are its :class:`BusReceiver`'s
    (:attr:`receiver`)."""

    def __init__(
        self,
        ws_url: str,
        *,
        on_quote: QuoteCallback,
        on_quotes: BatchCallback | None = None,
        on_quote_status: StatusCallback | None = None,
        on_state: StateCallback | None = None,
        on_response: ResponseCallback | None = None,
        api_key: str | None = None,
        asset_field_prefix: str = "core",
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        backoff_factor: float = 2.0,
        backoff_jitter: Jitter = "full",
        backoff_seed: int | None = None,
        max_frame_bytes: int = MIB,
        transport_max_bytes: int | None = None,
        open_timeout_s: float = 10.0,
        subscribe_timeout_s: float = 10.0,
        ping_interval_s: float | None = 20.0,
        max_inflight: int = 1024,
        compression: bool = False,
    ) -> None:
        if transport_max_bytes is None:  # skip what we can, let the library refuse only the absurd
            transport_max_bytes = max(16 * MIB, max_frame_bytes)
        if max_frame_bytes <= 0 or transport_max_bytes < max_frame_bytes:
            raise ConfigError("need 0 < max_frame_bytes <= transport_max_bytes")
        backoff(backoff_initial_s, backoff_max_s, backoff_factor, backoff_jitter)  # validate
        self.url = ws_url
        self.receiver = receiver = BusReceiver(
            ws_url,
            on_quote=on_quote,
            on_quotes=on_quotes,
            on_quote_status=on_quote_status,
            on_state=on_state,
            on_response=on_response,
            on_subscribed=self._subscribed_now,
            on_fatal=self._leave_now,
            asset_field_prefix=asset_field_prefix,
            max_frame_bytes=max_frame_bytes,
            max_inflight=max_inflight,
        )
        # The receiver's, bound once: the hot path calls it with no hop through the client.
        self.handle_frame = receiver.handle_frame
        self.counters: WsCounters = receiver.counters
        self._pending = receiver.pending  # the sender registers each reply awaited here
        self._subs = receiver.subs  # the receiver's (a seam of the in-process benchmark)
        self._subscribed = asyncio.Event()  # set by the receiver's on_subscribed, per session
        self._leave = asyncio.Event()  # set by a fatal reply: the session ends
        self._backoff_args = (backoff_initial_s, backoff_max_s, backoff_factor, backoff_jitter)
        self._backoff_seed = backoff_seed
        self._subscribe_timeout = subscribe_timeout_s
        self._link = LinkOptions(
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
            max_size=transport_max_bytes,
            open_timeout_s=open_timeout_s,
            ping_interval_s=ping_interval_s,
            # permessage-deflate costs CPU on every frame of the hot path; off unless asked.
            compression="deflate" if compression else None,
        )
        self._ws: QuoteLink | None = None
        self._next_id = 0

    @property
    def connected(self) -> bool:
        """Connected *and* both subscriptions confirmed."""
        return self.receiver.connected

    @property
    def state(self) -> str:
        return self.receiver.state

    def _subscribed_now(self) -> None:
        self._subscribed.set()

    def _leave_now(self) -> None:
        self._leave.set()

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, subscribe, dispatch; reconnect with backoff until ``stop`` is set.

        Returns when ``stop`` is set; raises a :class:`SolverError` on a fatal error.
        """
        receiver = self.receiver
        delays = self._delays()
        receiver.fatal = None
        try:
            while not stop.is_set():
                receiver.set_state(CONNECTING)
                try:
                    ws = await open_link(self.url, self._link, stop)
                except Exception as exc:
                    error = connect_error(exc)
                    self.counters.connect_failures += 1
                    if classify(error) == "fatal":
                        raise error from exc
                    receiver.set_state(DISCONNECTED)
                    delay = next(delays)
                    log.info(
                        "relay %s: connect failed (%s); next attempt %s",
                        display_url(self.url), error, next_attempt(delay),
                    )  # fmt: skip
                    await sleep_unless(stop, delay)
                    continue
                if ws is None:
                    break
                if await self._session(ws, stop):
                    delays = self._delays()  # it worked: start the backoff over
                if receiver.fatal is not None:
                    raise receiver.fatal
                if stop.is_set():
                    break
                delay = next(delays)
                log.info(
                    "relay %s: connection lost; next attempt %s",
                    display_url(self.url), next_attempt(delay),
                )  # fmt: skip
                await sleep_unless(stop, delay)
        finally:
            receiver.connected = False
            await self._cancel_tasks()
            receiver.set_state(STOPPED)

    def _delays(self) -> Iterator[float]:
        initial, maximum, factor, jitter = self._backoff_args
        return backoff(initial, maximum, factor, jitter, seed=self._backoff_seed)

    async def _session(self, ws: QuoteLink, stop: asyncio.Event) -> bool:
        """Serve one connection until it closes, a reply is fatal, or ``stop``; True if it got
        subscribed. Messages are handled as they arrive (:meth:`handle_frame`)."""
        receiver = self.receiver
        self._ws = ws
        receiver.new_session()
        self._subscribed = asyncio.Event()
        self._leave = asyncio.Event()
        watcher = asyncio.create_task(self._watch(ws, stop))
        closed = asyncio.create_task(ws.wait_closed())
        leave = asyncio.create_task(self._leave.wait())
        reached = False
        try:
            receiver = self.receiver
            ws.attach(  # a fatal reply sets _leave (_leave_now)
                self.handle_frame, read_begin=receiver.read_begin, read_end=receiver.read_end
            )
            for kind in ("quote", "quote_status"):
                self._send_request("subscribe", kind, kind, ws)
            await asyncio.wait({closed, leave}, return_when=asyncio.FIRST_COMPLETED)
            if closed.done():
                self._closed_by_relay(ws, stop)
        except TransportError as exc:  # a subscribe could not be sent
            log.info("relay connection lost: %s", exc)
        finally:
            reached = receiver.subscribed
            self._ws = None
            if receiver.connected:
                self.counters.disconnects += 1
            receiver.connected = False
            for task in (watcher, closed, leave):
                task.cancel()
            await asyncio.gather(watcher, closed, leave, return_exceptions=True)
            await ws.close()
            receiver.drop_pending()
            if not stop.is_set():
                receiver.set_state(DISCONNECTED)
        return reached

    def _closed_by_relay(self, ws: QuoteLink, stop: asyncio.Event) -> None:
        closing = ws.protocol.close_exc
        if closing.sent is not None and closing.sent.code == 1009:
            self.counters.bad("too_large")
        if not stop.is_set():
            log.info("relay closed the connection: %s", closing)

    async def _watch(self, ws: QuoteLink, stop: asyncio.Event) -> None:
        """Close the socket on ``stop``, or when the subscriptions are not confirmed in time."""
        stop_wait = asyncio.create_task(stop.wait())
        sub_wait = asyncio.create_task(self._subscribed.wait())
        try:
            done, _ = await asyncio.wait(
                {stop_wait, sub_wait},
                timeout=self._subscribe_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                log.warning("relay did not confirm the subscriptions; reconnecting")
                await ws.close(1011, "subscribe timeout")
                return
            await stop_wait
            await ws.close()
        finally:
            for task in (stop_wait, sub_wait):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(stop_wait, sub_wait, return_exceptions=True)

    async def _cancel_tasks(self) -> None:
        tasks = list(self.receiver.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ sending

    def send_quote_response(self, params: Mapping[str, Any] | BaseModel) -> None:
        """Write a ``quote_response`` (protocol-notes 6) to the socket; the reply is not awaited.

        The reply is reported later to ``on_response(quote_id, ok, reason)``. Raises
        :class:`TransportError` when there is no open connection.
        """
        if isinstance(params, BaseModel):
            data = params.model_dump(mode="json", exclude_none=True)
        else:
            data = params if isinstance(params, dict) else dict(params)
        quote_id = data.get("quote_id")
        ws = self._ws
        if ws is None:
            raise TransportError("not connected to the relay")
        tag = quote_id if isinstance(quote_id, str) else ""
        self._send_request("quote_response", data, tag, ws)

    def send_answer(self, quote: Quote, signed: SignedQuote) -> None:
        """The executor's sender port: ``quote`` signed as ``signed``, as a ``quote_response``.

        The frame is one bytes template filled in (the quote id and ``signed_data`` by orjson,
        as it writes them inside the whole): the bytes ``orjson.dumps`` of
        :func:`~solver.protocol.bus.quote_response`'s params in a request would give, without
        building three dicts and checking them again (one answer each, issue 29)."""
        ws = self._ws
        if ws is None:
            raise TransportError("not connected to the relay")
        self._next_id = request_id = self._next_id + 1
        try:
            if quote.exact_in:
                frame = _ANSWER_OUT % (
                    request_id, orjson.dumps(quote.quote_id), quote.amount_out,
                    orjson.dumps(signed.signed_data),
                )  # fmt: skip
            else:
                frame = _ANSWER_IN % (
                    request_id, orjson.dumps(quote.quote_id), quote.amount_in,
                    orjson.dumps(signed.signed_data),
                )  # fmt: skip
        except TypeError as exc:
            raise ProtocolError(f"quote_response params are not JSON: {exc}") from None
        self._send_frame(frame, request_id, PendingReply("quote_response", quote.quote_id), ws)

    def corked(self) -> contextlib.AbstractContextManager[None]:
        """Answers sent inside leave in one write at the end (:meth:`QuoteLink.corked`)."""
        ws = self._ws
        return contextlib.nullcontext() if ws is None else ws.corked()

    def _send_request(self, method: str, param: Any, tag: str, ws: QuoteLink) -> None:
        self._next_id += 1
        request_id = self._next_id
        try:
            frame = orjson.dumps(
                {"jsonrpc": JSONRPC, "id": request_id, "method": method, "params": [param]}
            )
        except TypeError as exc:
            raise ProtocolError(f"{method} params are not JSON: {exc}") from None
        self._send_frame(frame, request_id, PendingReply(method, tag), ws)

    def _send_frame(
        self, frame: bytes, request_id: int, entry: PendingReply, ws: QuoteLink
    ) -> None:
        """Write ``frame`` and await its reply as ``entry`` (not if it could not be sent)."""
        pending = self._pending
        pending[request_id] = entry
        if len(pending) > MAX_PENDING_REPLIES:
            _, oldest = pending.popitem(last=False)  # its reply is no longer awaited
            if oldest.kind == "quote_response":
                self.counters.unanswered += 1
        try:
            ws.send_text_now(frame)
        except TransportError:
            pending.pop(request_id, None)
            raise
