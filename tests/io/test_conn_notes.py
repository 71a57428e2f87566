"""Connection error lines name the URL (never its credentials) and the next attempt's time."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from solver.errors import TransportError
from solver.io._http import send
from solver.io.conn_notes import display_url, next_attempt


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("ws://127.0.0.1:8760/ws", "ws://127.0.0.1:8760/ws"),
        ("wss://user:secret@relay.example.com/ws?token=abc#x", "wss://relay.example.com/ws"),
        ("http://[::1]:8761/", "http://[::1]:8761/"),
        ("http://host:notaport/", "<invalid URL>"),
    ],
)
def test_display_url_drops_credentials_query_and_fragment(url: str, shown: str) -> None:
    assert display_url(url) == shown


def test_next_attempt_gives_the_delay_and_the_utc_time() -> None:
    now = datetime(2026, 1, 2, 12, 0, 0, 500_000, tzinfo=UTC)
    assert next_attempt(0.8, now) == "in 0.80 s, at 12:00:01Z"
    assert next_attempt(30, now) == "in 30.00 s, at 12:00:30Z"


async def test_an_rpc_transport_error_names_the_url() -> None:
    """A real refused connection (a port nothing listens on), through the one HTTP helper every
    RPC client uses."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/rpc?key=secret"
    async with httpx.AsyncClient() as client:
        with pytest.raises(TransportError) as caught:
            await send(client, "POST", url, name="ledger", what="fee", timeout_s=2, headers={})
    text = str(caught.value)
    assert text.startswith(f"ledger fee at http://127.0.0.1:{port}/rpc: ConnectError"), text
    assert "secret" not in text


async def test_the_reconnect_loop_names_the_relay_and_the_next_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bus websocket against a port nothing listens on: each failed connect logs the URL
    and when it tries again."""
    import asyncio
    import logging
    import socket

    from solver.io.bus_ws import BusWsClient

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = BusWsClient(
        f"ws://127.0.0.1:{port}/ws", on_quote=lambda *_: None, backoff_initial_s=0.05,
        backoff_max_s=0.05, backoff_jitter="none",
    )  # fmt: skip
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="solver")
    task = asyncio.create_task(client.run(stop))
    deadline = asyncio.get_running_loop().time() + 5
    while client.counters.connect_failures < 2:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    lines = [r.getMessage() for r in caplog.records if "connect failed" in r.getMessage()]
    assert lines, caplog.text
    assert lines[0].startswith(f"relay ws://127.0.0.1:{port}/ws: connect failed ("), lines[0]
    assert "next attempt in 0.05 s, at " in lines[0] and lines[0].endswith("Z"), lines[0]
