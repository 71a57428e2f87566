"""``solver backtest run`` and its outputs: byte-identical summary and fills, the HTML report."""

from __future__ import annotations

import base64
import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.engine import Replay
from backtest.replay_result import Progress
from backtest.report.html import SECTIONS, render_html
from backtest.report.outputs import FILL_COLUMNS, FillsCsv, summary
from backtest.stream.events import CompetitorEvent, RequestEvent, StreamEvent
from backtest.stream.write import write_stream
from solver.cli import main
from tests.backtest.replay_helpers import HEADER, bot_config, bot_config_data, flow, run, settings

REQUIRED = {
    "requests",
    "quoted",
    "won",
    "win_rate",
    "volume_usd",
    "pnl_usd",
    "realized_pnl_usd",
    "max_drawdown_usd",
    "fees_paid_usd",
    "final_inventory",
    "skips",
    "markouts_usd",
}


def _events() -> list[StreamEvent]:
    events: list[StreamEvent] = []
    for i, event in enumerate(flow(300, every=0.5)):
        events.append(event)
        if isinstance(event, RequestEvent) and i % 3:
            req = event.request
            # Every third request has no competitor; the others a competitor near our price.
            best = req.amount * 3 * 10**6 // 10**24 if req.asset_in.endswith("wrap.near") else 0
            if best:
                events.append(CompetitorEvent(event.ts, req.quote_id, best * 9_985 // 10_000))
    return events


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    stream = write_stream(tmp_path / "stream.jsonl.gz", HEADER, _events())
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    backtest = tmp_path / "backtest.yaml"
    backtest.write_text(
        "fee_pips: 100\nkill_switch: false\nlatency: {kind: lognormal, median_ms: 30}\n"
    )
    return stream, config, backtest


def _run(files: tuple[Path, Path, Path], out: Path, *extra: str) -> dict[str, Any]:
    stream, config, backtest = files
    argv = ["backtest", "run", str(stream), "--config", str(config), "--out", str(out)]
    assert main([*argv, "--backtest-config", str(backtest), "--no-progress", *extra]) == 0
    figures: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return figures


def test_run_writes_identical_summary_and_fills_twice(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _run(files, tmp_path / "one")
    line = json.loads(capsys.readouterr().out)
    assert line["requests"] == first["requests"] == 300
    _run(files, tmp_path / "two")
    for name in ("summary.json", "fills.csv"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert set(first) >= REQUIRED
    assert first["fill_model"] == "competitor"
    assert isinstance(first["won"], int) and 0 < first["won"] < 300
    assert set(first["markouts_usd"]) == {"1s", "10s", "60s", "300s"}  # the desk's horizons
    assert all(isinstance(v, str) for v in first["final_inventory"].values())
    assert first["fees_paid_usd"] > 0
    with (tmp_path / "one" / "fills.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == FILL_COLUMNS and len(rows) == 1 + first["won"]
    timing = json.loads((tmp_path / "one" / "timing.json").read_text())
    assert timing["requests"] == 300 and timing["requests_per_s"] > 0
    assert timing["signing"] is False


def test_report_html_embeds_the_plots(files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _run(files, tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 5
    assert all(base64.b64decode(i).startswith(b"\x89PNG\r\n\x1a\n") for i in images)
    assert re.findall(r"<h2>([^<]+)</h2>", page) == list(SECTIONS)
    assert "http://" not in page and "https://" not in page  # self-contained


def test_signing_on_gives_the_same_outputs(files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    off = _run(files, tmp_path / "off")
    on = _run(files, tmp_path / "on", "--sign")
    config_on, config_off = on.pop("config"), off.pop("config")
    assert on == off
    # The report says what ran: the settings differ in signing only.
    assert config_on["backtest"] == {**config_off["backtest"], "sign": True}
    assert config_on["digest"] == config_off["digest"]
    assert config_on["backtest_digest"] != config_off["backtest_digest"]
    assert (tmp_path / "on" / "fills.csv").read_bytes() == (
        tmp_path / "off" / "fills.csv"
    ).read_bytes()
    assert json.loads((tmp_path / "on" / "timing.json").read_text())["signing"] is True


def test_logistic_runs_depend_on_the_seed_only(
    files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    a = _run(files, tmp_path / "a", "--fill-model", "logistic", "--seed", "5")
    b = _run(files, tmp_path / "b", "--fill-model", "logistic", "--seed", "5")
    c = _run(files, tmp_path / "c", "--fill-model", "logistic", "--seed", "6")
    assert a == b and a["fill_model"] == "logistic" and a["seed"] == 5
    assert (a["won"], a["pnl_usd"]) != (c["won"], c["pnl_usd"])


def test_run_reports_usage_errors(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream, config, _ = files
    assert main(["backtest", "run", str(stream), "--out", str(tmp_path)]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("nonsense: 1\n")
    argv = ["backtest", "run", str(stream), "--config", str(config), "--out", str(tmp_path / "x")]
    assert main([*argv, "--backtest-config", str(bad)]) == 2
    assert "nonsense" in capsys.readouterr().err
    assert (
        main(
            [
                "backtest",
                "run",
                str(tmp_path / "missing"),
                "--config",
                str(config),
                "--out",
                str(tmp_path / "y"),
            ]
        )
        == 2
    )


def test_outputs_of_an_empty_replay() -> None:
    _, result = run([])
    figures = summary(result, fill_model="always", seed=0)
    assert figures["requests"] == 0 and figures["win_rate"] == 0.0
    page = render_html(result, figures, {}, "empty")
    assert page.count("data:image/png;base64,") == 5


def test_fills_csv_rows_and_progress(tmp_path: Path) -> None:
    path = tmp_path / "fills.csv"
    updates: list[Progress] = []
    with path.open("w", newline="") as handle:
        sink = FillsCsv(handle)
        replay = Replay(
            bot_config(), settings(fill={"model": "always"}), on_fill=sink, progress=updates.append
        )
        result = replay.run(flow(50), HEADER)
    assert sink.rows == result.measures.won > 0
    assert updates[-1] == Progress(
        result.measures.events["price"] + 50, 50, result.measures.quoted, result.measures.won
    )
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    first = rows[0]
    assert int(first["amount_in"]) > 0 and first["exact_in"] in ("0", "1")
    assert first["markout_1s_usd"] != ""  # the stream goes on long enough after the first fill
    assert rows[-1]["markout_60s_usd"] == ""  # ...but not after the last one
