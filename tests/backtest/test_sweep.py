"""``solver backtest sweep``: the sweep file, candidates, walk-forward, executors, outputs."""

from __future__ import annotations

import csv
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.settings import load_settings
from backtest.stream.events import PriceEvent, RequestEvent, StreamEvent
from backtest.stream.records import event as event_of
from backtest.stream.records import record
from backtest.stream.write import write_stream
from backtest.sweep.outputs import leaderboard_csv, summary_json
from backtest.sweep.result import SweepResult, spearman
from backtest.sweep.run import run_sweep
from backtest.sweep.segments import (
    FULL,
    Segment,
    Split,
    stream_span,
    walk_forward_splits,
    window,
    window_batches,
)
from backtest.sweep.spec import (
    Candidate,
    ObjectiveSpec,
    SweepError,
    build_candidates,
    expand,
    split_overrides,
    validate_sweep,
)
from backtest.sweep.tasks import TaskResult
from solver.cli import main
from solver.config import load_bot_config
from solver.errors import ConfigError
from tests.backtest.replay_helpers import (
    HEADER,
    NEAR,
    USDC,
    at,
    bot_config_data,
    competitor,
    flow,
    price,
    request,
)

# ------------------------------------------------------------------------------ the sweep file


def test_grid_expands_to_every_combination_in_a_fixed_order() -> None:
    spec = validate_sweep(
        {"grid": {"pairs.0.params.spread_bps": [10, 20, 30], "backtest.fill.model": ["a", "b"]}}
    )
    points = expand(spec)
    assert points == [
        {"pairs.0.params.spread_bps": s, "backtest.fill.model": m}
        for s in (10, 20, 30)
        for m in ("a", "b")
    ]
    assert spec.keys == ["pairs.0.params.spread_bps", "backtest.fill.model"]
    bot, backtest = split_overrides(points[0])
    assert bot == {"pairs.0.params.spread_bps": 10} and backtest == {"fill.model": "a"}
    # No keys at all: one candidate, the base configuration.
    assert expand(validate_sweep({})) == [{}]


def test_random_samples_are_deterministic_for_a_seed_and_respect_the_space() -> None:
    data: dict[str, Any] = {
        "random": {
            "samples": 200,
            "seed": 9,
            "space": {
                "a": {"low": 5, "high": 50},
                "b": {"low": 1, "high": 10_000, "log": True},
                "c": {"low": 1, "high": 4, "int": True},
                "d": {"choices": ["spread", "amm"]},
            },
        }
    }
    first, again = expand(validate_sweep(data)), expand(validate_sweep(data))
    assert first == again and len(first) == 200
    other = expand(validate_sweep({**data, "random": {**data["random"], "seed": 10}}))
    assert other != first
    assert all(5 <= p["a"] <= 50 and 1 <= p["b"] <= 10_000 for p in first)
    assert all(float(f"{p['a']:.6g}") == p["a"] for p in first)  # 6 significant digits
    assert {p["c"] for p in first} == {1, 2, 3, 4} and all(type(p["c"]) is int for p in first)
    assert {p["d"] for p in first} == {"spread", "amm"}
    # Log-uniform: about half the samples below the geometric middle (100).
    below = sum(1 for p in first if p["b"] < 100)
    assert 70 < below < 130


