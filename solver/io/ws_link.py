"""The bus websocket with a synchronous hot path (issue 11; protocol-notes 6).

websockets' :class:`~websockets.asyncio.client.ClientConnection` still does everything around
the messages: the opening handshake (headers, TLS, proxies, redirects, ``open_timeout``),
keepalive pings with their timeout, flow control of the socket and the closing handshake.
:class:`QuoteLink` is the subclass that ``connect(create_connection=QuoteLink)`` builds; it
changes only how messages come in and go out:

- **In**: a data message is handed to the attached handler *while the socket's bytes are being
  parsed* (in ``process_event``), instead of being queued for ``await recv()``. A relay that
  sends faster than the bot handles is held back by TCP: nothing is read while the handler
  runs, and nothing queues in memory.
- **Out**: :meth:`QuoteLink.send_text_now` serializes the frame and writes it to the socket
  before it returns, instead of ``await send()``'s lock, drain and task switch.
- **Reads**: :meth:`QuoteLink.attach` may be given ``read_begin`` and ``read_end``, which bracket
  the messages of each read of the socket (``data_received``, the asyncio protocol method): the
  bus client hands the quotes of one read to the executor together, in stages (issue 29).

Why: one request in and one answer out cost the bare solver ~14 µs of task switches, queueing
and the send context per answer on top of the frames themselves (75 → 61 µs an answer,
measured in ``benchmarks/README.md``). The bot pays it at every answer.

Only the library's documented extension point (``create_connection``), the sans-I/O
protocol's public methods and the asyncio protocol's ``data_received`` (wrapped, not
replaced) are used; ``process_event`` is the one overridden hook of the library, and the
pin in ``pyproject.toml`` keeps to the websockets versions this was tested with (13.1, 14.2,
15.0.1, 16.0 and 17.4: the link and bus client tests).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode
from websockets.protocol import Event, State

from solver.errors import TransportError

log = logging.getLogger("solver.io.ws_link")

UNSENT_LIMIT = 4 << 20
"""Bytes written but not yet taken by the relay above which an answer is refused (not
queued): a relay that stopped reading for ~4,000 answers will not use them in time."""

MessageHandler = Callable[[bytes], None]
ReadHook = Callable[[], None]


class QuoteLink(ClientConnection):
    """A client connection whose messages reach a plain callback and leave without awaiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handler: MessageHandler | None = None
        self._read_begin: ReadHook | None = None
        self._read_end: ReadHook | None = None
        self._early: list[bytes] = []  # messages before a handler was attached
        self._parts: list[bytes] | None = None  # a fragmented message being put together
        self._corked: list[bytes] | None = None  # frames held for one write (``corked``)
        self._corked_bytes = 0

    def attach(
        self,
        handler: MessageHandler,
        *,
        read_begin: ReadHook | None = None,
        read_end: ReadHook | None = None,
    ) -> None:
        """Deliver every message to ``handler`` from now on, those already arrived first.
        ``read_begin`` and ``read_end``, when given, bracket the messages of each read of
        the socket (``read_end`` runs whatever happened in between): a batch the handler's
        owner may process at once (the executor's stages, issue 29)."""
        early, self._early = self._early, []
        self._handler = handler
        for message in early:
            self._deliver(message)
        self._read_begin, self._read_end = read_begin, read_end

    def data_received(self, data: bytes) -> None:
        begin, end = self._read_begin, self._read_end
        if begin is None or end is None:
            super().data_received(data)
            return
        begin()
        try:
            super().data_received(data)
        finally:
            end()

    def process_event(self, event: Event) -> None:
        if self.response is None or type(event) is not Frame:
            super().process_event(event)  # the handshake's response
            return
        opcode = event.opcode
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            if event.fin:
                self._deliver(bytes(event.data))  # the parser's bytes: returned, not copied
            else:
                self._parts = [bytes(event.data)]
        elif opcode is Opcode.CONT:
            parts = self._parts
            if parts is not None:  # the protocol refuses a CONT without a start
                parts.append(bytes(event.data))
                if event.fin:
                    self._parts = None
                    self._deliver(b"".join(parts))
        else:
            super().process_event(event)  # PONG acknowledges the keepalive's pings

    def _deliver(self, message: bytes) -> None:
        handler = self._handler
        if handler is None:
            self._early.append(message)
            return
        try:
            handler(message)
        except Exception:  # the connection must outlive a handler's bug; said with its traceback
            log.exception("relay message handler failed")

    def send_text_now(self, data: bytes) -> None:
        """Write one text frame (``data``: UTF-8 JSON) to the socket before returning (at the
        end of the :meth:`corked` block when inside one).

        Raises :class:`TransportError` when the connection is not open, or when the relay has
        left more than :data:`UNSENT_LIMIT` bytes unread: the caller counts the message as
        not sent, and it was not.
        """
        protocol = self.protocol
        transport = self.transport
        if protocol.state is not State.OPEN or transport.is_closing():
            raise TransportError("relay connection is closed")
        unsent = transport.get_write_buffer_size() + self._corked_bytes
        if unsent > UNSENT_LIMIT:
            raise TransportError(f"the relay left {unsent >> 10:,} kB unread")
        try:
            protocol.send_text(data)
            chunks = protocol.data_to_send()
            corked = self._corked
            if corked is not None:
                corked.extend(chunks)
                self._corked_bytes += sum(len(chunk) for chunk in chunks)
                return
            for chunk in chunks:
                transport.write(chunk)
        except (InvalidState, OSError, RuntimeError) as exc:  # closing under our feet
            raise TransportError(f"relay connection failed while sending: {exc}") from None

    @contextlib.contextmanager
    def corked(self) -> Iterator[None]:
        """Frames sent inside the block leave in one write at its end: a batch of answers
        costs one system call and one TCP segment instead of one each.

        Should that write fail, the connection is failing: the frames count as sent, like
        frames still in the socket's buffer when a connection drops (the relay may or may not
        have them; their quotes stay reserved until their deadlines), and it is aborted.
        """
        if self._corked is not None:  # already corked: the outer block writes
            yield
            return
        self._corked, self._corked_bytes = [], 0
        try:
            yield
        finally:
            chunks, self._corked, self._corked_bytes = self._corked, None, 0
            if chunks:
                try:
                    self.transport.write(b"".join(chunks))
                except (OSError, RuntimeError) as exc:
                    log.info(
                        "relay connection failed while sending %d frames: %s", len(chunks), exc
                    )
                    self.transport.abort()
