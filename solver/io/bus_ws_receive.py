"""The bus connection's frame handling, without the socket: frames in, typed events out to the
callbacks, the relay's replies matched to what was sent, and the state they move.

:class:`BusReceiver` is the sans-I/O half of the bus websocket client, in the manner of
python-websockets' ``Protocol`` beside its ``Connection``: it is given each frame's bytes
(:meth:`BusReceiver.handle_frame`) and never touches a socket, a timer or a backoff. The
client (:class:`~solver.io.bus_ws.BusWsClient`) owns one: it opens and closes the connections,
writes the requests and registers each awaited reply in :attr:`BusReceiver.pending`, and is
told by two hooks what only frames can tell it (``on_subscribed``: both subscriptions are
confirmed; ``on_fatal``: a reply ended the session, :attr:`BusReceiver.fatal`). The counters,
the subscriptions and the connection state live here, with the frames that move them, and the
client reads them (their names and types, which the bot reads too, are
:mod:`solver.io.bus_state`'s). So the frame path is tested with bytes alone, and the lifecycle
can change without touching it.

The rules (bad frames are counted, never raised; callbacks' errors are contained; an answer
without a reply is unanswered, not refused) are those of :mod:`solver.io.bus_ws`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from solver.errors import RemoteError, SolverError
from solver.io.bus_frames import BUS_REQUESTS, Skip, parse_quote_status_event
from solver.io.bus_state import CONNECTED, DISCONNECTED, PendingReply, WsCounters
from solver.protocol.bus import QuoteStatusEvent, rename_asset_fields, unwrap_event
from solver.protocol.quote_request import BadQuoteRequest, QuoteRequest

__all__ = [
    "BatchCallback",
    "BusReceiver",
    "QuoteCallback",
    "ResponseCallback",
    "StateCallback",
    "StatusCallback",
]

log = logging.getLogger("solver.io.bus_ws")  # the client's one logger, as before the split


_NO_METADATA: Final[dict[str, Any]] = {}
"""An event without a metadata object (read, never written)."""
_OK_HEAD: Final = b'{"jsonrpc":"2.0","id":'
_OK_TAIL: Final = b',"result":"OK"}'
_ID_FROM: Final = len(_OK_HEAD)
_ID_TO: Final = -len(_OK_TAIL)
_OK_MAX: Final = _ID_FROM + 19 - _ID_TO
"""An ``"OK"`` reply as the relay (and orjson) writes it, around its id: the frame that follows
every answer, recognised from its bytes (:meth:`BusReceiver.handle_frame`); any frame this
long or longer (an event) is not looked at."""

Hook = Callable[[], None]
QuoteCallback = Callable[[QuoteRequest], Awaitable[None] | None]
BatchCallback = Callable[[list[QuoteRequest]], int]
"""The quotes of one read of the socket; returns how many of them failed (logged)."""
StatusCallback = Callable[[QuoteStatusEvent], Awaitable[None] | None]
StateCallback = Callable[[str], None]
ResponseCallback = Callable[[str, bool, str | None], None]


def _noop_state(state: str) -> None:
    return None


def _nothing() -> None:
    return None


class BusReceiver:
    """Handles the relay's frames: events to the callbacks, replies to the requests awaited
    (:attr:`pending`, filled by the sender), the subscriptions and the connection state."""

    def __init__(
        self,
        url: str,
        *,
        on_quote: QuoteCallback,
        on_quotes: BatchCallback | None = None,
        on_quote_status: StatusCallback | None = None,
        on_state: StateCallback | None = None,
        on_response: ResponseCallback | None = None,
        on_subscribed: Hook = _nothing,
        on_fatal: Hook = _nothing,
        asset_field_prefix: str = "core",
        max_frame_bytes: int,
        max_inflight: int,
    ) -> None:
        self.url = url  # for the log lines only
        self.prefix = asset_field_prefix
        self._core = asset_field_prefix == "core"  # the relay's fields need no renaming
        self.counters = WsCounters()
        self.connected = False
        self.state = DISCONNECTED
        self.subs: dict[str, str] = {}  # subscription id -> kind
        self.subscribed = False  # both subscriptions confirmed in this session
        self.pending: OrderedDict[int, PendingReply] = OrderedDict()
        """Replies awaited, by request id: the sender adds, a reply (or the end of the
        connection, :meth:`drop_pending`) takes. One object for the client's lifetime."""
        self.fatal: SolverError | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # awaitable callbacks' results, running
        self._on_quote = on_quote
        self._on_quotes = on_quotes
        self._batch: list[QuoteRequest] | None = None
        """The quotes of the read under way (:meth:`read_begin`), or None: handled one by
        one as they come."""
        self._on_quote_status = on_quote_status
        self._on_state = on_state or _noop_state
        self._on_response = on_response
        self._on_subscribed = on_subscribed
        self._on_fatal = on_fatal
        self._max_frame = max_frame_bytes
        self._max_inflight = max_inflight

    def new_session(self) -> None:
        """A connection opened: its subscriptions are still to be made and confirmed."""
        self.subs.clear()
        self.subscribed = False

    # ------------------------------------------------------------------ receiving

    def read_begin(self) -> None:
        """A read of the socket begins: its quotes wait for :meth:`read_end`, when
        ``on_quotes`` takes them at once (one quote, or no ``on_quotes``: as they come)."""
        if self._on_quotes is not None:
            self._batch = []

    def read_end(self) -> None:
        """The read's frames are handled: its quotes to ``on_quotes``, in their order."""
        batch, self._batch = self._batch, None
        if not batch:
            return
        if len(batch) == 1:
            self._call_quote(batch[0])
            return
        assert self._on_quotes is not None  # a batch is kept only for it
        try:
            failed = self._on_quotes(batch)
        except Exception:
            failed = len(batch)
            log.exception("event callback failed")
        self.counters.callback_errors += failed

    def handle_frame(self, raw: bytes | str) -> None:
        """Handle one incoming frame; never raises on bad input (it is counted instead).

        The link's handler itself (:meth:`~solver.io.ws_link.QuoteLink.attach`): every
        message the relay sends is counted here (``frames_in``)."""
        self.counters.frames_in += 1
        size = len(raw)
        if size > self._max_frame:
            self._bad("too_large", f"{size} bytes")
            return
        if (
            size < _OK_MAX
            and type(raw) is bytes
            and raw[_ID_TO:] == _OK_TAIL
            and raw[:_ID_FROM] == _OK_HEAD
        ):
            # The reply to an answer, one per answer: its id read from the bytes, no dict
            # built (0.9 -> 0.75 µs, issue 29). Only what orjson reads as the same int (no
            # sign, no leading zero, under 2**63); any other frame, however close, is parsed.
            digits = raw[_ID_FROM:_ID_TO]
            if 0 < len(digits) < 19 and digits.isdigit() and (digits[0] != 48 or len(digits) == 1):
                self._replied(self.pending.pop(int(digits), None), "OK", None)
                return
        try:
            frame = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self._bad("invalid_json", "")
            return
        if type(frame) is not dict:  # orjson's objects are dicts, never a subclass
            self._bad("not_object", type(frame).__name__)
            return
        method = frame.get("method")
        if method == "event":
            params = frame.get("params")
            if type(params) is dict and type(data := params.get("data")) is dict:
                sub = params.get("subscription")  # the nested envelope (the relay's): no copy
                if type(sub) is str and self.subs.get(sub) == "quote" and self._core:
                    # A quote, nearly every event: _on_event's first case, one call fewer.
                    metadata = params.get("metadata")
                    partner = metadata.get("partner_id") if type(metadata) is dict else None
                    self._quote(data, partner if type(partner) is str else None)
                    return
            self._on_event(params)
        elif method is None and ("result" in frame or "error" in frame):
            self._on_reply(frame)
        else:
            self._bad("unknown_frame", str(method)[:40])

    def _on_event(self, params: Any) -> None:
        if type(params) is dict and type(data := params.get("data")) is dict:
            sub = params.get("subscription")  # the nested envelope (the relay's): no copy
            metadata = params.get("metadata")
            if type(sub) is not str:
                sub = None
            if type(metadata) is not dict:
                metadata = _NO_METADATA
        else:
            try:
                sub, data, metadata = unwrap_event(params)
            except ValueError:
                self._bad("bad_envelope", "event params are not an object")
                return
        kind = self.subs.get(sub) if sub is not None else None
        if kind is None:  # before the subscribe reply, or a flat envelope without an id
            kind = "quote" if "quote_id" in data else "quote_status" if "quote_hash" in data else ""
        if kind == "quote":
            if not self._core:
                data = rename_asset_fields(data, self.prefix, "core")
            partner = metadata.get("partner_id")
            self._quote(data, partner if type(partner) is str else None)
        elif kind == "quote_status":
            status = parse_quote_status_event(data)
            if isinstance(status, Skip):
                self._bad(status.reason, "")
                return
            self.counters.quote_statuses_in += 1
            if self._on_quote_status is not None:
                self._dispatch(self._on_quote_status, status)
        else:
            self._bad("unknown_event", str(sub)[:40])

    def _quote(self, data: dict[str, Any], partner_id: str | None) -> None:
        """A quote event's ``data`` (``core``-prefixed) to ``on_quote``: :meth:`_dispatch`'s
        work for this one callback, inline (the hot path, one call fewer)."""
        try:  # parse_quote_event's work, one call fewer
            request = BUS_REQUESTS.parse(data, partner_id)
        except BadQuoteRequest as exc:
            self._bad("quote." + exc.field, str(data.get("quote_id"))[:80])
            return
        self.counters.quotes_in += 1
        if len(self.tasks) >= self._max_inflight:
            self._bad("overloaded", "too many callbacks in flight")
            return
        batch = self._batch
        if batch is not None:
            batch.append(request)
            return
        self._call_quote(request)

    def _call_quote(self, request: QuoteRequest) -> None:
        try:
            result = self._on_quote(request)
        except Exception:
            self.counters.callback_errors += 1
            log.exception("event callback failed")
            return
        if result is not None and inspect.isawaitable(result):  # the bot's is a plain call
            self._spawn(result)

    def _on_reply(self, frame: dict[str, Any]) -> None:
        request_id = frame.get("id")
        entry = self.pending.pop(request_id, None) if type(request_id) is int else None
        self._replied(entry, frame.get("result"), frame.get("error"))

    def _replied(self, entry: PendingReply | None, result: Any, error: Any) -> None:
        """A reply to the request ``entry`` (None: none awaited with its id)."""
        if entry is None:
            self._bad("unmatched_reply", _error_text(error) if error is not None else "")
            return
        if entry.kind == "quote_response":
            if error is None and result == "OK":  # the answer's reply, nearly always
                self.counters.responses_ok += 1
                on_response = self._on_response
                if on_response is not None:
                    try:
                        on_response(entry.tag, True, None)
                    except Exception:
                        self.counters.callback_errors += 1
                        log.exception("on_response callback failed")
                return
        elif entry.kind == "subscribe":
            if error is None and isinstance(result, str) and result:
                self.subs[result] = entry.tag
                if set(self.subs.values()) >= {"quote", "quote_status"}:
                    self._confirm_subscribed()
            else:
                text = _error_text(error) if error is not None else f"bad result {result!r:.80}"
                self.fatal = RemoteError(
                    f"subscribe {entry.tag} refused: {text}", code=_error_code(error)
                )
                self._on_fatal()
            return
        if error is None and result == "OK":
            self._report(entry, True, None)
        else:
            reason = (
                _error_text(error) if error is not None else f"unexpected result {result!r:.80}"
            )
            self._report(entry, False, reason)

    def _confirm_subscribed(self) -> None:
        if self.subscribed:
            return
        self.subscribed = True
        self._on_subscribed()
        self.connected = True
        self.counters.connects += 1
        if self.counters.connects > 1:
            self.counters.reconnects += 1
        log.info("subscribed to the relay at %s", self.url)
        self.set_state(CONNECTED)

    def set_state(self, state: str) -> None:
        """The connection's state, told to ``on_state`` when it changes."""
        if state == self.state:
            return
        self.state = state
        try:
            self._on_state(state)
        except Exception:
            self.counters.callback_errors += 1
            log.exception("on_state callback failed")

    def _report(self, entry: PendingReply, ok: bool, reason: str | None) -> None:
        if entry.kind != "quote_response":
            return
        if ok:
            self.counters.responses_ok += 1
        else:
            self.counters.responses_failed += 1
        if self._on_response is None:
            return
        try:
            self._on_response(entry.tag, ok, reason)
        except Exception:
            self.counters.callback_errors += 1
            log.exception("on_response callback failed")

    def drop_pending(self) -> None:
        """The connection is gone: replies still awaited will never come. Nothing is reported
        (an unanswered answer is not a refused one); the replies are only counted."""
        pending = self.pending
        self.counters.unanswered += sum(1 for e in pending.values() if e.kind == "quote_response")
        pending.clear()

    def _dispatch(self, callback: Callable[..., Awaitable[None] | None], *args: Any) -> None:
        """Call a user callback; an awaitable result runs as a task. Errors are contained."""
        if len(self.tasks) >= self._max_inflight:
            self._bad("overloaded", "too many callbacks in flight")
            return
        try:
            result = callback(*args)
        except Exception:
            self.counters.callback_errors += 1
            log.exception("event callback failed")
            return
        if result is not None and inspect.isawaitable(result):  # the bot's are plain calls
            self._spawn(result)

    def _spawn(self, result: Awaitable[None]) -> None:
        """A callback's awaitable result runs as a task, counted in flight until done."""
        task = asyncio.get_running_loop().create_task(self._guard(result))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _guard(self, awaitable: Awaitable[None]) -> None:
        try:
            await awaitable
        except Exception:
            self.counters.callback_errors += 1
            log.exception("event callback failed")

    def _bad(self, reason: str, detail: str) -> None:
        self.counters.bad(reason)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("skipped a relay frame (%s) %s", reason, detail)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str):
            return message
    return str(error)[:200]


def _error_code(error: Any) -> int | None:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None
