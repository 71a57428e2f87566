"""Calibration of the logistic fill model: the fit, the store and stream sources, the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from backtest.calibration.calibrate import (
    LogisticFit,
    fit_logistic,
    observations_from_replay,
    observations_from_store,
    write_fit,
)
from backtest.settings import load_settings
from backtest.stream.events import CompetitorEvent, RequestEvent, StreamEvent
from backtest.stream.write import write_stream
from solver.cli import main
from solver.core import facts as f
from solver.core.clock import SECOND, micros
from solver.core.lifecycle import QuoteState
from solver.errors import ConfigError
from solver.io.store.sqlite_store import Store
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.quote_signing import QuoteSigner
from tests.backtest.replay_helpers import (
    E6,
    E24,
    HEADER,
    NEAR,
    T0,
    USDC,
    bot_config,
    bot_config_data,
    flow,
    price,
    settings,
)


def test_the_fit_recovers_known_parameters() -> None:
    rng = np.random.default_rng(11)
    a0, b0 = 0.4, 0.08
    edges = rng.normal(-15.0, 20.0, 40_000)
    won = rng.random(edges.size) < 1 / (1 + np.exp(-(a0 + b0 * edges)))
    fit = fit_logistic(edges, won)
    assert fit.converged and fit.n == 40_000 and fit.won == int(won.sum())
    assert fit.a == pytest.approx(a0, abs=0.05)
    assert fit.b == pytest.approx(b0, abs=0.005)
    assert fit.probability(-a0 / b0) == pytest.approx(0.5, abs=0.03)


def test_the_fit_needs_both_outcomes_and_survives_separated_data() -> None:
    with pytest.raises(ConfigError, match="both won and lost"):
        fit_logistic([1.0, 2.0, 3.0], [True, True, True])
    with pytest.raises(ConfigError):
        fit_logistic([1.0], [True])
    fit = fit_logistic([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0], [False, False, False, True, True, True])
    assert np.isfinite(fit.a) and fit.b > 0


def test_write_fit_gives_a_backtest_config(tmp_path: Path) -> None:
    fit = LogisticFit(0.25, 0.07, 100, 40, -50.0, 6, True)
    for name in ("fit.yaml", "fit.json"):
        path = write_fit(tmp_path / name, fit, "a\nstore")
        loaded = load_settings(path)
        assert (loaded.fill.model, loaded.fill.a, loaded.fill.b) == ("logistic", 0.25, 0.07)
    written = {"fill": {**fit.settings()["fill"], "fitted": "competition"}}
    assert json.loads((tmp_path / "fit.json").read_text()) == written
    assert yaml.safe_load((tmp_path / "fit.yaml").read_text()) == written
    joint = write_fit(tmp_path / "joint.yaml", fit, "a store", "joint")
    assert load_settings(joint).fill.fitted == "joint"  # the taker is in the curve already
    assert "fitted: joint" in joint.read_text()


# ------------------------------------------------------------------------------ store


def _store(path: Path) -> list[float]:
    """Quotes selling 1 NEAR (3 USD) for 3 USDC * (1 + edge): better edges won."""
    signer = QuoteSigner(SecretKey(b"\x07" * 32), "solver.near", "intents.near")
    rows = [  # (state path, edge bps, seconds)
        ([QuoteState.WON, QuoteState.SETTLED], -5.0, 0),
        ([QuoteState.WON, QuoteState.SETTLING], -8.0, 10),
        ([QuoteState.LOST], -25.0, 20),
        ([QuoteState.LOST], -4.0, 30),
        ([QuoteState.WON, QuoteState.FAILED], -12.0, 40),
        ([QuoteState.REJECTED], -1.0, 50),  # never seen by users: left out
        ([], -3.0, 60),  # still open: left out
        ([QuoteState.LOST], -30.0, 4_000),  # no price nearby unless a stream gives one
        ([QuoteState.WON], -2.0, 70),
    ]
    with Store(path, checkpoint_every_s=None) as store:
        for i, (states, edge, seconds) in enumerate(rows):
            created = micros(T0) + seconds * SECOND
            deadline = created + 60 * SECOND
            out = round(3 * E6 * (1 + edge / 10_000))
            signed = signer.sign(
                deadline=deadline,
                nonce=salted_nonce(b"\x00\x00\x00\x01"),
                asset_in=NEAR,
                amount_in=E24,
                asset_out=USDC,
                amount_out=out,
            )
            # What the live desk journals (its facts), projected into the quote tables.
            store.journal.append(
                f.QuoteOpened(
                    f"q{i}", signed.quote_hash, NEAR, USDC, E24, out, 0, deadline, signed.nonce,
                    created, True, None, signed.signed_data,
                )
            )  # fmt: skip
            for new in states:
                fill = f.FillPrices(3.0, 1.0, 3.0 - out / E6) if new is QuoteState.SETTLED else None
                store.journal.append(f.QuoteMoved(f"q{i}", new.value, created, fill=fill))
            store.project()
    return [edge for states, edge, _ in rows]


def test_observations_from_a_store(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite"
    _store(db)
    obs = observations_from_store(db, {NEAR: 24, USDC: 6}, max_gap_s=120)
    assert obs.won == [True, True, False, False, True, True]
    assert obs.edges == pytest.approx([-5.0, -8.0, -25.0, -4.0, -12.0, -2.0], abs=0.01)
    assert obs.skipped == {"state REJECTED": 1, "state OPEN": 1, "no reference price": 1}
    more = observations_from_store(
        db, {NEAR: 24, USDC: 6}, [price(3_990, NEAR, "3"), price(3_990, USDC, "1")], max_gap_s=120
    )
    assert len(more.edges) == 7 and more.won[-1] is False
    assert observations_from_store(db, {NEAR: 24}).skipped["unknown decimals"] == 7
    with pytest.raises(ConfigError, match="no store"):
        observations_from_store(tmp_path / "none.sqlite", {})


def test_calibrate_command_from_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "store.sqlite"
    _store(db)
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    prices = write_stream(
        tmp_path / "prices.jsonl", HEADER, [price(3_990, NEAR, "3"), price(3_990, USDC, "1")]
    )
    out = tmp_path / "fit.yaml"
    argv = ["backtest", "calibrate", "--db", str(db), "--config", str(config)]
    assert main([*argv, "--prices", str(prices), "--out", str(out)]) == 2  # 4 wins: too few
    assert "at least 20" in capsys.readouterr().err
    few = ["--min-wins", "1", "--min-losses", "1"]
    assert main([*argv, *few, "--prices", str(prices), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["quotes"] == 7 and line["won"] == 4
    assert load_settings(out).fill.model == "logistic"
    assert main(["backtest", "calibrate", "--out", str(out)]) == 2
    assert "either --db" in capsys.readouterr().err


# ------------------------------------------------------------------------------ stream


def _competitive_flow() -> list[StreamEvent]:
    """Requests with competing answers priced 10 ± 8 bps under the reference rate."""
    rng = np.random.default_rng(5)
    events: list[StreamEvent] = []
    for event in flow(800, every=0.5):
        events.append(event)
        if isinstance(event, RequestEvent):
            request = event.request
            fair_near_usdc = 3.0 * 1e6 / 1e24  # USDC units per NEAR unit at the start
            c = float(rng.normal(10.0, 8.0)) / 10_000
            rate = fair_near_usdc if request.asset_in == NEAR else 1 / fair_near_usdc
            if request.exact_in:
                best = int(request.amount * rate * (1 - c))
            else:
                best = int(request.amount / rate / (1 - c))
            events.append(CompetitorEvent(event.ts, request.quote_id, max(1, best)))
    return events


def test_calibration_from_a_stream_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = bot_config(pairs__0__params={"spread_bps": 2, "widen_bps_per_1k_usd": 30})
    events = _competitive_flow()
    # The fill model given is replaced by ``competitor``; no kill switch on price swings.
    quiet = settings(fill={"model": "always"}, kill_switch=False)
    obs = observations_from_replay(events, HEADER, config, quiet)
    fit = obs.fit()
    assert fit.n > 500 and 0 < fit.won < fit.n
    assert fit.b > 0  # better prices for the user win more often

    stream = write_stream(tmp_path / "s.jsonl", HEADER, events)
    data = bot_config_data()
    data["pairs"][0]["params"] = {"spread_bps": 2, "widen_bps_per_1k_usd": 30}
    path = tmp_path / "bot.yaml"
    path.write_text(yaml.safe_dump(data))
    backtest = tmp_path / "bt.yaml"
    backtest.write_text("kill_switch: false\n")
    out = tmp_path / "fit.json"
    argv = ["backtest", "calibrate", str(stream), "--config", str(path)]
    assert main([*argv, "--backtest-config", str(backtest), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out)
    assert (line["a"], line["b"]) == pytest.approx((fit.a, fit.b), rel=1e-3)
    assert line["quotes"] == fit.n and line["fitted"] == "competition"
    assert main(["backtest", "calibrate", str(stream), "--out", str(out)]) == 2


# ------------------------------------------------------------------------------ sampled store


def _sampled_journal(path: Path, n: int = 4000) -> None:
    """``n`` quotes selling 1 NEAR (3 USD) at edges of -40..+10 bps, won with probability
    1 / (1 + exp(-(0.5 + 0.1 edge))): the journal alone (projected when opened)."""
    rng = np.random.default_rng(29)
    store = Store(path, checkpoint_every_s=None)
    lost: list[str] = []
    for i in range(n):
        edge = float(rng.uniform(-40.0, 10.0))
        created = micros(T0) + i * SECOND
        out = round(3 * E6 * (1 + edge / 10_000))
        quote_id = f"s{i}"
        store.journal.append(
            f.QuoteOpened(
                quote_id, f"h{i}", NEAR, USDC, E24, out, 0, created + 5 * SECOND,
                i.to_bytes(32, "big"), created, True, None, {"signed": i},
            )
        )  # fmt: skip
        if rng.random() < 1 / (1 + np.exp(-(0.5 + 0.1 * edge))):
            store.journal.append(f.QuoteMoved(quote_id, "WON", created))
            fill = f.FillPrices(3.0, 1.0, 3.0 - out / E6)
            store.journal.append(f.QuoteMoved(quote_id, "SETTLED", created, fill=fill))
        else:
            lost.append(quote_id)
        if len(lost) == 64 or i == n - 1:
            store.journal.append(f.QuotesLost(tuple(lost), created, "expired"))
            lost = []
    store.commit()
    store._close()  # no projection: each copy projects at its own rate


def test_calibrate_weighs_the_sampled_lost_quotes_of_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store keeping 1 lost quote in 10 (issue 29) calibrates to what the whole store gives:
    each sampled row weighs 10 in the fit, and the intervals widen for the quotes not seen. A
    fit that ignored the weights would put the 50 % point ~23 bps off."""
    journal = tmp_path / "journal.sqlite"
    _sampled_journal(journal)
    stores = {}
    for rate in (1.0, 0.1):
        path = tmp_path / f"rate-{rate}.sqlite"
        path.write_bytes(journal.read_bytes())
        Store(path, lost_quote_sample_rate=rate, checkpoint_every_s=None).close()
        stores[rate] = path
    prices = [price(s, asset, usd) for s in range(0, 4001, 60) for asset, usd in ((NEAR, "3"),
              (USDC, "1"))]  # fmt: skip
    every, tenth = (
        observations_from_store(stores[r], {NEAR: 24, USDC: 6}, prices) for r in (1.0, 0.1)
    )
    assert set(every.weights) == {1.0} and set(tenth.weights) == {1.0, 10.0}
    lost_all = every.won.count(False)
    lost_rows = tenth.won.count(False)
    assert tenth.won.count(True) == every.won.count(True)
    assert 0.07 * lost_all < lost_rows < 0.13 * lost_all
    assert sum(tenth.weights) == pytest.approx(len(every.edges), rel=0.06)

    full, sampled = every.calibrate().require(), tenth.calibrate().require()
    assert sampled.weight == pytest.approx(len(every.edges), rel=0.06) and full.weight is None
    for fit in (full, sampled):
        assert fit.a == pytest.approx(0.5, abs=4 * fit.se_a)
        assert fit.b == pytest.approx(0.1, abs=4 * fit.se_b)
    assert abs(sampled.edge_at(0.5) - full.edge_at(0.5)) < 3.0
    assert sampled.se_b > full.se_b  # fewer lost rows seen: honestly less sure
    blind = fit_logistic(tenth.edges, tenth.won)  # the weights ignored
    assert abs(blind.edge_at(0.5) - full.edge_at(0.5)) > 15

    # The command says so, and counts what the rows stand for.
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump(bot_config_data()))
    stream = write_stream(tmp_path / "prices.jsonl", HEADER, prices)
    out = tmp_path / "fit.yaml"
    argv = ["backtest", "calibrate", "--db", str(stores[0.1]), "--config", str(config)]
    assert main([*argv, "--prices", str(stream), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["quotes"] == pytest.approx(len(every.edges), rel=0.06)
    assert line["rows"]["lost"] == lost_rows and "sample" in line["sampled"]
    assert "stand for" in out.read_text()
