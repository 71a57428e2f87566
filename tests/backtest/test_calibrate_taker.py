"""Calibration fits the competition alone (issue 25, finding 2).

``calibrate`` used to count a taker's refusal as a lost race, and the ``logistic`` file it
wrote applied the taker again: refusals counted twice (at 40 bps, 16.5 % fewer fills than the
ground truth, and intervals that missed the true parameters). Here a synthetic stream whose
competitors are exactly logistic, replayed under a strict taker at several spreads: the fit
must contain the true ``a`` and ``b`` in its intervals, and a ``logistic`` replay with the
written file must fill about as often as the ``competitor`` replay it was fitted on.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from backtest.calibration.calibrate import observations_from_replay, write_fit
from backtest.engine import Replay
from backtest.settings import load_settings, validate_settings
from backtest.stream.read import read_stream
from backtest.synth.generate import SynthParams, synthesize
from solver.config import load_bot_config

DEFAULT = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
M, S = 25.0, 10.0
"""The competitor charges Logistic(mean M, sd S) bps: an answer giving the user g bps wins the
race with probability 1 / (1 + exp(-(g + M) / s)), s = S * sqrt(3) / pi."""
B_TRUE = math.pi / (S * math.sqrt(3))
A_TRUE = M * B_TRUE
STRICT = {"kind": "lognormal", "tolerance_bps": 30, "sigma": 0.5}
"""Half the users refuse an answer charging more than 30 bps."""


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "logistic.jsonl.gz"
    params = SynthParams(
        rate_per_s=10.0, competitor_share=1.0, competitor_edge_bps=M, competitor_edge_sd_bps=S,
        competitor_edge_bps_per_decade=0.0, competitor_edge_dist="logistic", informed_share=0.0,
    )  # fmt: skip
    synthesize(
        out, pairs=[("nep141:wrap.sandbox", "nep141:usdc.sandbox", 1.0)], duration_s=900,
        seed=25, params=params,
    )  # fmt: skip
    return out


def _config(tmp_path: Path, spread_bps: int) -> Path:
    data = yaml.safe_load(DEFAULT.read_text())
    for pair in data["pairs"]:
        pair["params"] = {"spread_bps": spread_bps, "widen_bps_per_1k_usd": 40}
    path = tmp_path / f"bot{spread_bps}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _won(stream: Path, config: Path, fill: dict[str, object]) -> int:
    settings = validate_settings({"kill_switch": False, "fill": fill, "seed": 3})
    with read_stream(stream) as reader:
        result = Replay(load_bot_config(config), settings).run(reader, reader.header)
    return result.measures.won


@pytest.mark.parametrize("spread_bps", [10, 25, 40])
def test_calibration_under_a_strict_taker_recovers_the_competition(
    stream: Path, tmp_path: Path, spread_bps: int
) -> None:
    config = _config(tmp_path, spread_bps)
    settings = validate_settings({"kill_switch": False, "fill": {"taker": STRICT}})
    with read_stream(stream) as reader:
        obs = observations_from_replay(reader, reader.header, load_bot_config(config), settings)
    fit = obs.calibrate().require()
    a_lo, a_hi = fit.a_interval()
    b_lo, b_hi = fit.b_interval()
    assert a_lo <= A_TRUE <= a_hi, (spread_bps, (a_lo, a_hi), A_TRUE)
    assert b_lo <= B_TRUE <= b_hi, (spread_bps, (b_lo, b_hi), B_TRUE)
    # The written model composes with the taker exactly once: as many fills as the truth.
    path = write_fit(tmp_path / "fit.yaml", fit, "test")
    fill = load_settings(path).fill.model_dump() | {"taker": STRICT}
    truth = _won(stream, config, {"model": "competitor", "taker": STRICT})
    modelled = _won(stream, config, fill)
    assert truth > 50
    assert abs(modelled - truth) <= 4 * math.sqrt(truth), (spread_bps, modelled, truth)
