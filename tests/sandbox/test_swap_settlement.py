"""Deposits and settlement on loopback (spec 2.5–2.8, 3.1, 7.4, 7.6): each swap type with a
deposit below and above what it expects, refund reasons and fees, INTENTS deposits detected by
transfer, DESTINATION_CHAIN payouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from solver.protocol.intents import Transfer
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import sign_nep413
from tests.sandbox.scripted import NEAR, USDC
from tests.sandbox.test_swap_harness import E6, E24, SwapWorld, future, swap_world

REFUND_FEE = 10**22 // 3  # 0.01 USD of NEAR at 3 USD


@pytest.fixture
async def world() -> AsyncIterator[SwapWorld]:
    async with swap_world() as w:
        yield w


async def quote_and_deposit(
    w: SwapWorld, deposit: int, **overrides: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    quote = (await w.ok_quote(w.auth, **overrides))["quote"]
    await w.deposit(quote["depositAddress"], deposit)
    done = await w.wait_status(quote["depositAddress"])
    return quote, done


# ---------------------------------------------------------------------------------- EXACT_INPUT


async def test_exact_input_below_amount_in_waits_then_refunds_partial(world: SwapWorld) -> None:
    w = world
    quote = (await w.ok_quote(w.auth, deadline=future(0.8)))["quote"]
    address = quote["depositAddress"]
    await w.deposit(address, E24)
    incomplete = await w.wait_status(address, ("INCOMPLETE_DEPOSIT",))
    assert incomplete["swapDetails"]["depositedAmount"] == str(E24)
    done = await w.wait_status(address)
    assert done["status"] == "REFUNDED"
    details = done["swapDetails"]
    assert details["refundReason"] == "PARTIAL_DEPOSIT"
    assert details["refundedAmount"] == str(E24)
    assert w.balance("alice.near", NEAR) == E24 and w.balance("bob.near", USDC) == 0
    history = await w.client.get(w.api + "/api/v0/transactions", headers=w.auth)
    record = history.json()[0]
    assert (record["status"], record["refundReason"]) == ("REFUNDED", "PARTIAL_DEPOSIT")
    assert (record["refundFee"], record["refundFeeFormatted"]) == ("0", "0")
    assert (record["amountIn"], record["amountOut"]) == (str(E24), "0")


async def test_exact_input_top_up_before_the_deadline_swaps(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth))["quote"]
    address = quote["depositAddress"]
    await world.deposit(address, E24)
    await world.wait_status(address, ("INCOMPLETE_DEPOSIT",))
    await world.deposit(address, E24)
    assert (await world.wait_status(address))["status"] == "SUCCESS"


async def test_exact_input_above_amount_in_swaps_and_refunds_the_excess(world: SwapWorld) -> None:
    quote, done = await quote_and_deposit(world, 3 * E24)
    assert done["status"] == "SUCCESS"
    details = done["swapDetails"]
    assert details["amountIn"] == str(2 * E24) and details["amountOut"] == quote["amountOut"]
    assert details["refundedAmount"] == str(E24) and "refundReason" not in details
    assert world.balance("bob.near", USDC) == 6 * E6
    assert world.balance("alice.near", NEAR) == E24
    assert world.balance(quote["depositAddress"], NEAR) == 0
    assert details["slippage"] == 0.0 and len(details["intentHashes"]) == 2


async def test_origin_chain_refund_of_the_excess_pays_the_refund_fee(world: SwapWorld) -> None:
    quote, done = await quote_and_deposit(world, 3 * E24, refundType="ORIGIN_CHAIN")
    assert quote["refundFee"] == str(REFUND_FEE) and done["status"] == "SUCCESS"
    assert done["swapDetails"]["refundedAmount"] == str(E24 - REFUND_FEE)
    assert world.balance("fees.swap.sandbox", NEAR) == REFUND_FEE
    withdrawals = [e for e in world.sb.ledger.events if '"ft_withdraw"' in e]
    assert any('"receiver_id":"alice.near"' in e for e in withdrawals)


# ---------------------------------------------------------------------------------- EXACT_OUTPUT


async def test_exact_output_below_min_amount_in_refunds_partial(world: SwapWorld) -> None:
    quote = (
        await world.ok_quote(
            world.auth, swapType="EXACT_OUTPUT", amount=str(6 * E6), deadline=future(0.8)
        )
    )["quote"]
    address = quote["depositAddress"]
    await world.deposit(address, int(quote["minAmountIn"]) - 1)
    await world.wait_status(address, ("INCOMPLETE_DEPOSIT",))
    done = await world.wait_status(address)
    assert (done["status"], done["swapDetails"]["refundReason"]) == ("REFUNDED", "PARTIAL_DEPOSIT")


@pytest.mark.parametrize("extra", [0, 10**21, 10**24])  # within, at and far above maxAmountIn
async def test_exact_output_pays_exactly_and_refunds_what_is_unused(
    world: SwapWorld, extra: int
) -> None:
    dry = await world.ok_quote(world.auth, dry=True, swapType="EXACT_OUTPUT", amount=str(6 * E6))
    minimum = int(dry["quote"]["minAmountIn"])
    quote, done = await quote_and_deposit(
        world, minimum + extra, swapType="EXACT_OUTPUT", amount=str(6 * E6)
    )
    assert done["status"] == "SUCCESS"
    assert world.balance("bob.near", USDC) == 6 * E6
    assert done["swapDetails"]["amountIn"] == str(minimum)
    assert world.balance("alice.near", NEAR) == extra
    assert int(quote["maxAmountIn"]) == minimum * 101 // 100


# ---------------------------------------------------------------------------------- FLEX_INPUT


async def test_flex_input_below_the_widened_bound_refunds_partial(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth, swapType="FLEX_INPUT", deadline=future(0.8)))["quote"]
    lower = 2 * E24 * 98 // 100  # 1 % slippage plus 1 %
    await world.deposit(quote["depositAddress"], lower - 1)
    done = await world.wait_status(quote["depositAddress"])
    assert done["swapDetails"]["refundReason"] == "PARTIAL_DEPOSIT"


@pytest.mark.parametrize("deposit", [2 * E24 * 985 // 1000, 2 * E24 * 995 // 1000, 5 * E24])
async def test_flex_input_converts_the_whole_deposit(world: SwapWorld, deposit: int) -> None:
    _, done = await quote_and_deposit(world, deposit, swapType="FLEX_INPUT")
    assert done["status"] == "SUCCESS"
    assert done["swapDetails"]["amountIn"] == str(deposit)
    assert world.balance("bob.near", USDC) == deposit * 3 * E6 // E24
    assert world.balance("alice.near", NEAR) == 0


async def test_flex_input_refunds_when_the_price_moved_below_min_amount_out(
    world: SwapWorld,
) -> None:
    quote = (await world.ok_quote(world.auth, swapType="FLEX_INPUT"))["quote"]
    world.solver.rate_num = 2 * E6  # the fresh quote for another amount is a third worse
    await world.deposit(quote["depositAddress"], 2 * E24 * 99 // 100)
    done = await world.wait_status(quote["depositAddress"])
    assert done["swapDetails"]["refundReason"] == "AMOUNT_LESS_THAN_MIN_AMOUNT_OUT"
    assert done["swapDetails"]["amountOut"] == "0"


# ---------------------------------------------------------------------------------- ANY_INPUT


@pytest.mark.parametrize("deposit", [E24 // 10, 6 * E24])  # far below and above `amount`
async def test_any_input_converts_whatever_arrives(world: SwapWorld, deposit: int) -> None:
    _, done = await quote_and_deposit(world, deposit, swapType="ANY_INPUT")
    assert done["status"] == "SUCCESS" and done["swapDetails"]["amountIn"] == str(deposit)
    assert world.balance("bob.near", USDC) == deposit * 3 * E6 // E24
    assert world.balance("alice.near", NEAR) == 0


# ---------------------------------------------------------------------------------- refund reasons


async def test_no_liquidity_when_no_solver_quotes_at_deposit_time(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth, swapType="FLEX_INPUT"))["quote"]
    await world.solver.stop()
    await asyncio.sleep(0.05)
    await world.deposit(quote["depositAddress"], 2 * E24 * 99 // 100)
    done = await world.wait_status(quote["depositAddress"])
    assert done["swapDetails"]["refundReason"] == "NO_LIQUIDITY"
    assert world.balance("alice.near", NEAR) == 2 * E24 * 99 // 100


async def test_intent_submit_failed_when_the_solver_cannot_pay(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth))["quote"]
    world.sb.ledger.balances[world.solver.account][USDC] = 0
    await world.deposit(quote["depositAddress"], 2 * E24)
    done = await world.wait_status(quote["depositAddress"])
    assert done["swapDetails"]["refundReason"] == "INTENT_SUBMIT_FAILED"
    assert world.balance("alice.near", NEAR) == 2 * E24


async def test_a_complete_deposit_after_the_deadline_is_refunded(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth, deadline=future(0.3)))["quote"]
    await asyncio.sleep(0.4)
    await world.deposit(quote["depositAddress"], 2 * E24)
    done = await world.wait_status(quote["depositAddress"])
    assert (done["status"], done["swapDetails"]["refundReason"]) == ("REFUNDED", "UNKNOWN")


async def test_a_refund_not_above_the_refund_fee_fails(world: SwapWorld) -> None:
    quote = await world.ok_quote(world.auth, refundType="ORIGIN_CHAIN", deadline=future(0.6))
    address = quote["quote"]["depositAddress"]
    await world.deposit(address, REFUND_FEE)
    done = await world.wait_status(address)
    assert done["status"] == "FAILED"
    assert done["swapDetails"]["refundReason"] == "AMOUNT_LESS_THAN_MIN_WITHDRAWABLE"


# ---------------------------------------------------------------------------------- kinds of deposit and payout


async def test_intents_deposit_is_detected_from_a_transfer(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth, depositType="INTENTS"))["quote"]
    address = quote["depositAddress"]
    user = SecretKey.generate()
    account = user.public_key.implicit_account_id()
    world.sb.ledger.deposit(account, NEAR, 2 * E24)
    ledger = world.sb.ledger
    signed = sign_nep413(
        user,
        signer_id=account,
        verifying_contract=ledger.contract_id,
        deadline=datetime.now(UTC) + timedelta(seconds=60),
        nonce=salted_nonce(bytes.fromhex(ledger.current_salt())),
        intents=[Transfer(receiver_id=address, tokens={NEAR: 2 * E24})],
    )
    result = world.sb.chain.execute([signed.model_dump(mode="json", exclude_none=True)])
    done = await world.wait_status(address)
    assert done["status"] == "SUCCESS"
    details = done["swapDetails"]
    assert details["originChainTxHashes"][0]["hash"] == result.intent_hashes[0]
    record = world.sb.swap.store.get(address, None)
    assert record is not None and record.senders == [account]


async def test_destination_chain_payout_withdraws_with_the_message(world: SwapWorld) -> None:
    _, done = await quote_and_deposit(
        world, 2 * E24, recipientType="DESTINATION_CHAIN", customRecipientMsg="memo-42"
    )
    assert done["status"] == "SUCCESS"
    assert len(done["swapDetails"]["destinationChainTxHashes"]) == 1
    withdrawals = [
        json.loads(e.partition(":")[2])["data"][0]
        for e in world.sb.ledger.events
        if '"ft_withdraw"' in e
    ]
    assert withdrawals[-1]["receiver_id"] == "bob.near"
    assert withdrawals[-1]["msg"] == "memo-42" and withdrawals[-1]["amount"] == str(6 * E6)


async def test_a_deposit_that_would_overflow_is_refused(world: SwapWorld) -> None:
    quote = (await world.ok_quote(world.auth))["quote"]
    body = {"depositAddress": quote["depositAddress"], "amount": str(2**128 - 1)}
    first = await world.client.post(world.base + "/sandbox/deposit", json=body)
    assert first.status_code == 200
    second = await world.client.post(world.base + "/sandbox/deposit", json=body)
    assert second.status_code == 400 and second.json()["field"] == "amount"
    assert second.json()["message"].startswith("amount: ")  # names the field (protocol-notes 7)
