"""The replay's compact records (``backtest.stream.records``): the writer's timestamps read
without a datetime and agreeing with ``fromisoformat``, records read in batches giving the same
events as iterating, and an error coming after the records read before it."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from backtest.stream import line_parser
from backtest.stream.format import Malformed, StreamError, format_ts
from backtest.stream.kinds import partner_of, price
from backtest.stream.read import read_stream
from backtest.stream.records import REC_REQUEST, TAILS, Timestamps, event, ms_to_us, record
from backtest.stream.write import write_stream
from solver.core.clock import from_micros, micros
from solver.protocol.quote_request import BadQuoteRequest, QuoteRequestParser
from tests.backtest.test_stream import (
    HEADER,
    NEAR,
    USDC,
    bad_stream,
    every_kind,
    request_json,
    write_lines,
)
from tests.backtest.test_stream import at as at_ms


def _iso_micros(text: str) -> int | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return micros(moment) if moment.tzinfo is not None else None


def test_the_writers_timestamps_are_read_as_fromisoformat_reads_them() -> None:
    stamps = Timestamps()
    rng = random.Random(7)
    for _ in range(20_000):
        moment = from_micros(rng.randrange(-(10**15), 10**17))
        text = format_ts(moment)
        assert stamps.micros(text) == micros(moment) // 1000 * 1000 == _iso_micros(text)


@pytest.mark.parametrize(
    "text",
    [
        "2025-03-01T24:00:00.000Z",  # hour 24
        "2025-03-01T12:60:00.000Z",
        "2025-03-01T12:00:60.000Z",  # a leap second
        "2025-02-30T12:00:00.000Z",
        "2025-03-01T12:00:00.0٣0Z",  # a non-ASCII digit
        "2025-03-01 12:00:00.000Z",  # another separator: the full parser's call
        "2025-03-01T12:00:00.000+00:00",
        "2025-03-01T12:00:00Z",
        "2025-03-01T12:00:00.000000Z",
        "+025-03-01T12:00:00.000Z",
    ],
)
def test_any_other_form_is_left_to_the_full_parser(text: str) -> None:
    assert Timestamps().micros(text) is None


def test_a_random_edit_is_read_as_fromisoformat_reads_it_or_left_to_it() -> None:
    stamps = Timestamps()
    rng = random.Random(11)
    base = "2025-03-01T12:34:56.789Z"
    for _ in range(20_000):
        chars = list(base)
        for _ in range(rng.randrange(1, 3)):
            chars[rng.randrange(len(chars))] = rng.choice("0123456789T:.Z-+ x")
        text = "".join(chars)
        got = stamps.micros(text)
        assert got is None or got == _iso_micros(text), text


def test_a_second_and_a_tail_are_the_timestamp_as_the_reader_caches_them() -> None:
    """The reader's loop: a text whose first 19 characters are a second read before and whose
    rest is a key of TAILS is that second's µs plus the tail's, as micros reads it."""
    stamps = Timestamps()
    rng = random.Random(13)
    base = "2025-03-01T12:34:56.789Z"
    for _ in range(20_000):
        chars = list(base)
        for _ in range(rng.randrange(0, 3)):
            chars[rng.randrange(len(chars))] = rng.choice("0123456789T:.Z-+ x")
        text = "".join(chars)
        second = stamps.second(text)
        got = stamps.micros(text)
        if second is None:
            assert got is None, text
        else:
            assert text[19:] in TAILS and got == second + TAILS[text[19:]] == _iso_micros(text)


def test_milliseconds_become_microseconds_as_timedelta_rounds_them() -> None:
    rng = random.Random(3)
    for ms in [0.0, 0.0005, 0.0015, 2.5e-4, 40.0, 1e-9] + [rng.lognormvariate(3.7, 0.5)] * 1000:
        assert from_micros(ms_to_us(ms)) == from_micros(0) + timedelta(milliseconds=ms)


def test_batches_are_the_events_and_the_same_statistics(tmp_path: Path) -> None:
    path = bad_stream(tmp_path)
    events = list(plain := read_stream(path))
    batched = read_stream(path)
    records = [r for batch in batched.batches() for r in batch]
    assert [event(r) for r in records] == events
    assert [record(e) for e in events] == records
    assert batched.stats.as_dict() == plain.stats.as_dict()


def test_events_then_batches_lose_nothing(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "s.jsonl.gz", HEADER, every_kind())
    reader = read_stream(path)
    first = next(reader)
    rest = [event(r) for batch in reader.batches() for r in batch]
    assert [first, *rest] == every_kind()


def test_an_error_comes_after_the_records_before_it(tmp_path: Path) -> None:
    lines = [request_json(ms, quote_id=f"q{ms}") for ms in range(5)] + [request_json(1)]
    reader = read_stream(write_lines(tmp_path / "s.jsonl", lines))
    batches = reader.batches()
    assert [r[2].quote_id for r in next(batches)] == [f"q{ms}" for ms in range(5)]
    with pytest.raises(StreamError, match="unsorted timestamps at line 7"):
        next(batches)
    strict = read_stream(bad_stream(tmp_path), strict=True).batches()
    assert [r[2].quote_id for r in next(strict)] == ["ok-1"]
    with pytest.raises(StreamError, match="malformed line 3: invalid JSON"):
        next(strict)


def _mutations(rng: random.Random) -> list[Any]:
    """Lines near the usual shapes, each changed a little: every way the short way could
    wrongly take (or wrongly refuse) one."""
    values: list[Any] = [None, 1, 1.0, True, "1", [], {}, "x", 0, -1, "", "0", "01", "٣"]
    out: list[Any] = []
    for ms in range(0, 3_000, 3):
        base = rng.choice(
            [
                request_json(ms, quote_id=f"q{ms}"),
                {"v": 1, "ts": format_ts(at_ms(ms)), "kind": "competitor",
                 "data": {"quote_id": f"q{ms}", "best_amount": "123"}},
                {"v": 1, "ts": format_ts(at_ms(ms)), "kind": "price",
                 "data": {"asset": USDC, "usd": "1.5"}},
                {"v": 1, "ts": format_ts(at_ms(ms)), "kind": "informed",
                 "data": {"quote_id": f"q{ms}"}},
            ]
        )  # fmt: skip
        line = json.loads(json.dumps(base))
        where = rng.choice(["top", "data", "none", "none"])
        target = line if where == "top" else line["data"]
        if where != "none":
            key = rng.choice([*target, "meta", "extra"])
            if rng.random() < 0.3:
                target.pop(key, None)
            else:
                target[key] = rng.choice([*values, format_ts(at_ms(ms + 1)), "2025-03-01"])
        out.append(line if rng.random() < 0.9 else json.dumps(line)[: rng.randrange(1, 40)])
    return out


def test_the_short_way_reads_every_line_as_the_long_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_lines(tmp_path / "s.jsonl", _mutations(random.Random(5)))

    def outcome() -> tuple[list[Any], dict[str, Any], str | None]:
        reader = read_stream(path)
        got: list[Any] = []
        error = None
        try:
            for batch in reader.batches():
                got.extend(batch)
        except StreamError as exc:
            error = str(exc)
        return got, reader.stats.as_dict(), error

    short = outcome()
    monkeypatch.setattr(line_parser, "_SHORT_WAY", {})
    long = outcome()
    assert short == long
    assert len(short[0]) > 100 and short[1]["malformed_total"] > 100


def test_the_inline_request_checks_read_every_request_as_the_parser_does(tmp_path: Path) -> None:
    """The reader's loop checks the writer's request shape inline; any request it does not pass
    goes to ``QuoteRequestParser.parse``. Requests changed a little (a field dropped, null, of
    another type, both or neither exact amount, the same asset twice, an odd meta) must come
    out as the parser reads them: the same request (field for field, the same types) or the
    same reason."""
    rng = random.Random(17)
    values: list[Any] = [None, 1, 1.0, True, "1", [], {}, "", "0", "01", "٣", "1_0", " 1", "+1",
                         "9" * 39, "340282366920938463463374607431768211456", USDC, NEAR, "x",
                         -1, 86_400_000, 86_400_001, "q" * 256, "q" * 257]  # fmt: skip
    keys = ["quote_id", "core_asset_identifier_in", "core_asset_identifier_out",
            "exact_amount_in", "exact_amount_out", "min_deadline_ms"]  # fmt: skip
    lines: list[Any] = []
    for ms in range(2_000):
        line = request_json(ms, quote_id=f"q{ms}")
        if rng.random() < 0.5:
            data = line["data"]
            data["exact_amount_out"] = data.pop("exact_amount_in")
        for _ in range(rng.randrange(0, 3)):
            key = rng.choice([*keys, "meta"])
            target = line if key == "meta" else line["data"]
            if rng.random() < 0.3:
                target.pop(key, None)
            elif key == "meta":
                target[key] = rng.choice([None, {}, {"partner_id": "p"}, {"partner_id": 1}, []])
            else:
                target[key] = rng.choice(values)
        lines.append(line)
    reader = read_stream(write_lines(tmp_path / "s.jsonl", lines))
    got = [r for batch in reader.batches() for r in batch]
    parser = QuoteRequestParser(assets=HEADER.tokens)
    expected: list[Any] = []
    reasons: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=2):
        meta = line.get("meta")
        try:
            partner = partner_of(meta)
            request = parser.parse(line["data"], partner)
        except (Malformed, BadQuoteRequest) as exc:
            reasons.append((number, str(exc)))
            continue
        expected.append((REC_REQUEST, micros(datetime.fromisoformat(line["ts"])), request))
    assert got == expected
    assert [[type(x) for x in r[2]] for r in got] == [[type(x) for x in r[2]] for r in expected]
    assert reader.stats.malformed == reasons[: len(reader.stats.malformed)]
    assert reader.stats.malformed_total == len(reasons)
    assert 300 < len(got) < 1_900


def test_the_inline_price_checks_read_every_price_as_kinds_price_does(tmp_path: Path) -> None:
    """The reader checks a price line's ``usd`` by str methods, not ``USD_RE``; prices of
    random texts near decimals (and other types, a missing or unknown asset) must come out as
    ``kinds.price`` reads them: the same record or the same reason."""
    rng = random.Random(19)
    texts: list[Any] = [None, 1, 1.5, True, [], "", "1" * 64, "1" * 65, "0." + "0" * 62 + "1"]
    for _ in range(3_000):
        texts.append(
            "".join(rng.choice("0000123456789..٣²x-+ e_") for _ in range(rng.randrange(1, 8)))
        )
    lines: list[Any] = []
    for ms, usd in enumerate(texts):
        data: dict[str, Any] = {
            "asset": rng.choice([USDC, USDC, NEAR, "nep141:other", 7]),
            "usd": usd,
        }
        if rng.random() < 0.05:
            data.pop(rng.choice(["asset", "usd"]))
        lines.append({"v": 1, "ts": format_ts(at_ms(ms)), "kind": "price", "data": data})
    reader = read_stream(write_lines(tmp_path / "s.jsonl", lines))
    got = [r for batch in reader.batches() for r in batch]
    expected: list[Any] = []
    reasons: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=2):
        try:
            expected.append(
                price(micros(datetime.fromisoformat(line["ts"])), line["data"], HEADER.tokens)
            )
        except Malformed as exc:
            reasons.append((number, str(exc)))
    assert got == expected
    assert reader.stats.malformed == reasons[: len(reader.stats.malformed)]
    assert reader.stats.malformed_total == len(reasons)
    assert 200 < len(got) < len(lines) - 200
