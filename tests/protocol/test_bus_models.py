"""Message-bus objects (spec 2.13, 3.2, 4.7, 8; protocol-notes 6)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from solver.protocol.amounts import U128_MAX, WIRE
from solver.protocol.bus import (
    DEFAULT_MIN_DEADLINE_MS,
    MAX_SOLVER_WAIT_MS,
    IntentStatus,
    JsonRpcRequest,
    PublishIntentParams,
    PublishResult,
    PublishStatus,
    QuoteOutput,
    QuoteParams,
    QuoteRequestEvent,
    QuoteResponseParams,
    StatusResult,
    rename_asset_fields,
    rpc_error,
    rpc_request,
    rpc_result,
    unwrap_event,
)
from solver.protocol.intents import Erc191Signed, Nep413Signed, RawEd25519Signed, TokenDiff
from solver.protocol.keys import SecretKey
from solver.protocol.signing import sign_nep413, verify_signed

WRAP = "nep141:wrap.near"
USDC = "nep141:usdc.near"
BASE_EVENT: dict[str, Any] = {
    "quote_id": "q-1",
    "core_asset_identifier_in": WRAP,
    "core_asset_identifier_out": USDC,
    "exact_amount_in": "1000",
    "min_deadline_ms": 60000,
}


def _event(**changes: Any) -> dict[str, Any]:
    data = {**BASE_EVENT, **changes}
    return {k: v for k, v in data.items() if v is not None}


def _loc(exc: ValidationError) -> tuple[int | str, ...]:
    return tuple(exc.errors()[0]["loc"])


def _signed() -> Nep413Signed:
    return sign_nep413(
        SecretKey(b"\x01" * 32),
        signer_id="solver.near",
        verifying_contract="intents.near",
        deadline=datetime(2026, 11, 22, 10, 0, tzinfo=UTC),
        nonce=b"\x02" * 32,
        intents=[TokenDiff(diff={WRAP: 1000, USDC: -2500})],
    )


def test_limits() -> None:
    assert DEFAULT_MIN_DEADLINE_MS == 60_000
    assert MAX_SOLVER_WAIT_MS == 3_000


# ------------------------------------------------------------------------- quote events


def test_quote_event_exact_in() -> None:
    event = QuoteRequestEvent.model_validate(BASE_EVENT)
    assert event.quote_id == "q-1"
    assert event.core_asset_identifier_in == WRAP
    assert event.core_asset_identifier_out == USDC
    assert event.exact_amount_in == 1000
    assert event.exact_amount_out is None
    assert event.is_exact_in
    assert event.exact_amount == 1000
    assert event.min_deadline_ms == 60000


def test_quote_event_exact_out_and_default_deadline() -> None:
    data = _event(exact_amount_in=None, exact_amount_out="77", min_deadline_ms=None)
    event = QuoteRequestEvent.model_validate(data)
    assert not event.is_exact_in
    assert event.exact_amount == 77
    assert event.min_deadline_ms == DEFAULT_MIN_DEADLINE_MS


@settings(max_examples=100)
@given(st.integers(min_value=1, max_value=U128_MAX), st.booleans())
def test_quote_event_any_positive_amount(amount: int, exact_in: bool) -> None:
    side = "exact_amount_in" if exact_in else "exact_amount_out"
    data = _event(**{"exact_amount_in": None, side: str(amount)})
    event = QuoteRequestEvent.model_validate_json(orjson.dumps(data))
    assert event.is_exact_in is exact_in
    assert event.exact_amount == amount


def test_quote_event_requires_exactly_one_exact_amount() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        QuoteRequestEvent.model_validate(_event(exact_amount_out="5"))
    with pytest.raises(ValidationError, match="exactly one"):
        QuoteRequestEvent.model_validate(_event(exact_amount_in=None))


@pytest.mark.parametrize("side", ["exact_amount_in", "exact_amount_out"])
def test_quote_event_rejects_zero(side: str) -> None:
    with pytest.raises(ValidationError, match="positive"):
        QuoteRequestEvent.model_validate(_event(**{"exact_amount_in": None, side: "0"}))


@pytest.mark.parametrize("value", [str(U128_MAX + 1), "-5", "1.5", "", "01", True])
def test_quote_event_rejects_bad_amount_text(value: Any) -> None:
    with pytest.raises(ValidationError) as exc_info:
        QuoteRequestEvent.model_validate(_event(exact_amount_in=value))
    assert _loc(exc_info.value) == ("exact_amount_in",)


@pytest.mark.parametrize("how", ["json", "python"])
def test_quote_event_rejects_number_amount(how: str) -> None:
    raw = orjson.dumps(_event(exact_amount_in=1000))
    with pytest.raises(ValidationError) as exc_info:
        if how == "json":
            QuoteRequestEvent.model_validate_json(raw)
        else:
            QuoteRequestEvent.model_validate(orjson.loads(raw), context=WIRE)
    assert _loc(exc_info.value) == ("exact_amount_in",)


@pytest.mark.parametrize("value", [-1, -60000, "60000", 1.5, True, 86_400_001])
def test_quote_event_rejects_bad_min_deadline(value: Any) -> None:
    with pytest.raises(ValidationError) as exc_info:
        QuoteRequestEvent.model_validate(_event(min_deadline_ms=value))
    assert _loc(exc_info.value) == ("min_deadline_ms",)


def test_quote_event_accepts_zero_min_deadline() -> None:
    assert QuoteRequestEvent.model_validate(_event(min_deadline_ms=0)).min_deadline_ms == 0


def test_quote_event_tolerates_unknown_fields() -> None:
    data = _event(
        min_wait_ms=100,
        max_wait_ms=3000,
        protocol_fee_included=True,
        trusted_metadata={"source": "x", "nested": [1, 2]},
    )
    event = QuoteRequestEvent.model_validate_json(orjson.dumps(data))
    assert event == QuoteRequestEvent.model_validate(BASE_EVENT)
    assert "trusted_metadata" not in event.model_dump()


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"quote_id": ""}, ("quote_id",)),
        ({"quote_id": None}, ("quote_id",)),
        ({"core_asset_identifier_in": "wrap.near"}, ("core_asset_identifier_in",)),
        ({"core_asset_identifier_out": "nep171:nft.near"}, ("core_asset_identifier_out",)),
    ],
)
def test_quote_event_field_errors(changes: dict[str, Any], where: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError) as exc_info:
        QuoteRequestEvent.model_validate(_event(**changes))
    assert _loc(exc_info.value) == where


def test_quote_event_same_asset_rejected() -> None:
    with pytest.raises(ValidationError, match="differ"):
        QuoteRequestEvent.model_validate(_event(core_asset_identifier_out=WRAP))


def test_quote_params_share_the_rules() -> None:
    params = {k: v for k, v in BASE_EVENT.items() if k != "quote_id"}
    assert QuoteParams.model_validate(params).exact_amount == 1000
    with pytest.raises(ValidationError, match="exactly one"):
        QuoteParams.model_validate({**params, "exact_amount_out": "1"})


# ------------------------------------------------------------------------- renaming, envelopes


def test_rename_asset_fields() -> None:
    relay = {
        "quote_id": "q-1",
        "defuse_asset_identifier_in": WRAP,
        "defuse_asset_identifier_out": USDC,
        "exact_amount_in": "1000",
    }
    renamed = rename_asset_fields(relay, "defuse", "core")
    assert renamed == {
        "quote_id": "q-1",
        "core_asset_identifier_in": WRAP,
        "core_asset_identifier_out": USDC,
        "exact_amount_in": "1000",
    }
    assert "defuse_asset_identifier_in" in relay  # the input is not modified
    assert QuoteRequestEvent.model_validate(renamed).core_asset_identifier_out == USDC
    assert rename_asset_fields(renamed, "core", "defuse") == relay
    assert rename_asset_fields(relay, "core", "core") == relay
    partial = rename_asset_fields({"defuse_asset_identifier_in": WRAP}, "defuse", "core")
    assert partial == {"core_asset_identifier_in": WRAP}


def test_unwrap_event_nested_envelope() -> None:
    data = {"quote_id": "q-1"}
    params = {"subscription": "sub-1", "data": data, "metadata": {"partner_id": "p"}}
    assert unwrap_event(params) == ("sub-1", data, {"partner_id": "p"})
    assert unwrap_event({"subscription": "sub-1", "data": data}) == ("sub-1", data, {})


def test_unwrap_event_flat_envelope() -> None:
    params = {**BASE_EVENT, "subscription": "sub-2", "metadata": {"traceparent": "00-ab"}}
    subscription, data, metadata = unwrap_event(params)
    assert subscription == "sub-2"
    assert data == BASE_EVENT
    assert metadata == {"traceparent": "00-ab"}
    assert QuoteRequestEvent.model_validate(data).quote_id == "q-1"
    assert unwrap_event(dict(BASE_EVENT)) == (None, BASE_EVENT, {})


def test_unwrap_event_odd_shapes() -> None:
    assert unwrap_event({"subscription": 7, "data": {"a": 1}, "metadata": "x"}) == (
        None,
        {"a": 1},
        {},
    )
    bad: object
    for bad in (None, [], "event", 3):
        with pytest.raises(ValueError, match="object"):
            unwrap_event(bad)


# ------------------------------------------------------------------------- quote responses


def test_quote_output_needs_a_side() -> None:
    assert QuoteOutput.model_validate({"amount_out": "5"}).amount_out == 5
    assert QuoteOutput.model_validate({"amount_in": "6"}).amount_in == 6
    with pytest.raises(ValidationError, match="needs amount_in or amount_out"):
        QuoteOutput.model_validate({})
    # py-near's solver sends both; the relay checks them against the request and the diff.
    both = QuoteOutput.model_validate({"amount_in": "1", "amount_out": "2"})
    assert (both.amount_in, both.amount_out) == (1, 2)
    with pytest.raises(ValidationError) as exc_info:
        QuoteOutput.model_validate({"amount_out": str(U128_MAX + 1)})
    assert _loc(exc_info.value) == ("amount_out",)


def test_quote_output_serializes_strings() -> None:
    output = QuoteOutput(amount_out=U128_MAX)
    assert output.model_dump(mode="json", exclude_none=True) == {"amount_out": str(U128_MAX)}


def test_quote_response_params_round_trip() -> None:
    signed = _signed()
    params = QuoteResponseParams(
        quote_id="q-1", quote_output=QuoteOutput(amount_out=2500), signed_data=signed
    )
    wire = orjson.loads(orjson.dumps(params.model_dump(mode="json", exclude_none=True)))
    assert wire["quote_output"] == {"amount_out": "2500"}
    assert wire["signed_data"]["standard"] == "nep413"
    assert set(wire["signed_data"]["payload"]) == {"message", "nonce", "recipient"}
    back = QuoteResponseParams.model_validate(wire)
    assert back == params
    assert verify_signed(back.signed_data).message.signer_id == "solver.near"


def test_quote_response_rejects_number_amount_from_the_wire() -> None:
    wire = {
        "quote_id": "q-1",
        "quote_output": {"amount_out": 2500},
        "signed_data": _signed().model_dump(mode="json", exclude_none=True),
    }
    with pytest.raises(ValidationError) as exc_info:
        QuoteResponseParams.model_validate(wire, context=WIRE)
    assert _loc(exc_info.value) == ("quote_output", "amount_out")
    with pytest.raises(ValidationError):
        QuoteResponseParams.model_validate_json(orjson.dumps(wire))


def test_publish_intent_params_accept_each_standard() -> None:
    signed = _signed().model_dump(mode="json", exclude_none=True)
    params = PublishIntentParams.model_validate(
        {"quote_hashes": ["h"], "signed_data": signed}, context=WIRE
    )
    assert isinstance(params.signed_data, Nep413Signed)
    assert params.quote_hashes == ["h"]
    raw = {"standard": "raw_ed25519", "payload": "{}", "public_key": "k", "signature": "s"}
    erc = {"standard": "erc191", "payload": "{}", "signature": "secp256k1:x"}
    kinds = [
        type(PublishIntentParams.model_validate({"quote_hashes": [], "signed_data": d}).signed_data)
        for d in (raw, erc)
    ]
    assert kinds == [RawEd25519Signed, Erc191Signed]
    with pytest.raises(ValidationError) as exc_info:
        PublishIntentParams.model_validate(
            {"quote_hashes": ["h"], "signed_data": {**signed, "standard": "webauthn"}}
        )
    assert _loc(exc_info.value)[0] == "signed_data"


def test_quote_hashes_null_is_none() -> None:
    signed = _signed().model_dump(mode="json", exclude_none=True)
    params = PublishIntentParams.model_validate({"quote_hashes": None, "signed_data": signed})
    assert params.quote_hashes == []
    with pytest.raises(ValidationError):
        PublishIntentParams.model_validate({"signed_data": signed})


# ------------------------------------------------------------------------- results, envelope


def test_status_values() -> None:
    assert [s.value for s in IntentStatus] == [
        "PENDING",
        "TX_BROADCASTED",
        "SETTLED",
        "NOT_FOUND_OR_NOT_VALID",
    ]
    result = StatusResult.model_validate(
        {"intent_hash": "h", "status": "SETTLED", "data": {"hash": "tx"}}
    )
    assert result.status is IntentStatus.SETTLED
    assert result.data is not None
    assert result.data.hash == "tx"
    with pytest.raises(ValidationError) as exc_info:
        StatusResult.model_validate({"intent_hash": "h", "status": "DONE"})
    assert _loc(exc_info.value) == ("status",)


def test_publish_result() -> None:
    failed = PublishResult.model_validate(
        {"status": "FAILED", "reason": "expired", "intent_hash": "h"}
    )
    assert failed.status is PublishStatus.FAILED
    assert failed.reason == "expired"
    with pytest.raises(ValidationError):
        PublishResult.model_validate({"status": "MAYBE"})


def test_rpc_envelopes() -> None:
    assert rpc_request("quote", {"a": 1}, 7) == {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "quote",
        "params": [{"a": 1}],
    }
    assert rpc_result(7, "OK") == {"jsonrpc": "2.0", "id": 7, "result": "OK"}
    assert rpc_error(7, -32602, "bad") == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32602, "message": "bad"},
    }
    assert rpc_error(None, -32000, "x", {"k": 1})["error"]["data"] == {"k": 1}

    request = JsonRpcRequest.model_validate(rpc_request("get_status", {"intent_hash": "h"}, "a"))
    assert request.first_param() == {"intent_hash": "h"}
    assert JsonRpcRequest.model_validate({"jsonrpc": "2.0", "method": "m"}).first_param() is None
    with pytest.raises(ValidationError) as exc_info:
        JsonRpcRequest.model_validate({"jsonrpc": "1.0", "method": "m"})
    assert _loc(exc_info.value) == ("jsonrpc",)