def test_grid_and_random_combine_as_a_product() -> None:
    spec = validate_sweep(
        {
            "grid": {"backtest.fill.model": ["competitor", "always"]},
            "random": {"samples": 3, "seed": 1, "space": {"x": {"low": 0, "high": 1}}},
        }
    )
    points = expand(spec)
    assert len(points) == 6
    assert [p["backtest.fill.model"] for p in points] == ["competitor"] * 3 + ["always"] * 3
    assert [p["x"] for p in points[:3]] == [p["x"] for p in points[3:]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"grid": {"a": []}}, "grid a: give at least one value"),
        ({"walk_forward": {"splits": 2, "train_fraction": 0.5}}, "exactly one of"),
        ({"walk_forward": {}}, "exactly one of"),
        ({"walk_forward": {"train_fraction": 1.0}}, "walk_forward.train_fraction"),
        ({"grid": {"a": [1]}, "random": {"samples": 1, "space": {"a": {"choices": [1]}}}}, "both"),
        ({"random": {"samples": 1, "space": {"a": {"low": 2, "high": 1}}}}, "low must not"),
        ({"random": {"samples": 1, "space": {"a": {"low": 0, "high": 1, "log": True}}}}, "log"),
        ({"random": {"samples": 1, "space": {"a": {"low": 0}}}}, "give low and high"),
        ({"random": {"samples": 1, "space": {}}}, "at least one key"),
        ({"objective": {"kind": "sharpe"}}, "objective.kind"),
        ({"grdi": {"a": [1]}}, "grdi"),
        ({"grid": {"a": list(range(1000)), "b": list(range(1000))}}, "more than"),
    ],
)
def test_bad_sweep_files_are_refused_with_their_path(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_sweep(data, "s.yaml")


def test_objectives() -> None:
    metrics = {
        "pnl_usd": 100.0,
        "realized_pnl_usd": 80.0,
        "inventory_risk_usd": 500.0,
        "max_drawdown_usd": 40.0,
        "pnl_over_hold_usd": 30.0,
    }
    assert ObjectiveSpec().score(metrics) == 30.0  # default: PnL over hold
    assert ObjectiveSpec(kind="pnl_minus_inventory_risk").score(metrics) == 50.0  # 0.1 weight
    assert ObjectiveSpec(kind="pnl_minus_inventory_risk", risk_weight=0.5).score(metrics) == -150
    assert ObjectiveSpec(kind="pnl").score(metrics) == 100.0
    assert ObjectiveSpec(kind="realized_pnl").score(metrics) == 80.0
    assert ObjectiveSpec(kind="pnl_minus_drawdown", risk_weight=1).score(metrics) == 60.0


def test_invalid_candidates_are_kept_with_their_error_and_never_run() -> None:
    spec = validate_sweep({"grid": {"pairs.0.params.spread_bps": [10, 600], "backtest.seed": [-1]}})
    candidates = build_candidates(spec, bot_config_data(), {})
    assert [c.error is not None for c in candidates] == [True, True]
    assert "backtest" in (candidates[0].error or "")  # seed -1
    spec = validate_sweep({"grid": {"pairs.0.params.spread_bps": [10, 600]}})
    good, bad = build_candidates(spec, bot_config_data(), {})
    assert good.error is None and good.config["pairs"][0]["params"]["spread_bps"] == 10
    assert bad.error is not None and "spread_bps" in bad.error


# ------------------------------------------------------------------------------ walk-forward


def test_walk_forward_windows_tile_the_span() -> None:
    rolling = validate_sweep({"walk_forward": {"splits": 3}}).walk_forward
    assert rolling is not None
    splits = walk_forward_splits(rolling, 1_000, 4_999)
    bounds = [1_000, 2_000, 3_000, 4_000, 5_000]
    assert splits == [
        Split(Segment(bounds[i], bounds[i + 1]), Segment(bounds[i + 1], bounds[i + 2]))
        for i in range(3)
    ]
    anchored = validate_sweep({"walk_forward": {"splits": 3, "anchored": True}}).walk_forward
    assert anchored is not None
    assert [s.train for s in walk_forward_splits(anchored, 1_000, 4_999)] == [
        Segment(1_000, b) for b in bounds[1:4]
    ]
    fraction = validate_sweep({"walk_forward": {"train_fraction": 0.7}}).walk_forward
    assert fraction is not None
    assert walk_forward_splits(fraction, 0, 999) == [Split(Segment(0, 700), Segment(700, 1_000))]


def test_a_window_carries_the_latest_prices_into_its_start() -> None:
    events: list[StreamEvent] = [
        price(0, USDC, "1.0"),
        price(0, NEAR, "3.0"),
        request(1, "a", 10**24),
        price(2, NEAR, "3.1"),
        competitor(2, "a", 1),
        request(3, "b", 10**24),
        price(4, NEAR, "3.2"),
        request(5, "c", 10**24),
    ]
    us = [int(e.ts.timestamp() * 1_000_000) for e in events]
    got = list(window(events, Segment(us[5], us[7])))
    assert got == [events[0], events[3], events[5], events[6]]
    assert list(window(events, FULL)) == events
    # Nothing inside: the carried prices only.
    tail = list(window(events, Segment(us[7] + 1, us[7] + 2)))
    assert tail == [events[0], events[6]]
    assert all(isinstance(e, PriceEvent) for e in tail)
    # the same on records, however they are batched
    for segment in (Segment(us[5], us[7]), FULL, Segment(us[7] + 1, us[7] + 2)):
        for size in (1, 3, len(events)):
            records = [record(e) for e in events]
            batches = [records[i : i + size] for i in range(0, len(records), size)]
            got_records = [r for b in window_batches(batches, segment) for r in b]
            assert [event_of(r) for r in got_records] == list(window(events, segment))


def _fake_result(scores: dict[tuple[int, int], float], candidates: int) -> SweepResult:
    spec = validate_sweep(
        {"grid": {"k": [0, 1, 2]}, "objective": {"kind": "pnl"}, "walk_forward": {"splits": 2}}
    )
    segments = [FULL, Segment(0, 10), Segment(10, 20), Segment(20, 30)]
    splits = [Split(segments[1], segments[2]), Split(segments[2], segments[3])]
    results = {key: TaskResult(key[0], key[1], {"pnl_usd": value}) for key, value in scores.items()}
    return SweepResult(
        spec,
        "s",
        [Candidate(i, {"k": i}) for i in range(candidates)],
        segments,
        splits,
        results,
        (0, 29),
    )


def test_walk_forward_picks_the_in_sample_best_and_scores_it_out_of_sample() -> None:
    # Candidate 0 is lucky in window 1 and bad after; candidate 2 is steady.
    scores = {
        (0, 0): 5.0, (0, 1): 50.0, (0, 2): -10.0, (0, 3): -20.0,
        (1, 0): 1.0, (1, 1): 10.0, (1, 2): 0.0, (1, 3): 40.0,
        (2, 0): 9.0, (2, 1): 20.0, (2, 2): 20.0, (2, 3): 20.0,
    }  # fmt: skip
    result = _fake_result(scores, 3)
    first, second = result.split_results()
    assert (first.chosen, first.in_sample, first.out_of_sample) == (0, 50.0, -10.0)
    assert first.oos_rank == 3 and (first.best_oos, first.best_oos_objective) == (2, 20.0)
    assert first.rank_correlation == -0.5
    assert (second.chosen, second.in_sample, second.out_of_sample, second.oos_rank) == (
        2,
        20.0,
        20.0,
        2,
    )
    walk = summary_json(result)["walk_forward"]
    assert walk["mean_in_sample"] == 35.0 and walk["mean_out_of_sample"] == 5.0
    assert walk["mean_gap"] == 30.0 and walk["splits_detail"][0]["gap"] == 60.0
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(result))))
    # Ranked by the mean out-of-sample objective (1 and 2 tie at 20: the lower index first),
    # not by the full stream (2, 0, 1) nor in sample (0 was the luckiest there).
    assert [r["candidate"] for r in rows] == ["1", "2", "0"]
    assert rows[2]["split0_is"] == "50.000000" and rows[2]["split0_oos"] == "-10.000000"
    assert rows[1]["is_mean"] == "20.000000" and rows[1]["k"] == "2"
    assert rows[0]["oos_mean"] == rows[1]["oos_mean"] == "20.000000"
    best = summary_json(result)["best"]
    assert best["candidate"] == 1 and best["chosen_on"] == "out_of_sample_mean"
    assert (best["in_sample_mean"], best["out_of_sample_mean"]) == (5.0, 20.0)


