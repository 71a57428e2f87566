"""Bad frames from a relay never stop the websocket client (STYLE 9).

A tiny websocket server in the test (a real peer on 127.0.0.1:0) sends every kind of bad frame
followed by good ones; the client counts each by reason and still delivers the good ones. The
pure parser is tested without any socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

from solver.core.lifecycle import Quote
from solver.errors import RemoteError
from solver.io.bus_frames import Skip, parse_quote_event
from solver.io.bus_ws import BusWsClient
from solver.protocol.bus import QuoteStatusEvent, quote_response, rpc_request
from solver.protocol.quote_request import QuoteRequest
from solver.protocol.quote_signing import SignedQuote
from tests.io.peers import wait_for
from tests.sandbox.scripted import NEAR, USDC

GOOD = {
    "quote_id": "q-good",
    "core_asset_identifier_in": NEAR,
    "core_asset_identifier_out": USDC,
    "exact_amount_in": "1000",
    "min_deadline_ms": 60000,
}
FAST = {"backoff_initial_s": 0.02, "backoff_max_s": 0.05, "backoff_seed": 2}

Handler = Callable[[ServerConnection, int], Awaitable[None]]


@contextlib.asynccontextmanager
async def relay_peer(script: Handler) -> AsyncIterator[str]:
    """A websocket server; ``script(ws, n)`` runs for the n-th connection (from 0)."""
    connections = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal connections
        n = connections
        connections += 1
        await script(ws, n)

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws"


async def answer_subscribes(ws: ServerConnection) -> None:
    for _ in range(2):
        request = orjson.loads(await ws.recv())
        assert request["method"] == "subscribe"
        kind = request["params"][0]
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": f"{kind}-1"}))


def event(data: Any, subscription: str = "quote-1", **extra: Any) -> bytes:
    params = {"subscription": subscription, "data": data, "metadata": {}, **extra}
    return orjson.dumps({"jsonrpc": "2.0", "method": "event", "params": params})


def quote(**changes: Any) -> dict[str, Any]:
    data = {**GOOD, "quote_id": "q-bad"}
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return data


BAD_FRAMES: list[tuple[str, bytes | str]] = [
    ("invalid_json", b"{not json"),
    (
        "invalid_json",
        b'{"jsonrpc": "2.0", "method": "event", "params": {"data": {"quote_id": "\xff',
    ),
    ("not_object", b"[1, 2, 3]"),
    ("not_object", b'"just text"'),
    ("not_object", b"null"),
    ("unknown_frame", b'{"jsonrpc": "2.0", "method": "surprise", "params": []}'),
    ("bad_envelope", b'{"jsonrpc": "2.0", "method": "event", "params": "data"}'),
    ("unknown_event", event({"something": "else"}, subscription="mystery")),
    ("quote.exact_amount", event(quote(exact_amount_out="5"))),
    ("quote.exact_amount", event(quote(exact_amount_in=None))),
    ("quote.amount", event(quote(exact_amount_in=1000))),
    ("quote.amount", event(quote(exact_amount_in="0"))),
    ("quote.amount", event(quote(exact_amount_in=str(1 << 128)))),
    ("quote.amount", event(quote(exact_amount_in="-5"))),
    ("quote.amount", event(quote(exact_amount_in="1e3"))),
    ("quote.min_deadline_ms", event(quote(min_deadline_ms=-1))),
    ("quote.min_deadline_ms", event(quote(min_deadline_ms="60000"))),
    ("quote.asset", event(quote(core_asset_identifier_in="btc:bitcoin"))),
    ("quote.asset", event(quote(core_asset_identifier_out=None))),
    ("quote.asset", event(quote(core_asset_identifier_out=NEAR))),
    ("quote.quote_id", event(quote(quote_id=""))),
    ("quote.quote_id", event(quote(quote_id=7))),
    ("quote_status.invalid", event({"quote_hash": "h"}, subscription="quote_status-1")),
    ("unmatched_reply", b'{"jsonrpc": "2.0", "id": 999, "result": "OK"}'),
    (
        "unmatched_reply",
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "x"}}',
    ),
    ("too_large", event(quote(padding="x" * (2 << 20)))),
]


def expected_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason, _ in BAD_FRAMES:
        counts[reason] = counts.get(reason, 0) + 1
    return counts


class Sink:
    def __init__(self) -> None:
        self.quotes: list[QuoteRequest] = []
        self.statuses: list[QuoteStatusEvent] = []
        self.responses: list[tuple[str, bool, str | None]] = []

    def on_quote(self, request: QuoteRequest) -> None:
        self.quotes.append(request)

    def on_response(self, quote_id: str, ok: bool, reason: str | None) -> None:
        self.responses.append((quote_id, ok, reason))


def client_for(url: str, sink: Sink, **kwargs: Any) -> BusWsClient:
    return BusWsClient(
        url,
        on_quote=sink.on_quote,
        on_quote_status=sink.statuses.append,
        on_response=sink.on_response,
        **{**FAST, **kwargs},
    )


@contextlib.asynccontextmanager
async def running(client: BusWsClient) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(client.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_every_bad_frame_is_counted_and_the_good_ones_still_arrive() -> None:
    async def script(ws: ServerConnection, n: int) -> None:
        await answer_subscribes(ws)
        for _, frame in BAD_FRAMES:
            await ws.send(frame)
        # Good events: the nested envelope with the extra fields a real relay adds, the flat
        # envelope, and a quote_status.
        extra = {
            "min_wait_ms": 0,
            "max_wait_ms": 1500,
            "protocol_fee_included": True,
            "trusted_metadata": {"source": "x"},
        }
        await ws.send(event({**GOOD, **extra}, metadata={"partner_id": "p", "traceparent": "t"}))
        flat = {"jsonrpc": "2.0", "method": "event", "params": {**GOOD, "quote_id": "q-flat"}}
        await ws.send(orjson.dumps(flat))
        status = {"quote_hash": "qh", "intent_hash": "ih", "tx_hash": "tx"}
        await ws.send(event(status, subscription="quote_status-1"))
        await ws.wait_closed()

    sink = Sink()
    async with relay_peer(script) as url:
        client = client_for(url, sink)
        async with running(client):
            await wait_for(lambda: len(sink.statuses) == 1)
        counters = client.counters
    assert counters.bad_frames == expected_counts()
    assert [(r.quote_id, r.amount) for r in sink.quotes] == [
        ("q-good", 1000),
        ("q-flat", 1000),
    ]
    assert sink.quotes[0].partner_id == "p"  # the relay's partner, from the metadata
    assert sink.statuses == [QuoteStatusEvent(quote_hash="qh", intent_hash="ih", tx_hash="tx")]
    assert counters.frames_in == len(BAD_FRAMES) + 2 + 3
    assert counters.connects == 1 and counters.reconnects == 0 and counters.disconnects == 1


async def test_frame_over_the_transport_limit_costs_a_reconnect_only() -> None:
    async def script(ws: ServerConnection, n: int) -> None:
        await answer_subscribes(ws)
        if n == 0:
            await ws.send(event(quote(padding="x" * 10_000)))
        else:
            await ws.send(event(GOOD))
        await ws.wait_closed()

    sink = Sink()
    async with relay_peer(script) as url:
        client = client_for(url, sink, max_frame_bytes=1024, transport_max_bytes=4096)
        async with running(client):
            await wait_for(lambda: len(sink.quotes) == 1)
    assert client.counters.bad_frames == {"too_large": 1}
    assert client.counters.reconnects == 1


async def test_replies_are_matched_and_lost_ones_reported() -> None:
    async def script(ws: ServerConnection, n: int) -> None:
        await answer_subscribes(ws)
        if n > 0:  # the client reconnects after "c": nothing more to say
            await ws.wait_closed()
            return
        await ws.send(event(GOOD))
        for _ in range(3):
            request = orjson.loads(await ws.recv())
            assert request["method"] == "quote_response"
            quote_id = request["params"][0]["quote_id"]
            if quote_id == "a":
                reply = {"jsonrpc": "2.0", "id": request["id"], "result": "OK"}
            elif quote_id == "b":
                error = {"code": -32602, "message": "deadline too short"}
                reply = {"jsonrpc": "2.0", "id": request["id"], "error": error}
            else:
                await ws.close()  # "c" never gets its reply
                return
            await ws.send(orjson.dumps(reply))

    sink = Sink()
    clients: list[BusWsClient] = []

    async def answer(request: QuoteRequest) -> None:
        for quote_id in ("a", "b", "c"):
            clients[0].send_quote_response({"quote_id": quote_id, "quote_output": {}})

    async with relay_peer(script) as url:
        client = BusWsClient(url, on_quote=answer, on_response=sink.on_response)
        clients.append(client)
        async with running(client):
            await wait_for(lambda: client.counters.unanswered == 1)
    # "c" was never answered: not a refusal (the relay may still use it until its deadline).
    assert sink.responses == [
        ("a", True, None),
        ("b", False, "deadline too short"),
    ]


async def test_silent_relay_is_dropped_and_a_refused_subscription_is_fatal() -> None:
    sessions: list[int] = []

    async def silent(ws: ServerConnection, n: int) -> None:
        sessions.append(n)
        await ws.wait_closed()  # never confirms the subscriptions

    sink = Sink()
    async with relay_peer(silent) as url:
        client = client_for(url, sink, subscribe_timeout_s=0.1)
        async with running(client):
            await wait_for(lambda: len(sessions) >= 2)  # the client hung up and came back
    assert client.counters.connects == 0 and client.counters.connect_failures == 0

    async def refuse(ws: ServerConnection, n: int) -> None:
        request = orjson.loads(await ws.recv())
        error = {"code": -32602, "message": "no such topic"}
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "error": error}))
        await ws.wait_closed()

    async with relay_peer(refuse) as url:
        client = client_for(url, sink)
        with pytest.raises(RemoteError) as refused:
            await asyncio.wait_for(client.run(asyncio.Event()), 5)
    assert "no such topic" in refused.value.reason and refused.value.code == -32602


async def test_callback_errors_are_contained() -> None:
    async def script(ws: ServerConnection, n: int) -> None:
        await answer_subscribes(ws)
        await ws.send(event(GOOD))
        await ws.send(event({**GOOD, "quote_id": "q2"}))
        await ws.wait_closed()

    seen: list[str] = []

    def explode(request: QuoteRequest) -> None:
        seen.append(request.quote_id)
        raise RuntimeError("strategy bug")

    async with relay_peer(script) as url:
        client = BusWsClient(url, on_quote=explode)
        async with running(client):
            await wait_for(lambda: len(seen) == 2)
    assert client.counters.callback_errors == 2


# ---------------------------------------------------------------------------- pure parsing


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"exact_amount_out": "1"}, "quote.exact_amount"),
        ({"exact_amount_in": None}, "quote.exact_amount"),
        ({"exact_amount_in": 5}, "quote.amount"),
        ({"exact_amount_in": "0"}, "quote.amount"),
        ({"exact_amount_in": str(1 << 128)}, "quote.amount"),
        ({"min_deadline_ms": -1}, "quote.min_deadline_ms"),
        ({"core_asset_identifier_in": "nep999:x"}, "quote.asset"),
        ({"core_asset_identifier_in": USDC}, "quote.asset"),
        ({"quote_id": None}, "quote.quote_id"),
    ],
)
def test_parse_quote_event_names_the_reason(changes: dict[str, Any], reason: str) -> None:
    assert parse_quote_event(quote(**changes)) == Skip(reason)


def test_parse_quote_event_accepts_exact_out_and_extra_fields() -> None:
    data = quote(exact_amount_in=None, exact_amount_out=str((1 << 128) - 1), max_wait_ms=10)
    parsed = parse_quote_event(data)
    assert isinstance(parsed, QuoteRequest)
    assert not parsed.exact_in and parsed.amount == (1 << 128) - 1


def test_handle_frame_needs_no_network() -> None:
    sink = Sink()
    client = client_for("ws://127.0.0.1:9/ws", sink)
    client.handle_frame(event(GOOD))
    client.handle_frame(b"nope")
    assert [r.quote_id for r in sink.quotes] == ["q-good"]
    assert client.counters.bad_frames == {"invalid_json": 1}


async def test_cancelling_run_closes_cleanly() -> None:
    async def script(ws: ServerConnection, n: int) -> None:
        await answer_subscribes(ws)
        await ws.wait_closed()

    sink = Sink()
    async with relay_peer(script) as url:
        client = client_for(url, sink)
        task = asyncio.create_task(client.run(asyncio.Event()))
        await wait_for(lambda: client.connected)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert client.state == "stopped" and not client.connected
    # Cancelled while connecting (nobody listens on that port any more) is clean too.
    client = client_for(url, sink)
    task = asyncio.create_task(client.run(asyncio.Event()))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.state == "stopped"


class _Socket:
    """A connected link's sending side: keeps the frames."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send_text_now(self, frame: bytes) -> None:
        self.frames.append(frame)


