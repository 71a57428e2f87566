"""Swap API models (spec 2.1–2.6, 2.8, 3.1): wire names, round trips and rejections."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from solver.protocol.amounts import U128_MAX
from solver.protocol.swap import (
    AppFee,
    ChainTxHash,
    DepositMode,
    DepositSubmitRequest,
    DepositSubmitResponse,
    Quote,
    QuoteRequest,
    QuoteResponse,
    RefundReason,
    SwapDetails,
    SwapStatus,
    SwapType,
    format_timestamp,
    from_wire,
)


def wire_aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def error_locs(exc: pytest.ExceptionInfo[ValidationError]) -> list[tuple[int | str, ...]]:
    return [tuple(err["loc"]) for err in exc.value.errors()]


def quote_request_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "dry": False,
        "swapType": "EXACT_INPUT",
        "slippageTolerance": 100,
        "originAsset": "nep141:wrap.near",
        "depositType": "ORIGIN_CHAIN",
        "destinationAsset": "nep245:v2_1.omni.hot.tg:56_11111",
        "amount": "1000000000000000000000000",
        "refundTo": "alice.near",
        "refundType": "ORIGIN_CHAIN",
        "recipient": "0x2527d02599ba641c19fea793cd0f167589a0f10d",
        "recipientType": "DESTINATION_CHAIN",
        "deadline": "2026-11-22T10:00:00.000Z",
    }
    body.update(changes)
    return body


FULL_OPTIONALS: dict[str, Any] = {
    "depositMode": "MEMO",
    "connectedWallets": ["alice.near", "0xabc"],
    "sessionId": "session-1",
    "virtualChainRecipient": "0x1111111111111111111111111111111111111111",
    "virtualChainRefundRecipient": "0x2222222222222222222222222222222222222222",
    "customRecipientMsg": '{"action":"stake"}',
    "referral": "my-app",
    "quoteWaitingTimeMs": 0,
    "appFees": [{"recipient": "fees.near", "fee": 25}, {"recipient": "b.near", "fee": 2.5}],
}

QUOTE: dict[str, Any] = {
    "amountIn": "1000000000000000000000000",
    "amountInFormatted": "1.0",
    "amountInUsd": "3.2512",
    "minAmountIn": "990000000000000000000000",
    "maxAmountIn": "1010000000000000000000000",
    "amountOut": "3240000",
    "amountOutFormatted": "3.24",
    "amountOutUsd": "3.2400",
    "minAmountOut": "3207600",
    "timeEstimate": 20,
    "depositAddress": "5f3c9a0e8d1b2c4a6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5",
    "depositMemo": "123456",
    "deadline": "2026-11-22T10:00:00.000Z",
    "timeWhenInactive": "2026-11-22T09:00:00.000Z",
    "virtualChainRecipient": "0x1111111111111111111111111111111111111111",
    "virtualChainRefundRecipient": "0x2222222222222222222222222222222222222222",
    "customRecipientMsg": "msg",
    "refundFee": "1000",
}


def quote_response_body() -> dict[str, Any]:
    return {
        "correlationId": "c0ffee",
        "timestamp": "2026-11-22T08:59:59.123Z",
        "signature": "ed25519:3xYz",
        "quoteRequest": quote_request_body(**FULL_OPTIONALS),
        "quote": dict(QUOTE),
    }


SWAP_DETAILS: dict[str, Any] = {
    "intentHashes": ["hash1", "hash2"],
    "nearTxHashes": ["tx1"],
    "originChainTxHashes": [{"hash": "0xaa", "explorerUrl": "https://explorer/tx/0xaa"}],
    "destinationChainTxHashes": [{"hash": "0xbb", "explorerUrl": "https://explorer/tx/0xbb"}],
    "amountIn": "1000",
    "amountInFormatted": "0.001",
    "amountInUsd": "0.01",
    "amountOut": "999",
    "amountOutFormatted": "0.000999",
    "amountOutUsd": "0.0099",
    "slippage": -0.5,
    "refundedAmount": "0",
    "refundedAmountFormatted": "0",
    "refundedAmountUsd": "0",
    "refundReason": "NO_LIQUIDITY",
    "depositedAmount": "1000",
    "depositedAmountFormatted": "0.001",
    "depositedAmountUsd": "0.01",
    "referral": "my-app",
}


# --- wire names -------------------------------------------------------------------------------


def test_quote_request_wire_names_match_spec_2_1() -> None:
    assert wire_aliases(QuoteRequest) == {
        "dry", "swapType", "slippageTolerance", "originAsset", "depositType",
        "destinationAsset", "amount", "refundTo", "refundType", "recipient", "recipientType",
        "deadline", "depositMode", "connectedWallets", "sessionId", "virtualChainRecipient",
        "virtualChainRefundRecipient", "customRecipientMsg", "referral", "quoteWaitingTimeMs",
        "appFees",
    }  # fmt: skip
    assert wire_aliases(AppFee) == {"recipient", "fee"}


def test_response_wire_names_match_spec() -> None:
    assert wire_aliases(QuoteResponse) == {
        "correlationId", "timestamp", "signature", "quoteRequest", "quote",
    }  # fmt: skip
    assert wire_aliases(Quote) == set(QUOTE)
    assert wire_aliases(DepositSubmitRequest) == {
        "txHash", "depositAddress", "nearSenderAccount", "memo",
    }  # fmt: skip
    assert wire_aliases(DepositSubmitResponse) == {
        "correlationId", "quoteResponse", "status", "updatedAt", "swapDetails",
    }  # fmt: skip
    assert wire_aliases(SwapDetails) == set(SWAP_DETAILS)
    assert wire_aliases(ChainTxHash) == {"hash", "explorerUrl"}


def test_enum_values_match_spec() -> None:
    assert [s.value for s in SwapType] == ["EXACT_INPUT", "EXACT_OUTPUT", "FLEX_INPUT", "ANY_INPUT"]
    assert {s.value for s in SwapStatus} == {
        "KNOWN_DEPOSIT_TX", "PENDING_DEPOSIT", "INCOMPLETE_DEPOSIT", "PROCESSING", "SUCCESS",
        "REFUNDED", "FAILED",
    }  # fmt: skip
    assert len(RefundReason) == 11
    assert RefundReason("REFUND_ADD_FAILED") is RefundReason.REFUND_ADD_FAILED


# --- quote request ----------------------------------------------------------------------------


def test_quote_request_round_trip_minimal_fills_defaults() -> None:
    body = quote_request_body()
    request = QuoteRequest.model_validate_json(json.dumps(body))
    assert request.amount == 10**24
    assert request.swap_type is SwapType.EXACT_INPUT
    assert request.deadline == datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert request.deposit_mode is DepositMode.SIMPLE
    assert request.quote_waiting_time_ms == 3000
    assert dump(request) == {**body, "depositMode": "SIMPLE", "quoteWaitingTimeMs": 3000}
    assert QuoteRequest.model_validate_json(request.model_dump_json(by_alias=True)) == request


def test_quote_request_round_trip_with_every_optional_field() -> None:
    body = quote_request_body(**FULL_OPTIONALS)
    request = QuoteRequest.model_validate_json(json.dumps(body))
    assert request.app_fees == [
        AppFee(recipient="fees.near", fee=25),
        AppFee(recipient="b.near", fee=2.5),
    ]
    assert request.referral == "my-app"
    assert dump(request) == body
    assert from_wire(QuoteRequest, json.loads(json.dumps(body))) == request


def test_quote_request_python_construction_by_snake_case_names() -> None:
    request = QuoteRequest(
        dry=True,
        swap_type=SwapType.EXACT_OUTPUT,
        slippage_tolerance=50,
        origin_asset="nep141:wrap.near",
        deposit_type="INTENTS",
        destination_asset="nep141:usdc.near",
        amount=U128_MAX,
        refund_to="alice.near",
        refund_type="INTENTS",
        recipient="bob.near",
        recipient_type="INTENTS",
        deadline=datetime(2026, 1, 1, 12, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=2))),
    )
    wire = dump(request)
    assert wire["amount"] == str(U128_MAX)
    assert wire["swapType"] == "EXACT_OUTPUT"
    assert wire["deadline"] == "2026-01-01T10:00:00.250Z"
    assert "swap_type" not in wire


REQUIRED_QUOTE_FIELDS = sorted(quote_request_body())


@pytest.mark.parametrize("field", REQUIRED_QUOTE_FIELDS)
def test_quote_request_each_required_field_missing(field: str) -> None:
    body = quote_request_body()
    del body[field]
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(body))
    assert error_locs(exc) == [(field,)]
    assert exc.value.errors()[0]["type"] == "missing"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("swapType", "EXACT_IN"),
        ("swapType", "exact_input"),
        ("depositType", "DESTINATION_CHAIN"),
        ("refundType", "SOMEWHERE"),
        ("recipientType", "ORIGIN_CHAIN"),
        ("depositMode", "BOTH"),
    ],
)
def test_quote_request_unknown_enum_value_rejected(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(**{field: value})))
    assert error_locs(exc) == [(field,)]


def test_amount_as_json_number_rejected() -> None:
    body = quote_request_body(amount=1000)
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(body))
    assert error_locs(exc) == [("amount",)]
    assert "decimal string" in exc.value.errors()[0]["msg"]
    with pytest.raises(ValidationError):
        from_wire(QuoteRequest, body)


@pytest.mark.parametrize("amount", [str(U128_MAX + 1), "-1", "01", "1.5", "", " 1", "1e3", "0x10"])
def test_bad_amount_strings_rejected(amount: str) -> None:
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(amount=amount)))
    assert error_locs(exc) == [("amount",)]


def test_amount_bounds_accepted() -> None:
    for amount in ("0", str(U128_MAX)):
        request = QuoteRequest.model_validate_json(json.dumps(quote_request_body(amount=amount)))
        assert dump(request)["amount"] == amount


def test_python_int_amount_outside_u128_rejected() -> None:
    body = quote_request_body()
    body.pop("amount")
    with pytest.raises(ValidationError):
        QuoteRequest.model_validate({**body, "amount": U128_MAX + 1})
    assert QuoteRequest.model_validate({**body, "amount": 7}).amount == 7


@given(st.integers(min_value=0, max_value=U128_MAX))
def test_amount_round_trips_as_string(amount: int) -> None:
    request = QuoteRequest.model_validate_json(json.dumps(quote_request_body(amount=str(amount))))
    assert request.amount == amount
    assert json.loads(request.model_dump_json(by_alias=True))["amount"] == str(amount)


@pytest.mark.parametrize(
    "deadline", ["2026-11-22T10:00:00", "2026-11-22", "tomorrow", "2026-13-01T00:00:00Z"]
)
def test_naive_or_malformed_deadline_rejected(deadline: str) -> None:
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(deadline=deadline)))
    assert error_locs(exc) == [("deadline",)]


def test_deadline_number_and_naive_datetime_rejected() -> None:
    with pytest.raises(ValidationError):
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(deadline=1_800_000_000)))
    body = quote_request_body(deadline=datetime(2026, 1, 1))  # noqa: DTZ001 - naive on purpose
    with pytest.raises(ValidationError, match="time zone"):
        QuoteRequest.model_validate(body)


def test_deadline_with_offset_keeps_the_instant() -> None:
    request = QuoteRequest.model_validate_json(
        json.dumps(quote_request_body(deadline="2026-11-22T12:30:00.5+02:30"))
    )
    assert request.deadline == datetime(2026, 11, 22, 10, 0, 0, 500_000, tzinfo=UTC)
    assert dump(request)["deadline"] == "2026-11-22T10:00:00.500Z"


@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1),  # noqa: DTZ001
        max_value=datetime(2200, 1, 1),  # noqa: DTZ001
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5, minutes=30))]
        ),
    )
)
def test_timestamp_round_trips(moment: datetime) -> None:
    text = format_timestamp(moment)
    assert text.endswith("Z")
    request = QuoteRequest.model_validate_json(json.dumps(quote_request_body(deadline=text)))
    assert request.deadline == moment


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("referral", "My-App"),
        ("referral", ""),
        ("slippageTolerance", -1),
        ("slippageTolerance", "100"),
        ("slippageTolerance", True),
        ("quoteWaitingTimeMs", -1),
        ("quoteWaitingTimeMs", "3000"),
        ("dry", "true"),
        ("dry", 1),
        ("originAsset", "wrap.near"),
        ("destinationAsset", "erc20:0xabc"),
        ("refundTo", ""),
        ("connectedWallets", "alice.near"),
    ],
)
def test_quote_request_bad_field_values(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(**{field: value})))
    assert {loc[0] for loc in error_locs(exc)} == {field}


def test_quote_request_boundary_values_accepted() -> None:
    request = QuoteRequest.model_validate_json(
        json.dumps(quote_request_body(slippageTolerance=0, quoteWaitingTimeMs=0, dry=True))
    )
    assert request.slippage_tolerance == 0
    assert request.quote_waiting_time_ms == 0
    assert request.dry is True


def test_quote_request_forbids_unknown_fields() -> None:
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(swap_type="EXACT_INPUT")))
    assert error_locs(exc) == [("swap_type",)]
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(
            json.dumps(quote_request_body(appFees=[{"recipient": "a.near", "fee": 1, "x": 2}]))
        )
    assert error_locs(exc) == [("appFees", 0, "x")]


def test_app_fee_fields() -> None:
    with pytest.raises(ValidationError) as exc:
        QuoteRequest.model_validate_json(json.dumps(quote_request_body(appFees=[{"fee": 1}])))
    assert error_locs(exc) == [("appFees", 0, "recipient")]
    with pytest.raises(ValidationError):
        AppFee.model_validate_json('{"recipient": "a.near", "fee": -1}')


def test_models_are_frozen() -> None:
    request = QuoteRequest.model_validate_json(json.dumps(quote_request_body()))
    with pytest.raises(ValidationError):
        request.amount = 5


# --- quote response ---------------------------------------------------------------------------


def test_quote_response_round_trip() -> None:
    body = quote_response_body()
    response = QuoteResponse.model_validate_json(json.dumps(body))
    assert response.quote.amount_out == 3_240_000
    assert response.quote.amount_out_usd == "3.2400"
    assert response.quote_request.deposit_mode is DepositMode.MEMO
    assert response.timestamp == datetime(2026, 11, 22, 8, 59, 59, 123_000, tzinfo=UTC)
    assert dump(response) == body
    assert response.dry_rule_problem() is None


def test_quote_response_tolerates_unknown_fields() -> None:
    body = quote_response_body()
    body["extraTop"] = 1
    body["quote"]["newField"] = "x"
    body["quoteRequest"]["serverAddedField"] = True
    response = QuoteResponse.model_validate_json(json.dumps(body))
    assert dump(response) == quote_response_body()


def test_dry_quote_without_deposit_fields() -> None:
    body = quote_response_body()
    body["quoteRequest"]["dry"] = True
    for key in ("depositAddress", "depositMemo", "deadline", "timeWhenInactive"):
        del body["quote"][key]
    response = QuoteResponse.model_validate_json(json.dumps(body))
    assert response.quote.deposit_address is None
    assert "depositAddress" not in dump(response)["quote"]
    assert response.dry_rule_problem() is None
    leaky = response.model_copy(
        update={"quote": response.quote.model_copy(update={"deposit_address": "abc"})}
    )
    assert leaky.dry_rule_problem() == "dry quote carries deposit_address"


@pytest.mark.parametrize(
    "field", ["correlationId", "timestamp", "signature", "quoteRequest", "quote"]
)
def test_quote_response_required_fields(field: str) -> None:
    body = quote_response_body()
    del body[field]
    with pytest.raises(ValidationError) as exc:
        QuoteResponse.model_validate_json(json.dumps(body))
    assert error_locs(exc) == [(field,)]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("amountIn", 1000),
        ("minAmountOut", str(U128_MAX + 1)),
        ("amountInUsd", 3.25),
        ("amountOutFormatted", "1e-7"),
        ("amountOutFormatted", "3,24"),
        ("amountInUsd", ""),
        ("deadline", "2026-11-22T10:00:00"),
        ("timeEstimate", "20"),
    ],
)
def test_quote_bad_values_rejected(field: str, value: Any) -> None:
    body = quote_response_body()
    body["quote"][field] = value
    with pytest.raises(ValidationError) as exc:
        QuoteResponse.model_validate_json(json.dumps(body))
    assert {loc[:2] for loc in error_locs(exc)} == {("quote", field)}


# --- deposit submission -----------------------------------------------------------------------


def test_deposit_submit_request_round_trip_and_required_fields() -> None:
    body = {
        "txHash": "0xdead",
        "depositAddress": "addr",
        "nearSenderAccount": "alice.near",
        "memo": "7",
    }
    request = DepositSubmitRequest.model_validate_json(json.dumps(body))
    assert request.tx_hash == "0xdead"
    assert dump(request) == body
    for field in ("txHash", "depositAddress"):
        partial = {k: v for k, v in body.items() if k != field}
        with pytest.raises(ValidationError) as exc:
            DepositSubmitRequest.model_validate_json(json.dumps(partial))
        assert error_locs(exc) == [(field,)]
    with pytest.raises(ValidationError) as exc:
        DepositSubmitRequest.model_validate_json(json.dumps({**body, "nearSenderAccount": "A!"}))
    assert error_locs(exc) == [("nearSenderAccount",)]
    with pytest.raises(ValidationError) as exc:
        DepositSubmitRequest.model_validate_json(json.dumps({**body, "hash": "x"}))
    assert error_locs(exc) == [("hash",)]


def deposit_response_body() -> dict[str, Any]:
    return {
        "correlationId": "c1",
        "quoteResponse": quote_response_body(),
        "status": "KNOWN_DEPOSIT_TX",
        "updatedAt": "2026-11-22T09:01:00.000Z",
        "swapDetails": dict(SWAP_DETAILS),
    }


def test_deposit_submit_response_round_trip() -> None:
    body = deposit_response_body()
    response = DepositSubmitResponse.model_validate_json(json.dumps(body))
    assert response.status is SwapStatus.KNOWN_DEPOSIT_TX
    details = response.swap_details
    assert details.refund_reason is RefundReason.NO_LIQUIDITY
    assert details.origin_chain_tx_hashes == [
        ChainTxHash(hash="0xaa", explorer_url="https://explorer/tx/0xaa")
    ]
    assert details.amount_out == 999
    assert details.slippage == -0.5
    assert dump(response) == body


def test_empty_swap_details_allowed() -> None:
    body = deposit_response_body()
    body["swapDetails"] = {}
    response = DepositSubmitResponse.model_validate_json(json.dumps(body))
    assert response.swap_details == SwapDetails()
    assert dump(response)["swapDetails"] == {}


@pytest.mark.parametrize(
    "field", ["correlationId", "quoteResponse", "status", "updatedAt", "swapDetails"]
)
def test_deposit_submit_response_required_fields(field: str) -> None:
    body = deposit_response_body()
    del body[field]
    with pytest.raises(ValidationError) as exc:
        DepositSubmitResponse.model_validate_json(json.dumps(body))
    assert error_locs(exc) == [(field,)]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("status",), "DONE"),
        (("swapDetails", "refundReason"), "BAD_LUCK"),
        (("swapDetails", "refundedAmount"), 0),
        (("swapDetails", "originChainTxHashes"), ["0xaa"]),
        (("swapDetails", "depositedAmountUsd"), "abc"),
    ],
)
def test_deposit_submit_response_bad_values(path: tuple[str, ...], value: Any) -> None:
    body = deposit_response_body()
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError) as exc:
        DepositSubmitResponse.model_validate_json(json.dumps(body))
    assert all(loc[: len(path)] == path for loc in error_locs(exc))


def test_format_timestamp_precision() -> None:
    assert format_timestamp(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000Z"
    moment = datetime(2026, 1, 1, 0, 0, 0, 123_456, tzinfo=UTC)
    assert format_timestamp(moment) == "2026-01-01T00:00:00.123456Z"
