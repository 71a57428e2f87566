"""Reference prices from several sources: median of the fresh ones, divergence guard
(solver/core/state.py). Pure: every observation carries its time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from solver.core.clock import from_micros, micros, span
from solver.core.market import ReferencePrice
from solver.core.state import MarketState

T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
NEAR = "nep141:wrap.near"


def at(seconds: float) -> int:
    """An observation's time, as the desk gives it (µs)."""
    return T0 + span(seconds)


def when(seconds: float) -> datetime:
    """The same time as strategies read it (``ReferencePrice``, the history)."""
    return from_micros(at(seconds))


def state(max_divergence_bps: float | None = 200.0) -> MarketState:
    return MarketState(
        decimals={NEAR: 24}, price_max_age_s=10.0, max_divergence_bps=max_divergence_bps
    )


def test_one_source_is_taken_as_it_comes() -> None:
    s = state()
    s.set_price(NEAR, 3.0, at(0))
    s.set_price(NEAR, 30.0, at(1))  # no other source to disagree with
    s.set_price(NEAR, 1.0, at(0.5))  # older than the source's latest: ignored
    s.set_price(NEAR, -1.0, at(2))  # not a price
    assert s.prices[NEAR] == ReferencePrice(30.0, when(1)) and s.price_at[NEAR] == at(1)
    assert list(s.history[NEAR]) == [(when(0), 3.0), (when(1), 30.0)]
    assert s.divergent == {}


@pytest.mark.parametrize(
    ("observations", "median"),
    [
        ([("a", 3.00), ("b", 3.02)], 3.01),
        ([("a", 3.00), ("b", 3.02), ("c", 3.05)], 3.02),
        ([("a", 3.00), ("b", 3.02), ("c", 3.05), ("d", 3.01)], 3.015),
        ([("a", 3.00), ("a", 3.04)], 3.04),  # a source's latest replaces its earlier one
    ],
)
def test_the_price_is_the_median_of_the_sources(
    observations: list[tuple[str, float]], median: float
) -> None:
    s = state()
    for i, (source, usd) in enumerate(observations):
        s.set_price(NEAR, usd, at(i * 0.1), source)
    assert s.prices[NEAR].usd == pytest.approx(median)
    assert s.history[NEAR][-1] == (when((len(observations) - 1) * 0.1), s.prices[NEAR].usd)


def test_the_combined_price_is_as_old_as_its_oldest_input() -> None:
    s = state()
    s.set_price(NEAR, 3.00, at(0), "a")
    s.set_price(NEAR, 3.02, at(4), "b")
    assert s.prices[NEAR] == ReferencePrice(3.01, when(0))
    assert s.price_at[NEAR] == at(0)  # what the desk's age checks read


def test_a_stale_source_is_left_out_when_another_one_arrives() -> None:
    s = state()
    s.set_price(NEAR, 3.0, at(0), "dead")
    s.set_price(NEAR, 5.0, at(10.5), "live")  # "dead" is 10.5 s older: out, no divergence
    assert s.prices[NEAR] == ReferencePrice(5.0, when(10.5))
    assert s.divergent == {}
    s.set_price(NEAR, 3.0, at(11), "dead")  # back, and now it disagrees
    assert NEAR in s.divergent


def test_sources_that_disagree_leave_no_usable_price() -> None:
    s = state()
    s.set_price(NEAR, 3.00, at(0), "a")
    s.set_price(NEAR, 3.05, at(1), "b")  # 167 bps: within 200
    agreed = s.prices[NEAR]
    assert agreed == ReferencePrice(3.025, when(0))
    s.set_price(NEAR, 3.07, at(2), "b")  # 233 bps > 200
    assert s.divergent[NEAR] == "sources disagree by 233 bps > 200: a=3, b=3.07"
    # The last agreed price stays (PnL marks on it while it ages); history gets nothing.
    assert s.prices[NEAR] == agreed
    assert len(s.history[NEAR]) == 2
    s.set_price(NEAR, 3.06, at(3), "a")  # they agree again
    assert NEAR not in s.divergent
    assert s.prices[NEAR] == ReferencePrice(3.065, when(2))


def test_divergence_exactly_at_the_limit_is_not_one() -> None:
    s = state(max_divergence_bps=100.0)
    s.set_price(NEAR, 2.0, at(0), "a")
    s.set_price(NEAR, 2.02, at(0), "b")  # 100 bps (2.02 / 2 - 1, exactly representable)
    assert s.divergent == {}
    s.set_price(NEAR, 2.0201, at(0), "b")
    assert NEAR in s.divergent


def test_no_limit_means_no_divergence_check() -> None:
    s = state(max_divergence_bps=None)
    s.set_price(NEAR, 1.0, at(0), "a")
    s.set_price(NEAR, 100.0, at(0), "b")
    assert s.divergent == {} and s.prices[NEAR].usd == 50.5
