"""Synthetic streams: deterministic for a seed, statistically what was asked for, and valid
streams that the reader takes without a complaint."""

from __future__ import annotations

import math
import statistics
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from backtest.stream.events import CompetitorEvent, PriceEvent, RequestEvent
from backtest.stream.read import read_stream
from backtest.synth.generate import (
    DEFAULT_START,
    DEFAULT_TOKENS,
    SynthParams,
    SynthSummary,
    generate,
    resolve_pairs,
    synthesize,
)
from solver.cli import main
from solver.core.market import QuoteRequest

ROOT = Path(__file__).resolve().parents[2]

USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
PAIRS = [(NEAR, USDC), (ETH, USDC)]


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_same_seed_gives_identical_bytes(tmp_path: Path, name: str) -> None:
    first = synthesize(tmp_path / f"1-{name}", pairs=PAIRS, duration_s=300, seed=7)
    second = synthesize(tmp_path / f"2-{name}", pairs=PAIRS, duration_s=300, seed=7)
    assert first.requests > 0
    assert (tmp_path / f"1-{name}").read_bytes() == (tmp_path / f"2-{name}").read_bytes()
    assert first.as_dict() | {"path": None} == second.as_dict() | {"path": None}


def test_another_seed_gives_another_stream(tmp_path: Path) -> None:
    synthesize(tmp_path / "a.jsonl", pairs=PAIRS, duration_s=300, seed=7)
    synthesize(tmp_path / "b.jsonl", pairs=PAIRS, duration_s=300, seed=8)
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "b.jsonl").read_bytes()


def test_the_file_holds_exactly_the_generated_events(tmp_path: Path) -> None:
    summary = synthesize(tmp_path / "s.jsonl.gz", pairs=PAIRS, duration_s=120, seed=1)
    in_memory = list(generate(pairs=PAIRS, duration_s=120, seed=1))
    reader = read_stream(tmp_path / "s.jsonl.gz", strict=True)
    assert list(reader) == in_memory
    assert reader.header.created == DEFAULT_START
    assert {a: (t.symbol, t.decimals) for a, t in reader.header.tokens.items()} == {
        a: (t.symbol, t.decimals) for a, t in DEFAULT_TOKENS.items()
    }
    assert reader.stats.events == {
        "price": summary.prices,
        "quote_request": summary.requests,
        "competitor": summary.competitors,
        "informed": summary.informed,  # a label per informed request (issue 25)
    }
    assert reader.header.competitor_share == 0.85  # how competition was observed


