"""The hot-path quote signer is byte-identical to the model-based signer and verifies."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from datetime import UTC, datetime, timedelta, timezone

import base58
import nacl.signing
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.core import clock
from solver.protocol import encoding, intents, quote_signing
from solver.protocol.amounts import I128_MAX
from solver.protocol.encoding import b58encode
from solver.protocol.intents import (
    TokenDiff,
    format_deadline,
    format_deadline_us,
    serialize_message,
)
from solver.protocol.keys import SecretKey
from solver.protocol.quote_signing import QuoteSigner, token_diff_message
from solver.protocol.signing import NEP413_TAG, parse_signed, sign_nep413, verify_signed

KEY = SecretKey(bytes(range(32)))
ASSET_A = "nep141:usdc.sandbox"
ASSET_B = "nep245:v2_1.omni.hot.tg:56_11111111111111111111"


@settings(max_examples=100, deadline=None)
@given(
    amount_in=st.integers(1, I128_MAX),
    amount_out=st.integers(1, I128_MAX),
    micros=st.integers(0, 10**12),
)
def test_fast_signer_equals_model_signer(amount_in: int, amount_out: int, micros: int) -> None:
    deadline = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    nonce = os.urandom(32)
    signer = QuoteSigner(KEY, "solver.sandbox", "intents.sandbox")
    fast = signer.sign(
        deadline=clock.micros(deadline),
        nonce=nonce,
        asset_in=ASSET_A,
        amount_in=amount_in,
        asset_out=ASSET_B,
        amount_out=amount_out,
    )
    diff = {ASSET_A: amount_in, ASSET_B: -amount_out}
    assert fast.message == serialize_message("solver.sandbox", deadline, [TokenDiff(diff=diff)])
    reference = sign_nep413(
        KEY,
        signer_id="solver.sandbox",
        verifying_contract="intents.sandbox",
        deadline=deadline,
        nonce=nonce,
        intents=[TokenDiff(diff=diff)],
    )
    assert fast.signed_data == reference.model_dump(mode="json", exclude_none=True)
    verified = verify_signed(parse_signed(fast.signed_data))
    assert verified.intent_hash_text == fast.quote_hash
    assert verified.message.intents[0] == TokenDiff(diff=diff)


def test_message_escapes_unusual_asset_ids() -> None:
    message = token_diff_message(
        "a.near", datetime(2026, 1, 1, tzinfo=UTC), 'nep245:x.near:"q"', 1, ASSET_A, 2
    )
    assert '"nep245:x.near:\\"q\\"":"1"' in message


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_fast_base58_matches_the_base58_package(data: bytes) -> None:
    assert b58encode(data) == base58.b58encode(data).decode()


def test_repr_has_no_secret() -> None:
    signer = QuoteSigner(KEY, "solver.sandbox", "intents.sandbox")
    assert KEY.to_text()[8:] not in repr(signer)


# ------------------------------------------------------- the signing path at its floor (issue 29)
# The implementations the fast ones replaced, kept here verbatim: the new ones must give the same
# bytes for the same inputs.


def _old_json_str(value: str) -> str:
    return orjson.dumps(value).decode("utf-8")


def _old_format_deadline(moment: datetime) -> str:
    tz = moment.tzinfo
    if tz is None:
        raise ValueError("deadline must be timezone-aware")
    utc = moment if tz is UTC else moment.astimezone(UTC)
    return utc.isoformat(timespec="milliseconds")[:-6] + "Z"


def _old_token_diff_message(
    signer_id: str,
    deadline: datetime,
    asset_in: str,
    amount_in: int,
    asset_out: str,
    amount_out: int,
) -> str:
    return (
        '{"deadline":"' + _old_format_deadline(deadline) + '","intents":[{"intent":"token_diff","diff":{'
        + _old_json_str(asset_in) + ':"' + str(amount_in) + '",'
        + _old_json_str(asset_out) + ':"-' + str(amount_out) + '"}}],"signer_id":'
        + _old_json_str(signer_id) + "}"
    )  # fmt: skip


def _old_b58encode(data: bytes) -> str:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    pairs = [a + b for a in alphabet for b in alphabet]
    number = int.from_bytes(data, "big")
    digits: list[str] = []
    while number >= 3364:
        number, pair = divmod(number, 3364)
        digits.append(pairs[pair])
    if number >= 58:
        digits.append(pairs[number])
    elif number:
        digits.append(alphabet[number])
    zeros = len(data) - len(data.lstrip(b"\0"))
    return "1" * zeros + "".join(reversed(digits))


def _old_sign(
    seed: bytes,
    signer_id: str,
    contract: str,
    *,
    deadline: datetime,
    nonce: bytes,
    asset_in: str,
    amount_in: int,
    asset_out: str,
    amount_out: int,
) -> tuple[dict[str, object], str]:
    """The previous ``QuoteSigner.sign``, on PyNaCl's ``SigningKey``."""
    message = _old_token_diff_message(
        signer_id, deadline, asset_in, amount_in, asset_out, amount_out
    )
    raw = message.encode("utf-8")
    recipient = contract.encode("utf-8")
    suffix = struct.pack("<I", len(recipient)) + recipient + b"\x00"
    digest = hashlib.sha256(
        NEP413_TAG + struct.pack("<I", len(raw)) + raw + nonce + suffix
    ).digest()
    signature = bytes(nacl.signing.SigningKey(seed).sign(digest).signature)
    signed: dict[str, object] = {
        "standard": "nep413",
        "payload": {
            "message": message,
            "nonce": base64.b64encode(nonce).decode("ascii"),
            "recipient": contract,
        },
        "public_key": SecretKey(seed).public_key.to_text(),
        "signature": "ed25519:" + _old_b58encode(signature),
    }
    return signed, _old_b58encode(digest)


