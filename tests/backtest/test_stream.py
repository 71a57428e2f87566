"""Quote streams, format v1: writer → reader round trips, validation with line numbers, strict
mode, ordering, rotation, gzip detection, and flat memory on a long stream."""

from __future__ import annotations

import gc
import gzip
import itertools
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from backtest.stream.events import (
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    StreamEvent,
    TokenInfo,
)
from backtest.stream.format import MAX_MALFORMED_KEPT, StreamError, format_ts, stream_parts
from backtest.stream.line_parser import CHUNK
from backtest.stream.read import read_stream
from backtest.stream.records import REC_REQUEST
from backtest.stream.write import StreamWriter, write_stream
from solver.core.market import QuoteRequest
from solver.protocol.amounts import U128_MAX

USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
HEADER = Header(
    created=T0,
    source="test",
    tokens={USDC: TokenInfo("USDC", 6), NEAR: TokenInfo("wNEAR", 24)},
)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def every_kind() -> list[StreamEvent]:
    return [
        PriceEvent(at(0), NEAR, "3.0412"),
        PriceEvent(at(0), USDC, "1"),
        RequestEvent(at(5), QuoteRequest("q1", NEAR, USDC, True, 10 * 10**24, 60_000, "p1")),
        RequestEvent(at(7), QuoteRequest("q2", USDC, NEAR, False, U128_MAX, 0, None)),
        CompetitorEvent(at(250), "q1", 30_410_000),
        StatusEvent(at(900), "hash-q", "hash-i", "hash-tx"),
        StatusEvent(at(901), "hash-q2", "hash-i2", None),
        PriceEvent(at(1000), NEAR, "0.000000123"),
    ]


def write_lines(path: Path, lines: list[Any], *, header: Any = None) -> Path:
    """A stream file from raw lines: dicts are dumped, str/bytes written as they are."""
    out = []
    head = header if header is not None else _header_json()
    for item in [head, *lines]:
        if isinstance(item, dict):
            out.append(orjson.dumps(item))
        elif isinstance(item, str):
            out.append(item.encode())
        else:
            out.append(item)
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def _header_json() -> dict[str, Any]:
    return {
        "v": 1,
        "kind": "header",
        "created": "2025-03-01T12:00:00.000Z",
        "source": "test",
        "tokens": {
            USDC: {"symbol": "USDC", "decimals": 6},
            NEAR: {"symbol": "wNEAR", "decimals": 24},
        },
    }


def request_json(ms: int = 0, **data: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "quote_id": "q",
        "core_asset_identifier_in": NEAR,
        "core_asset_identifier_out": USDC,
        "exact_amount_in": "1000",
        "min_deadline_ms": 60_000,
    }
    for key, value in data.items():
        if value is _DROP:
            body.pop(key, None)
        else:
            body[key] = value
    return {"v": 1, "ts": format_ts(at(ms)), "kind": "quote_request", "data": body, "meta": {}}


_DROP = object()


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("name", ["s.jsonl", "s.jsonl.gz"])
def test_round_trip_every_kind(tmp_path: Path, name: str) -> None:
    events = every_kind()
    path = write_stream(tmp_path / name, HEADER, events)
    with read_stream(path) as reader:
        assert reader.header == HEADER
        assert list(reader) == events
    assert reader.stats.events == {
        "price": 3,
        "quote_request": 2,
        "competitor": 1,
        "quote_status": 2,
    }
    assert reader.stats.lines == 1 + len(events)
    assert reader.stats.malformed == [] and reader.stats.malformed_total == 0
    assert path.read_bytes()[:2] == (b"\x1f\x8b" if name.endswith(".gz") else b'{"')


