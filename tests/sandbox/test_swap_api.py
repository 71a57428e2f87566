"""The swap API on loopback (spec 2.1–2.5, 4.1, 4.2, 5.1, 7.7): quote rules, fees, signatures,
validation and error bodies, deposit submission and status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandbox.swap.rules import quote_signature_message
from sandbox.swap.store import HistoryWhere
from solver.protocol.history import HistoryStatus
from solver.protocol.keys import PublicKey, parse_signature
from solver.protocol.swap import DepositSubmitResponse, QuoteResponse, from_wire
from tests.sandbox.scripted import NEAR, USDC
from tests.sandbox.test_swap_harness import (
    E6,
    E24,
    SwapWorld,
    future,
    quote_body,
    swap_config,
    swap_world,
)

ERROR_KEYS = {"error", "message"}


@pytest.fixture
async def world() -> AsyncIterator[SwapWorld]:
    async with swap_world() as w:
        yield w


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert ERROR_KEYS <= set(body) <= ERROR_KEYS | {"field"}
    assert body["error"] == code
    if field is not None:
        assert body.get("field") == field, body


# ---------------------------------------------------------------------------------- quotes


async def test_dry_quote_omits_deposit_fields_and_is_not_stored(world: SwapWorld) -> None:
    body = await world.ok_quote(dry=True)
    parsed = from_wire(QuoteResponse, body)
    assert parsed.dry_rule_problem() is None
    quote = body["quote"]
    for absent in ("depositAddress", "deadline", "timeWhenInactive", "depositMemo"):
        assert absent not in quote
    assert quote["amountIn"] == str(2 * E24) and int(quote["amountOut"]) > 0
    assert body["quoteRequest"]["dry"] is True and body["signature"].startswith("ed25519:")
    every = HistoryWhere(statuses=tuple(s.value for s in HistoryStatus), show_test=True)
    assert world.sb.swap.store.count(every) == 0


async def test_non_dry_quote_has_deposit_fields_and_is_pending(world: SwapWorld) -> None:
    body = await world.ok_quote(deadline=future(120))
    quote = body["quote"]
    assert len(quote["depositAddress"]) == 64 and "depositMemo" not in quote
    assert quote["deadline"].endswith("Z") and quote["timeWhenInactive"] <= quote["deadline"]
    assert quote["amountInFormatted"] == "2" and quote["amountInUsd"] == "6"
    assert quote["timeEstimate"] == 10 and quote["refundFee"] == "0"
    status = await world.status(quote["depositAddress"])
    assert status.json()["status"] == "PENDING_DEPOSIT"
    assert status.json()["quoteResponse"] == body


async def test_platform_fee_applies_without_a_token_only(world: SwapWorld) -> None:
    anonymous = (await world.ok_quote(dry=True))["quote"]
    partner = (await world.ok_quote(world.auth, dry=True))["quote"]
    full = 2 * E24 * 3 * E6 // E24
    assert int(partner["amountOut"]) == full
    assert int(anonymous["amountOut"]) == full - full * 20 // 10_000


async def test_invalid_or_expired_token_is_401(world: SwapWorld) -> None:
    for header in ("Bearer nope", "Basic abc", "Bearer " + world.token[:-2] + "xx"):
        assert_error(await world.quote({"Authorization": header}), 401, "UNAUTHORIZED")
    expired = world.sb.swap.keys.issue_token("old", ttl_s=-60)
    assert_error(await world.quote({"Authorization": f"Bearer {expired}"}), 401, "UNAUTHORIZED")


async def test_x_api_key_carries_the_token_too(world: SwapWorld) -> None:
    """The official schema's quote security is ``X-API-Key`` or ``JWT-auth`` (protocol-notes 7):
    the same token in either header is a partner's; a bad one in either is a 401, never an
    anonymous quote, also beside a valid bearer."""
    anonymous = (await world.ok_quote(dry=True))["quote"]
    by_key = (await world.ok_quote({"X-API-Key": world.token}, dry=True))["quote"]
    by_bearer = (await world.ok_quote(world.auth, dry=True))["quote"]
    assert int(anonymous["amountOut"]) < int(by_key["amountOut"]) == int(by_bearer["amountOut"])
    for headers in ({"X-API-Key": "nope"}, {"X-API-Key": ""}, {**world.auth, "X-API-Key": "x"}):
        assert_error(await world.quote(headers), 401, "UNAUTHORIZED")
    status = world.base + "/v0/status"
    response = await world.client.get(
        status, params={"depositAddress": "a"}, headers={"X-API-Key": "x"}
    )
    assert_error(response, 401, "UNAUTHORIZED")


async def test_app_fees_are_taken_from_the_input_and_paid_out(world: SwapWorld) -> None:
    fees = [{"recipient": "app.near", "fee": 50}, {"recipient": "ref.near", "fee": 12.5}]
    quote = (await world.ok_quote(appFees=fees))["quote"]
    amount = 2 * E24
    paid = {"fees.swap.sandbox": amount * 20 // 10_000, "app.near": amount * 50 // 10_000}
    paid["ref.near"] = amount * 125 // 100_000
    assert int(quote["amountOut"]) == (amount - sum(paid.values())) * 3 * E6 // E24
    await world.deposit(quote["depositAddress"], amount)
    done = await world.wait_status(quote["depositAddress"])
    assert done["status"] == "SUCCESS"
    for account, fee in paid.items():
        assert world.balance(account, NEAR) == fee
    assert world.balance("bob.near", USDC) == int(quote["amountOut"])


async def test_slippage_bounds_per_swap_type(world: SwapWorld) -> None:
    exact_in = (await world.ok_quote(world.auth, dry=True, slippageTolerance=100))["quote"]
    assert int(exact_in["minAmountOut"]) == int(exact_in["amountOut"]) * 9_900 // 10_000
    assert exact_in["minAmountIn"] == exact_in["amountIn"] and "maxAmountIn" not in exact_in
    exact_out = (
        await world.ok_quote(world.auth, dry=True, swapType="EXACT_OUTPUT", amount=str(6 * E6))
    )["quote"]
    assert exact_out["amountOut"] == exact_out["minAmountOut"] == str(6 * E6)
    assert int(exact_out["minAmountIn"]) == 2 * E24
    assert exact_out["maxAmountIn"] == exact_out["amountIn"] == str(2 * E24 * 101 // 100)
    flex = (await world.ok_quote(world.auth, dry=True, swapType="FLEX_INPUT"))["quote"]
    assert int(flex["minAmountIn"]) == 2 * E24 * 99 // 100
    assert int(flex["minAmountOut"]) == 6 * E6 * 99 // 100


async def test_quote_signature_verifies_with_the_published_key(world: SwapWorld) -> None:
    body = await world.ok_quote()
    key = (await world.client.get(world.base + "/sandbox/service-key")).json()["publicKey"]
    assert key == world.sb.info()["swap_service_public_key"]
    public = PublicKey.from_text(key)
    signature = parse_signature(body["signature"])
    assert public.verify(quote_signature_message(body), signature)
    body["quote"]["amountOut"] = str(int(body["quote"]["amountOut"]) + 1)
    assert not public.verify(quote_signature_message(body), signature)


async def test_memo_mode_shares_the_address_and_tells_quotes_by_memo(world: SwapWorld) -> None:
    first = (await world.ok_quote(depositMode="MEMO"))["quote"]
    second = (await world.ok_quote(depositMode="MEMO"))["quote"]
    assert first["depositAddress"] == second["depositAddress"] == "memo.swap.sandbox"
    assert first["depositMemo"] != second["depositMemo"] and first["depositMemo"].isdigit()
    address, memo = first["depositAddress"], first["depositMemo"]
    assert (await world.status(address, memo)).json()["status"] == "PENDING_DEPOSIT"
    assert_error(await world.status(address), 404, "NOT_FOUND")
    await world.deposit(address, 2 * E24, memo)
    assert (await world.wait_status(address, memo=memo))["status"] == "SUCCESS"
    assert (await world.status(address, second["depositMemo"])).json()[
        "status"
    ] == "PENDING_DEPOSIT"


async def test_no_solver_means_no_quote(world: SwapWorld) -> None:
    await world.solver.stop()
    await asyncio.sleep(0.05)
    assert_error(await world.quote(), 400, "NO_QUOTE")


async def test_quote_waiting_time_bounds_the_wait() -> None:
    """Load-proof margins: the slower solver cannot answer before 1.5 s (it sleeps first), the
    fast one has 1 s for the short wait, and the relay waits up to 3 s (it ends when both
    answered) for the best offer."""
    config = swap_config()
    config = config.model_copy(
        update={"bus": config.bus.model_copy(update={"solver_wait_ms": 3000})}
    )
    async with swap_world(config) as world:
        slow = await world.add_solver(rate_num=31 * E6, rate_den=10 * E24, delay_s=1.5)  # better
        try:
            first = (await world.ok_quote(world.auth, dry=True, quoteWaitingTimeMs=0))["quote"]
            assert first["amountOut"] == str(6 * E6)
            assert slow.signed == {}  # 0: the first answer, not waiting for the slower solver
            short = (await world.ok_quote(world.auth, dry=True, quoteWaitingTimeMs=1000))["quote"]
            assert short["amountOut"] == str(6 * E6)
            best = (await world.ok_quote(world.auth, dry=True))["quote"]
            assert best["amountOut"] == str(62 * E6 // 10)
        finally:
            await slow.stop()


# ---------------------------------------------------------------------------------- validation


INVALID_QUOTES: list[tuple[dict[str, Any], str]] = [
    ({"amount": 5}, "amount"),
    ({"amount": "-5"}, "amount"),
    ({"amount": "0"}, "amount"),
    ({"dry": "false"}, "dry"),
    ({"swapType": "SOMETIMES"}, "swapType"),
    ({"slippageTolerance": "100"}, "slippageTolerance"),
    ({"slippageTolerance": -1}, "slippageTolerance"),
    ({"slippageTolerance": 10_001}, "slippageTolerance"),
    ({"originAsset": "nep141:nope.near"}, "originAsset"),
    ({"destinationAsset": NEAR}, "destinationAsset"),
    ({"deadline": "2020-01-01T00:00:00Z"}, "deadline"),
    ({"deadline": "2099-01-01T00:00:00"}, "deadline"),
    ({"recipient": "Not An Account"}, "recipient"),
    ({"refundTo": "x"}, "refundTo"),
    ({"depositType": "INTENTS", "depositMode": "MEMO"}, "depositMode"),
    ({"customRecipientMsg": "hi"}, "customRecipientMsg"),
    ({"virtualChainRecipient": "0x12"}, "virtualChainRecipient"),
    ({"referral": "Upper"}, "referral"),
    ({"quoteWaitingTimeMs": -1}, "quoteWaitingTimeMs"),
    ({"appFees": [{"recipient": "app.near", "fee": -1}]}, "appFees.0.fee"),
    ({"appFees": [{"recipient": "BAD", "fee": 1}]}, "appFees.0.recipient"),
    ({"appFees": [{"recipient": "app.near", "fee": 9_990}]}, "appFees"),
    ({"swap_type": "EXACT_INPUT"}, "swap_type"),
    ({"colour": "red"}, "colour"),
    ({"recipient": None}, "recipient"),
]


async def test_invalid_quote_bodies_are_400_naming_the_field(world: SwapWorld) -> None:
    """The official API's answer to bad input: 400, ``BadRequestResponse`` (protocol-notes 7)."""
    for overrides, field in INVALID_QUOTES:
        body = {**quote_body(), **overrides}
        body = {k: v for k, v in body.items() if v is not None}
        response = await world.client.post(world.base + "/v0/quote", json=body)
        assert_error(response, 400, "INVALID_BODY", field)
        assert response.json()["message"].startswith(field), response.text