_LEGAL = st.characters(codec="utf-8")  # any code point UTF-8 can carry (no lone surrogates)
_account_part = st.from_regex(r"[a-z0-9]{1,8}(?:[-_][a-z0-9]{1,8}){0,2}", fullmatch=True)
accounts = st.lists(_account_part, min_size=1, max_size=3).map(".".join)
# nep245/nep171 token ids may hold any character: quotes, backslashes, controls, non-ASCII.
token_ids = st.one_of(
    st.text(_LEGAL, min_size=1, max_size=40),
    st.sampled_from(['"', "\\", '\\"', "\n\t\x00\x1f\x7f", "é€😀", "\u2028\u2029", "a b", "</x>"]),
)
asset_ids = st.one_of(
    accounts.map(lambda a: "nep141:" + a),
    st.tuples(st.sampled_from(["nep171", "nep245"]), accounts, token_ids).map(":".join),
)
offsets = st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m)))
deadlines = st.builds(
    lambda moment, zone: moment.replace(tzinfo=UTC).astimezone(zone),
    st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30)),  # noqa: DTZ001
    st.one_of(st.just(UTC), offsets),
)
amounts = st.one_of(st.integers(0, 10**6), st.integers(0, I128_MAX))


@settings(max_examples=500, deadline=None)
@given(
    signer=accounts,
    deadline=deadlines,
    asset_in=asset_ids,
    amount_in=amounts,
    asset_out=asset_ids,
    amount_out=amounts,
)
def test_template_message_equals_the_previous_builder(
    signer: str,
    deadline: datetime,
    asset_in: str,
    amount_in: int,
    asset_out: str,
    amount_out: int,
) -> None:
    new = token_diff_message(signer, deadline, asset_in, amount_in, asset_out, amount_out)
    old = _old_token_diff_message(signer, deadline, asset_in, amount_in, asset_out, amount_out)
    assert new == old
    assert orjson.loads(new)["intents"][0]["diff"] == {
        **{asset_in: str(amount_in)},
        **{asset_out: f"-{amount_out}"},
    }


