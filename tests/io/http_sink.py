"""A real HTTP server on 127.0.0.1:0 that records what webhooks post to it (STYLE 2).

Plain asyncio, HTTP/1.1 with keep-alive and Content-Length bodies: enough for Apprise's
``json://`` plugin (``requests`` underneath) and small enough to read in one sitting. Each
request is answered with the next status of ``statuses`` (the last one repeats), so a test can
make the first deliveries fail.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Posted:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpSink:
    statuses: list[int] = field(default_factory=lambda: [200])
    delay_s: float = 0.0
    received: list[Posted] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def url(self, path: str = "/hook", scheme: str = "json", auth: str = "") -> str:
        return f"{scheme}://{auth}127.0.0.1:{self.port}{path}"

    async def start(self) -> HttpSink:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def wait_for(self, count: int, timeout_s: float = 10.0) -> list[Posted]:
        """Wait until at least ``count`` requests were answered (any status)."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.answered) >= count)
        return self.received

    def messages(self) -> list[dict[str, Any]]:
        """Bodies of the requests answered 2xx, parsed as JSON."""
        return [p.json() for p, s in zip(self.received, self.answered, strict=True) if s < 300]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                index = len(self.answered)
                status = self.statuses[min(index, len(self.statuses) - 1)]
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode("latin-1"))
                await writer.drain()
                async with self._changed:
                    self.received.append(Posted(method, path, headers, body))
                    self.answered.append(status)
                    self._changed.notify_all()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
