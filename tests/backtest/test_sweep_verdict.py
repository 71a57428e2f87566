"""Issue 26: sweeps that say no. A sweep whose candidates all lose to holding says "no winner",
exits 3 and writes no best config; one with a real winner names it with its interval; the
overfitting warnings; a one-key sweep's curve; sweep.html's bins and wide tables."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.stream.events import StreamEvent
from backtest.stream.write import write_stream
from backtest.sweep.html import _levels, short
from backtest.sweep.outputs import summary_json
from backtest.sweep.run import run_sweep
from backtest.sweep.spec import validate_sweep
from backtest.sweep.tasks import TaskResult
from backtest.sweep.verdict import EXIT_NO_WINNER, judge
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
)
from tests.backtest.test_sweep import _fake_result

SETTINGS: dict[str, Any] = {
    "kill_switch": False,
    "fill": {"model": "always"},
    "balances": {USDC: str(20_000 * E6), NEAR: str(5_000 * E24)},
}


def falling(n: int = 240) -> list[StreamEvent]:
    """wNEAR falls 20 % while every user sells wNEAR: whatever the spread, the desk buys a
    falling token, and quoting loses to holding."""
    events: list[StreamEvent] = [*prices(0.0)]
    for i in range(1, n + 1):
        events.extend(prices(float(i), near=f"{3.0 * (1 - 0.2 * i / n):.6f}"))
        events.append(request(i + 0.5, f"s{i}", (5 + i % 4) * E24))
    return events


def flat(n: int = 240) -> list[StreamEvent]:
    """A constant price and users swapping both ways: the spread is all there is."""
    events: list[StreamEvent] = [*prices(0.0)]
    for i in range(1, n + 1):
        events.extend(prices(float(i)))
        if i % 2:
            events.append(request(i + 0.5, f"a{i}", (1 + i % 7) * E24))
        else:
            events.append(
                request(i + 0.5, f"b{i}", (3 + i % 5) * E6, asset_in=USDC, asset_out=NEAR)
            )
    return events


SWEEP: dict[str, Any] = {
    "grid": {"pairs.0.params.spread_bps": [2, 5, 10]},
    "walk_forward": {"splits": 2},
}


def _cli(tmp_path: Path, events: list[StreamEvent], *extra: str) -> tuple[int, Path]:
    stream = write_stream(tmp_path / "s.jsonl", HEADER, events)
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    settings = tmp_path / "backtest.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    grid = tmp_path / "sweep.yaml"
    grid.write_text(yaml.safe_dump(SWEEP))
    out = tmp_path / "out"
    argv = ["backtest", "sweep", str(stream), "--config", str(config), "--grid", str(grid)]
    argv += ["--backtest-config", str(settings), "--out", str(out), "--workers", "1"]
    return main([*argv, "--no-progress", *extra]), out


def test_a_sweep_that_loses_to_holding_says_no_winner_and_writes_no_best_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _cli(tmp_path, falling())
    assert code == EXIT_NO_WINNER == 3
    captured = capsys.readouterr()
    line = json.loads(captured.out)
    assert line["verdict"] == "no_winner" and line["best"] is None
    assert line["leader"]["out_of_sample_mean"] < 0
    assert "solver: warning: no winner: no candidate's mean out-of-sample pnl_over_hold" in (
        captured.err
    )
    assert "none beats holding the starting inventory" in captured.err
    assert not (out / "best_config.yaml").exists() and not (out / "best_backtest.yaml").exists()
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["verdict"]["verdict"] == "no_winner" and summary["best"] is None
    assert summary["objective"]["kind"] == "pnl_over_hold"  # the default
    page = (out / "sweep.html").read_text()
    assert '<div class="verdict no_winner"><strong>No winner.</strong>' in page
    assert "Winner:" not in page
    # One swept key: its curve instead of an empty heatmap.
    assert re.findall(r"<h2>([^<]+)</h2>", page)[:3] == [
        "Verdict", "Candidates", "Objective against the swept key"
    ]  # fmt: skip
    assert 'alt="objective against pairs.0.params.spread_bps"' in page
    assert '<div class="wide"><table>' in page
    assert "<th>PnL over hold USD</th>" in page
    # Asked for anyway: written, still exit 3, and the file says why.
    code, out = _cli(tmp_path, falling(), "--write-best-anyway")
    assert code == 3
    assert "# Verdict: no_winner:" in (out / "best_config.yaml").read_text()


def test_a_real_winner_is_named_with_its_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _cli(tmp_path, flat())
    assert code == 0
    line = json.loads(capsys.readouterr().out)
    assert line["verdict"] == "winner" and line["best"] == line["leader"]
    interval = line["interval"]
    assert interval["on"] == "out_of_sample" and interval["figure"] == "pnl_over_hold_usd"
    assert 0 < interval["low"] <= interval["estimate"] <= interval["high"]
    assert interval["estimate"] == pytest.approx(line["best"]["out_of_sample_mean"], abs=1e-5)
    summary = json.loads((out / "sweep.json").read_text())
    verdict = summary["verdict"]
    assert verdict["reality_check"]["p_value"] < 0.05
    assert verdict["reality_check"]["candidates"] == 3
    assert (out / "best_config.yaml").read_text().count("# Verdict: winner:") == 1
    assert (
        '<div class="verdict winner"><strong>Winner.</strong>' in (out / "sweep.html").read_text()
    )


def test_the_verdict_is_the_same_for_the_same_sweep(tmp_path: Path) -> None:
    stream = write_stream(tmp_path / "s.jsonl", HEADER, flat(120))
    spec = validate_sweep(SWEEP)
    one = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=1)
    two = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=2)
    assert summary_json(one) == summary_json(two)
    assert all(len(r.blocks) == 24 for r in one.results.values())
    full = one.results[(0, 0)]
    assert sum(full.blocks) == pytest.approx(full.metrics["pnl_over_hold_usd"], abs=1e-4)


def test_overfitting_warnings_from_the_gap_and_the_rank_correlation() -> None:
    # Candidate 0 is lucky in window 1 and bad after; candidate 2 is steady.
    scores = {
        (0, 0): 5.0, (0, 1): 50.0, (0, 2): -10.0, (0, 3): -20.0,
        (1, 0): 1.0, (1, 1): 10.0, (1, 2): 0.0, (1, 3): 40.0,
        (2, 0): 9.0, (2, 1): 20.0, (2, 2): 20.0, (2, 3): 20.0,
    }  # fmt: skip
    verdict = judge(_fake_result(scores, 3))
    assert verdict.verdict == "winner" and verdict.candidate == 1
    gap, rho = verdict.warnings
    assert gap == (
        "overfitting: the candidates chosen in sample made 35.00 USD there and 5.00 USD out of "
        "sample (gap 30.00 USD)"
    )
    assert rho.startswith("overfitting: the in-sample ranking predicts little out of sample")


def test_heatmap_bins_read_as_numbers() -> None:
    assert [short(x) for x in (8_670.0, 9_750.4, 12.345, 0.012345, 0.0)] == [
        "8,670", "9,750", "12.3", "0.0123", "0",
    ]  # fmt: skip
    labels, level = _levels([8_000.0 + 137.3 * i for i in range(13)])
    assert labels[0] == "8,000–8,210" and all("e+" not in label for label in labels)
    assert level(8_000.0) == 0 and level(8_000.0 + 137.3 * 12) == 7


def test_a_leader_whose_interval_reaches_zero_is_inconclusive() -> None:
    scores = {(i, s): 1.0 + i for i in range(3) for s in range(4)}
    result = _fake_result(scores, 3)
    noisy = (10.0, -9.0) * 12  # +12 USD a window, from blocks of ±10
    for (i, s), task in list(result.results.items()):
        result.results[(i, s)] = TaskResult(i, s, task.metrics, blocks=noisy)
    verdict = judge(result)
    assert verdict.verdict == "inconclusive" and verdict.candidate == 2
    assert verdict.interval is not None and verdict.interval["low"] < 0 < verdict.interval["high"]
    assert verdict.interval["estimate"] == 12.0
    assert "reaches zero" in verdict.reason
    # Three identical candidates: the best is exactly what luck gives.
    assert verdict.reality_check is not None and verdict.reality_check["p_value"] > 0.05
