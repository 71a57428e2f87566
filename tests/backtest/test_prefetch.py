"""Reading a stream in a second process (``backtest.stream.prefetch``): the same replay, the same
reading rules, errors raised again here."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from backtest.engine import Replay
from backtest.report.outputs import FillsCsv, summary
from backtest.stream.events import RequestEvent, StatusEvent, StreamEvent
from backtest.stream.format import StreamError
from backtest.stream.prefetch import PrefetchReader
from backtest.stream.read import read_stream
from backtest.stream.records import event as event_of
from backtest.stream.records import record
from backtest.stream.write import write_stream
from tests.backtest.replay_helpers import HEADER, at, bot_config, competitor, flow, settings


def _events() -> list[StreamEvent]:
    events: list[StreamEvent] = []
    for event in flow(300, every=0.25):
        events.append(event)
        if isinstance(event, RequestEvent) and event.request.quote_id.endswith("3"):
            events.append(competitor((event.ts - at(0)).total_seconds(), event.request.quote_id, 1))
    events.append(StatusEvent(events[-1].ts, "qh", "ih", None))
    return events


def test_a_prefetched_replay_is_the_in_process_replay(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "s.jsonl.gz", HEADER, _events())
    values = {"fill": {"model": "logistic", "a": 0.5}, "latency": {"kind": "lognormal"}}
    outputs = []
    for prefetch in (False, True):
        fills = io.StringIO()
        replay = Replay(bot_config(), settings(**values), on_fill=FillsCsv(fills))
        if prefetch:
            with PrefetchReader(path, batch_size=64) as reader:
                result = replay.run_records(reader, reader.header)
                stats = reader.stats
        else:
            with read_stream(path) as plain:
                result = replay.run(plain, plain.header)
                stats = plain.stats
        figures = summary(result, fill_model="logistic", seed=0)
        outputs.append((json.dumps(figures, sort_keys=True), fills.getvalue(), stats.as_dict()))
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0][0])["events"]["status"] == 1
    assert json.loads(outputs[0][0])["won"] > 0


def test_records_carry_every_field() -> None:
    events = _events()
    assert [event_of(record(e)) for e in events] == events
    request = next(e for e in events if isinstance(e, RequestEvent))
    assert record(request)[2] is request.request


def _plain(tmp_path: Path, lines: list[str]) -> Path:
    path = write_stream(tmp_path / "s.jsonl", HEADER, _events()[:6])
    with path.open("a") as out:
        out.writelines(line + "\n" for line in lines)
    return path


def test_the_reading_rules_hold_in_the_child(tmp_path: Path) -> None:
    path = _plain(tmp_path, ["not json", '{"v": 1, "kind": "book", "ts": "x"}'])
    with PrefetchReader(path) as reader:
        batches = list(reader)
    with read_stream(path) as plain:
        expected = [record(e) for e in plain]
    assert [r for batch in batches for r in batch] == expected
    assert reader.stats.malformed_total == 1 and reader.stats.unknown_kinds == 1
    assert reader.stats.as_dict() == plain.stats.as_dict()
    strict = PrefetchReader(path, strict=True)
    with pytest.raises(StreamError, match="malformed line 8: invalid JSON") as info, strict:
        list(strict)
    assert info.value.line == 8 and info.value.path == str(path)


def test_unsorted_timestamps_stop_the_replay(tmp_path: Path) -> None:
    early = '{"v":1,"ts":"2020-01-01T00:00:00.000Z","kind":"price","data":{"asset":"nep141:usdc.near","usd":"1"}}'
    path = _plain(tmp_path, [early])
    replay = Replay(bot_config(), settings())
    reader = PrefetchReader(path)
    with pytest.raises(StreamError, match="unsorted timestamps at line 8"), reader:
        replay.run_records(reader, reader.header)


def test_a_bad_file_fails_at_once_and_an_early_close_stops_the_child(tmp_path: Path) -> None:
    with pytest.raises(StreamError, match="cannot open stream"):
        PrefetchReader(tmp_path / "missing.jsonl")
    path = write_stream(tmp_path / "s.jsonl.gz", HEADER, _events())
    reader = PrefetchReader(path, batch_size=8)
    first = next(iter(reader))
    assert len(first) == 8
    reader.close()
    assert not reader._process.is_alive()