def test_lines_are_compact_with_string_amounts_and_ms_timestamps(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "s.jsonl", HEADER, every_kind())
    lines = path.read_bytes().splitlines()
    header = orjson.loads(lines[0])
    assert header == {
        "v": 1,
        "kind": "header",
        "created": "2025-03-01T12:00:00.000Z",
        "source": "test",
        "tokens": {
            USDC: {"symbol": "USDC", "decimals": 6},
            NEAR: {"symbol": "wNEAR", "decimals": 24},
        },
    }
    request = orjson.loads(lines[3])
    assert request == {
        "v": 1,
        "ts": "2025-03-01T12:00:00.005Z",
        "kind": "quote_request",
        "data": {
            "quote_id": "q1",
            "core_asset_identifier_in": NEAR,
            "core_asset_identifier_out": USDC,
            "exact_amount_in": "10000000000000000000000000",
            "min_deadline_ms": 60000,
        },
        "meta": {"partner_id": "p1"},
    }
    assert b" " not in lines[3]
    assert orjson.loads(lines[4])["data"]["exact_amount_out"] == str(U128_MAX)
    assert orjson.loads(lines[5])["data"] == {"quote_id": "q1", "best_amount": "30410000"}


def test_gzip_is_detected_by_magic_bytes_not_the_name(tmp_path: Path) -> None:
    gz = write_stream(tmp_path / "s.jsonl.gz", HEADER, every_kind())
    disguised = tmp_path / "really-gzip.jsonl"
    disguised.write_bytes(gz.read_bytes())
    plain = write_stream(tmp_path / "plain.jsonl", HEADER, every_kind())
    misnamed = tmp_path / "really-plain.jsonl.gz"
    misnamed.write_bytes(plain.read_bytes())
    assert list(read_stream(disguised)) == every_kind()
    assert list(read_stream(misnamed)) == every_kind()


def test_writer_refuses_out_of_order_and_naive_timestamps(tmp_path: Path) -> None:
    with StreamWriter(tmp_path / "s.jsonl", HEADER) as writer:
        writer.write(PriceEvent(at(10), USDC, "1"))
        writer.write(PriceEvent(at(10), NEAR, "3"))  # equal is fine
        with pytest.raises(ValueError, match="time order"):
            writer.write(PriceEvent(at(9), USDC, "1"))
        with pytest.raises(ValueError, match="timezone"):
            writer.write(PriceEvent(datetime(2030, 1, 1), USDC, "1"))  # noqa: DTZ001
    assert len(list(read_stream(tmp_path / "s.jsonl"))) == 2


def test_header_only_is_a_stream_of_zero_events(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "s.jsonl.gz", HEADER, [])
    reader = read_stream(path)
    assert reader.header == HEADER
    assert list(reader) == []
    assert reader.stats.lines == 1 and reader.stats.total_events == 0


def test_empty_stream_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(StreamError, match="empty stream"):
        read_stream(empty)
    empty_gz = tmp_path / "empty.jsonl.gz"
    empty_gz.write_bytes(gzip.compress(b"", mtime=0))
    with pytest.raises(StreamError, match="empty stream"):
        read_stream(empty_gz)


def test_missing_file_is_a_stream_error(tmp_path: Path) -> None:
    with pytest.raises(StreamError, match="cannot open"):
        read_stream(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (request_json(), "first line must be the header"),
        ("not json", "not JSON"),
        ({**_header_json(), "v": 2}, "unsupported stream version 2"),
        ({**_header_json(), "v": "1"}, "unsupported stream version"),
        ({**_header_json(), "tokens": {"bogus": {"symbol": "X", "decimals": 6}}}, "tokens"),
        ({**_header_json(), "tokens": {USDC: {"symbol": "USDC", "decimals": 99}}}, "decimals"),
        ({**_header_json(), "created": "yesterday"}, "created"),
    ],
)
def test_bad_header_is_a_stream_error(tmp_path: Path, header: Any, match: str) -> None:
    path = write_lines(tmp_path / "s.jsonl", [request_json()], header=header)
    with pytest.raises(StreamError, match=match) as info:
        read_stream(path)
    assert info.value.line == 1


# ------------------------------------------------------------------------------ bad lines


