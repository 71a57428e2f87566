"""Unit tests of the pure swap rules (sandbox/swap/rules.py): fee math, quote terms per swap
type, the settlement decisions of spec 3.1, derivations, the signed bytes and history rules."""

from __future__ import annotations

import json
from dataclasses import astuple
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.swap.rules import (
    Action,
    FeeShare,
    Terms,
    actual_slippage_bps,
    asset_filter,
    bps,
    decide,
    deposit_memo,
    deposit_seed,
    fee_amounts,
    fee_shares,
    format_units,
    format_usd,
    gross_up,
    is_masking,
    is_test_transaction,
    net_of_fees,
    page_info,
    quote_signature_message,
    quote_terms,
    solver_side,
    total_bps,
    with_protocol_fee,
    without_protocol_fee,
)
from solver.protocol.swap import RefundReason, SwapStatus, SwapType

E24 = 10**24
PLATFORM = FeeShare("fees.swap.sandbox", Fraction(20), platform=True)


# ---------------------------------------------------------------------------------- fees


def test_platform_fee_only_without_a_token() -> None:
    anonymous = fee_shares(authorized=False, platform_fee_bps=20, fee_account="fees.x")
    assert anonymous == [FeeShare("fees.x", Fraction(20), platform=True)]
    assert fee_shares(authorized=True, platform_fee_bps=20, fee_account="fees.x") == []


def test_app_fees_follow_the_platform_fee_in_order() -> None:
    shares = fee_shares(
        authorized=False,
        platform_fee_bps=20,
        fee_account="fees.x",
        app_fees=[("app.near", 50), ("ref.near", 12.5)],
    )
    assert [s.recipient for s in shares] == ["fees.x", "app.near", "ref.near"]
    assert total_bps(shares) == Fraction(165, 2)
    assert fee_amounts(1_000_000, shares) == [2_000, 5_000, 1_250]


def test_fee_rounds_down_and_bps_are_exact() -> None:
    assert fee_amounts(999, [PLATFORM]) == [1]  # 999 * 20 / 10000 = 1.998
    assert bps(0.1) == Fraction(1, 10)
    with pytest.raises(ValueError):
        bps(-1)


@given(st.integers(1, 10**30), st.lists(st.integers(0, 2000), max_size=4))
def test_gross_up_is_the_smallest_input_covering_the_net(net: int, fees: list[int]) -> None:
    shares = [FeeShare(f"r{i}.near", Fraction(f)) for i, f in enumerate(fees)]
    gross = gross_up(net, shares)
    assert net_of_fees(gross, shares) >= net
    assert gross == 0 or net_of_fees(gross - 1, shares) < net


def test_gross_up_refuses_fees_of_100_percent() -> None:
    with pytest.raises(ValueError):
        gross_up(10, [FeeShare("a.near", Fraction(10_000))])


@given(st.integers(0, 10**30), st.integers(0, 999_999))
def test_protocol_fee_inverse(budget: int, pips: int) -> None:
    amount = without_protocol_fee(budget, pips)
    assert with_protocol_fee(amount, pips) <= budget
    assert with_protocol_fee(amount + 1, pips) > budget


def test_solver_side_per_swap_type() -> None:
    assert solver_side(SwapType.EXACT_INPUT, 10_000, [PLATFORM]) == ("in", 9_980)
    assert solver_side(SwapType.FLEX_INPUT, 10_000, []) == ("in", 10_000)
    assert solver_side(SwapType.EXACT_OUTPUT, 10_000, [PLATFORM]) == ("out", 10_000)


# ---------------------------------------------------------------------------------- terms


def test_exact_input_terms() -> None:
    t = quote_terms(
        SwapType.EXACT_INPUT, 1000, Fraction(100), [], solver_amount_in=1000, solver_amount_out=3000
    )
    assert t == Terms(1000, 1000, None, 3000, 2970, 1000, 2970)


def test_exact_output_terms_gross_up_fees_and_add_slippage_on_input() -> None:
    t = quote_terms(
        SwapType.EXACT_OUTPUT,
        3000,
        Fraction(100),
        [PLATFORM],
        solver_amount_in=998,
        solver_amount_out=3000,
    )
    assert t.min_amount_in == 999  # 998 grossed up for 0.2 % (the fee on 999 rounds down to 1)
    assert t.amount_in == t.max_amount_in == 1009  # ceil(999 x 1.01)
    assert t.amount_out == t.min_amount_out == 3000


