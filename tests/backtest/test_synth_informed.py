"""Informed flow and logistic competition in synthetic streams (issue 12)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from decimal import Decimal

import pytest

from backtest.stream.events import CompetitorEvent, PriceEvent, RequestEvent, StreamEvent
from backtest.synth.flow import PricePath
from backtest.synth.generate import DEFAULT_TOKENS, SynthParams, SynthSummary, generate
from sandbox.prices import PriceProcess
from tests.backtest.test_synth import NEAR, USDC, _edge_bps

PAIR = [(NEAR, USDC)]
HORIZON = 60  # seconds = ticks at the default 1 s price interval


def markouts_bps(events: Iterable[StreamEvent], horizon: int = HORIZON) -> list[float]:
    """What a solver filling each request at the reference gains ``horizon`` ticks later, in
    bps: it receives ``asset_in`` and gives ``asset_out``, both valued at the request's tick."""
    ticks: list[dict[str, float]] = []
    pending: list[tuple[int, str, str]] = []
    for event in events:
        if isinstance(event, PriceEvent):
            if not ticks or len(ticks[-1]) == len(DEFAULT_TOKENS):
                ticks.append({})
            ticks[-1][event.asset] = float(event.usd)
        elif isinstance(event, RequestEvent):
            r = event.request
            pending.append((len(ticks) - 1, r.asset_in, r.asset_out))
    out = []
    for tick, asset_in, asset_out in pending:
        if tick + horizon >= len(ticks):
            continue
        now, later = ticks[tick], ticks[tick + horizon]
        gain = later[asset_in] / now[asset_in] - later[asset_out] / now[asset_out]
        out.append(gain * 10_000)
    return out


def test_informed_requests_always_trade_the_coming_move() -> None:
    """Share 1: every request buys what is higher 60 s later, so a solver filling it at the
    reference is never ahead at that horizon, and behind by E|move| on average."""
    marks = markouts_bps(generate(pairs=PAIR, duration_s=3600, seed=3, informed_share=1.0))
    assert len(marks) > 10_000
    assert max(marks) <= 1e-6
    # wNEAR: 0.9 annual vol -> sd of a 60 s move 12.4 bps, E|move| = 12.4 * sqrt(2/pi) = 9.9.
    sd = 0.9 * math.sqrt(HORIZON / (365.25 * 86_400)) * 10_000
    assert statistics.mean(marks) == pytest.approx(-sd * math.sqrt(2 / math.pi), rel=0.35)


def test_uninformed_flow_has_no_adverse_selection_and_a_share_scales_it() -> None:
    uninformed = markouts_bps(generate(pairs=PAIR, duration_s=3600, seed=3, informed_share=0.0))
    informed = markouts_bps(generate(pairs=PAIR, duration_s=3600, seed=3, informed_share=1.0))
    part = markouts_bps(generate(pairs=PAIR, duration_s=3600, seed=3, informed_share=0.3))
    assert abs(statistics.mean(uninformed)) < 3.0
    # The price path and the coin are the same in the three streams: a share of 0.3 sits
    # about 30 % of the way from the uninformed mean to the fully informed one.
    lo, hi = statistics.mean(uninformed), statistics.mean(informed)
    assert 0.15 < (statistics.mean(part) - lo) / (hi - lo) < 0.45


def test_informed_share_changes_only_directions() -> None:
    """Prices, times, sizes in USD, competition: all the same; only who buys what changes."""

    def shape(share: float) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = []
        for event in generate(pairs=PAIR, duration_s=600, seed=9, informed_share=share):
            if isinstance(event, RequestEvent):
                r = event.request
                rows.append(
                    (event.ts, r.quote_id, r.exact_in, frozenset((r.asset_in, r.asset_out)))
                )
            elif isinstance(event, PriceEvent):
                rows.append((event.ts, event.asset, event.usd))
            elif isinstance(event, CompetitorEvent):
                rows.append((event.ts, event.quote_id))
        return rows

    assert shape(0.0) == shape(0.5) == shape(1.0)
    a = [e for e in generate(pairs=PAIR, duration_s=600, seed=9) if isinstance(e, RequestEvent)]
    b = list(generate(pairs=PAIR, duration_s=600, seed=9, informed_horizon_s=5.0))
    assert a != [e for e in b if isinstance(e, RequestEvent)]  # another horizon, other moves


def test_stable_pairs_fall_back_to_the_coin() -> None:
    still = {a: t.model_copy(update={"volatility_annual": 0.0}) for a, t in DEFAULT_TOKENS.items()}
    summary = SynthSummary()
    events = list(
        generate(pairs=PAIR, duration_s=300, seed=2, tokens=still, informed_share=1.0,
                 summary=summary)
    )  # fmt: skip
    directions = [e.request.asset_in for e in events if isinstance(e, RequestEvent)]
    assert summary.informed == 0 and 0.35 < directions.count(NEAR) / len(directions) < 0.65


def test_the_price_path_looks_ahead_without_changing_itself() -> None:
    straight = PriceProcess(DEFAULT_TOKENS, seed=4)
    expected = []
    for i in range(20):
        if i:
            straight.step(1.0)
        expected.append(straight.usd(NEAR))
    path = PricePath(PriceProcess(DEFAULT_TOKENS, seed=4), 1.0)
    assert float(path.at(15)[NEAR]) == pytest.approx(expected[15], rel=1e-9)
    for i in range(20):
        assert float(path.at(i)[NEAR]) == pytest.approx(expected[i], rel=1e-9)
        path.release_before(i)
    assert len(path) == 1
    with pytest.raises(IndexError):
        path.at(3)


def test_logistic_competition_has_the_asked_mean_and_sd() -> None:
    params = SynthParams(
        competitor_share=1.0, competitor_edge_bps=8, competitor_edge_sd_bps=6,
        competitor_edge_bps_per_decade=0, competitor_edge_dist="logistic", informed_share=0,
    )  # fmt: skip
    prices: dict[str, Decimal] = {}
    last: RequestEvent | None = None
    edges = []
    for event in generate(pairs=PAIR, duration_s=1200, seed=5, params=params):
        if isinstance(event, PriceEvent):
            prices[event.asset] = Decimal(event.usd)
        elif isinstance(event, RequestEvent):
            last = event
        elif isinstance(event, CompetitorEvent):
            assert last is not None
            r = last.request
            edges.append(
                _edge_bps(r.exact_in, r.amount, event.best_amount, r.asset_in, r.asset_out,
                          prices)
            )  # fmt: skip
    assert statistics.mean(edges) == pytest.approx(8, abs=0.4)
    assert statistics.stdev(edges) == pytest.approx(6, abs=0.4)
    # Logistic tails: 0.86 % beyond 3 sd (a normal has 0.27 %).
    assert sum(abs(e - 8) > 18 for e in edges) / len(edges) > 0.005
    with pytest.raises(ValueError, match="informed_share"):
        SynthParams(informed_share=1.5).check()
    with pytest.raises(ValueError, match="informed_horizon_s"):
        SynthParams(informed_horizon_s=0).check()