def bad_stream(tmp_path: Path) -> Path:
    return write_lines(
        tmp_path / "bad.jsonl",
        [
            request_json(0, quote_id="ok-1"),  # line 2
            '{"v": 1, "ts": "2025-03-01T12:00:00.001Z", "kind": "quote_req',  # 3: bad JSON
            request_json(2, exact_amount_in=1000),  # 4: JSON number amount
            request_json(3, exact_amount_out="5"),  # 5: both exact amounts
            request_json(4, core_asset_identifier_out="nep141:doge.near"),  # 6: unknown asset
            request_json(5, quote_id=_DROP),  # 7: missing quote_id
            request_json(6, min_deadline_ms=_DROP),  # 8: missing min_deadline_ms
            request_json(7, exact_amount_in=_DROP),  # 9: neither exact amount
            request_json(8, exact_amount_in=str(U128_MAX + 1)),  # 10: over u128
            request_json(9, exact_amount_in="0"),  # 11: zero
            request_json(10, exact_amount_in="007"),  # 12: leading zeros
            {"v": 1, "ts": format_ts(at(11)), "kind": "price", "data": {"asset": USDC, "usd": 1}},
            {"v": 1, "ts": format_ts(at(12)), "kind": "competitor", "data": {"quote_id": "q"}},
            {"v": 1, "ts": "noon", "kind": "price", "data": {"asset": USDC, "usd": "1"}},  # 15
            {"v": 3, "ts": format_ts(at(13)), "kind": "price", "data": {"asset": USDC, "usd": "1"}},
            "[1, 2]",  # 17: not an object
            request_json(14, quote_id="ok-2"),  # 18
        ],
    )


def test_malformed_lines_are_reported_with_line_numbers_and_skipped(tmp_path: Path) -> None:
    reader = read_stream(bad_stream(tmp_path))
    events = list(reader)
    assert [e.request.quote_id for e in events if isinstance(e, RequestEvent)] == ["ok-1", "ok-2"]
    stats = reader.stats
    assert stats.lines == 18
    assert stats.malformed_total == 15
    reasons = dict(stats.malformed)
    assert sorted(reasons) == list(range(3, 18))
    expected = {
        3: "invalid JSON",
        4: "exact_amount_in must be a decimal string, got a JSON number",
        5: "exactly one of exact_amount_in and exact_amount_out",
        6: "unknown asset nep141:doge.near",
        7: "missing quote_id",
        8: "missing min_deadline_ms",
        9: "exactly one of exact_amount_in and exact_amount_out",
        10: "exceeds u128",
        11: "must be positive",
        12: "not an unsigned decimal integer",
        13: "usd must be a decimal string, got a JSON number",
        14: "missing best_amount",
        15: "not ISO 8601",
        16: "unsupported event version 3",
        17: "not a JSON object",
    }
    for line, text in expected.items():
        assert text in reasons[line], (line, reasons[line])


def test_strict_mode_stops_at_the_first_malformed_line(tmp_path: Path) -> None:
    reader = read_stream(bad_stream(tmp_path), strict=True)
    assert isinstance(next(reader), RequestEvent)
    with pytest.raises(StreamError, match="malformed line 3: invalid JSON") as info:
        next(reader)
    assert info.value.line == 3
    with pytest.raises(StopIteration):
        next(reader)


def test_unknown_kinds_are_counted_and_skipped(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl",
        [
            {"v": 1, "ts": format_ts(at(0)), "kind": "fill", "data": {"anything": [1, 2]}},
            {"v": 2, "kind": "book_snapshot"},  # no ts, other version: still just skipped
            request_json(1),
            {"v": 1, "ts": format_ts(at(2)), "kind": "fill", "data": {}},
            {"v": 1, "ts": format_ts(at(3)), "kind": "header", "tokens": {}},
        ],
    )
    reader = read_stream(path, strict=False)
    assert len(list(reader)) == 1
    assert reader.stats.unknown_kinds == 3
    assert reader.stats.unknown_by_kind == {"fill": 2, "book_snapshot": 1}
    assert reader.stats.malformed == [(6, "a second header inside the stream")]
    # strict mode does not mind unknown kinds either
    strict = read_stream(path, strict=True)
    assert isinstance(next(strict), RequestEvent)


def test_unsorted_timestamps_are_rejected_even_when_not_strict(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "s.jsonl",
        [request_json(10, quote_id="a"), request_json(10, quote_id="b"), request_json(9)],
    )
    reader = read_stream(path)
    assert next(reader).ts == at(10)
    assert next(reader).ts == at(10)
    with pytest.raises(StreamError, match="unsorted timestamps at line 4") as info:
        next(reader)
    assert info.value.line == 4


