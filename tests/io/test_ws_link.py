"""The bus websocket's synchronous hot path (:class:`solver.io.ws_link.QuoteLink`).

A real websockets server on 127.0.0.1:0 is the peer; the client is opened exactly as the bot
opens it (``connect(create_connection=QuoteLink)``). Messages must arrive whole and in order
(fragmented ones too, and those that came before a handler was attached), a handler's bug must
not end the connection, an answer must be refused — not queued — once the relay stops
reading or the connection is gone, and a relay sending faster than the handler works must be
held back by TCP, not read into memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection as SyncServerConnection
from websockets.sync.server import serve as sync_serve

from solver.errors import TransportError
from solver.io import ws_link
from solver.io.ws_link import QuoteLink
from tests.io.peers import wait_for

Script = Callable[[ServerConnection], Awaitable[None]]


@contextlib.asynccontextmanager
async def link_to(script: Script) -> AsyncIterator[QuoteLink]:
    """A server running ``script`` for its one connection, and the client's link to it."""

    async def handler(ws: ServerConnection) -> None:
        await script(ws)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        url = f"ws://127.0.0.1:{port}/ws"
        link = await connect(url, compression=None, create_connection=QuoteLink)  # as the bot
        assert isinstance(link, QuoteLink)
        try:
            yield link
        finally:
            await link.close()


async def test_messages_before_the_handler_are_delivered_first_in_order() -> None:
    sent = asyncio.Event()

    async def script(ws: ServerConnection) -> None:
        for n in range(3):
            await ws.send(f'{{"n":{n}}}')
        sent.set()

    got: list[bytes] = []
    async with link_to(script) as link:
        # The three arrive while nothing is attached: the pong to a ping sent after them comes
        # behind them on the socket, so once it is in, so are they (no wall-clock wait).
        await sent.wait()
        await asyncio.wait_for(await link.ping(), 10)
        link.attach(got.append)
        assert got == [b'{"n":0}', b'{"n":1}', b'{"n":2}']


async def test_a_fragmented_message_is_delivered_whole() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(["[1,", "2,", "3]"])  # three frames: TEXT, CONT, CONT
        await ws.send(b'"binary"')

    got: list[bytes] = []
    async with link_to(script) as link:
        link.attach(got.append)
        await wait_for(lambda: len(got) == 2)
        assert got == [b"[1,2,3]", b'"binary"']


async def test_a_failing_handler_is_logged_and_the_link_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send("boom")
        await ws.send("fine")

    got: list[bytes] = []

    def handler(message: bytes) -> None:
        if message == b"boom":
            raise RuntimeError("a bug in the handler")
        got.append(message)

    async with link_to(script) as link:
        link.attach(handler)
        await wait_for(lambda: got == [b"fine"])
        (failure,) = [r for r in caplog.records if r.name == "solver.io.ws_link"]
        assert failure.exc_info is not None and "a bug in the handler" in str(failure.exc_info[1])
        link.send_text_now(b'"still open"')


async def test_a_frame_is_written_before_send_returns() -> None:
    received: asyncio.Queue[str | bytes] = asyncio.Queue()

    async def script(ws: ServerConnection) -> None:
        async for message in ws:
            await received.put(message)

    async with link_to(script) as link:
        for n in range(100):
            link.send_text_now(f'{{"n":{n}}}'.encode())
        assert link.transport.get_write_buffer_size() == 0  # all handed to the kernel
        got = [await asyncio.wait_for(received.get(), 5) for _ in range(100)]
        assert got == [f'{{"n":{n}}}' for n in range(100)]  # text frames, in order


async def test_an_answer_is_refused_once_the_relay_stops_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ws_link, "UNSENT_LIMIT", 256 << 10)
    stalled, release = asyncio.Event(), asyncio.Event()

    async def script(ws: ServerConnection) -> None:
        ws.transport.pause_reading()  # the relay takes nothing more from its socket
        stalled.set()
        await release.wait()
        # It reads again and takes everything, so the closing handshake gets through instead
        # of waiting out the 10 s close timeouts on both sides.
        ws.transport.resume_reading()
        async for _ in ws:
            pass

    async with link_to(script) as link:
        await stalled.wait()
        frame = b'"' + b"x" * (64 << 10) + b'"'
        written = 0
        with pytest.raises(TransportError, match="unread"):
            for _ in range(10_000):  # the kernel's buffers fill first, then ours
                link.send_text_now(frame)
                written += 1
        before = link.transport.get_write_buffer_size()
        assert before > 256 << 10
        with pytest.raises(TransportError):
            link.send_text_now(frame)
        assert link.transport.get_write_buffer_size() == before  # refused, not queued
        assert written < 10_000
        release.set()


async def test_sending_on_a_closed_link_is_refused() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.close()

    async with link_to(script) as link:
        await asyncio.wait_for(link.wait_closed(), 5)
        with pytest.raises(TransportError, match="closed"):
            link.send_text_now(b"{}")


async def test_a_socket_failing_under_a_send_is_a_transport_error() -> None:
    async def script(ws: ServerConnection) -> None:
        return None

    async with link_to(script) as link:
        link.transport.write_eof()  # writing after this raises in the transport itself
        with pytest.raises(TransportError, match="failed while sending"):
            link.send_text_now(b"{}")


