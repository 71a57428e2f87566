"""The bus client's sans-I/O frame handling (:class:`~solver.io.bus_ws_receive.BusReceiver`):
bytes in, callbacks and counters out, no socket and no event loop.

The receiver reads the reply that follows every answer from its bytes rather than through
orjson (issue 29); a ``str`` frame always takes the parser, so each frame given both ways must
leave the same trace: the same callbacks, counters, subscriptions and fatal error.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson
import pytest

from solver.io.bus_state import PendingReply
from solver.io.bus_ws_receive import BusReceiver


def _receiver() -> tuple[BusReceiver, list[tuple[str, bool, str | None]]]:
    responses: list[tuple[str, bool, str | None]] = []
    receiver = BusReceiver(
        "ws://127.0.0.1:9/ws",
        on_quote=lambda request: None,
        on_response=lambda quote_id, ok, reason: responses.append((quote_id, ok, reason)),
        max_frame_bytes=1 << 20,
        max_inflight=16,
    )
    receiver.pending[5] = PendingReply("quote_response", "q-5")
    receiver.pending[0] = PendingReply("quote_response", "q-0")
    receiver.pending[7] = PendingReply("subscribe", "quote")
    receiver.pending[123456789012345678] = PendingReply("quote_response", "q-big")
    return receiver, responses


def _trace(frame: bytes | str) -> dict[str, Any]:
    receiver, responses = _receiver()
    receiver.handle_frame(frame)
    return {
        "responses": responses,
        "counters": asdict(receiver.counters),
        "pending": sorted(receiver.pending),
        "subs": dict(receiver.subs),
        "fatal": repr(receiver.fatal),
    }


OK = b'{"jsonrpc":"2.0","id":%s,"result":"OK"}'
FRAMES = [
    OK % b"5",
    OK % b"0",
    OK % b"7",  # a subscribe's id: "OK" is its subscription id
    OK % b"6",  # no request with this id
    OK % b"123456789012345678",
    OK % b"1234567890123456789",  # 19 digits: parsed by orjson
    OK % b"99999999999999999999",  # beyond u64: orjson reads a float, matched to nothing
    OK % b"05",  # a leading zero: not JSON
    OK % b"00",
    OK % b"-5",
    OK % b"+5",
    OK % b"5.0",
    OK % b"5e0",
    OK % b" 5",
    OK % b"",
    OK % b'"5"',
    OK % "٥".encode(),  # a digit, but not an ASCII one
    b'{"jsonrpc":"2.0","id":5,"result":"OK"} ',
    b'{"jsonrpc":"2.0","id":5,"result":"OK"}}',
    b'{"jsonrpc":"2.0","id":5,"result":"OK","id":6,"result":"OK"}',
    b'{"jsonrpc":"2.0","id":5,"error":{"code":1},"result":"OK"}',
    b'{"jsonrpc":"2.0","id":5,"result":"NO"}',
    b'{"jsonrpc":"2.0","id":,"result":"OK"}',
    b'{"jsonrpc":"2.0","id":"result":"OK"}',
    orjson.dumps({"id": 5, "jsonrpc": "2.0", "result": "OK"}),  # another order: the parser
]


@pytest.mark.parametrize("frame", FRAMES)
def test_a_reply_read_from_its_bytes_leaves_the_parsers_trace(frame: bytes) -> None:
    assert _trace(frame) == _trace(frame.decode())


def test_the_reply_to_an_answer_reports_it_and_is_no_longer_awaited() -> None:
    trace = _trace(OK % b"5")
    assert trace["responses"] == [("q-5", True, None)]
    assert trace["counters"]["responses_ok"] == 1 and 5 not in trace["pending"]
    unmatched = _trace(OK % b"6")
    assert unmatched["responses"] == []
    assert unmatched["counters"]["bad_frames"] == {"unmatched_reply": 1}


def test_a_reply_over_the_frame_limit_is_too_large() -> None:
    receiver, responses = _receiver()
    receiver._max_frame = 10
    receiver.handle_frame(OK % b"5")
    assert receiver.counters.bad_frames == {"too_large": 1} and responses == []


def _quote_event(quote_id: str) -> bytes:
    data = {
        "quote_id": quote_id,
        "core_asset_identifier_in": "nep141:usdc.sandbox",
        "core_asset_identifier_out": "nep141:wrap.sandbox",
        "exact_amount_in": "1000000",
        "min_deadline_ms": 60_000,
    }
    params = {"subscription": "sub-q", "data": data, "metadata": {}}
    return orjson.dumps({"jsonrpc": "2.0", "method": "event", "params": params})


def _batching(fail: bool = False) -> tuple[BusReceiver, list[str], list[list[str]]]:
    one: list[str] = []
    many: list[list[str]] = []

    def on_quotes(requests: list[Any]) -> int:
        many.append([r.quote_id for r in requests])
        if fail:
            raise RuntimeError("a bug in the batch")
        return sum(1 for r in requests if r.quote_id.endswith("!"))

    receiver = BusReceiver(
        "ws://127.0.0.1:9/ws",
        on_quote=lambda request: one.append(request.quote_id),
        on_quotes=on_quotes,
        max_frame_bytes=1 << 20,
        max_inflight=16,
    )
    receiver.subs["sub-q"] = "quote"
    receiver.pending[5] = PendingReply("quote_response", "q-5")
    return receiver, one, many


def test_the_quotes_of_one_read_go_to_the_desk_together_in_order() -> None:
    """Between ``read_begin`` and ``read_end`` (the link's one read of the socket) the quotes
    wait and go as one batch; the other frames are handled as they come. A lone quote, or
    one outside a read, goes by itself."""
    receiver, one, many = _batching()
    receiver.read_begin()
    receiver.handle_frame(_quote_event("a"))
    receiver.handle_frame(OK % b"5")  # handled at once, between the quotes
    assert receiver.counters.responses_ok == 1 and many == []
    receiver.handle_frame(_quote_event("b!"))
    receiver.handle_frame(b"not json")
    receiver.handle_frame(_quote_event("c"))
    receiver.read_end()
    assert many == [["a", "b!", "c"]] and one == []
    assert receiver.counters.quotes_in == 3
    assert receiver.counters.callback_errors == 1  # the batch said one failed
    receiver.read_begin()
    receiver.handle_frame(_quote_event("d"))
    receiver.read_end()
    receiver.handle_frame(_quote_event("e"))  # no read under way
    receiver.read_begin()
    receiver.read_end()  # a read with no quote
    assert one == ["d", "e"] and many == [["a", "b!", "c"]]


def test_a_batch_that_raises_counts_every_quote_of_it(caplog: pytest.LogCaptureFixture) -> None:
    receiver, _, many = _batching(fail=True)
    receiver.read_begin()
    receiver.handle_frame(_quote_event("a"))
    receiver.handle_frame(_quote_event("b"))
    receiver.read_end()
    assert many == [["a", "b"]] and receiver.counters.callback_errors == 2
    assert "a bug in the batch" in caplog.text
    receiver.handle_frame(_quote_event("c"))  # the next read starts afresh
    assert many == [["a", "b"]]
