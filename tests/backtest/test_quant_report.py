"""Issue 26: the replay's figures say what the data allow. The hold benchmark and PnL over it,
the PnL split with fees apart, the hedged view, statistics withheld below their minimum samples,
breakdowns per hour, day and week, per-trade figures, and the curves as CSV files."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.measure.detail import PeriodBook, TradeBook, period_start
from backtest.report.outputs import summary
from backtest.report.stats import ratios, trades
from backtest.stream.events import StreamEvent
from backtest.stream.write import write_stream
from solver.cli import main
from tests.backtest.replay_helpers import (
    E6,
    E24,
    HEADER,
    NEAR,
    USDC,
    bot_config_data,
    prices,
    request,
    run,
)


def trending(n: int = 200, drift: float = 0.10) -> list[StreamEvent]:
    """wNEAR rises by ``drift`` over ``n`` seconds while users swap both ways every second."""
    events: list[StreamEvent] = [*prices(0.0)]
    for i in range(1, n + 1):
        events.extend(prices(float(i), near=f"{3.0 * (1 + drift * i / n):.6f}"))
        if i % 2:
            events.append(request(i + 0.5, f"a{i}", (1 + i % 7) * E24))
        else:
            events.append(
                request(i + 0.5, f"b{i}", (3 + i % 5) * E6, asset_in=USDC, asset_out=NEAR)
            )
    return events


SETTINGS: dict[str, Any] = {
    "kill_switch": False,
    "fee_pips": 100,
    "fill": {"model": "always"},
    "balances": {USDC: str(10_000 * E6), NEAR: str(2_000 * E24)},
}


def test_hold_benchmark_and_pnl_over_hold_split_the_pnl() -> None:
    _, result = run(trending(), **SETTINGS)
    figures = summary(result, fill_model="always", seed=0, hedge_cost_bps=3.0)
    # Hold: 2,000 wNEAR from 3.0 to 3.3 USD, and USDC does not move.
    assert figures["hold_pnl_usd"] == pytest.approx(2_000 * 0.3, abs=1e-3)
    assert figures["pnl_over_hold_usd"] == pytest.approx(
        figures["pnl_usd"] - figures["hold_pnl_usd"], abs=2e-6
    )
    split = figures["pnl_split"]
    assert split["fees_usd"] == -figures["fees_paid_usd"] < 0
    assert split["spread_capture_usd"] + split["fees_usd"] == pytest.approx(
        split["spread_earned_usd"], abs=2e-6
    )
    assert split["spread_earned_usd"] + split["inventory_revaluation_usd"] == pytest.approx(
        figures["pnl_usd"], abs=2e-6
    )
    assert split["hold_revaluation_usd"] + split["position_revaluation_usd"] == pytest.approx(
        split["inventory_revaluation_usd"], abs=2e-6
    )
    # Most of the PnL is the market: hold dominates, and over hold is what quoting added.
    assert abs(figures["pnl_over_hold_usd"]) < figures["hold_pnl_usd"]
    capital = figures["returns_pct"]["capital_usd"]
    assert capital == pytest.approx(10_000 + 2_000 * 3.0, abs=1e-3)
    assert figures["returns_pct"]["hold"] == pytest.approx(100 * 600 / capital, abs=1e-3)
    hedged = figures["hedged"]
    assert hedged["hedge_cost_usd"] == pytest.approx(figures["volume_usd"] * 3e-4, abs=1e-5)
    assert hedged["pnl_over_hold_usd"] == pytest.approx(
        split["spread_earned_usd"] - hedged["hedge_cost_usd"], abs=2e-6
    )
    assert summary(result, fill_model="always", seed=0)["hedged"] is None


def test_no_annualised_ratio_from_three_days() -> None:
    # Three days with a positive mean: a Sharpe of 111 annualised by √365 is what main printed.
    out = ratios([100.0, 120.0, 110.0], 2.3, 50.0)
    assert out["sharpe"] is None and out["sortino"] is None and out["calmar"] is None
    assert out["span_days"] == 2.3 and out["min_days"] == 30
    assert out["withheld"] == (
        "Sharpe, Sortino and Calmar withheld: 2.3 days of data, fewer than the 30 days they need"
    )
    days = [5.0, -1.0, 6.0] * 12
    full = ratios(days, 36.0, 4.0)
    mean = sum(days) / len(days)
    sd = math.sqrt(sum((x - mean) ** 2 for x in days) / (len(days) - 1))
    assert full["withheld"] is None
    assert full["sharpe"] == pytest.approx(mean / sd * math.sqrt(365), abs=1e-4)
    assert full["sortino"] == pytest.approx(mean / math.sqrt(12 / 36) * math.sqrt(365), abs=1e-4)
    assert full["calmar"] == pytest.approx(sum(days) / 36 * 365 / 4.0, abs=1e-4)


def test_the_replay_withholds_ratios_and_trade_figures_it_cannot_support() -> None:
    _, result = run(trending(), **SETTINGS)
    figures = summary(result, fill_model="always", seed=0)
    assert figures["daily_ratios"]["sharpe"] is None
    assert figures["daily_ratios"]["withheld"].startswith("Sharpe, Sortino and Calmar withheld")
    t = figures["trades"]
    assert t["horizon_s"] == 300 and t["n"] == 0 and t["profit_factor"] is None
    assert "per-trade figures withheld: 0 fills" in t["withheld"]


def test_profit_factor_expectancy_and_average_win_and_loss() -> None:
    book = TradeBook()
    for value in [3.0, -1.0, 2.0, -2.0] * 10:
        book.add(value)
    out = trades(book)
    assert (out["n"], out["wins"], out["losses"], out["withheld"]) == (40, 20, 20, None)
    assert out["profit_factor"] == pytest.approx(50 / 30, abs=1e-4)
    assert out["expectancy_usd"] == pytest.approx(20 / 40)
    assert (out["average_win_usd"], out["average_loss_usd"]) == (2.5, -1.5)
    assert out["win_rate"] == 0.5
    assert trades(book, min_trades=41)["profit_factor"] is None


def test_breakdowns_by_hour_day_and_iso_week() -> None:
    monday = datetime(2026, 1, 5, tzinfo=UTC).timestamp()  # a Monday
    assert period_start("week", monday + 6.9 * 86_400) == monday
    assert period_start("week", monday - 1) == monday - 7 * 86_400
    assert period_start("hour", monday + 3_700) == monday + 3_600
    hours = PeriodBook("hour")
    for t, pnl in [(0, 1.0), (3_599, 2.0), (3_600, 5.0), (7_300, 4.0)]:
        hours.on_tick(monday + t, pnl, pnl / 2, 0.5, 0.1, int(pnl))
    rows = hours.rows()
    assert [r[1][0] for r in rows] == [2.0, 3.0, -1.0]  # each hour's change
    assert [r[1][4] for r in rows] == [2, 3, -1]
    _, result = run(trending(), **SETTINGS)
    figures = summary(result, fill_model="always", seed=0)
    assert set(figures["breakdown"]) == {"hour", "day", "week"}
    (week,) = figures["breakdown"]["week"]
    assert week["from"] == "2026-01-05T00:00:00.000+00:00"
    assert week["pnl_usd"] == pytest.approx(figures["pnl_usd"], abs=1e-5)
    assert week["pnl_over_hold_usd"] == pytest.approx(figures["pnl_over_hold_usd"], abs=1e-5)
    assert week["fills"] == figures["won"]


def test_run_writes_equity_and_inventory_curves_beside_fills(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = write_stream(tmp_path / "s.jsonl", HEADER, trending(120))
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    backtest = tmp_path / "backtest.yaml"
    backtest.write_text(yaml.safe_dump({**SETTINGS, "hedge_cost_bps": 2}))
    out = tmp_path / "out"
    argv = ["backtest", "run", str(stream), "--config", str(config), "--out", str(out)]
    assert main([*argv, "--backtest-config", str(backtest), "--no-progress"]) == 0
    line = json.loads(capsys.readouterr().out)
    figures = json.loads((out / "summary.json").read_text())
    assert line["pnl_over_hold_usd"] == figures["pnl_over_hold_usd"]
    assert figures["hedged"]["cost_bps"] == 2
    equity = list(csv.DictReader(io.StringIO((out / "equity.csv").read_text())))
    last = equity[-1]
    assert float(last["pnl_usd"]) == pytest.approx(figures["pnl_usd"], abs=1e-5)
    assert float(last["hold_pnl_usd"]) == pytest.approx(figures["hold_pnl_usd"], abs=1e-5)
    assert float(last["equity_usd"]) == pytest.approx(figures["end_equity_usd"], abs=1e-5)
    assert max(float(r["drawdown_usd"]) for r in equity) == pytest.approx(
        figures["max_drawdown_usd"], abs=1e-5
    )
    inventory = list(csv.DictReader(io.StringIO((out / "inventory.csv").read_text())))
    assert list(inventory[0]) == ["time", USDC, NEAR]
    assert {a: inventory[-1][a] for a in (USDC, NEAR)} == figures["final_inventory"]
    assert {a: inventory[0][a] for a in (USDC, NEAR)} == figures["start_inventory"]
    page = (out / "report.html").read_text()
    for text in ("Against holding", "PnL over hold", "hedged at 2 bps", "withheld", "By UTC hour"):
        assert text in page
    assert "Sharpe / Sortino (daily PnL, × √365)</td><td>n/a" not in page