async def test_frames_sent_corked_leave_in_one_write_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received: asyncio.Queue[str | bytes] = asyncio.Queue()

    async def script(ws: ServerConnection) -> None:
        async for message in ws:
            await received.put(message)

    async with link_to(script) as link:
        writes: list[int] = []
        write = link.transport.write

        def counted(data: bytes | bytearray | memoryview) -> None:  # a spy on asyncio's transport
            writes.append(len(data))
            write(data)

        monkeypatch.setattr(link.transport, "write", counted)
        with link.corked():
            for n in range(10):
                link.send_text_now(f'{{"n":{n}}}'.encode())
                with link.corked():  # nested: the outer block writes
                    link.send_text_now(b'"inner"')
            assert writes == []  # nothing left before the end of the block
        assert len(writes) == 1
        got = [await asyncio.wait_for(received.get(), 5) for _ in range(20)]
        assert got == [m for n in range(10) for m in (f'{{"n":{n}}}', '"inner"')]


async def test_corked_bytes_count_against_the_unread_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ws_link, "UNSENT_LIMIT", 64 << 10)

    async def script(ws: ServerConnection) -> None:
        # The relay takes what arrives: 60-odd messages left in its queue would stop its reads
        # and the closing handshake would wait out its 10 s timeout.
        async for _ in ws:
            pass

    async with link_to(script) as link:
        frame = b'"' + b"y" * 1022 + b'"'
        sent = 0
        with link.corked(), pytest.raises(TransportError, match="unread"):
            for _ in range(1000):
                link.send_text_now(frame)
                sent += 1
        assert 60 <= sent <= 66  # ~64 kB held, then refused


async def test_a_failed_corked_write_aborts_the_link_without_raising() -> None:
    async def script(ws: ServerConnection) -> None:
        return None

    async with link_to(script) as link:
        with link.corked():
            link.send_text_now(b"{}")
            link.transport.write_eof()  # the block's one write will fail
        await asyncio.wait_for(link.wait_closed(), 5)


async def test_a_relay_sending_faster_than_the_handler_is_held_back_by_tcp() -> None:
    """A message is handled inside the socket's read callback, so the link reads no faster
    than its handler works: a relay (its own thread, blocking sends) flooding 19 MB at a
    handler that takes 0.2 ms a message stays a few socket buffers ahead, its sends waiting,
    instead of the bot reading it all into memory. The sockets' buffers are fixed at 64 KiB so
    that the bound does not depend on the kernel's autotuning."""
    size, count = 64 << 10, 300
    payload = "x" * size
    progress = {"sent": 0, "handled": 0, "lead": 0}

    def flood(ws: SyncServerConnection) -> None:
        ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        for _ in range(count):
            ws.send(payload)  # blocks while the socket's buffer is full
            progress["sent"] += 1
        with contextlib.suppress(ConnectionClosed):
            ws.recv()  # until the client closes

    def slow_handler(message: bytes) -> None:
        assert len(message) == size
        progress["handled"] += 1
        progress["lead"] = max(progress["lead"], progress["sent"] - progress["handled"])
        time.sleep(0.0002)  # the bot's work on it (synchronous, as the quote path is)

    with sync_serve(flood, "127.0.0.1", 0, compression=None) as server:
        relay = threading.Thread(target=server.serve_forever, daemon=True)
        relay.start()
        url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}/ws"
        link = await connect(url, compression=None, create_connection=QuoteLink)
        assert isinstance(link, QuoteLink)
        try:
            link.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10
            )
            link.attach(slow_handler)
            await wait_for(lambda: progress["handled"] == count, timeout_s=30)
        finally:
            await link.close()
            server.shutdown()
            relay.join(5)
    # In flight at most: the relay's send buffer, our receive buffer and the chunk being
    # parsed, each a 64 KiB message or two (measured: 2–3). Had the link read ahead into
    # memory, the relay would have finished long before the handler (a lead near 300).
    assert 0 < progress["lead"] <= 24, progress


async def test_each_read_of_the_socket_is_bracketed_around_its_messages() -> None:
    """``read_begin`` and ``read_end`` enclose the messages of every read of the socket (the
    batch the bus client hands the executor at once), whatever the handler does: however the
    server's frames fall into reads, each message lies between a begin and its end."""

    async def script(ws: ServerConnection) -> None:
        await ws.recv()  # the client attached: nothing arrives before
        await ws.send(['{"n":0}', ',{"n":1}'])  # one message in two frames
        for n in range(2, 40):
            await ws.send(f'{{"n":{n}}}')

    trace: list[str] = []

    def handler(message: bytes) -> None:
        trace.append(message.decode())
        if message == b'{"n":7}':
            raise RuntimeError("a bug in the handler")

    async with link_to(script) as link:
        link.attach(
            handler, read_begin=lambda: trace.append("("), read_end=lambda: trace.append(")")
        )
        link.send_text_now(b'"go"')
        await wait_for(lambda: '{"n":39}' in trace and trace[-1] == ")")
    depth, messages = 0, []
    for item in trace:
        if item in ("(", ")"):
            depth += 1 if item == "(" else -1
            assert depth in (0, 1)
        else:
            assert depth == 1  # inside a read
            messages.append(item)
    assert depth == 0
    assert messages == ['{"n":0},{"n":1}', *[f'{{"n":{n}}}' for n in range(2, 40)]]