def test_statistics_are_roughly_what_was_asked(tmp_path: Path) -> None:
    params = SynthParams(
        rate_per_s=8,
        burst_factor=4,
        calm_mean_s=20,
        burst_mean_s=4,
        exact_out_share=0.3,
        competitor_share=0.8,
        competitor_edge_bps=10,
        competitor_edge_sd_bps=4,
        competitor_edge_bps_per_decade=0,
        price_interval_s=2,
    )
    duration = 3000.0
    summary = SynthSummary()
    requests: list[RequestEvent] = []
    rivals: dict[str, int] = {}
    prices: dict[str, Decimal] = {}
    edges: list[float] = []
    price_events = 0
    for event in generate(
        pairs=PAIRS, duration_s=duration, seed=11, params=params, summary=summary
    ):
        if isinstance(event, PriceEvent):
            prices[event.asset] = Decimal(event.usd)
            price_events += 1
        elif isinstance(event, RequestEvent):
            requests.append(event)
        elif isinstance(event, CompetitorEvent):
            rivals[event.quote_id] = event.best_amount
            request = requests[-1].request
            assert request.quote_id == event.quote_id  # right after its request
            edges.append(_edge_bps(request.exact_in, request.amount, event.best_amount,
                                   request.asset_in, request.asset_out, prices))  # fmt: skip
    rate = len(requests) / duration
    assert 8 * 0.85 < rate < 8 * 1.15, rate
    exact_out = sum(not r.request.exact_in for r in requests) / len(requests)
    assert 0.27 < exact_out < 0.33, exact_out
    assert 0.77 < len(rivals) / len(requests) < 0.83
    assert price_events == 3 * math.ceil(duration / 2)  # every token, every 2 s
    assert summary.bursts > 50 and 0.1 < summary.burst_time_s / duration < 0.25
    assert abs(statistics.mean(edges) - 10) < 0.5, statistics.mean(edges)
    assert abs(statistics.stdev(edges) - 4) < 0.5
    # Sizes: lognormal around the 50 USD median.
    sizes = [_usd(r.request, prices) for r in requests[-2000:]]
    assert 35 < statistics.median(sizes) < 70
    # Bursts: some 10-second windows are far busier than the average.
    windows: dict[int, int] = {}
    for r in requests:
        key = int((r.ts - DEFAULT_START).total_seconds() // 10)
        windows[key] = windows.get(key, 0) + 1
    assert max(windows.values()) > 2.5 * 10 * 8
    # Every pair and both directions are traded.
    directions = {(r.request.asset_in, r.request.asset_out) for r in requests}
    assert directions == {(NEAR, USDC), (USDC, NEAR), (ETH, USDC), (USDC, ETH)}


def _edge_bps(
    exact_in: bool, amount: int, best: int, asset_in: str, asset_out: str,
    prices: dict[str, Decimal],
) -> float:  # fmt: skip
    d_in, d_out = DEFAULT_TOKENS[asset_in].decimals, DEFAULT_TOKENS[asset_out].decimals
    rate = prices[asset_in] / prices[asset_out]  # whole out per whole in
    if exact_in:
        fair = Decimal(amount) / 10**d_in * rate * 10**d_out
        return float((1 - Decimal(best) / fair) * 10_000)
    fair = Decimal(amount) / 10**d_out / rate * 10**d_in
    return float((Decimal(best) / fair - 1) * 10_000)


def _usd(request: QuoteRequest, prices: dict[str, Decimal]) -> float:
    asset = request.asset_in if request.exact_in else request.asset_out
    return float(Decimal(request.amount) / 10 ** DEFAULT_TOKENS[asset].decimals * prices[asset])


def test_resolve_pairs_by_symbol_asset_id_and_weight() -> None:
    assert resolve_pairs("wNEAR/USDC, eth/usdc:0.5", DEFAULT_TOKENS) == [
        (NEAR, USDC, 1.0),
        (ETH, USDC, 0.5),
    ]
    assert resolve_pairs(f"{NEAR}/{USDC}:2", DEFAULT_TOKENS) == [(NEAR, USDC, 2.0)]
    with pytest.raises(ValueError, match="unknown token 'DOGE'"):
        resolve_pairs("DOGE/USDC", DEFAULT_TOKENS)
    with pytest.raises(ValueError, match="BASE/QUOTE"):
        resolve_pairs("wNEAR", DEFAULT_TOKENS)
    with pytest.raises(ValueError, match="same token"):
        resolve_pairs("USDC/USDC", DEFAULT_TOKENS)
    with pytest.raises(ValueError, match="no pairs"):
        resolve_pairs(" , ", DEFAULT_TOKENS)


def test_pair_weights_shape_the_mix() -> None:
    summary = SynthSummary()
    for _ in generate(
        pairs=[(NEAR, USDC, 3.0), (ETH, USDC, 1.0)], duration_s=600, seed=2, summary=summary
    ):
        pass
    near = summary.requests_by_pair["wNEAR/USDC"] + summary.requests_by_pair["USDC/wNEAR"]
    assert 0.7 < near / summary.requests < 0.8


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (SynthParams(rate_per_s=0), "rate_per_s"),
        (SynthParams(burst_factor=0.5), "burst_factor"),
        (SynthParams(exact_out_share=1.5), "exact_out_share"),
        (SynthParams(price_interval_s=-1), "price_interval_s"),
    ],
)
def test_bad_parameters_are_refused(params: SynthParams, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        generate(pairs=PAIRS, duration_s=10, seed=1, params=params)


def test_cli_synth_writes_a_stream_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.jsonl.gz"
    argv = ["backtest", "synth", "--out", str(out), "--pairs", "wNEAR/USDC,ETH/USDC",
            "--duration", "120", "--seed", "7", "--rate", "3", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert summary["requests"] > 100 and summary["path"] == str(out)
    again = tmp_path / "again.jsonl.gz"
    argv[3] = str(again)
    assert main([*argv, "--tokens-from", str(ROOT / "config" / "sandbox.yaml")]) == 0
    assert out.read_bytes() == again.read_bytes()  # sandbox.yaml has the built-in tokens
    assert main([*argv[:5], "DOGE/USDC", *argv[6:]]) == 2
    assert "unknown token 'DOGE'" in capsys.readouterr().err


def test_knobs_as_keywords_override_params(tmp_path: Path) -> None:
    fast = synthesize(tmp_path / "k.jsonl", pairs=PAIRS, duration_s=200, seed=5, rate_per_s=20,
                      burst_factor=1.0)  # fmt: skip
    slow = synthesize(tmp_path / "p.jsonl", pairs=PAIRS, duration_s=200, seed=5,
                      params=SynthParams(rate_per_s=2, burst_factor=1.0))  # fmt: skip
    assert fast.requests > 5 * slow.requests
    with pytest.raises(TypeError):
        generate(pairs=PAIRS, duration_s=10, seed=1, no_such_knob=1)
