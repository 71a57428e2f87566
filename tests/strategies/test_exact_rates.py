"""The desk's view answers ``conversion_rate`` itself, cached per price update (issue 29): the
same result as the generic path over the view's public methods, for every price, age and
decimals, and again after each price update."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core.clock import SECOND, from_micros
from solver.core.inventory import Inventory
from solver.core.market import EXACT_RATE_VIEWS, ReferencePrice
from solver.core.state import LiveMarketView, MarketState
from strategies.pricing import conversion_rate

T0 = 1_764_000_000 * SECOND
ASSETS = ("a", "b", "c", "unknown")


class GenericView(LiveMarketView):
    """The same view taking the generic path (only the exact type is registered)."""

    __slots__ = ()


usd = st.one_of(
    st.floats(min_value=1e-12, max_value=1e12),
    st.sampled_from([0.0, -1.0, math.inf, math.nan, 3.0, 0.1, 1e-300]),
)
step = st.tuples(
    st.sampled_from(ASSETS[:3]),
    usd,
    st.integers(min_value=-30 * SECOND, max_value=0),  # the price's time, before now
    st.booleans(),  # through set_price (False: written directly, as tests do)
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(step, min_size=1, max_size=12),
    ages=st.lists(
        st.one_of(st.none(), st.sampled_from([0.0, 1.0, 10.0]), st.floats(0, 40)), min_size=1
    ),
    later=st.integers(min_value=0, max_value=20 * SECOND),
)
def test_the_cached_rate_is_the_generic_one(
    steps: list[tuple[str, float, int, bool]], ages: list[float | None], later: int
) -> None:
    assert LiveMarketView in EXACT_RATE_VIEWS and GenericView not in EXACT_RATE_VIEWS
    state = MarketState(decimals={"a": 24, "b": 6, "c": 0}, max_divergence_bps=None)
    inventory = Inventory()
    for asset, price, offset, through_state in steps:
        if through_state:
            state.set_price(asset, price, T0 + offset)
        else:
            state.prices[asset] = ReferencePrice(price, from_micros(T0 + offset))
        now = T0 + later
        fast, slow = LiveMarketView(state, inventory, now), GenericView(state, inventory, now)
        for age in ages:
            for src in ASSETS:
                for dst in ASSETS:
                    expected = conversion_rate(slow, src, dst, age)
                    assert conversion_rate(fast, src, dst, age) == expected
