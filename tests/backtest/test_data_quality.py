"""Data you can see the quality of (issue 25, finding 3): a stream that ends early exits with
its own code unless ``--allow-truncated``, and every malformed line is named — on stderr (the
first few), in ``summary.json`` (all of them) and in a banner at the top of the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from backtest.stream.read import read_stream
from backtest.stream.write import write_stream
from solver.cli import main
from tests.backtest.replay_helpers import HEADER, bot_config_data, flow

EXIT_TRUNCATED = 4  # documented in docs/backtest.md (solver.cli.backtest.run)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "bot.yaml"
    path.write_text(yaml.safe_dump(bot_config_data()))
    return path


def _run(stream: Path, config: Path, out: Path, *extra: str) -> int:
    argv = ["backtest", "run", str(stream), "--config", str(config), "--out", str(out)]
    return main([*argv, "--no-kill-switch", "--no-progress", *extra])


def test_a_gzip_cut_in_half_exits_with_its_own_code(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = write_stream(tmp_path / "s.jsonl.gz", HEADER, flow(400))
    data = stream.read_bytes()
    stream.write_bytes(data[: len(data) // 2])
    assert _run(stream, config, tmp_path / "out") == EXIT_TRUNCATED
    err = capsys.readouterr().err
    assert "ended early" in err and "cut short" in err and "lines read" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["stream"]["truncated"].startswith("the gzip stream is cut short after line")
    assert 0 < summary["requests"] < 400
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.index('class="warning"') < page.index("<h2>What ran</h2>")
    assert "ended early" in page
    capsys.readouterr()
    assert _run(stream, config, tmp_path / "ok", "--allow-truncated") == 0
    assert "ended early" in capsys.readouterr().err  # still said, not an error


def test_a_last_line_cut_short_is_a_truncation(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = write_stream(tmp_path / "s.jsonl", HEADER, flow(50))
    text = stream.read_bytes()
    stream.write_bytes(text[:-25])  # mid-way through the last event, no line end
    with read_stream(stream) as reader:
        list(reader)
    assert reader.stats.truncated is not None and "cut short" in reader.stats.truncated
    assert _run(stream, config, tmp_path / "out") == EXIT_TRUNCATED
    # A last line without a line end that is a whole event is not a truncation.
    stream.write_bytes(text.rstrip(b"\n"))
    assert _run(stream, config, tmp_path / "whole") == 0


def test_three_malformed_lines_are_all_named(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = write_stream(tmp_path / "s.jsonl", HEADER, flow(40))
    lines = stream.read_text().splitlines(keepends=True)
    for number in (5, 12, 30):  # 1-based line numbers, the header is line 1
        lines[number - 1] = "{nope\n"
    stream.write_text("".join(lines))
    assert _run(stream, config, tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "3 malformed stream lines skipped: lines 5, 12, 30" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["stream"]["malformed"] == [
        [5, "invalid JSON"],
        [12, "invalid JSON"],
        [30, "invalid JSON"],
    ]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "lines 5, 12, 30" in page[: page.index("<h2>What ran</h2>")]
