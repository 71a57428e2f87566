"""Sweeps: the Optuna TPE search (deterministic for a seed, whatever the workers), ``--search``,
and ``sweep.html`` (candidates, heatmap, in-sample against out-of-sample). Tiny streams, few
trials: each trial is a few short replays."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from backtest.stream.write import write_stream
from backtest.sweep.html import heatmap_keys as heatmap_keys_for
from backtest.sweep.outputs import leaderboard_csv, summary_json
from backtest.sweep.run import run_sweep
from backtest.sweep.spec import validate_sweep
from solver.cli import main
from solver.errors import ConfigError
from tests.backtest.replay_helpers import HEADER, bot_config_data, flow

pytest.importorskip("optuna")

SETTINGS: dict[str, Any] = {"kill_switch": False, "starting_usd": 20_000}
TPE: dict[str, Any] = {
    "grid": {"backtest.fill.model": ["always", "competitor"]},
    "tpe": {
        "trials": 6,
        "seed": 11,
        "batch": 3,
        "startup_trials": 3,
        "space": {
            "pairs.0.params.spread_bps": {"low": 2, "high": 80, "log": True},
            "backtest.latency.ms": {"low": 0, "high": 40, "int": True},
        },
    },
    "objective": {"kind": "pnl"},
    "walk_forward": {"splits": 1},
}


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_stream(tmp_path_factory.mktemp("tpe") / "s.jsonl", HEADER, flow(80, every=0.5))


def test_tpe_is_deterministic_for_a_seed_and_stays_in_its_space(stream: Path) -> None:
    spec = validate_sweep(TPE)
    one = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=1)
    two = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=2)
    assert len(one.candidates) == 6 and len(one.results) == 6 * 3  # full + train + test
    assert leaderboard_csv(one) == leaderboard_csv(two)  # the batch, not the workers, matters
    assert summary_json(one) == summary_json(two)
    for candidate in one.candidates:
        o = candidate.overrides
        assert 2 <= o["pairs.0.params.spread_bps"] <= 80
        assert isinstance(o["backtest.latency.ms"], int) and 0 <= o["backtest.latency.ms"] <= 40
        assert o["backtest.fill.model"] in ("always", "competitor")
    other = run_sweep(
        validate_sweep({**TPE, "tpe": {**TPE["tpe"], "seed": 12}}),
        stream,
        bot_config_data(),
        SETTINGS,
        workers=1,
    )
    assert [c.overrides for c in other.candidates] != [c.overrides for c in one.candidates]
    summary = summary_json(one)
    assert summary["search"] == {
        "kind": "tpe", "trials": 6, "seed": 11, "batch": 3, "startup_trials": 3
    }  # fmt: skip
    best = summary["best"]
    assert best["chosen_on"] == "out_of_sample_mean"
    assert best["out_of_sample_mean"] == max(
        one.mean_over(c.index, test=True) or -1e18 for c in one.candidates
    )


def test_search_turns_a_random_block_into_tpe_and_grid_drops_it() -> None:
    spec = validate_sweep(
        {
            "grid": {"pairs.0.params.spread_bps": [5, 10]},
            "random": {
                "samples": 7,
                "seed": 4,
                "space": {"backtest.latency.ms": {"low": 0, "high": 9}},
            },
        }
    )
    tpe = spec.searched("tpe", trials=3)
    assert tpe.random is None and tpe.tpe is not None
    assert (tpe.tpe.trials, tpe.tpe.seed, list(tpe.tpe.space)) == (3, 4, ["backtest.latency.ms"])
    assert tpe.keys == ["pairs.0.params.spread_bps", "backtest.latency.ms"]
    assert spec.searched("grid").random is None and spec.searched(None) == spec
    with pytest.raises(ConfigError, match="--trials"):
        spec.searched(None, trials=3)
    with pytest.raises(ConfigError, match="random block"):
        validate_sweep({"grid": {"a": [1]}}).searched("random")
    with pytest.raises(ConfigError, match="not both"):
        validate_sweep({**spec.model_dump(by_alias=True, exclude_none=True), "tpe": {"trials": 2}})


def test_cli_tpe_writes_sweep_html_with_a_heatmap(
    stream: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    settings = tmp_path / "backtest.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    grid = tmp_path / "sweep.yaml"
    grid.write_text(
        yaml.safe_dump(
            {
                "grid": {"backtest.fill.model": ["always", "competitor"]},
                "random": {
                    "samples": 20,
                    "seed": 1,
                    "space": {"pairs.0.params.spread_bps": {"low": 2, "high": 60}},
                },
                "objective": {"kind": "pnl"},
                "walk_forward": {"train_fraction": 0.5},
            }
        )
    )
    out = tmp_path / "out"
    argv = ["backtest", "sweep", str(stream), "--config", str(config), "--grid", str(grid)]
    argv += ["--backtest-config", str(settings), "--out", str(out), "--workers", "1"]
    assert main([*argv, "--search", "tpe", "--trials", "4", "--no-progress"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["candidates"] == 4 and line["best"]["chosen_on"] == "out_of_sample_mean"
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    assert rows[0]["candidate"] == str(line["best"]["candidate"])
    page = (out / "sweep.html").read_text()
    assert re.findall(r"<h2>([^<]+)</h2>", page) == [
        "Verdict",
        "Candidates",
        "Heatmap",
        "In-sample against out-of-sample",
        "Walk-forward splits",
    ]
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 2 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    # the verdict (head, interval, reality check), candidates (head + 4), splits (head + 1)
    assert page.count("<tr>") == 3 + 1 + 4 + 1 + 1
    # A key that is not swept is refused before anything runs.
    assert main([*argv, "--heatmap", "risk.x,backtest.fill.model", "--no-progress"]) == 2


def test_heatmap_keys_default_to_the_first_two_that_vary(stream: Path) -> None:
    spec = validate_sweep(
        {
            "grid": {
                "backtest.seed": [1],
                "pairs.0.params.spread_bps": [5, 30],
                "backtest.fill.model": ["always", "competitor"],
            }
        }
    )
    result = run_sweep(spec, stream, bot_config_data(), SETTINGS, workers=1)
    assert heatmap_keys_for(result) == ["pairs.0.params.spread_bps", "backtest.fill.model"]
    assert result.chosen_on == "full" and summary_json(result)["best"]["chosen_on"] == "full"
