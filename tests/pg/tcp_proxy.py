"""A pausable TCP proxy on 127.0.0.1 port 0, to cut a bot off its database (issue 27: "a network
partition between the active and the database").

:meth:`TcpProxy.partition` black-holes every connection, in both directions, without closing
any: bytes are held, not delivered, and new connections are accepted and held too — what a
partition looks like from each side, save that this process's kernel still acknowledges what
it receives, so the sender's TCP timeouts do not fire (the bot's connection hangs, as on a
stalled server). With ``reset=True`` it resets every connection instead (RST) and refuses new
ones at once (accepted and reset), as a router that answers does. :meth:`TcpProxy.heal` lets
everything through again, the held bytes first.

It runs on the test's event loop; faults are simulated, not mocked (STYLE 9).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.partitioned = False
        self.refusing = False
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.accepted = 0
        self.resets = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def url(self, url: str) -> str:
        """``url`` (``postgresql://user@127.0.0.1:<port>/db``) through this proxy."""
        return url.replace(f":{self.target[1]}/", f":{self.port}/", 1)

    def partition(self, *, reset: bool = False) -> None:
        """Stop forwarding in both directions; ``reset``: also reset every connection now and
        every new one until :meth:`heal`."""
        self.partitioned = True
        self._flowing.clear()
        if reset:
            self.refusing = True
            for writer in list(self._writers):
                self._reset(writer)

    def heal(self) -> None:
        self.partitioned = self.refusing = False
        self._flowing.set()

    async def close(self) -> None:
        self.refusing = True  # a connection held in a black hole is reset, not left waiting
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            self._reset(writer)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _reset(self, writer: asyncio.StreamWriter) -> None:
        """Close with an RST (SO_LINGER 0), not a FIN: the peer's next read or write fails."""
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        self._writers.discard(writer)
        self.resets += 1

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            self._reset(client_w)
            return
        self._writers.add(client_w)
        try:
            await self._flowing.wait()  # a connection made during a black hole waits in it
            if self.refusing or client_w.transport.is_closing():
                self._reset(client_w)
                return
            server_r, server_w = await asyncio.open_connection(*self.target)
        except (OSError, asyncio.CancelledError):
            self._reset(client_w)
            return
        self._writers.add(server_w)
        pumps = [
            asyncio.create_task(self._pump(client_r, server_w)),
            asyncio.create_task(self._pump(server_r, client_w)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for writer in (client_w, server_w):
                if writer in self._writers:
                    self._writers.discard(writer)
                    writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy until EOF; while partitioned, hold what was read (and read no more)."""
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                if writer.transport.is_closing():
                    return
                writer.write(data)
                await writer.drain()


@contextlib.asynccontextmanager
async def tcp_proxy(host: str, port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
