"""Fast paths of the quote path give what the general ones give (issue 29): the desk's view
answers ``conversion_rate`` itself (``exact_conversion_rate``), cached per price update, with the generic path's result for
every price, age and decimals, again after each price update; the spread's integer path quotes
what its Fraction path would."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from solver.core.clock import SECOND, from_micros
from solver.core.inventory import Inventory
from solver.core.market import QuoteRequest, ReferencePrice
from solver.core.state import LiveMarketView, MarketState
from strategies.pricing import U128_MAX, conversion_rate, gross_outflow
from strategies.spread import SpreadConfig, SpreadStrategy

T0 = 1_764_000_000 * SECOND
ASSETS = ("a", "b", "c", "unknown")


class GenericView(LiveMarketView):
    """The same view taking the generic path (it offers no ``exact_conversion_rate``)."""

    __slots__ = ()
    exact_conversion_rate = None  # type: ignore[assignment]


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
    assert callable(LiveMarketView.exact_conversion_rate)  # the fast path is the desk's
    assert GenericView.exact_conversion_rate is None
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


@settings(max_examples=400, deadline=None)
@example(10**10, True, ("b", "a"), (1.0, 2.0, 3.0), 0, 20.0, 0, LiveMarketView)
@example(10**10, True, ("b", "a"), (1.0, 2.0, 3.0), 100, 20.0, -1, LiveMarketView)
@example(10**20, False, ("a", "b"), (3.0, 1.0, 3.0), 100, 25.0, 0, LiveMarketView)
@example(10**20, False, ("a", "b"), (3.0, 1.0, 3.0), 0, 25.0, -1, LiveMarketView)
@given(
    amount=st.one_of(
        st.integers(1, 10**30), st.integers(10**6, 10**26), st.sampled_from([1, 10**6, U128_MAX])
    ),
    exact_in=st.booleans(),
    direction=st.sampled_from([("a", "b"), ("b", "a"), ("a", "c"), ("c", "b")]),
    usd=st.tuples(st.floats(1e-6, 1e6), st.floats(1e-6, 1e6), st.floats(1e-6, 1e6)),
    fee_pips=st.sampled_from([0, 1, 100, 999_999, -5]),
    spread_bps=st.sampled_from([0.0, 0.5, 20.0, 25.0, 333.3]),
    free=st.one_of(st.integers(0, 10**31), st.sampled_from([-1, 0, 1])),
    view=st.sampled_from([LiveMarketView, GenericView]),
)
def test_the_flat_spread_is_the_general_one(
    amount: int,
    exact_in: bool,
    direction: tuple[str, str],
    usd: tuple[float, float, float],
    fee_pips: int,
    spread_bps: float,
    free: int,
    view: type[LiveMarketView],
) -> None:
    """The spread's integer path (a constant spread; its checks and helpers inline) quotes what
    its Fraction path would, through the desk's view and the generic one. ``free`` in -1..1:
    free inventory that far from the quote's gross outflow (the boundary)."""
    state = MarketState(decimals={"a": 24, "b": 6, "c": 18}, max_divergence_bps=None)
    for asset, price in zip("abc", usd, strict=True):
        state.set_price(asset, price, T0)
    state.fee_pips = fee_pips
    inventory = Inventory()
    strategy = SpreadStrategy(SpreadConfig(spread_bps=spread_bps))
    request = QuoteRequest("q", *direction, exact_in, amount, 60_000)
    if free <= 1:  # at the boundary: the gross outflow of the quote with plenty free
        inventory.set_confirmed(dict.fromkeys("abc", 10**40), T0)
        other = strategy._quote_widening(request, view(state, inventory, T0 + SECOND))
        out = amount if not exact_in else other or 0
        free = max(0, gross_outflow(out, fee_pips) + free)
    inventory.set_confirmed(dict.fromkeys("abc", free), T0 + 1)
    market = view(state, inventory, T0 + SECOND)
    assert strategy.quote(request, market) == strategy._quote_widening(request, market)
