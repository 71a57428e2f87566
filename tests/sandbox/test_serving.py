"""A client that leaves mid-request is not a server error (sandbox.serving)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from sandbox.server import Sandbox
from tests.sandbox.scripted import sandbox_config


async def leave_mid_body(host: str, port: int, path: str) -> None:
    """Send the headers of a 1000-byte POST, ten bytes of it, and close the socket."""
    _reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        'Content-Length: 1000\r\n\r\n{"jsonrpc"'.encode()
    )
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await writer.wait_closed()


async def test_a_client_leaving_mid_body_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with Sandbox(sandbox_config(), run_takers=False) as sb:
        urls = sb.urls()
        for name in ("relay_rpc", "chain_rpc"):
            url = httpx.URL(urls[name])
            assert url.host and url.port
            await leave_mid_body(url.host, url.port, url.path or "/")
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(100):  # the servers noticed the disconnects, and still answer
                if sum("went away" in r.getMessage() for r in caplog.records) >= 2:
                    break
                await asyncio.sleep(0.05)
            answer = await client.post(
                urls["relay_rpc"],
                json={"jsonrpc": "2.0", "id": 1, "method": "get_status",
                      "params": [{"intent_hash": "x"}]},
            )  # fmt: skip
            assert answer.status_code == 200
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "Exception in ASGI application" in m], messages
    assert sum("went away before its body was read" in m for m in messages) == 2, messages
