"""The measurements' run-at-a-time counting gives the counts, and the key order, of counting one
by one (backtest/measure/columns.py), on queues that take the short way and on those that do
not (times that go back, NaN, edges past the clamp, sizes not positive, wins)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from backtest.measure.columns import count_outcomes, count_timeline
from backtest.measure.detail import Timeline
from backtest.measure.measurements import QUEUE_MAX, Measurements
from solver.protocol.quote_request import QuoteRequest

CLAMP, PER_DECADE = 500, 5
A, B = "nep141:a", "nep141:b"
Request = tuple[str, str, int, float, str | None]
Bins = dict[int, list[int]]


def reference_timeline(timeline: Timeline, queue: list[Request]) -> None:
    for _, _, t_us, _, skip in queue:
        timeline.add(t_us / 1e6, "quoted" if skip is None else skip)


def reference_outcomes(
    edge_bins: Bins, size_bins: Bins, resolved: list[tuple[float, float, bool]]
) -> None:
    for edge_bps, notional_usd, won in resolved:
        if -CLAMP <= edge_bps <= CLAMP:
            bin_ = round(edge_bps)
        else:
            bin_ = CLAMP if edge_bps > CLAMP else -CLAMP
        counts = edge_bins.setdefault(bin_, [0, 0])
        counts[0] += 1
        counts[1] += won
        size = (
            math.floor(math.log10(notional_usd) * PER_DECADE)
            if notional_usd > 0
            else -10 * PER_DECADE
        )
        size_bins.setdefault(size, [0, 0])[1 if won else 0] += 1


def requests(rng: random.Random, n: int, *, sorted_times: bool) -> list[Request]:
    t = 1_735_689_600_000_000 + rng.randrange(10**9)
    out: list[Request] = []
    for _ in range(n):
        t += rng.choice((0, 0, 1_000, 20_000, 700_000, 61_000_000))
        skip = rng.choice((None, None, None, "spread", "quoted", "inventory"))
        out.append((A, B, t if sorted_times else t - rng.randrange(10**8), 1.5, skip))
    return out


@pytest.mark.parametrize("sorted_times", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_the_timeline_counts_as_one_by_one(seed: int, sorted_times: bool) -> None:
    rng = random.Random(seed)
    ours, theirs = Timeline(max_buckets=8), Timeline(max_buckets=8)  # merges happen
    for _ in range(5):
        queue = requests(rng, rng.randrange(1, 600), sorted_times=sorted_times)
        count_timeline(ours, [t_us for _, _, t_us, _, _ in queue], [q[4] for q in queue])
        reference_timeline(theirs, queue)
        assert (ours.origin, ours.width_s) == (theirs.origin, theirs.width_s)
        assert list(ours.buckets) == list(theirs.buckets)
        for index, counts in theirs.buckets.items():
            assert list(ours.buckets[index].items()) == list(counts.items())


def outcomes(rng: random.Random, n: int, odd: bool) -> list[tuple[float, float, bool]]:
    out = []
    for _ in range(n):
        edge = rng.uniform(-80.0, 40.0)
        size = 10 ** rng.uniform(-1.0, 6.0)
        if odd and rng.random() < 0.05:
            edge = rng.choice((math.nan, 900.0, -1e9, math.inf, 0.5, -2.5))
        if odd and rng.random() < 0.05:
            size = rng.choice((0.0, -3.0, math.nan))
        out.append((edge, size, rng.random() < 0.1))
    return out


@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_outcomes_count_as_one_by_one(seed: int, odd: bool) -> None:
    rng = random.Random(seed)
    ours: tuple[Bins, Bins] = ({}, {})
    theirs: tuple[Bins, Bins] = ({}, {})
    for _ in range(4):
        resolved = outcomes(rng, rng.randrange(1, 500), odd)
        edges, sizes = [e for e, _, _ in resolved], [u for _, u, _ in resolved]
        wins = [i for i, (_, _, won) in enumerate(resolved) if won]
        count_outcomes(*ours, edges, sizes, wins, clamp_bps=CLAMP, per_decade=PER_DECADE)
        reference_outcomes(*theirs, resolved)
        assert list(ours[0].items()) == list(theirs[0].items())
        assert list(ours[1].items()) == list(theirs[1].items())
    assert Counter(type(v) for bins in ours for pair in bins.values() for v in pair) == Counter(
        {int: sum(2 * len(bins) for bins in ours)}
    )


def test_the_measurements_queues_count_as_one_by_one() -> None:
    """What the replay queues as columns (requests; outcomes and the positions of the won
    ones) is counted as one by one, across folds: a win is counted on its own outcome."""
    rng = random.Random(7)
    m = Measurements({A: 6, B: 18}, [A, B])
    queued = requests(rng, 2 * QUEUE_MAX + 123, sorted_times=True)
    resolved = outcomes(rng, 2 * QUEUE_MAX + 77, odd=False)
    for i, (asset_in, asset_out, t_us, latency, skip) in enumerate(queued):
        m.on_request(QuoteRequest(f"q{i}", asset_in, asset_out, True, 1, 0), t_us, latency, skip)
    for edge, size, won in resolved:
        m.on_resolved(edge, size, won)
    m.fold()
    timeline = Timeline()
    reference_timeline(timeline, queued)
    assert list(m.outcomes.buckets) == list(timeline.buckets)
    for index, counts in timeline.buckets.items():
        assert list(m.outcomes.buckets[index].items()) == list(counts.items())
    edge_bins: Bins = {}
    size_bins: Bins = {}
    reference_outcomes(edge_bins, size_bins, resolved)
    assert list(m.edge_bins.items()) == list(edge_bins.items())
    assert list(m.size_bins.items()) == list(size_bins.items())
    skips = Counter(skip for *_, skip in queued if skip is not None)
    everything = m.pairs.all
    assert (everything.requests, everything.quoted) == (
        len(queued),
        len(queued) - sum(skips.values()),
    )
    assert everything.skips == skips
    assert m.latency.n == len(queued)


def test_queued_loss_reasons_and_latencies_count_as_one_by_one() -> None:
    """The relay queues each loss's reason, counted into ``lost`` at a fold with the late
    answers counted at once; the latency total is the sum in the order the requests came."""
    rng = random.Random(3)
    m = Measurements({A: 6, B: 18}, [A, B])
    m.lost["late"] = 2  # a late answer is counted at once
    reasons = [rng.choice(("competitor", "taker_limit", "late")) for _ in range(1_000)]
    m.outcome_reasons.extend(reasons)
    latencies = [rng.lognormvariate(3.0, 1.0) for _ in range(3_000)]
    for i, ms in enumerate(latencies):
        m.on_request(QuoteRequest(f"q{i}", A, B, True, 1, 0), 1_000_000 * i, ms, None)
    m.fold()
    expected = Counter(reasons)
    expected["late"] += 2
    assert m.lost == dict(expected) and not m.outcome_reasons
    total = 0.0
    for ms in latencies:
        total += ms
    assert m.latency.total == total  # the same float, not an approximation
