"""Fill models, the latency model and the backtest settings."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from backtest.fills import (
    LOST_COMPETITOR,
    LOST_MODEL,
    LOST_RACE,
    LOST_TAKER,
    AlwaysFill,
    CompetitorBook,
    CompetitorFill,
    LatencyModel,
    LogisticFill,
    edge_bps,
    make_fill_model,
    seeded,
)
from backtest.settings import (
    FillSpec,
    LatencySpec,
    RaceSpec,
    TakerSpec,
    UnobservedSpec,
    load_settings,
)
from backtest.takers import TakerModel
from solver.core.clock import micros, span
from solver.core.lifecycle import Quote
from solver.errors import ConfigError

# Not from replay_helpers: these models are tested without the replay.
USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
T0 = micros(datetime(2026, 1, 5, 12, 0, tzinfo=UTC))
WIDE = TakerModel(TakerSpec(kind="fixed", tolerance_bps=5_000, max_bps=5_000))
"""Users who take anything short of a 50 % loss: the competition alone decides."""


def at(seconds: float) -> int:
    return T0 + span(seconds)


def quote(exact_in: bool, amount_in: int, amount_out: int) -> Quote:
    return Quote("q", NEAR, USDC, amount_in, amount_out, 0, at(60), exact_in)


@pytest.mark.parametrize(
    ("exact_in", "amount_in", "amount_out", "best", "wins"),
    [
        (True, 1000, 100, 99, True),  # exact-in: more out than the best competitor
        (True, 1000, 100, 100, False),  # a tie is not better for the user
        (True, 1000, 100, 101, False),
        (True, 1000, 100, None, True),  # unobserved, uncontested: the upper bound
        (False, 100, 1000, 101, True),  # exact-out: less in than the best competitor
        (False, 100, 1000, 100, False),
        (False, 100, 1000, 99, False),
        (False, 100, 1000, None, True),
    ],
)
def test_competitor_model(
    exact_in: bool, amount_in: int, amount_out: int, best: int | None, wins: bool
) -> None:
    uncontested = UnobservedSpec(mode="uncontested")
    first = RaceSpec(median_ms=0)  # the competitor always answers first: a tie is lost
    model = CompetitorFill(WIDE, uncontested, first)
    verdict = model.decide(quote(exact_in, amount_in, amount_out), best, -20.0)
    tie = best is not None and best == (amount_out if exact_in else amount_in)
    assert verdict == (None if wins else LOST_RACE if tie else LOST_COMPETITOR)


def test_a_tie_goes_to_whoever_answered_first() -> None:
    """Issue 25: a competitor that answers faster wins a tie, a slower one loses it. Its
    latency belongs to the request (a hash of seed and quote_id), lognormal around 40 ms."""
    model = CompetitorFill(WIDE, UnobservedSpec(mode="uncontested"), RaceSpec())
    q = quote(True, 1000, 100)
    rival = model.race.competitor_ms(q.quote_id)
    assert model.race.competitor_ms(q.quote_id) == rival  # the same competitor
    assert model.decide(q, 100, -20.0, latency_ms=rival - 1) is None
    assert model.decide(q, 100, -20.0, latency_ms=rival + 1) == LOST_RACE
    assert model.decide(q, 99, -20.0, latency_ms=1e6) is None  # a better price needs no race
    spread = [model.race.competitor_ms(f"q{i}") for i in range(4000)]
    assert sorted(spread)[2000] == pytest.approx(40.0, rel=0.05)


def test_always_wins_within_the_takers_limit() -> None:
    assert AlwaysFill(WIDE).decide(quote(True, 1, 1), 10**30, -20.0) is None
    assert AlwaysFill(WIDE).decide(quote(True, 1, 1), 10**30, -1e6) == LOST_TAKER
    assert AlwaysFill().decide(quote(True, 1, 1), 10**30, -600.0) == LOST_TAKER  # defaults


def test_logistic_is_deterministic_for_a_seed_and_follows_its_probability() -> None:
    def decisions(seed: int, edge: float, n: int = 20_000) -> list[bool]:
        model = LogisticFill(0.5, 0.1, seeded(seed, 1), WIDE)
        q = quote(True, 1, 1)
        return [model.decide(q, None, edge) is None for _ in range(n)]

    first, again, other = decisions(3, -10.0), decisions(3, -10.0), decisions(4, -10.0)
    assert first == again and first != other
    p = 1 / (1 + math.exp(-(0.5 - 1.0)))
    assert sum(first) / len(first) == pytest.approx(p, abs=0.015)
    model = LogisticFill(0.0, 1.0, seeded(0, 1))
    assert model.probability(-1e6) == 0.0 and model.probability(1e6) == 1.0  # no overflow
    assert model.probability(0.0) == 0.5
    assert LogisticFill(0.0, 0.0, seeded(0, 1)).decide(quote(True, 1, 1), None, 0) in (
        None,
        LOST_MODEL,
    )


def test_make_fill_model_by_name() -> None:
    assert make_fill_model(FillSpec(model="always"), 0).name == "always"
    assert make_fill_model(FillSpec(model="competitor"), 0).name == "competitor"
    logistic = make_fill_model(FillSpec(model="logistic", a=1.0, b=0.2), 0)
    assert isinstance(logistic, LogisticFill) and (logistic.a, logistic.b) == (1.0, 0.2)
    fixed = TakerSpec(kind="fixed", tolerance_bps=25)
    model = make_fill_model(FillSpec(model="always", taker=fixed), 0)
    assert model.takers.limit_bps("any") == 25.0


def test_edge_is_the_users_gain_against_the_reference() -> None:
    # 1 NEAR (3 USD) for 2.994 USDC: the user gives up 20 bps.
    assert edge_bps(10**24, 3.0 / 1e24, 2_994_000, 1.0 / 1e6) == pytest.approx(-20.0)
    assert edge_bps(10**24, 3.0 / 1e24, 3_000_000, 1.0 / 1e6) == pytest.approx(0.0)
    assert edge_bps(0, 3.0, 1, 1.0) == 0.0


def test_latency_model() -> None:
    assert LatencyModel(LatencySpec(kind="fixed", ms=12.5), 0).sample() == 12.5
    spec = LatencySpec(kind="lognormal", median_ms=40.0, sigma=0.5)
    draws = [LatencyModel(spec, 9).sample() for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]  # a new model, the same first draw
    model = LatencyModel(spec, 9)
    samples = sorted(model.sample() for _ in range(10_001))
    assert samples[5_000] == pytest.approx(40.0, rel=0.05)
    assert samples[0] > 0
    # the replay's draws: the same milliseconds, each with its µs as a timedelta rounds them
    pairs = list(itertools.islice(LatencyModel(spec, 9).draws(), 5_000))
    same = LatencyModel(spec, 9)
    assert [ms for ms, _ in pairs] == [same.sample() for _ in range(5_000)]
    assert all(timedelta(milliseconds=ms) == timedelta(microseconds=us) for ms, us in pairs)
    fixed = LatencyModel(LatencySpec(kind="fixed", ms=0.0125), 0).draws()
    assert next(fixed) == next(fixed) == (0.0125, 12)


def test_a_competitor_is_forgotten_once_one_ttl_newer_came() -> None:
    book = CompetitorBook(ttl_us=1_000)
    book.add("early", 5, 0)
    book.add("other", 6, 1_000)
    assert book.pop("early") == 5  # exactly one ttl older: still there
    book.add("early", 5, 0)
    book.add("other", 6, 1_001)
    assert book.pop("early") is None and book.pop("other") == 6
    assert book.pop("other") is None  # popped once
    book.add("q", 7, 2_000)
    book.add("q", 8, 3_500)  # a newer answer for the same request replaces the old
    assert book.pop("q") == 8
    for i in range(100_000):  # nobody asks: memory stays bounded by what is live
        book.add(f"q{i}", i, 10_000 + i)
        if i % 1_000 == 0:
            book.sweep()  # the replay's tick
    assert len(book) == 1_001 and len(book.best) <= 2 * 4_096 + 1_000


def test_a_sweep_forgets_only_expired_competitors_and_waits_for_growth() -> None:
    book = CompetitorBook(ttl_us=1_000)
    for i in range(5_000):
        book.add(f"q{i}", i, i)
    book.sweep()  # 5,000 held, over the 4,096 a first sweep waits for: those before 3,999 go
    assert len(book.best) == 1_001 and book.pop("q3999") == 3_999 and book.pop("q3998") is None
    book.add("late", 1, 5_000)
    book.sweep()  # 1,001 held: under twice what the last sweep kept, nothing goes
    assert len(book.best) == 1_001


def test_settings_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "bt.yaml"
    path.write_text(
        f'balances: {{"{USDC}": "123"}}\nsettlement_delay_ms: 250\nfill: {{model: logistic, a: 1, b: 0.3}}\n'
    )
    settings = load_settings(path, fill_model="always", seed=7, sign=None)
    assert settings.balances == {USDC: 123}
    assert settings.settlement_delay_ms == 250 and settings.seed == 7 and not settings.sign
    assert (settings.fill.model, settings.fill.a, settings.fill.b) == ("always", 1.0, 0.3)
    assert load_settings(None).fill.model == "competitor"
    path.write_text("settlement_delay: 5\n")
    with pytest.raises(ConfigError, match="settlement_delay"):
        load_settings(path)
    path.write_text(f'balances: {{"{USDC}": 1.5}}\n')
    with pytest.raises(ConfigError, match="balances"):
        load_settings(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")


def test_the_documented_example_is_the_defaults() -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "backtest.yaml"
    assert load_settings(example) == load_settings(None)


def test_latency_draws_are_the_median_times_the_exponential_of_the_seeded_normals() -> None:
    """The block of draws is made in C (map): the very floats of ``median * exp(sigma * z)``
    for each normal of the model's generator, in order, across blocks."""
    spec = LatencySpec(kind="lognormal", median_ms=40.0, sigma=0.6)
    rng = seeded(9, 2)
    normals = rng.standard_normal(4096).tolist() + rng.standard_normal(4096).tolist()
    expected = [40.0 * math.exp(0.6 * z) for z in normals]
    draws = list(itertools.islice(LatencyModel(spec, 9).draws(), 8192))
    assert [ms for ms, _ in draws] == expected