@settings(max_examples=200, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    nonce=st.binary(min_size=32, max_size=32),
    signer=accounts,
    contract=accounts,
    deadline=deadlines,
    asset_in=asset_ids,
    amount_in=amounts,
    asset_out=asset_ids,
    amount_out=amounts,
)
def test_signed_quote_is_byte_identical_to_the_previous_signer(
    seed: bytes,
    nonce: bytes,
    signer: str,
    contract: str,
    deadline: datetime,
    asset_in: str,
    amount_in: int,
    asset_out: str,
    amount_out: int,
) -> None:
    inputs = {
        "deadline": deadline,
        "nonce": nonce,
        "asset_in": asset_in,
        "amount_in": amount_in,
        "asset_out": asset_out,
        "amount_out": amount_out,
    }
    signer_inputs = {**inputs, "deadline": clock.micros(deadline)}  # the signer takes µs
    quote_signer = QuoteSigner(SecretKey(seed), signer, contract)
    new = quote_signer.sign(**signer_inputs)  # type: ignore[arg-type]
    old_signed, old_hash = _old_sign(seed, signer, contract, **inputs)  # type: ignore[arg-type]
    assert new.signed_data == old_signed
    assert orjson.dumps(new.signed_data) == orjson.dumps(old_signed)
    assert new.quote_hash == old_hash
    assert new.nonce == nonce
    assert new.message == old_signed["payload"]["message"]  # type: ignore[index]
    assert new.signer_id == signer


def test_json_cache_is_bounded() -> None:
    quote_signing._json_cache.clear()
    for index in range(quote_signing._JSON_CACHE_MAX + 10):
        assert quote_signing._json_str(f"nep141:t{index}.near") == f'"nep141:t{index}.near"'
    assert len(quote_signing._json_cache) <= quote_signing._JSON_CACHE_MAX


@settings(max_examples=300)
@given(st.integers(0, 8), st.binary(max_size=120))
def test_base58_with_leading_zero_bytes_matches_the_package(zeros: int, data: bytes) -> None:
    value = b"\0" * zeros + data
    assert b58encode(value) == base58.b58encode(value).decode() == _old_b58encode(value)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 31, 32, 33, 63, 64, 65, 100])
@pytest.mark.parametrize("fill", [0x00, 0x01, 0x39, 0x3A, 0xFF])
def test_base58_edge_values(size: int, fill: int) -> None:
    for value in (bytes([fill]) * size, b"\0" * size + b"\1", bytes([fill]) * size + b"\0"):
        assert b58encode(value) == base58.b58encode(value).decode()


def test_base58_of_chunk_boundaries() -> None:
    """Numbers around powers of 58 (a chunk or a pair that ends in zero digits)."""
    for power in range(1, 100):
        for number in (58**power - 1, 58**power, 58**power + 1, 2 * 58**power):
            value = number.to_bytes((number.bit_length() + 7) // 8, "big")
            assert b58encode(value) == base58.b58encode(value).decode(), number


@settings(max_examples=500)
@given(deadlines)
def test_format_deadline_equals_isoformat(moment: datetime) -> None:
    assert format_deadline(moment) == _old_format_deadline(moment)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    us = (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
    assert format_deadline_us(us) == _old_format_deadline(moment)


def test_format_deadline_refuses_naive_times_and_bounds_its_cache() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_deadline(datetime(2026, 1, 1))  # noqa: DTZ001
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for second in range(intents._SECONDS_MAX + 10):
        moment = start + timedelta(seconds=second, milliseconds=7)
        assert format_deadline(moment) == _old_format_deadline(moment)
    assert len(intents._SECONDS) <= intents._SECONDS_MAX


@settings(max_examples=200)
@given(st.binary(max_size=100))
def test_gmpy2_without_from_bytes_reads_the_same_number(data: bytes) -> None:
    assert encoding._mpz_via_int(data, "big") == encoding._mpz_from_bytes(data, "big")
    assert int(encoding._mpz_via_int(data, "big")) == int.from_bytes(data, "big")