def test_flex_input_terms_band_and_extra_percent() -> None:
    t = quote_terms(
        SwapType.FLEX_INPUT,
        10_000,
        Fraction(100),
        [],
        solver_amount_in=10_000,
        solver_amount_out=30_000,
    )
    assert (t.min_amount_in, t.min_amount_out) == (9_900, 29_700)
    assert (t.accept_in, t.accept_out) == (9_800, 29_400)  # slippage plus 1 percent


def test_any_input_accepts_any_deposit() -> None:
    t = quote_terms(
        SwapType.ANY_INPUT,
        10_000,
        Fraction(50),
        [],
        solver_amount_in=10_000,
        solver_amount_out=30_000,
    )
    assert t.accept_in == 1 and t.min_amount_out == 29_850


# ---------------------------------------------------------------------------------- decisions

EXACT_IN = Terms(1000, 1000, None, 3000, 2970, 1000, 2970)
EXACT_OUT = Terms(1010, 1000, 1010, 3000, 3000, 1000, 3000)
FLEX = Terms(10_000, 9_900, None, 30_000, 29_700, 9_800, 29_400)
ANY = Terms(10_000, 10_000, None, 30_000, 29_850, 1, 29_850)


@pytest.mark.parametrize("terms", [EXACT_IN, EXACT_OUT, FLEX, ANY])
def test_nothing_deposited_waits_even_after_the_deadline(terms: Terms) -> None:
    for passed in (False, True):
        d = decide(SwapType.EXACT_INPUT, terms, 0, passed)
        assert (d.action, d.status) == (Action.WAIT, SwapStatus.PENDING_DEPOSIT)


@pytest.mark.parametrize(
    ("swap_type", "terms", "below"),
    [
        (SwapType.EXACT_INPUT, EXACT_IN, 999),
        (SwapType.EXACT_OUTPUT, EXACT_OUT, 999),
        (SwapType.FLEX_INPUT, FLEX, 9_799),
    ],
)
def test_below_the_bound_waits_then_refunds_as_partial(
    swap_type: SwapType, terms: Terms, below: int
) -> None:
    waiting = decide(swap_type, terms, below, False)
    assert (waiting.action, waiting.status) == (Action.WAIT, SwapStatus.INCOMPLETE_DEPOSIT)
    late = decide(swap_type, terms, below, True)
    assert (late.action, late.reason) == (Action.REFUND, RefundReason.PARTIAL_DEPOSIT)


def test_exact_input_converts_amount_in_and_leaves_the_excess() -> None:
    d = decide(SwapType.EXACT_INPUT, EXACT_IN, 1500, False)
    assert (d.action, d.swap_in, d.min_out) == (Action.SWAP, 1000, 2970)


def test_exact_output_caps_the_input_at_max_amount_in() -> None:
    assert decide(SwapType.EXACT_OUTPUT, EXACT_OUT, 1005, False).swap_in == 1005
    above = decide(SwapType.EXACT_OUTPUT, EXACT_OUT, 5000, False)
    assert (above.swap_in, above.min_out) == (1010, 3000)


def test_flex_input_converts_everything_with_the_right_floor() -> None:
    in_band = decide(SwapType.FLEX_INPUT, FLEX, 9_900, False)
    assert (in_band.swap_in, in_band.min_out) == (9_900, 29_700)
    wide = decide(SwapType.FLEX_INPUT, FLEX, 9_850, False)
    assert (wide.swap_in, wide.min_out) == (9_850, 29_400)
    above = decide(SwapType.FLEX_INPUT, FLEX, 50_000, False)
    assert (above.action, above.swap_in) == (Action.SWAP, 50_000)


def test_any_input_scales_the_floor_with_the_deposit() -> None:
    d = decide(SwapType.ANY_INPUT, ANY, 5_000, False)
    assert (d.action, d.swap_in, d.min_out) == (Action.SWAP, 5_000, 14_925)


def test_complete_deposit_after_the_deadline_is_refunded() -> None:
    d = decide(SwapType.EXACT_INPUT, EXACT_IN, 1000, True)
    assert (d.action, d.reason) == (Action.REFUND, RefundReason.UNKNOWN)