def test_ties_rank_by_candidate_index_and_failures_go_last() -> None:
    scores = {(i, s): 1.0 for i in range(3) for s in range(4)}
    result = _fake_result(scores, 3)
    result.results[(0, 2)] = TaskResult(0, 2, {}, error="ConfigError: boom")
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(result))))
    assert [r["candidate"] for r in rows] == ["1", "2", "0"]
    assert rows[2]["error"] == "ConfigError: boom" and rows[2]["objective"] == ""


def test_spearman() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert spearman([1, 1, 1], [1, 2, 3]) is None and spearman([1], [1]) is None
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486833, abs=1e-6)


# ------------------------------------------------------------------------------ running


def _stream(tmp_path: Path, n: int = 240) -> Path:
    events: list[StreamEvent] = []
    for event in flow(n, every=0.5):
        events.append(event)
        if isinstance(event, RequestEvent) and event.request.quote_id[-1] in "02468":
            req = event.request
            # A competitor about 15 bps better than the reference for half the requests.
            if req.exact_in:
                fair = (
                    req.amount * 3 * 10**6 // 10**24
                    if req.asset_in == NEAR
                    else req.amount * 10**24 // (3 * 10**6)
                )
                events.append(competitor(_secs(event), req.quote_id, fair * 9_985 // 10_000))
    return write_stream(tmp_path / "stream.jsonl.gz", HEADER, events)


def _secs(event: StreamEvent) -> float:
    return (event.ts - at(0)).total_seconds()


SWEEP: dict[str, Any] = {
    "grid": {"pairs.0.params.spread_bps": [5, 30], "backtest.fill.model": ["competitor"]},
    "random": {"samples": 2, "seed": 3, "space": {"backtest.latency.ms": {"low": 0, "high": 50}}},
    "objective": {"kind": "pnl_minus_inventory_risk", "risk_weight": 0.05},
    "walk_forward": {"splits": 2},
}
SETTINGS: dict[str, Any] = {"kill_switch": False, "starting_usd": 20_000}


def test_stream_span(tmp_path: Path) -> None:
    path = _stream(tmp_path, 20)
    span = stream_span(path)
    assert span is not None
    first, last = span
    assert first == int(at(0).timestamp() * 1_000_000)
    assert last == int(at(10.5).timestamp() * 1_000_000)  # the last request, at 1 + 19 * 0.5
    empty = write_stream(tmp_path / "empty.jsonl", HEADER, [])
    assert stream_span(empty) is None


def test_local_sweep_is_identical_with_one_and_two_workers(tmp_path: Path) -> None:
    stream = _stream(tmp_path)
    spec = validate_sweep(SWEEP)
    started = time.monotonic()
    one = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=1)
    two = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=2)
    assert time.monotonic() - started < 60
    assert len(one.results) == 4 * 4  # 4 candidates x (full + 3 windows)
    assert leaderboard_csv(one) == leaderboard_csv(two)
    assert summary_json(one) == summary_json(two)
    # Every task ran without error and the objective is what the figures say.
    assert all(r.error is None for r in one.results.values())
    best = one.best()
    assert best is not None
    metrics = one.results[(best.index, 0)].metrics
    assert one.objective(best.index) == pytest.approx(
        metrics["pnl_usd"] - 0.05 * metrics["inventory_risk_usd"], abs=1e-6
    )
    assert metrics["quoted"] > 0 and metrics["won"] > 0
    # Windows hold the requests of their time range: they add up to the full stream.
    windows = [one.results[(best.index, s)].metrics["requests"] for s in (1, 2, 3)]
    assert sum(windows) == metrics["requests"] == 240