@pytest.mark.parametrize("exact_in", [True, False])
@pytest.mark.parametrize("quote_id", ["q-1", 'odd "id" \\ é\n\u2028'])
def test_send_answer_writes_the_bytes_of_the_dict_built_request(
    exact_in: bool, quote_id: str
) -> None:
    """The answer frame is a bytes template filled in (issue 29): byte for byte what orjson
    writes for :func:`quote_response`'s params in a JSON-RPC request, and awaited by its id."""
    client = client_for("ws://127.0.0.1:9/ws", Sink())
    socket = _Socket()
    client._ws = socket  # type: ignore[assignment]
    signed_data = {
        "standard": "nep413",
        "payload": {"message": '{"x":"y"}', "nonce": "AAE=", "recipient": "intents.near"},
        "public_key": "ed25519:abc",
        "signature": "ed25519:def",
    }
    request = QuoteRequest(quote_id, USDC, NEAR, exact_in, 10**30, 60_000)
    signed = SignedQuote(signed_data, "hash", b"\x00", "message")
    client._next_id = 41
    client.send_answer(
        Quote(
            request.quote_id,
            request.asset_in,
            request.asset_out,
            10**30 + 7,
            (1 << 128) - 1,
            3,
            0,
            request.exact_in,
        ),
        signed,
    )
    params = quote_response(quote_id, exact_in, 10**30 + 7, (1 << 128) - 1, signed_data)
    assert socket.frames == [orjson.dumps(rpc_request("quote_response", params, 42))]
    assert client._pending[42].tag == quote_id
