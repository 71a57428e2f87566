"""The competition model for requests without an observed competitor (backtest/unobserved.py):
pure tests of its buckets, fallbacks, prior, window and draws."""

from __future__ import annotations

import math
import statistics
from collections import deque

import pytest

from backtest.settings import CompetitionPrior, UnobservedSpec
from backtest.unobserved import (
    CompetitionModel,
    Coverage,
    competitor_edge_bps,
    day_quarter,
    pair_key,
    size_bucket,
)
from solver.core.lifecycle import Quote

A, B, C = "nep141:a.near", "nep141:b.near", "nep141:c.near"
HOUR_US = 3_600_000_000


def test_the_competitors_edge_follows_from_ours_and_the_amounts() -> None:
    # Exact-in: we give 100 out at -20 bps; a competitor giving 101 gives the user ~+80 bps.
    assert competitor_edge_bps(-20.0, True, 100, 101) == pytest.approx(79.8, abs=0.01)
    # Exact-out: we ask 100 in; a competitor asking 101 charges the user ~1 % more.
    assert competitor_edge_bps(-20.0, False, 100, 101) == pytest.approx(-118.81, abs=0.01)
    assert competitor_edge_bps(-20.0, True, 100, 100) == pytest.approx(-20.0)


def test_buckets_are_pair_size_decade_and_quarter_of_the_day() -> None:
    assert [size_bucket(x) for x in (0.5, 5, 50, 5e5, 0, 1e12)] == [-1, 0, 1, 5, -3, 9]
    assert [day_quarter(h * HOUR_US) for h in (0, 5, 6, 13, 23, 24)] == [0, 0, 1, 2, 3, 0]


def test_the_size_bucket_is_the_clamped_decade_at_every_edge() -> None:
    # The clamp by comparisons gives max(-3, min(9, floor(log10(x)))) (issue 29): each decade's
    # edge and the floats either side of it, the clamps' own, and NaN, zero and negatives.
    edges = [10.0**k for k in range(-6, 14)]
    sizes = [x for e in edges for x in (math.nextafter(e, 0), e, math.nextafter(e, math.inf))]
    sizes += [1e-300, 1.5e-3, 0.999e-2, 7.5, 1e10, 9.99e9, 1e300, 0.0, -1.0, -0.0, math.nan]
    for x in sizes:
        expected = max(-3, min(9, math.floor(math.log10(x)))) if x > 0 else -3
        assert size_bucket(x) == expected, x
    with pytest.raises(OverflowError):  # as before: an infinite notional has no decade
        size_bucket(math.inf)


def test_observe_and_draw_use_the_route_of_size_bucket_and_day_quarter() -> None:
    # observe and _buckets_of compute the size and the quarter inline (issue 29): the route
    # they file an answer under is size_bucket's and day_quarter's at every edge.
    edges = [10.0**k for k in range(-6, 14)]
    sizes = [x for e in edges for x in (math.nextafter(e, 0), e, math.nextafter(e, math.inf))]
    sizes += [1e-300, 7.5, 1e300, 0.0, -1.0, -0.0, math.nan]
    quarter_us = 6 * HOUR_US
    times = [k * quarter_us + d for k in range(9) for d in (-1, 0, 1)]
    for x in sizes:
        for t_us in times:
            model = CompetitionModel(UnobservedSpec(), seed=0)
            model.observe(A, B, x, t_us, 1.0)
            assert list(model._by_route) == [(A, B, size_bucket(x), day_quarter(t_us))], (x, t_us)
            assert model._buckets_of(A, B, x, t_us)[0] == deque([1.0])
    model = CompetitionModel(UnobservedSpec(), seed=0)
    with pytest.raises(OverflowError):  # as size_bucket: an infinite notional has no decade
        model.observe(A, B, math.inf, 0, 1.0)