def test_dask_executor_gives_the_local_leaderboard(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    stream = _stream(tmp_path, 120)
    spec = validate_sweep({**SWEEP, "random": {**SWEEP["random"], "samples": 1}})
    local = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=1)
    started = time.monotonic()
    distributed = run_sweep(spec, stream, bot_config_data(), SETTINGS, executor="dask", workers=2)
    assert time.monotonic() - started < 30
    assert distributed.executor == "dask"
    assert leaderboard_csv(distributed) == leaderboard_csv(local)


def test_a_sweep_of_only_invalid_candidates_fails_before_running(tmp_path: Path) -> None:
    stream = _stream(tmp_path, 10)
    spec = validate_sweep({"grid": {"pairs.0.params.spread_bps": [600]}})
    with pytest.raises(SweepError, match="no valid candidate"):
        run_sweep(spec, stream, bot_config_data(), {})


def test_cli_writes_the_leaderboard_and_the_best_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = _stream(tmp_path, 120)
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    settings = tmp_path / "backtest.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    grid = tmp_path / "sweep.yaml"
    grid.write_text(
        yaml.safe_dump(
            {
                "grid": {"pairs.0.params.spread_bps": [5, 30, 600]},
                "objective": {"kind": "pnl"},
                "walk_forward": {"train_fraction": 0.6},
            }
        )
    )
    out = tmp_path / "out"
    argv = ["backtest", "sweep", str(stream), "--config", str(config), "--grid", str(grid)]
    code = main([*argv, "--out", str(out), "--workers", "1", "--backtest-config", str(settings)])
    assert code == 0
    line = json.loads(capsys.readouterr().out)
    assert line["candidates"] == 3 and line["failed"] == 1 and line["tasks"] == 2 * 3
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    assert [r["rank"] for r in rows] == ["1", "2", "3"]
    assert rows[-1]["pairs.0.params.spread_bps"] == "600" and "spread_bps" in rows[-1]["error"]
    scores = [float(r["oos_mean"]) for r in rows[:2]]  # the winner: best out of sample
    assert scores == sorted(scores, reverse=True)
    assert rows[0]["split0_is"] and rows[0]["split0_oos"]
    best = line["best"]
    assert best["candidate"] == int(rows[0]["candidate"])
    # The best config is the whole bot YAML with the winning value, and it loads.
    loaded = load_bot_config(out / "best_config.yaml")
    spread = loaded.pairs[0].params["spread_bps"]
    assert spread == best["overrides"]["pairs.0.params.spread_bps"]
    assert loaded.tokens.keys() == {USDC, NEAR}
    assert load_settings(out / "best_backtest.yaml").starting_usd == 20_000
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["best"]["candidate"] == best["candidate"]
    assert summary["walk_forward"]["splits_detail"][0]["chosen"] is not None
    timing = json.loads((out / "timing.json").read_text())
    assert timing["tasks"] == 6 and timing["workers"] == 1
    assert not math.isnan(timing["elapsed_s"])


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stream = _stream(tmp_path, 10)
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    grid = tmp_path / "sweep.yaml"
    grid.write_text("grid: {a: []}\n")
    argv = ["backtest", "sweep", str(stream), "--config", str(config), "--out", str(tmp_path)]
    assert main([*argv, "--grid", str(grid)]) == 2
    assert "grid a: give at least one value" in capsys.readouterr().err
    grid.write_text("grid: {a: [1]}\n")
    assert main([*argv, "--grid", str(grid), "--scheduler", "tcp://x:1"]) == 2
    assert main([*argv, "--grid", str(tmp_path / "missing.yaml")]) == 2