def test_actual_slippage() -> None:
    assert actual_slippage_bps(SwapType.EXACT_INPUT, EXACT_IN, 1000, 3000) == 0.0
    assert actual_slippage_bps(SwapType.EXACT_INPUT, EXACT_IN, 1000, 2970) == 100.0
    assert actual_slippage_bps(SwapType.EXACT_OUTPUT, EXACT_OUT, 1005, 3000) == 50.0


# ---------------------------------------------------------------------------------- derivations


def test_deposit_seed_and_memo_are_deterministic_and_distinct() -> None:
    a = deposit_seed(b"root", "cid-1", "2026-01-01T00:00:00.000Z")
    assert a == deposit_seed(b"root", "cid-1", "2026-01-01T00:00:00.000Z")
    assert a != deposit_seed(b"root", "cid-2", "2026-01-01T00:00:00.000Z")
    assert a != deposit_seed(b"other", "cid-1", "2026-01-01T00:00:00.000Z")
    memo = deposit_memo(a)
    assert memo.isdigit() and len(memo) == 10 and memo != deposit_memo(a, 1)


def test_signature_message_is_canonical_and_covers_the_deposit_fields() -> None:
    response: dict[str, Any] = {
        "correlationId": "c",
        "timestamp": "t",
        "quoteRequest": {"dry": False, "swapType": "EXACT_INPUT", "recipient": "bób.near"},
        "quote": {"amountIn": "1", "depositAddress": "addr", "timeEstimate": 10},
    }
    message = quote_signature_message(response)
    decoded = json.loads(message)
    assert decoded == {
        "domain": "sandbox-swap-quote-v1",
        "correlationId": "c",
        "timestamp": "t",
        "dry": "false",
        "quote.amountIn": "1",
        "quote.depositAddress": "addr",
        "quoteRequest.swapType": "EXACT_INPUT",
        "quoteRequest.recipient": "bób.near",
    }
    assert message.isascii() and b" " not in message
    assert list(decoded) == sorted(decoded)
    changed = {**response, "quote": {**response["quote"], "depositAddress": "other"}}
    assert quote_signature_message(changed) != message


# ---------------------------------------------------------------------------------- formatting


def test_format_units_and_usd() -> None:
    assert format_units(2 * E24, 24) == "2"
    assert format_units(1_500_000, 6) == "1.5"
    assert format_units(1, 6) == "0.000001"
    assert format_units(0, 6) == "0"
    assert format_units(7, 0) == "7"
    assert format_usd(Decimal("5.98800000")) == "5.988"
    assert format_usd(Decimal("0.0000001")) == "0"
    assert format_usd(Decimal("1234567.1234567")) == "1234567.123457"


# ---------------------------------------------------------------------------------- history


def test_masking_transactions() -> None:
    assert is_masking(SwapStatus.REFUNDED, 0) and is_masking(SwapStatus.FAILED, 0)
    assert not is_masking(SwapStatus.SUCCESS, 5)
    assert not is_masking(SwapStatus.PENDING_DEPOSIT, 0)


def test_test_transactions() -> None:
    assert is_test_transaction("test-bot", [], "test", [])
    assert is_test_transaction(None, ["qa.near"], "test", ["qa.near"])
    assert not is_test_transaction("prod", ["bob.near"], "test", ["qa.near"])


def test_asset_filter_precedence() -> None:
    def effective(*given: str | None) -> tuple[object, ...]:
        return astuple(asset_filter(*given))

    assert effective("eth", None, "btc", None) == ("eth", None, "btc", None)
    assert effective("eth", "nep141:a.near", None, None) == (None, "nep141:a.near", None, None)
    # toTokenId overrides toChainId and fromTokenId; fromChainId stays overridden by fromTokenId
    assert effective("eth", "nep141:a.near", "btc", "nep141:b.near") == (
        None,
        None,
        None,
        "nep141:b.near",
    )
    assert effective("eth", None, "btc", "nep141:b.near") == ("eth", None, None, "nep141:b.near")


@pytest.mark.parametrize(
    ("total", "page", "per_page", "expected"),
    [
        (0, 1, 50, (0, None, None, 0)),
        (1, 1, 1, (1, None, None, 0)),
        (101, 1, 50, (3, 2, None, 0)),
        (101, 3, 50, (3, None, 2, 100)),
        (101, 9, 50, (3, None, 8, 400)),
    ],
)
def test_page_info(total: int, page: int, per_page: int, expected: tuple[object, ...]) -> None:
    info = page_info(total, page, per_page)
    assert (info.total_pages, info.next_page, info.prev_page, info.offset) == expected