def test_offsets_are_read_as_utc_and_ordered_by_instant(tmp_path: Path) -> None:
    later_in_paris = {**request_json(), "ts": "2025-03-01T13:00:00.500+01:00"}  # 12:00:00.500Z
    path = write_lines(tmp_path / "s.jsonl", [request_json(100), later_in_paris])
    events = list(read_stream(path))
    assert events[1].ts == at(500) and events[1].ts.tzinfo == UTC


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", ["", request_json(1), "   ", request_json(2)])
    reader = read_stream(path)
    assert len(list(reader)) == 2
    assert reader.stats.blank_lines == 2 and reader.stats.malformed_total == 0


def test_the_malformed_list_is_capped_but_the_total_is_not(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", ["{nope"] * (MAX_MALFORMED_KEPT + 234))
    reader = read_stream(path)
    assert list(reader) == []
    assert len(reader.stats.malformed) == MAX_MALFORMED_KEPT
    assert reader.stats.malformed_total == MAX_MALFORMED_KEPT + 234
    assert reader.stats.malformed[0] == (2, "invalid JSON")


@pytest.mark.parametrize("name", ["s.jsonl", "s.jsonl.gz"])
def test_lines_cut_across_chunks_keep_their_numbers(tmp_path: Path, name: str) -> None:
    """The reader cuts lines from 64 KiB chunks (issue 29): a line across a chunk's end, one
    longer than a chunk, and a last line without its line end are read as lines, each with its
    number; a batch is a chunk's records, and the kinds are counted in the order first seen."""
    prices: list[dict[str, Any]] = [
        {"v": 1, "ts": format_ts(at(i)), "kind": "price",
         "data": {"asset": USDC, "usd": f"1.{i:04d}"}}
        for i in range(3000)
    ]  # fmt: skip
    long = {"v": 1, "ts": format_ts(at(1500)), "kind": "fill", "data": {"x": "y" * (3 * CHUNK)}}
    lines: list[Any] = [*prices[:1500], long, "{nope", *prices[1500:], request_json(3000)]
    head = orjson.dumps(_header_json())
    data = b"\n".join([head, *map(orjson.dumps, lines[:1501]), b"{nope"])
    data += b"\n" + b"\n".join(map(orjson.dumps, lines[1502:]))  # no line end at the end
    raw = gzip.compress(data) if name.endswith(".gz") else data
    (tmp_path / name).write_bytes(raw)
    reader = read_stream(tmp_path / name)
    batches = list(reader.batches())
    assert len(batches) > 3
    got = [r for batch in batches for r in batch]
    assert [r[3] for r in got[:-1]] == [p["data"]["usd"] for p in prices]
    assert got[-1][0] == REC_REQUEST
    assert reader.stats.unknown_by_kind == {"fill": 1}
    assert reader.stats.malformed == [(1503, "invalid JSON")]
    assert list(reader.stats.events.items()) == [("price", 3000), ("quote_request", 1)]
    assert reader.stats.lines == len(lines) + 1
    assert reader.stats.truncated is None


def test_a_last_line_cut_short_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    line = orjson.dumps(request_json(1))
    path.write_bytes(orjson.dumps(_header_json()) + b"\n" + line + b"\n" + line[:-9])
    reader = read_stream(path)
    assert len(list(reader)) == 1
    assert reader.stats.truncated == "the last line (3) is cut short"
    assert reader.stats.malformed == [(3, "invalid JSON")]


def test_a_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    events = [PriceEvent(at(i), USDC, f"1.{i:04d}") for i in range(3000)]
    path = write_stream(tmp_path / "s.jsonl.gz", HEADER, events)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    reader = read_stream(path)
    got = list(reader)
    assert 0 < len(got) < len(events)
    assert got == events[: len(got)]
    assert reader.stats.malformed_total == 1
    assert "truncated gzip" in reader.stats.malformed[0][1]
    with pytest.raises(StreamError, match="truncated gzip"):
        list(read_stream(path, strict=True))


# ------------------------------------------------------------------------------ rotation


@pytest.mark.parametrize(
    ("name", "rotate", "count"), [("r.jsonl", 40_000, 1000), ("r.jsonl.gz", 20_000, 8000)]
)
def test_rotation_by_size_gives_several_readable_parts(
    tmp_path: Path, name: str, rotate: int, count: int
) -> None:
    events: list[StreamEvent] = []
    for i in range(count):
        events.append(PriceEvent(at(i), NEAR, f"3.{i:05d}"))
        events.append(
            RequestEvent(at(i), QuoteRequest(f"q{i}", NEAR, USDC, i % 2 == 0, 10**20 + i, 60_000))
        )
    with StreamWriter(tmp_path / name, HEADER, rotate_bytes=rotate) as writer:
        writer.write_all(events)
    parts = stream_parts(tmp_path / name)
    assert parts == writer.paths
    assert len(parts) >= 3
    assert parts[1].name == f"{name}.1"
    total: list[StreamEvent] = []
    for part in parts:
        reader = read_stream(part)
        assert reader.header == HEADER  # each part has its own header
        got = list(reader)
        assert got
        total.extend(got)
    assert total == events
    # the set read as one stream, in order
    whole = read_stream(parts)
    assert list(whole) == events
    assert whole.stats.total_events == len(events)
    if not name.endswith(".gz"):
        assert all(rotate <= p.stat().st_size < rotate + 400 for p in parts[:-1])


def test_reports_of_a_rotated_set_name_the_part(tmp_path: Path) -> None:
    first = write_lines(tmp_path / "r.jsonl", [request_json(1)])
    second = write_lines(tmp_path / "r.jsonl.1", [request_json(2), "{bad"])
    reader = read_stream([first, second])
    assert len(list(reader)) == 2
    assert reader.stats.malformed == [(3, f"{second}: invalid JSON")]


# ------------------------------------------------------------------------------ memory


def test_reading_a_long_stream_keeps_memory_flat(tmp_path: Path) -> None:
    """200k lines in the mix of a synthetic stream (request, competitor, a price now and then).

    tracemalloc watches from the open through the first 50k lines (it slows reading ~6x, so not
    all of them): a reader that loaded the file, or kept anything per line, would show it there.
    The rest is read untraced, and the count of live memory blocks must not have grown."""
    path = tmp_path / "long.jsonl"
    request = (
        b'{"v":1,"ts":"%s","kind":"quote_request","data":{"quote_id":"synth-3-%09d",'
        b'"core_asset_identifier_in":"%s","core_asset_identifier_out":"%s",'
        b'"exact_amount_in":"%d","min_deadline_ms":60000},"meta":{"partner_id":"synth"}}'
    )
    rival = b'{"v":1,"ts":"%s","kind":"competitor","data":{"quote_id":"synth-3-%09d","best_amount":"%d"}}'
    price = b'{"v":1,"ts":"%s","kind":"price","data":{"asset":"%s","usd":"3.%04d"}}'
    near, usdc = NEAR.encode(), USDC.encode()
    lines = [orjson.dumps(_header_json())]
    for i in range(95_000):
        ts = format_ts(at(i * 20)).encode()
        if i % 20 == 0:
            lines.append(price % (ts, near, i % 9973))
        amount = 10**23 * (1 + i % 997) + i
        lines.append(request % (ts, i, near, usdc, amount))
        lines.append(rival % (ts, i, 3 * amount // 10**18))
    path.write_bytes(b"\n".join(lines) + b"\n")
    del lines
    size = path.stat().st_size
    gc.collect()
    blocks_before = sys.getallocatedblocks()
    tracemalloc.start()
    try:
        reader = read_stream(path)
        count = sum(1 for _ in itertools.islice(reader, 50_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    count += sum(1 for _ in reader)
    gc.collect()
    grown = sys.getallocatedblocks() - blocks_before
    assert count == 194_750
    assert reader.stats.lines == count + 1
    assert reader.stats.malformed_total == 0
    assert peak < size / 100, (peak, size)
    assert grown < 1000, grown


def test_an_abandoned_reader_closes_its_file(tmp_path: Path) -> None:
    """Dropped halfway (a replay that stops early): no ResourceWarning, which pytest turns
    into an error here."""
    path = write_stream(tmp_path / "s.jsonl", HEADER, every_kind())
    reader = read_stream(path)
    next(reader)
    del reader
    gc.collect()
    with read_stream(path) as reader:
        next(reader)
    assert reader._lines.done and not reader._lines.in_part