async def test_malformed_and_oversized_bodies(world: SwapWorld) -> None:
    url = world.base + "/v0/quote"
    for raw in (b"", b"{", b"[]", b"null", b'"x"'):
        assert_error(await world.client.post(url, content=raw), 400, "INVALID_BODY")
    big = b'{"x": "' + b"a" * 70_000 + b'"}'
    assert_error(await world.client.post(url, content=big), 413, "BODY_TOO_LARGE")


async def test_unknown_path_and_method_use_the_error_body(world: SwapWorld) -> None:
    assert_error(await world.client.get(world.base + "/v0/nothing"), 404, "NOT_FOUND")
    assert_error(await world.client.get(world.base + "/v0/quote"), 405, "METHOD_NOT_ALLOWED")


async def test_every_route_answers_an_unserved_method_405_with_allow(world: SwapWorld) -> None:
    """RFC 9110 15.5.6: a 405 lists the methods the path serves in ``Allow``."""
    paths = (await world.client.get(world.base + "/openapi.json")).json()["paths"]
    assert "/v0/status" in paths and "/sandbox/deposit" in paths
    for path, operations in paths.items():
        served = {method.upper() for method in operations}
        for method in ("TRACE", "DELETE", "PUT", "GET" if "GET" not in served else "POST"):
            response = await world.client.request(method, world.base + path)
            assert_error(response, 405, "METHOD_NOT_ALLOWED")
            assert set(response.headers["allow"].split(", ")) == served, (method, path)


