"""The hot-path quote signer is byte-identical to the model-based signer and verifies."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import base58
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.protocol.amounts import I128_MAX
from solver.protocol.encoding import b58encode
from solver.protocol.intents import TokenDiff, serialize_message
from solver.protocol.keys import SecretKey
from solver.protocol.quote_signing import QuoteSigner, token_diff_message
from solver.protocol.signing import parse_signed, sign_nep413, verify_signed

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
        deadline=deadline,
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