def test_a_draw_uses_the_finest_bucket_with_enough_observations() -> None:
    model = CompetitionModel(UnobservedSpec(min_observed=3), seed=1)
    for edge in (-10.0, -11.0, -12.0):  # pair A/B, 50 USD, first quarter
        model.observe(A, B, 50.0, 0, edge)
    model.observe(A, B, 5_000.0, 0, -40.0)  # another size
    model.observe(C, B, 50.0, 0, 99.0)  # another pair
    draws = {model.draw(f"q{i}", B, A, 60.0, 0) for i in range(200)}  # either direction
    assert draws == {-10.0, -11.0, -12.0}
    # Size 5,000 USD has one observation: the pair's bucket (all sizes) is used instead.
    assert {model.draw(f"q{i}", A, B, 5_000.0, 0) for i in range(200)} == {
        -10.0, -11.0, -12.0, -40.0,
    }  # fmt: skip
    # A pair with too few of its own falls back to every pair (which needs one).
    assert 99.0 in {model.draw(f"q{i}", C, A, 50.0, 0) for i in range(400)}


def test_the_draw_belongs_to_the_request() -> None:
    """Same seed and quote_id, same competitor, whatever was asked before; another seed, another."""

    def model(seed: int) -> CompetitionModel:
        m = CompetitionModel(UnobservedSpec(min_observed=1), seed)
        for i in range(100):
            m.observe(A, B, 50.0, 0, float(i))
        return m

    one, two = model(7), model(7)
    ids = [f"synth-7-{i}" for i in range(50)]
    forward = [one.draw(q, A, B, 50.0, 0) for q in ids]
    backward = [two.draw(q, A, B, 50.0, 0) for q in reversed(ids)]
    assert forward == backward[::-1]
    assert forward != [model(8).draw(q, A, B, 50.0, 0) for q in ids]


def test_the_window_keeps_the_most_recent() -> None:
    model = CompetitionModel(UnobservedSpec(min_observed=1, window=10), seed=0)
    for i in range(100):
        model.observe(A, B, 50.0, 0, float(i))
    assert {model.draw(f"q{i}", A, B, 50.0, 0) for i in range(500)} == {
        float(i) for i in range(90, 100)
    }


def test_the_prior_stands_in_before_anything_was_observed() -> None:
    assert CompetitionModel(UnobservedSpec(), seed=0).draw("q", A, B, 50.0, 0) is None
    prior = UnobservedSpec(prior=CompetitionPrior(edge_bps=-8.0, sd_bps=6.0))
    model = CompetitionModel(prior, seed=0)
    draws = [model.draw(f"q{i}", A, B, 50.0, 0) for i in range(4000)]
    values = [d for d in draws if d is not None]
    assert len(values) == 4000
    assert statistics.fmean(values) == pytest.approx(-8.0, abs=0.3)
    assert statistics.stdev(values) == pytest.approx(6.0, abs=0.3)


def test_coverage_counts_the_queued_quotes_by_route_when_it_is_read() -> None:
    """The relay queues each judged quote (and each with an observed competitor); the counts by
    route and by pair are those of counting one by one, and a fold empties the queues."""

    def quote(i: int, asset_in: str, asset_out: str) -> Quote:
        return Quote(f"q{i}", asset_in, asset_out, 1, 1, 0, 0)

    coverage = Coverage("model")
    coverage.judged.extend([quote(1, A, B), quote(2, B, A), quote(3, A, B), quote(4, C, A)])
    coverage.observed.extend([quote(1, A, B), quote(4, C, A)])
    assert coverage.routes == {(A, B): [2, 1], (B, A): [1, 0], (C, A): [1, 1]}
    assert not coverage.judged and not coverage.observed  # counted: the queues are empty
    coverage.judged.append(quote(5, B, A))
    coverage.fold()  # the replay's tick
    coverage.judged.append(quote(6, B, A))
    coverage.observed.append(quote(6, B, A))
    assert coverage.by_pair == {pair_key(A, B): [5, 2], pair_key(A, C): [1, 1]}
    competition = coverage.summary({}, 0.5)
    assert (competition["decided"], competition["observed"], competition["unobserved"]) == (
        6,
        3,
        3,
    )