# ---------------------------------------------------------------------------------- deposits


async def test_submit_for_an_unknown_address_is_404(world: SwapWorld) -> None:
    response = await world.client.post(
        world.base + "/v0/deposit/submit", json={"txHash": "h1", "depositAddress": "nobody.near"}
    )
    assert_error(response, 404, "NOT_FOUND")
    assert_error(await world.status("nobody.near"), 404, "NOT_FOUND")


async def test_submit_simulates_the_deposit_and_reports_known_tx(world: SwapWorld) -> None:
    quote = await world.ok_quote()
    address = quote["quote"]["depositAddress"]
    submit = {"txHash": "0xdeposit", "depositAddress": address, "nearSenderAccount": "carol.near"}
    response = await world.client.post(world.base + "/v0/deposit/submit", json=submit)
    assert response.status_code == 200, response.text
    body = from_wire(DepositSubmitResponse, response.json())
    assert body.status.value == "KNOWN_DEPOSIT_TX" and body.quote_response.signature
    done = await world.wait_status(address)
    assert done["status"] == "SUCCESS"
    details = done["swapDetails"]
    assert details["originChainTxHashes"][0]["hash"] == "0xdeposit"
    assert details["depositedAmount"] == str(2 * E24)
    again = await world.client.post(world.base + "/v0/deposit/submit", json=submit)
    assert again.json()["status"] == "SUCCESS"
    assert world.balance(address, NEAR) == 0  # a repeated submission deposits nothing


async def test_submit_and_status_validate_their_input(world: SwapWorld) -> None:
    url = world.base + "/v0/deposit/submit"
    for bad in ({"txHash": "h"}, {"txHash": 1, "depositAddress": "a"}, {"tx_hash": "h"}):
        assert_error(await world.client.post(url, json=bad), 400, "INVALID_BODY")
    status = world.base + "/v0/status"
    assert_error(await world.client.get(status), 400, "BAD_PARAMETER", "depositAddress")
    params = {"depositAddress": "a.near", "other": "1"}
    assert_error(await world.client.get(status, params=params), 400, "BAD_PARAMETER", "other")
    deposit = world.base + "/sandbox/deposit"
    bad_amount = {"depositAddress": "a.near", "amount": 5}
    assert_error(await world.client.post(deposit, json=bad_amount), 400, "INVALID_BODY", "amount")


async def test_origin_chain_refunds_quote_a_refund_fee(world: SwapWorld) -> None:
    quote = (await world.ok_quote(refundType="ORIGIN_CHAIN"))["quote"]
    assert int(quote["refundFee"]) == 10**22 // 3  # 0.01 USD of NEAR at 3 USD
