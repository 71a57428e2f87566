"""Tiny real servers on 127.0.0.1:0 that answer exactly what a test wants (STYLE 2, 9).

They stand in for a misbehaving ledger node or relay: the client under test still talks over
a real socket, so nothing of our own network code is mocked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

HttpHandler = Callable[[bytes], tuple[int, bytes]]


@contextlib.asynccontextmanager
async def http_peer(handler: HttpHandler) -> AsyncIterator[str]:
    """An HTTP/1.1 server: each POST body goes to ``handler(body) -> (status, body)``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length)
            status, answer = handler(body)
            writer.write(
                b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (status, len(answer), answer)
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()
        await server.wait_closed()


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` every 10 ms until true; fail the test after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)
