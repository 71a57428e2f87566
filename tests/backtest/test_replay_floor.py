"""The replay benchmark's floor (benchmarks/replay_floor.py) does the work a replay does: on the
same stream it quotes what the replay quotes and lets quotes expire, so the µs it reports is a
floor of that work, not of less (issue 29)."""

from __future__ import annotations

from pathlib import Path

from backtest.engine import Replay
from backtest.settings import validate_settings
from backtest.stream.read import read_stream
from benchmarks.replay import SETTINGS, _config, make_stream
from benchmarks.replay_floor import floor_run, floor_us, limits_of


def test_the_floor_quotes_what_the_replay_quotes(tmp_path: Path) -> None:
    stream = tmp_path / "s.jsonl.gz"
    make_stream(stream, 3_000)
    replay = Replay(_config("spread"), validate_settings({**SETTINGS, "sign": False}))
    with read_stream(str(stream)) as reader:
        result = replay.run(reader, reader.header)
    floor = floor_run(str(stream), limits_of(replay.pipeline))
    assert floor["requests"] == result.measures.requests == 3_000
    assert result.measures.quoted > 2_900
    assert abs(floor["quoted"] - result.measures.quoted) <= 30  # the replay's own skips
    assert floor["lost"] > 0  # the stream outlives the first deadlines: expiry ran
    assert floor["won"] > 0
    assert floor["cpu_s"] > 0


def test_floor_us_is_the_median_per_request(tmp_path: Path) -> None:
    stream = tmp_path / "s.jsonl.gz"
    make_stream(stream, 500)
    replay = Replay(_config("spread"), validate_settings({**SETTINGS, "sign": False}))
    got = floor_us(str(stream), replay.pipeline, repeats=3)
    assert got["requests"] == 500
    assert 0 < got["us_per_request"] < 10_000
