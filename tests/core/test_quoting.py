"""The quote pipeline ends every request in one outcome with a reason (DESIGN "The quote path")."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from solver.core import quoting as q
from solver.core.clock import MILLI, MINUTE, from_micros, micros, span
from solver.core.inventory import Inventory
from solver.core.lifecycle import Quote
from solver.core.market import MarketView, QuoteRequest
from solver.core.pauses import GLOBAL, Pause, Pauses
from solver.core.quoting import PipelineSettings, QuotePipeline, Route
from solver.core.state import MarketState

NOW = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
E6, E24 = 10**6, 10**24


class Fixed:
    """Returns a fixed answer (or raises it) and records what it saw."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[QuoteRequest] = []

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        self.seen.append(request)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]


def build(
    answer: Any = 3 * E6, *, route: dict[str, Any] | None = None, **settings: Any
) -> tuple[QuotePipeline, Fixed]:
    state = MarketState(decimals={USDC: 6, NEAR: 24})
    state.set_salt(b"\x01\x02\x03\x04", NOW)
    state.set_price(USDC, 1.0, NOW)
    state.set_price(NEAR, 3.0, NOW)
    inventory = Inventory(floors={USDC: E6})
    inventory.set_confirmed({USDC: 1_000 * E6, NEAR: 1_000 * E24}, NOW)
    strategy = Fixed(answer)
    near_usdc = Route(
        NEAR, USDC, strategy, min_notional_usd=1.0, max_notional_usd=10_000.0, **(route or {})
    )
    pipeline = QuotePipeline(
        PipelineSettings(**settings), {(NEAR, USDC): near_usdc}, inventory, state, Pauses(),
        timer=lambda: 0.0,  # the strategy's budget is tested with its own clock, not the CPU's
    )  # fmt: skip
    return pipeline, strategy


def req(
    amount: int = E24, *, exact_in: bool = True, quote_id: str = "q1", min_deadline_ms: int = 60_000
) -> QuoteRequest:
    return QuoteRequest(quote_id, NEAR, USDC, exact_in, amount, min_deadline_ms)


def test_happy_path_reserves_and_sets_the_deadline() -> None:
    pipeline, strategy = build()
    quote = pipeline.decide(req(), NOW)
    assert isinstance(quote, Quote)
    assert (quote.amount_in, quote.amount_out, quote.fee) == (E24, 3 * E6, 0)
    assert quote.deadline == NOW + 65_000 * MILLI
    assert pipeline.inventory.reserved == {USDC: 3 * E6}
    assert strategy.seen == [req()]


def test_exact_out_puts_the_strategy_answer_on_the_input_side() -> None:
    pipeline, _ = build(answer=2 * E24)
    quote = pipeline.decide(req(6 * E6, exact_in=False), NOW)
    assert isinstance(quote, Quote)
    assert (quote.amount_in, quote.amount_out) == (2 * E24, 6 * E6)


def test_protocol_fee_is_reserved_with_the_outflow() -> None:
    pipeline, _ = build()
    pipeline.state.fee_pips = 1_000  # 0.1 %
    quote = pipeline.decide(req(), NOW)
    assert isinstance(quote, Quote) and quote.fee == 3_000
    assert pipeline.inventory.reserved[USDC] == 3 * E6 + 3_000


