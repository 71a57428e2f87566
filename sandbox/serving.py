"""uvicorn on a pre-bound loopback socket, inside an existing event loop.

One place for what every sandbox service (and every test server) needs:

- the socket names ``IPPROTO_TCP``: asyncio sets TCP_NODELAY on accepted connections only when
  ``sock.proto == IPPROTO_TCP``, and a bare ``socket.socket()`` has proto 0, which costs every
  response a ~40 ms Nagle / delayed-ACK stall;
- a client that goes away while its request body is read (a taker cancelled at shutdown, a
  client timing out) is not an error of the server: it is logged at debug level instead of
  uvicorn's "Exception in ASGI application" traceback;
- the server does not capture SIGINT / SIGTERM: several servers share one process (and the bot
  in ``solver demo``), and the process owner decides when they stop, not the last server
  started;
- a port that cannot be bound (in use, not an address of this host) is a
  :class:`~solver.errors.ConfigError` naming ``host:port``: ``solver sandbox`` says it in one
  line with exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from solver.errors import ConfigError

log = logging.getLogger("sandbox.serving")


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass
class RunningServer:
    server: EmbeddedServer
    task: asyncio.Task[None]
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_server(
    app: Any, host: str = "127.0.0.1", port: int = 0, **config: Any
) -> RunningServer:
    """Bind, start ``app`` and return once it accepts connections (``port=0``: any free one)."""
    if isinstance(app, Starlette):
        app.add_exception_handler(ClientDisconnect, _client_gone)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # a port in use is the user's to fix, not a bug: one line, exit 2
        sock.close()
        why = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ConfigError(f"cannot listen on {host}:{port}: {why}") from None
    options: dict[str, Any] = {"log_level": "warning", "lifespan": "off", **config}
    server = EmbeddedServer(uvicorn.Config(app, **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped before it started")
        await asyncio.sleep(0.005)
    return RunningServer(server, task, host, sock.getsockname()[1])


async def _client_gone(request: Request, exc: Exception) -> Response:
    log.debug("%s %s: the client went away before its body was read", request.method, request.url)
    return Response(status_code=499)  # nobody reads it: the connection is gone


@contextlib.asynccontextmanager
async def serving(app: Any, **config: Any) -> AsyncIterator[str]:
    """``async with serving(app) as url:`` — for tests and tools."""
    running = await start_server(app, **config)
    try:
        yield running.url
    finally:
        await running.stop()
