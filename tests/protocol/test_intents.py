"""Intent models, the signed message string and semantic checks (spec 2.10–2.12, 5.3;
protocol-notes 2)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from solver.protocol.amounts import I128_MAX, I128_MIN, U128_MAX, WIRE
from solver.protocol.intents import (
    AddPublicKey,
    FtWithdraw,
    IntentMessage,
    RemovePublicKey,
    StorageDeposit,
    TokenDiff,
    Transfer,
    UnsignedPayload,
    format_deadline,
    intent_to_wire,
    parse_deadline,
    semantic_problem,
    serialize_message,
    serialize_payload,
)
from tests.protocol.test_ids import account_ids, asset_ids

WRAP = "nep141:wrap.near"
USDC = "nep141:usdc.near"
DEADLINE = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)

nonzero_i128 = st.integers(min_value=I128_MIN, max_value=I128_MAX).filter(lambda n: n != 0)
diffs = st.dictionaries(asset_ids(), nonzero_i128, min_size=1, max_size=4)
memos = st.one_of(st.none(), st.text(max_size=30))
deadlines = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)


def _loc(exc: ValidationError) -> tuple[int | str, ...]:
    return tuple(exc.errors()[0]["loc"])


def _token_diff_error(diff: dict[str, Any]) -> tuple[int | str, ...]:
    with pytest.raises(ValidationError) as exc_info:
        TokenDiff.model_validate({"intent": "token_diff", "diff": diff})
    return _loc(exc_info.value)


# ------------------------------------------------------------------------- structure


def test_token_diff_parses_strings() -> None:
    diff = TokenDiff.model_validate(
        {"intent": "token_diff", "diff": {WRAP: "-1000", USDC: "+25", "nep245:m.near:1": "7"}}
    )
    assert diff.diff == {WRAP: -1000, USDC: 25, "nep245:m.near:1": 7}
    assert intent_to_wire(diff) == {
        "intent": "token_diff",
        "diff": {WRAP: "-1000", USDC: "25", "nep245:m.near:1": "7"},
    }


def test_token_diff_amount_out_of_range_names_field() -> None:
    assert _token_diff_error({WRAP: str(I128_MAX + 1)})[:2] == ("diff", WRAP)
    assert _token_diff_error({WRAP: str(I128_MIN - 1)})[:2] == ("diff", WRAP)
    assert _token_diff_error({WRAP: "1.5"})[:2] == ("diff", WRAP)
    assert _token_diff_error({WRAP: True})[:2] == ("diff", WRAP)


@pytest.mark.parametrize("how", ["json", "python"])
def test_token_diff_rejects_json_number(how: str) -> None:
    raw = '{"intent": "token_diff", "diff": {"nep141:wrap.near": -5}}'
    with pytest.raises(ValidationError) as exc_info:
        if how == "json":
            TokenDiff.model_validate_json(raw)
        else:  # what the verifier does: orjson.loads, then model_validate in the WIRE context
            TokenDiff.model_validate(orjson.loads(raw), context=WIRE)
    assert _loc(exc_info.value)[:2] == ("diff", WRAP)
    # Python-side construction (our own code) still passes ints.
    assert TokenDiff.model_validate(orjson.loads(raw)).diff == {WRAP: -5}


@pytest.mark.parametrize(
    "asset",
    [
        "wrap.near",  # missing standard
        "nep999:wrap.near",  # unknown standard
        "nep171:nft.near",  # nep171 without token id
        "nep141:Wrap.near",
    ],
)
def test_token_diff_malformed_asset_names_field(asset: str) -> None:
    assert _token_diff_error({asset: "5"}) == ("diff", asset, "[key]")


def test_transfer_amount_above_u128_names_field() -> None:
    with pytest.raises(ValidationError) as exc_info:
        Transfer.model_validate({"receiver_id": "bob.near", "tokens": {WRAP: str(U128_MAX + 1)}})
    assert _loc(exc_info.value) == ("tokens", WRAP)
    with pytest.raises(ValidationError) as negative:
        Transfer.model_validate({"receiver_id": "bob.near", "tokens": {WRAP: "-1"}})
    assert _loc(negative.value) == ("tokens", WRAP)


@pytest.mark.parametrize(
    "account", ["Bob.near", "-bob.near", "bob.near.", "bob..near", "b", "b" * 65, "bob__x"]
)
def test_malformed_account_ids_name_the_field(account: str) -> None:
    with pytest.raises(ValidationError) as transfer:
        Transfer.model_validate({"receiver_id": account, "tokens": {WRAP: "1"}})
    assert _loc(transfer.value) == ("receiver_id",)
    with pytest.raises(ValidationError) as message:
        IntentMessage.model_validate(
            {"signer_id": account, "deadline": "2026-11-22T10:00:00.000Z", "intents": []}
        )
    assert _loc(message.value) == ("signer_id",)
    with pytest.raises(ValidationError) as referral:
        TokenDiff.model_validate({"diff": {WRAP: "1"}, "referral": account})
    assert _loc(referral.value) == ("referral",)


def test_unknown_intent_discriminator_names_field() -> None:
    base = {"signer_id": "alice.near", "deadline": "2026-11-22T10:00:00.000Z"}
    with pytest.raises(ValidationError) as unknown:
        IntentMessage.model_validate(
            {**base, "intents": [{"intent": "token_diff", "diff": {WRAP: "1"}}, {"intent": "mint"}]}
        )
    assert _loc(unknown.value) == ("intents", 1)
    assert "mint" in unknown.value.errors()[0]["msg"]
    with pytest.raises(ValidationError) as missing:
        IntentMessage.model_validate({**base, "intents": [{"diff": {WRAP: "1"}}]})
    assert _loc(missing.value) == ("intents", 0)


def test_all_intent_types_parse_in_a_message() -> None:
    message = IntentMessage.model_validate(
        {
            "signer_id": "alice.near",
            "deadline": "2026-11-22T10:00:00.000Z",
            "intents": [
                {"intent": "add_public_key", "public_key": "ed25519:abc"},
                {"intent": "remove_public_key", "public_key": "secp256k1:abc"},
                {"intent": "transfer", "receiver_id": "bob.near", "tokens": {WRAP: "3"}},
                {
                    "intent": "ft_withdraw",
                    "token": "wrap.near",
                    "receiver_id": "bob.near",
                    "amount": "4",
                    "storage_deposit": "1",
                },
                {
                    "intent": "storage_deposit",
                    "contract_id": "wrap.near",
                    "deposit_for_account_id": "bob.near",
                    "amount": "5",
                },
                {"intent": "token_diff", "diff": {WRAP: "-6"}, "unknown_field": 1},
            ],
        }
    )
    kinds = [type(i) for i in message.intents]
    assert kinds == [AddPublicKey, RemovePublicKey, Transfer, FtWithdraw, StorageDeposit, TokenDiff]
    storage = message.intents[4]
    assert isinstance(storage, StorageDeposit)
    assert storage.account_id == "bob.near"  # deposit_for_account_id alias
    withdraw = message.intents[3]
    assert isinstance(withdraw, FtWithdraw)
    assert (withdraw.amount, withdraw.storage_deposit) == (4, 1)
    assert message.deadline == DEADLINE


def test_public_key_intents_require_prefix() -> None:
    with pytest.raises(ValidationError) as exc_info:
        AddPublicKey.model_validate({"public_key": "abc"})
    assert _loc(exc_info.value) == ("public_key",)


def test_unsigned_payload_forbids_unknown_fields() -> None:
    good = {
        "signer_id": "alice.near",
        "verifying_contract": "intents.near",
        "deadline": "2026-11-22T10:00:00Z",
        "nonce": "AAAA",
        "intents": [],
    }
    assert UnsignedPayload.model_validate(good).verifying_contract == "intents.near"
    with pytest.raises(ValidationError) as exc_info:
        UnsignedPayload.model_validate({**good, "extra": 1})
    assert _loc(exc_info.value) == ("extra",)


# ------------------------------------------------------------------------- deadlines


def test_format_deadline() -> None:
    assert format_deadline(DEADLINE) == "2026-11-22T10:00:00.000Z"
    moment = datetime(
        2026, 11, 22, 15, 30, 0, 123999, tzinfo=timezone(timedelta(hours=5, minutes=30))
    )
    assert format_deadline(moment) == "2026-11-22T10:00:00.123Z"
    with pytest.raises(ValueError, match="timezone"):
        format_deadline(datetime(2026, 11, 22))  # noqa: DTZ001


@settings(max_examples=300)
@given(
    st.datetimes(
        min_value=datetime(1000, 1, 2),  # noqa: DTZ001 (hypothesis bounds are naive)
        max_value=datetime(9999, 12, 30),  # noqa: DTZ001
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7)), timezone(timedelta(0))]),
    )
)
def test_format_deadline_is_the_strftime_spelling(moment: datetime) -> None:
    """The fast spelling (isoformat) is the documented one, zone and milliseconds included."""
    utc = moment.astimezone(UTC)
    expected = utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    assert format_deadline(moment) == expected


def test_parse_deadline() -> None:
    assert parse_deadline("2026-11-22T10:00:00.000Z") == DEADLINE
    assert parse_deadline("2026-11-22T11:00:00+01:00") == DEADLINE
    for bad in ("2026-11-22T10:00:00", "tomorrow", ""):
        with pytest.raises(ValueError):
            parse_deadline(bad)
    with pytest.raises(ValidationError) as exc_info:
        IntentMessage.model_validate(
            {"signer_id": "alice.near", "deadline": "2026-11-22T10:00:00", "intents": []}
        )
    assert _loc(exc_info.value) == ("deadline",)


@settings(max_examples=100)
@given(deadlines)
def test_deadline_text_round_trip_to_milliseconds(moment: datetime) -> None:
    text = format_deadline(moment)
    assert text.endswith("Z")
    assert len(text) == len("2026-11-22T10:00:00.000Z")
    expected = moment.astimezone(UTC).replace(microsecond=moment.microsecond // 1000 * 1000)
    assert parse_deadline(text) == expected


# ------------------------------------------------------------------------- serialization


@settings(max_examples=100)
@given(account_ids(), deadlines, st.lists(st.tuples(diffs, memos), min_size=1, max_size=3))
def test_serialize_message_shape(
    signer: str, deadline: datetime, parts: list[tuple[dict[str, int], str | None]]
) -> None:
    intents: list[BaseModel] = [TokenDiff(diff=diff, memo=memo) for diff, memo in parts]
    message = serialize_message(signer, deadline, intents)

    assert "\n" not in message
    assert "\r" not in message
    data = json.loads(message)
    assert list(data) == ["deadline", "intents", "signer_id"]
    assert data["deadline"] == format_deadline(deadline)
    assert data["signer_id"] == signer
    for wire, (diff, memo) in zip(data["intents"], parts, strict=True):
        assert next(iter(wire)) == "intent"
        assert wire["intent"] == "token_diff"
        assert wire["diff"] == {asset: str(delta) for asset, delta in diff.items()}
        assert all(isinstance(v, str) for v in wire["diff"].values())
        assert not any(v.startswith("+") for v in wire["diff"].values())
        if memo is None:
            assert "memo" not in wire
        else:
            assert wire["memo"] == memo
    # The message string parses back to the same intents.
    parsed = IntentMessage.model_validate_json(message)
    assert parsed.signer_id == signer
    assert parsed.intents == intents


def test_serialize_message_exact_text() -> None:
    message = serialize_message(
        "solver.near",
        DEADLINE,
        [TokenDiff(diff={WRAP: 1000, USDC: -2500})],
    )
    assert message == (
        '{"deadline":"2026-11-22T10:00:00.000Z","intents":[{"intent":"token_diff",'
        '"diff":{"nep141:wrap.near":"1000","nep141:usdc.near":"-2500"}}],'
        '"signer_id":"solver.near"}'
    )


def test_serialize_payload_carries_nonce_and_contract() -> None:
    payload = serialize_payload(
        "alice.near", "intents.near", DEADLINE, "AAAA", [TokenDiff(diff={WRAP: -1})]
    )
    data = json.loads(payload)
    assert list(data) == ["signer_id", "verifying_contract", "deadline", "nonce", "intents"]
    assert data["verifying_contract"] == "intents.near"
    assert data["nonce"] == "AAAA"
    assert data["intents"] == [{"intent": "token_diff", "diff": {WRAP: "-1"}}]
    assert "\n" not in payload


def test_intent_to_wire_leaves_out_absent_optionals() -> None:
    withdraw = FtWithdraw(token="wrap.near", receiver_id="bob.near", amount=10)
    assert intent_to_wire(withdraw) == {
        "intent": "ft_withdraw",
        "token": "wrap.near",
        "receiver_id": "bob.near",
        "amount": "10",
    }
    storage = StorageDeposit(contract_id="wrap.near", account_id="bob.near", amount=U128_MAX)
    assert intent_to_wire(storage) == {
        "intent": "storage_deposit",
        "contract_id": "wrap.near",
        "account_id": "bob.near",
        "amount": str(U128_MAX),
    }


# ------------------------------------------------------------------------- semantics


def test_semantic_problem_empty_diff() -> None:
    assert semantic_problem(TokenDiff(diff={}), "alice.near") == "token_diff with an empty diff"


def test_semantic_problem_zero_delta() -> None:
    for zero in ("0", "-0", "+0"):
        diff = TokenDiff.model_validate({"diff": {WRAP: "5", USDC: zero}})
        assert semantic_problem(diff, "alice.near") == "token_diff with a zero delta"


def test_semantic_problem_transfer_to_self() -> None:
    transfer = Transfer(receiver_id="alice.near", tokens={WRAP: 1})
    assert semantic_problem(transfer, "alice.near") == "transfer to oneself"
    assert semantic_problem(transfer, "bob.near") is None


def test_semantic_problem_empty_tokens() -> None:
    transfer = Transfer(receiver_id="bob.near", tokens={})
    assert semantic_problem(transfer, "alice.near") == "transfer with no tokens"


def test_semantic_problem_zero_amounts() -> None:
    transfer = Transfer(receiver_id="bob.near", tokens={WRAP: 0})
    assert semantic_problem(transfer, "alice.near") == "transfer of a zero amount"
    withdraw = FtWithdraw(token="wrap.near", receiver_id="bob.near", amount=0)
    assert semantic_problem(withdraw, "alice.near") == "ft_withdraw of a zero amount"


@settings(max_examples=100)
@given(diffs, account_ids())
def test_semantic_problem_none_for_valid_diffs(diff: dict[str, int], signer: str) -> None:
    assert semantic_problem(TokenDiff(diff=diff), signer) is None
    assert semantic_problem(AddPublicKey(public_key="ed25519:x"), signer) is None
