"""Opening one connection to the relay's bus websocket, and what its failure means.

The client (:class:`~solver.io.bus_ws.BusWsClient`) decides when to connect and how long to
wait between attempts; here is one attempt: the websocket handshake with the client's options
(:class:`LinkOptions`), given up as soon as the bot stops (:func:`open_link`), and a failure
told as the project's error (:func:`connect_error`, STYLE 7), whose class says whether to try
again (:func:`~solver.io.backoff.classify`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus, InvalidURI

from solver.errors import ConfigError, ProtocolError, RemoteError, SolverError, TransportError
from solver.io.backoff import classify
from solver.io.ws_link import QuoteLink


@dataclass(frozen=True, slots=True)
class LinkOptions:
    """How each connection is opened (the client's settings)."""

    headers: dict[str, str] | None  # ``Authorization: Bearer <key>`` when a key is configured
    max_size: int  # the transport's frame limit: above it the library closes (1009)
    open_timeout_s: float
    ping_interval_s: float | None  # keepalive; a pong is awaited as long
    compression: str | None  # "deflate" or None


async def open_link(url: str, options: LinkOptions, stop: asyncio.Event) -> QuoteLink | None:
    """Open the websocket, or give up (None) as soon as ``stop`` is set."""

    async def opening() -> QuoteLink:
        link = await connect(
            url,
            additional_headers=options.headers,
            max_size=options.max_size,
            open_timeout=options.open_timeout_s,
            ping_interval=options.ping_interval_s,
            ping_timeout=options.ping_interval_s,
            close_timeout=2,
            compression=options.compression,
            create_connection=QuoteLink,
        )
        assert isinstance(link, QuoteLink)
        return link

    open_task = asyncio.create_task(opening())
    stop_wait = asyncio.create_task(stop.wait())
    cancelled = False
    try:
        await asyncio.wait({open_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        cancelled = True
    stop_wait.cancel()
    if not open_task.done():
        open_task.cancel()
    await asyncio.gather(stop_wait, open_task, return_exceptions=True)
    opened = not open_task.cancelled() and open_task.exception() is None
    if cancelled:
        if opened:
            await open_task.result().close()  # opened as we were cancelled: do not leak it
        raise asyncio.CancelledError
    if open_task.cancelled():
        return None
    ws = open_task.result()  # raises the connect error
    if stop.is_set():
        await ws.close()
        return None
    return ws


def connect_error(exc: Exception) -> SolverError:
    """websockets / OS errors at connect time → the project's errors (STYLE 7)."""
    if isinstance(exc, SolverError):
        return exc
    if isinstance(exc, InvalidURI):
        return ConfigError(f"invalid relay URL: {exc}")
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        if status in (401, 403):
            return RemoteError("unauthorized", code=status)
        if classify(exc) == "retry":
            return TransportError(f"relay answered HTTP {status}")
        return RemoteError(f"relay refused the websocket: HTTP {status}", code=status)
    if classify(exc) == "retry":
        return TransportError(f"{type(exc).__name__}: {exc}".rstrip(": "))
    return ProtocolError(f"relay handshake failed: {type(exc).__name__}: {exc}")


async def sleep_unless(stop: asyncio.Event, delay: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)
