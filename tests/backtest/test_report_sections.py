"""The report's breakdowns: a halted replay says so, per-pair figures add up to the totals, the
PnL split adds up, daily PnL and its ratios, drawdown dates, latency, outcomes over time, and
whole units where a person reads."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.measure.detail import DailyBook, DrawdownWatch, LatencyHistogram, Moments, Timeline
from backtest.report.html import SECTIONS, render_html
from backtest.report.outputs import summary
from backtest.report.stats import ratios
from backtest.stream.write import write_stream
from backtest.units import format_whole
from solver.cli import main
from tests.backtest.replay_helpers import (
    E24,
    HEADER,
    NEAR,
    USDC,
    bot_config,
    bot_config_data,
    flow,
    price,
    request,
    run,
)

# ------------------------------------------------------------------------------ the halt


def _halting_files(tmp_path: Path) -> tuple[Path, Path]:
    events = [*flow(120, every=0.5), price(61.5, NEAR, "2.5"), request(62, "late", 10 * E24)]
    stream = write_stream(tmp_path / "stream.jsonl", HEADER, events)
    data = bot_config_data()
    data["risk"] |= {"max_drawdown_usd": 5_000.0, "max_daily_loss_usd": 1e9}
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(data))
    return stream, config


def _cli_run(stream: Path, config: Path, out: Path, *extra: str) -> list[str]:
    argv = ["backtest", "run", str(stream), "--config", str(config), "--out", str(out)]
    assert main([*argv, "--fill-model", "always", "--no-progress", *extra]) == 0
    return []


def test_a_halted_replay_says_so_on_stdout_stderr_and_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream, config = _halting_files(tmp_path)
    _cli_run(stream, config, tmp_path / "on")
    captured = capsys.readouterr()
    line = json.loads(captured.out)
    assert line["halted"]["reason"].startswith("drawdown: drawdown ")
    assert line["halted"]["at"].startswith("2026-01-05T12:01:02")  # the tick after the drop
    assert line["paused"] == 1  # the request after the halt
    assert "halted at 2026-01-05T12:01:02" in captured.err and "--no-kill-switch" in captured.err
    page = (tmp_path / "on" / "report.html").read_text()
    assert '<div class="halted">' in page and html.escape(line["halted"]["reason"]) in page
    figures = json.loads((tmp_path / "on" / "summary.json").read_text())
    assert figures["halted"] == line["halted"] and figures["config"]["backtest"]["kill_switch"]

    # --no-kill-switch: the same stream goes on quoting, and the report says the switch was off.
    _cli_run(stream, config, tmp_path / "off", "--no-kill-switch")
    captured = capsys.readouterr()
    line = json.loads(captured.out)
    assert line["halted"] is None and line["paused"] == 0
    assert "replay halted" not in captured.err  # (the tmp path itself may say "halted")
    page = (tmp_path / "off" / "report.html").read_text()
    assert '<div class="halted">' not in page and "off (--no-kill-switch)" in page


# ------------------------------------------------------------------------------ the figures


@pytest.fixture(scope="module")
def replayed() -> tuple[Any, dict[str, Any]]:
    _, result = run(
        flow(400, every=0.5),
        fill={"model": "always"},
        kill_switch=False,
        latency={"kind": "lognormal", "median_ms": 40, "sigma": 0.5},
    )
    return result, summary(result, fill_model="always", seed=0)


def test_pairs_add_up_to_the_totals(replayed: tuple[Any, dict[str, Any]]) -> None:
    _, figures = replayed
    assert list(figures["pairs"]) == ["wNEAR/USDC"]  # both directions, the config's orientation
    pair, everything = figures["pairs"]["wNEAR/USDC"], figures["all"]
    for key in ("requests", "quoted", "won"):
        assert pair[key] == everything[key] == figures[key]
    assert pair["skips"] == figures["skips"]
    assert pair["volume_usd"] == pytest.approx(figures["volume_usd"], abs=1e-5)
    assert pair["realized_usd"] == pytest.approx(figures["realized_pnl_usd"], abs=1e-5)
    for h in ("1s", "10s", "60s", "300s"):
        assert pair["markouts_usd"][h] == pytest.approx(
            figures["markouts_usd"][h]["total"], abs=1e-5
        )
        assert pair["markouts_bps"][h]["n"] == figures["markouts_usd"][h]["n"]
    # Realized bps per fill: the spread strategy charges about 20 bps (10 each side of mid).
    assert pair["realized_bps"]["n"] == figures["won"]
    assert 5 < pair["realized_bps"]["mean"] < 25 and pair["realized_bps"]["se"] >= 0


def test_an_unconfigured_pair_is_named_by_its_sorted_symbols() -> None:
    events = [*flow(4), request(5, "x", 10**18, asset_in=USDC, asset_out="nep141:eth.near")]
    config = bot_config()
    _, result = run(events, config, fill={"model": "always"})
    names = result.measures.pairs
    assert names.name(USDC, NEAR) == names.name(NEAR, USDC) == "wNEAR/USDC"
    assert names.name("nep141:eth.near", USDC) == "USDC/nep141:eth.near"


def test_the_pnl_split_adds_up(replayed: tuple[Any, dict[str, Any]]) -> None:
    _, figures = replayed
    split = figures["pnl_split"]
    assert split["spread_earned_usd"] == figures["realized_pnl_usd"]
    assert split["spread_earned_usd"] + split["inventory_revaluation_usd"] == pytest.approx(
        figures["pnl_usd"], abs=2e-6
    )
    (day,) = figures["daily"]  # 200 s of stream: one UTC day
    assert day["date"] == "2026-01-05" and day["pnl_usd"] == pytest.approx(
        figures["pnl_usd"], abs=1e-5
    )
    ratios_ = figures["daily_ratios"]
    assert (ratios_["days"], ratios_["sharpe"], ratios_["sortino"]) == (1, None, None)
    assert ratios_["withheld"] is not None


def test_latency_and_outcomes_over_time(replayed: tuple[Any, dict[str, Any]]) -> None:
    _, figures = replayed
    latency = figures["latency_ms"]
    assert latency["n"] == figures["requests"] == 400
    assert (
        30 <= latency["p50_ms"] <= 50
        and latency["p50_ms"] <= latency["p90_ms"] <= latency["p99_ms"]
    )
    assert latency["p99_ms"] <= latency["max_ms"]
    rows = figures["outcomes_over_time"]["rows"]
    assert figures["outcomes_over_time"]["bucket_s"] == 60.0 and len(rows) == 4  # 12:00..12:03
    assert sum(r.get("quoted", 0) for r in rows) == figures["quoted"]
    assert sum(sum(v for k, v in r.items() if k != "from") for r in rows) == 400


def test_daily_pnl_and_ratios_across_days() -> None:
    book = DailyBook()
    day = 86_400.0
    for t, pnl, realized in [(10, 1, 0.5), (day - 1, 5, 2), (day + 5, 4, 3), (2 * day + 1, 10, 3)]:
        book.on_tick(t, pnl, realized)
    assert book.days() == [(0, 5, 2), (1, -1, 1), (2, 6, 0)]
    out = ratios([5.0, -1.0, 6.0], min_days=3)
    mean, sd = 10 / 3, math.sqrt(((5 - 10 / 3) ** 2 + (-1 - 10 / 3) ** 2 + (6 - 10 / 3) ** 2) / 2)
    assert out["sharpe"] == pytest.approx(mean / sd * math.sqrt(365), abs=1e-4)
    assert out["sortino"] == pytest.approx(mean / math.sqrt(1 / 3) * math.sqrt(365), abs=1e-4)
    flat = ratios([2.0, 2.0], min_days=2)
    assert flat["sharpe"] is None and flat["sortino"] is None
    assert ratios([1.0], min_days=1)["sharpe"] is None


def test_the_largest_drawdown_has_its_dates() -> None:
    watch = DrawdownWatch()
    peak = 0.0
    for t, pnl in [(0, 0), (1, 5), (2, 3), (3, 6), (4, 1), (5, 2), (6, 6.5), (7, 4)]:
        peak = max(peak, pnl)
        watch.on_tick(t, pnl, peak - pnl)
    assert (watch.max, watch.max_peak_t, watch.trough_t, watch.recovered_t) == (5, 3, 4, 6)


def test_timeline_merges_buckets_and_latency_quantiles() -> None:
    timeline = Timeline(width_s=60, max_buckets=4)
    for t in range(0, 600, 30):
        timeline.add(float(t), "quoted" if t % 60 else "paused")
    rows = timeline.rows()
    assert timeline.width_s == 240 and len(rows) == 3
    assert sum(sum(c.values()) for _, c in rows) == 20 and rows[0][1]["paused"] == 4
    hist = LatencyHistogram()
    for ms in [1.5, 2.5, 2.7, 10.0, 200_000.0]:
        hist.add(ms)
    assert (hist.quantile(0.0), hist.quantile(0.5), hist.quantile(1.0)) == (1.0, 2.0, 100_000.0)
    moments = Moments()
    for v in (1.0, 2.0, 3.0):
        moments.add(v)
    assert moments.mean == 2.0 and moments.stderr == pytest.approx(1 / math.sqrt(3))


def test_whole_units() -> None:
    assert format_whole(1_234_560_000 * 10**18, 24, "wNEAR") == "1,234.56 wNEAR"
    assert format_whole(-5_000_000, 6, "USDC") == "-5.00 USDC"
    assert format_whole(12_345, 6, "USDC") == "0.01234 USDC"  # small: significant digits kept
    assert format_whole(12, 18, "ETH") == "0.000000000000000012 ETH"
    assert format_whole(0, 6) == "0.00"


def test_the_report_reads_in_whole_units_and_has_every_section(
    replayed: tuple[Any, dict[str, Any]],
) -> None:
    result, figures = replayed
    page = render_html(result, figures, {USDC: "USDC", NEAR: "wNEAR"}, "t")
    assert re.findall(r"<h2>([^<]+)</h2>", page) == list(SECTIONS)
    start = int(figures["start_inventory"][NEAR])
    assert format_whole(start, 24, "wNEAR") in page  # 33,333.33 wNEAR, not 3333…e28
    assert figures["start_inventory"][NEAR] not in page.split("<h2>All figures</h2>")[0]