@pytest.mark.parametrize(
    ("setup", "request_kwargs", "reason"),
    [
        (lambda p: p.set_route((NEAR, USDC), None), {}, q.UNKNOWN_PAIR),
        (
            lambda p: p.set_route((NEAR, USDC), replace(p.routes[(NEAR, USDC)], enabled=False)),
            {},
            q.PAIR_DISABLED,
        ),
        (lambda p: p.pauses.add(Pause(GLOBAL, "drawdown", "-20 USD", NOW)), {}, q.PAUSED),
        (lambda p: p.pauses.add(Pause(f"{NEAR}->{USDC}", "operator", "x", NOW)), {}, q.PAUSED),
        (lambda p: None, {"min_deadline_ms": 600_000}, q.DEADLINE_TOO_LONG),
        (lambda p: setattr(p.state, "salt", None), {}, q.NO_SALT),
        (
            lambda p: setattr(p.inventory, "confirmed_at", NOW - 5 * MINUTE),
            {},
            q.STALE_BALANCES,
        ),
        (lambda p: p.state.prices.pop(NEAR), {}, q.NO_PRICE),
        (
            lambda p: (
                p.state.set_price(NEAR, 3.0, NOW - MINUTE)
                or p.state.prices.update(
                    {NEAR: replace(p.state.prices[NEAR], observed_at=from_micros(NOW - MINUTE))}
                )
                or p.state.price_at.update({NEAR: NOW - MINUTE})
            ),
            {},
            q.STALE_PRICE,
        ),
        (lambda p: None, {"amount": E24 // 10}, q.BELOW_MIN_SIZE),
        (lambda p: None, {"amount": 5_000 * E24}, q.ABOVE_MAX_SIZE),
    ],
)
def test_filters_skip_with_a_reason(
    setup: Any, request_kwargs: dict[str, Any], reason: str
) -> None:
    pipeline, _ = build()
    setup(pipeline)
    outcome = pipeline.decide(req(**request_kwargs), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == reason
    assert pipeline.inventory.reserved == {}


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ZeroDivisionError("boom"), q.STRATEGY_ERROR),
        (None, q.STRATEGY_NO_QUOTE),
        (3.0e6, q.STRATEGY_BAD_AMOUNT),
        (True, q.STRATEGY_BAD_AMOUNT),
        (0, q.STRATEGY_BAD_AMOUNT),
        (-5, q.STRATEGY_BAD_AMOUNT),
        (2**128, q.STRATEGY_BAD_AMOUNT),
        (2**127, q.STRATEGY_BAD_AMOUNT),  # a delta must fit i128
        (4 * E6, q.PRICE_GUARD),  # 4 USDC for 3 USD of NEAR: gives away 33 %
    ],
)
def test_misbehaving_strategies_mean_no_quote(answer: Any, reason: str) -> None:
    pipeline, _ = build(answer=answer)
    outcome = pipeline.decide(req(), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == reason
    assert pipeline.inventory.reserved == {}


def test_slow_strategy_is_skipped() -> None:
    ticks = iter([0.0, 0.050])
    pipeline, _ = build()
    pipeline.timer = lambda: next(ticks)
    outcome = pipeline.decide(req(), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.STRATEGY_SLOW


def test_fifty_requests_for_the_whole_balance_reserve_it_once() -> None:
    pipeline, _ = build(
        answer=999 * E6, max_open_exposure_usd=10**9, route={"max_giveaway_bps": 10**6}
    )
    pipeline.inventory.set_confirmed({USDC: 1_000 * E6}, NOW)
    outcomes = [pipeline.decide(req(333 * E24, quote_id=f"q{i}"), NOW) for i in range(50)]
    quotes = [o for o in outcomes if isinstance(o, Quote)]
    assert len(quotes) == 1
    assert {o.reason for o in outcomes if isinstance(o, q.Skip)} == {q.INSUFFICIENT_INVENTORY}
    assert pipeline.inventory.free(USDC) == 0


def test_exposure_and_rate_limits() -> None:
    pipeline, _ = build(max_open_exposure_usd=5.0)
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)
    outcome = pipeline.decide(req(quote_id="b"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.EXPOSURE_LIMIT
    limited, _ = build(max_quotes_per_s=2)
    results = [limited.decide(req(quote_id=f"r{i}"), NOW) for i in range(3)]
    assert [type(r).__name__ for r in results] == ["Quote", "Quote", "Skip"]
    later = limited.decide(req(quote_id="r9"), NOW + span(1))
    assert isinstance(later, Quote)


def test_per_token_limit() -> None:
    pipeline, _ = build(max_open_per_token={USDC: 5 * E6})
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)
    outcome = pipeline.decide(req(quote_id="b"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.PER_TOKEN_LIMIT


def test_a_pause_skips_its_scope_only_and_says_why() -> None:
    pipeline, _ = build()
    pipeline.pauses.add(Pause(f"{USDC}->{NEAR}", "operator", "the other direction", NOW))
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)
    pipeline.pauses.add(Pause(f"{NEAR}->{USDC}", "operator", "watching it", NOW))
    outcome = pipeline.decide(req(quote_id="b"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.PAUSED
    assert outcome.detail == "operator: watching it"
    pipeline.pauses.remove(f"{NEAR}->{USDC}", "operator")
    assert isinstance(pipeline.decide(req(quote_id="c"), NOW), Quote)


# ----------------------------------------------------------------- per-pair guard and partners


@pytest.mark.parametrize(
    ("answer", "route", "reason"),
    [
        (3_080_000, {}, None),  # 3.08 USDC for 3 USD of NEAR: 267 bps, within the default 300
        (3_100_000, {}, q.PRICE_GUARD),  # 333 bps
        (3_100_000, {"max_giveaway_bps": 400.0}, None),  # this pair allows more
        (3_001_000, {"max_giveaway_bps": 0.0}, q.PRICE_GUARD),  # and this one nothing
        (3_000_000, {"max_giveaway_bps": 0.0}, None),
    ],
)
def test_the_price_guard_is_the_pairs(
    answer: int, route: dict[str, Any], reason: str | None
) -> None:
    pipeline, _ = build(answer=answer, route=route)
    outcome = pipeline.decide(req(), NOW)
    if reason is None:
        assert isinstance(outcome, Quote), outcome
    else:
        assert isinstance(outcome, q.Skip) and outcome.reason == reason


@pytest.mark.parametrize(
    ("allow", "deny", "partner", "admitted"),
    [
        (None, (), None, True),
        (None, ("bad",), "good", True),
        (None, ("bad",), "bad", False),
        (None, ("bad",), None, True),  # a deny list alone admits requests without a partner
        (("good",), (), "good", True),
        (("good",), (), "other", False),
        (("good",), (), None, False),  # an allow list needs a partner id
        (("good", "bad"), ("bad",), "bad", False),  # deny wins
    ],
)
def test_partner_allow_and_deny_lists(
    allow: tuple[str, ...] | None, deny: tuple[str, ...], partner: str | None, admitted: bool
) -> None:
    partners = q.PartnerFilter(None if allow is None else frozenset(allow), frozenset(deny))
    pipeline, strategy = build(route={"partners": partners})
    request = req()._replace(partner_id=partner)
    outcome = pipeline.decide(request, NOW)
    if admitted:
        assert isinstance(outcome, Quote), outcome
    else:
        assert isinstance(outcome, q.Skip) and outcome.reason == q.PARTNER_NOT_ALLOWED
        assert outcome.detail == (partner or "no partner_id")
        assert strategy.seen == [] and pipeline.inventory.reserved == {}


# ------------------------------------------------------------------------ several price sources


def test_sources_that_disagree_make_the_pair_skip_until_they_agree() -> None:
    pipeline, strategy = build()
    state = pipeline.state
    state.set_price(NEAR, 3.0, NOW, "a")
    state.set_price(NEAR, 3.1, NOW, "b")  # 333 bps apart > 200
    outcome = pipeline.decide(req(quote_id="x"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.PRICE_DIVERGENCE
    assert "333 bps > 200" in outcome.detail and "a=3" in outcome.detail
    assert strategy.seen == []
    # The other direction's asset too: USDC->NEAR would need the same NEAR price.
    state.set_price(NEAR, 3.02, NOW + span(1), "b")
    outcome = pipeline.decide(req(quote_id="y"), NOW + span(1))
    assert isinstance(outcome, Quote), outcome
    # The median of the three fresh ones: "" (3.0, from build), a (3.0), b (3.02).
    assert state.prices[NEAR].usd == 3.0


def test_the_divergence_limit_comes_from_the_settings() -> None:
    pipeline, _ = build(max_price_divergence_bps=None)
    pipeline.state.set_price(NEAR, 3.0, NOW, "a")
    pipeline.state.set_price(NEAR, 3.6, NOW, "b")
    assert isinstance(pipeline.decide(req(), NOW), Quote)
    wide, _ = build(max_price_divergence_bps=1000.0, price_max_age_s=30.0)
    assert (wide.state.max_divergence_bps, wide.state.price_max_age_s) == (1000.0, 30.0)


def test_strategies_see_the_deadline_margin() -> None:
    seen: list[int] = []

    class Margin:
        def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
            seen.append(market.deadline_margin_ms)
            return 3 * E6

    pipeline, _ = build(deadline_margin_ms=7_000)
    pipeline.set_route((NEAR, USDC), replace(pipeline.routes[(NEAR, USDC)], strategy=Margin()))
    assert isinstance(pipeline.decide(req(), NOW), Quote)
    assert seen == [7_000]


# ------------------------------------------------------- what a decision reads per pair (issue 29)


def test_a_pair_reads_the_prices_of_each_update_not_of_its_first_decision() -> None:
    """A pair's slot keeps the prices it read until :attr:`MarketState.version` moves: every
    price update, divergence or agreement is seen by the next decision."""
    pipeline, _ = build()
    state = pipeline.state
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)
    state.set_price(NEAR, 0.5, NOW)  # 1 NEAR is 0.50 USD now: below the 1 USD minimum
    outcome = pipeline.decide(req(quote_id="b"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.BELOW_MIN_SIZE
    assert outcome.detail == "0.50 USD"
    state.set_price(NEAR, 3.0, NOW + span(1))
    assert isinstance(pipeline.decide(req(quote_id="c"), NOW + span(1)), Quote)
    state.set_price(USDC, 1.0, NOW + span(2), "other")
    state.set_price(USDC, 1.5, NOW + span(2), "third")  # the quote asset's sources disagree
    outcome = pipeline.decide(req(quote_id="d"), NOW + span(2))
    assert isinstance(outcome, q.Skip) and outcome.reason == q.PRICE_DIVERGENCE
    # No update since: the prices age with the clock alone.
    outcome = pipeline.decide(req(quote_id="e"), NOW + span(14))
    assert isinstance(outcome, q.Skip) and outcome.reason == q.PRICE_DIVERGENCE


def test_a_price_update_alone_makes_the_pair_stale_or_fresh() -> None:
    pipeline, _ = build(price_max_age_s=10.0)
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW + span(9)), Quote)
    outcome = pipeline.decide(req(quote_id="b"), NOW + span(11))
    assert isinstance(outcome, q.Skip) and outcome.reason == q.STALE_PRICE
    pipeline.state.set_price(NEAR, 3.0, NOW + span(11))
    outcome = pipeline.decide(req(quote_id="c"), NOW + span(11))
    assert isinstance(outcome, q.Skip) and outcome.reason == q.STALE_PRICE  # USDC's is old
    pipeline.state.set_price(USDC, 1.0, NOW + span(11))
    assert isinstance(pipeline.decide(req(quote_id="d"), NOW + span(11)), Quote)


def test_each_decision_shows_the_strategy_its_own_time_and_fee() -> None:
    """One view serves every decision: its time and the fee are the decision's."""
    seen: list[tuple[datetime, int, int]] = []

    class Watch:
        def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
            seen.append((market.now, market.fee_pips, market.free(USDC)))
            return 3 * E6

    pipeline, _ = build()
    pipeline.set_route((NEAR, USDC), replace(pipeline.routes[(NEAR, USDC)], strategy=Watch()))
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)
    pipeline.state.fee_pips = 100
    assert isinstance(pipeline.decide(req(quote_id="b"), NOW + span(1)), Quote)
    assert seen == [
        (from_micros(NOW), 0, 999 * E6),
        (from_micros(NOW + span(1)), 100, 996 * E6),  # 3 USDC reserved by the first
    ]


def test_a_changed_route_or_limit_is_read_again() -> None:
    pipeline, _ = build(max_open_per_token={USDC: 5 * E6})
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)
    key = (NEAR, USDC)
    pipeline.set_route(key, replace(pipeline.routes[key], min_notional_usd=4.0))
    outcome = pipeline.decide(req(quote_id="b"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.BELOW_MIN_SIZE
    pipeline.set_route(key, replace(pipeline.routes[key], min_notional_usd=1.0))
    outcome = pipeline.decide(req(quote_id="c"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.PER_TOKEN_LIMIT


def test_routes_change_only_through_set_route() -> None:
    """The routes are read-only: a decision finds a pair's route and its slot in one lookup,
    so a route changes with its slot (``set_route``) or not at all; a removed one is unknown
    and a route added later quotes."""
    pipeline, _ = build()
    key = (NEAR, USDC)
    route = pipeline.routes[key]
    with pytest.raises(TypeError):
        pipeline.routes[key] = route  # type: ignore[index]
    pipeline.set_route(key, None)
    assert key not in pipeline.routes
    outcome = pipeline.decide(req(quote_id="a"), NOW)
    assert isinstance(outcome, q.Skip) and outcome.reason == q.UNKNOWN_PAIR
    pipeline.set_route(key, route)
    assert isinstance(pipeline.decide(req(quote_id="b"), NOW), Quote)


def test_the_open_exposure_is_marked_at_the_latest_prices() -> None:
    pipeline, _ = build(max_open_exposure_usd=10.0, route={"max_giveaway_bps": 10**6})
    assert isinstance(pipeline.decide(req(quote_id="a"), NOW), Quote)  # 3 USD open
    assert pipeline.open_exposure_usd() == 3.0
    pipeline.state.set_price(USDC, 2.0, NOW)  # the 3 USDC open are worth 6 USD now
    outcome = pipeline.decide(req(quote_id="b"), NOW)  # 6 + 6 > 10
    assert isinstance(outcome, q.Skip) and outcome.reason == q.EXPOSURE_LIMIT
    pipeline.state.set_price(USDC, 1.0, NOW + 1)
    assert isinstance(pipeline.decide(req(quote_id="c"), NOW + 1), Quote)  # 3 + 3
