"""Signing and verifying signed intents: nep413, raw_ed25519, erc191 (spec 2.11, 5.2, 5.3;
protocol-notes 1–2)."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

import base58
import coincurve
import nacl.signing
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from solver.errors import ProtocolError, SignatureError
from solver.protocol.amounts import I128_MAX, I128_MIN
from solver.protocol.encoding import b64encode
from solver.protocol.intents import (
    Erc191Signed,
    Nep413Payload,
    Nep413Signed,
    RawEd25519Signed,
    TokenDiff,
    serialize_message,
    serialize_payload,
)
from solver.protocol.keys import PublicKey, SecretKey, parse_signature
from solver.protocol.signing import (
    erc191_hash,
    intent_hash,
    nep413_digest,
    nep413_preimage,
    parse_signed,
    secp256k1_address,
    sign_erc191,
    sign_nep413,
    sign_nep413_message,
    sign_raw_ed25519,
    verify_signed,
)
from tests.protocol.test_ids import account_ids, asset_ids

SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
DEADLINE = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)

# protocol-notes 1, known vector
VECTOR_PREIMAGE = (
    "9d0100800d00000048656c6c6f2c20776f726c6421" + "00" * 32 + "0c000000696e74656e74732e6e65617200"
)
VECTOR_SHA256 = "94648d7168d4a58d1eecd11fc2ecad210ef7cb5efce7a22d15a19e1764031f59"
VECTOR_PUBLIC_KEY = "e2e9cb7ac57cb46d4da1ce1d1cc2c33bdfe17407c517916b522724a8ea2c6c50"
VECTOR_SIGNATURE = (
    "e2ff6254871a3fec1853c167b42f0f14248c4cf7fef5452dc24d8dbdc5c4bf18"
    "3ab707322b4d782d5f5a05571bae476c5f7ee41c473f3002e600865e46b75d0f"
)

ed25519_seeds = st.binary(min_size=32, max_size=32)
secp256k1_keys = st.integers(min_value=1, max_value=SECP256K1_ORDER - 1).map(
    lambda k: k.to_bytes(32, "big")
)
nonces = st.binary(min_size=32, max_size=32)
nonzero_i128 = st.integers(min_value=I128_MIN, max_value=I128_MAX).filter(lambda n: n != 0)
token_diffs = st.lists(
    st.dictionaries(asset_ids(), nonzero_i128, min_size=1, max_size=3).map(
        lambda d: TokenDiff(diff=d)
    ),
    min_size=1,
    max_size=2,
)
deadlines = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
SIGN_SETTINGS = settings(max_examples=75, deadline=None)


def _b58(data: bytes) -> str:
    return base58.b58encode(data).decode("ascii")


def _ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _change_byte(data: bytes, pos: int, delta: int, modulus: int = 256) -> bytes:
    """``data`` with byte ``pos`` replaced by a different value (``delta`` in 1..modulus-1)."""
    out = bytearray(data)
    out[pos] = (out[pos] + delta) % modulus
    assert out[pos] != data[pos]
    return bytes(out)


def _change_char(text: str, data: st.DataObject) -> str:
    """``text`` (ASCII) with one byte replaced by another ASCII byte, chosen by hypothesis."""
    raw = text.encode("ascii")
    pos = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="position")
    delta = data.draw(st.integers(min_value=1, max_value=127), label="delta")
    return _change_byte(raw, pos, delta, modulus=128).decode("ascii")


def _change_raw(raw: bytes, data: st.DataObject) -> bytes:
    pos = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="position")
    delta = data.draw(st.integers(min_value=1, max_value=255), label="delta")
    return _change_byte(raw, pos, delta)


# ------------------------------------------------------------------------- known vector


def test_nep413_known_vector() -> None:
    nonce = b"\x00" * 32
    preimage = nep413_preimage("Hello, world!", nonce, "intents.near")
    assert len(preimage) == 70
    assert preimage.hex() == VECTOR_PREIMAGE
    digest = nep413_digest("Hello, world!", nonce, "intents.near")
    assert digest == hashlib.sha256(preimage).digest()
    assert digest.hex() == VECTOR_SHA256

    public_key = PublicKey(bytes.fromhex(VECTOR_PUBLIC_KEY))
    signature = bytes.fromhex(VECTOR_SIGNATURE)
    assert public_key.verify(digest, signature)
    nacl.signing.VerifyKey(public_key.raw).verify(digest, signature)  # raises if invalid
    # What is signed is the digest, not the preimage.
    assert not public_key.verify(preimage, signature)


def test_nep413_known_vector_through_verify_signed() -> None:
    item = parse_signed(
        {
            "standard": "nep413",
            "payload": {
                "message": "Hello, world!",
                "nonce": b64encode(b"\x00" * 32),
                "recipient": "intents.near",
            },
            "public_key": "ed25519:" + _b58(bytes.fromhex(VECTOR_PUBLIC_KEY)),
            "signature": "ed25519:" + _b58(bytes.fromhex(VECTOR_SIGNATURE)),
        }
    )
    assert intent_hash(item).hex() == VECTOR_SHA256
    # The signature checks out; the next check (JSON) fails, since the message is not an intent.
    with pytest.raises(ProtocolError, match="not valid JSON") as exc_info:
        verify_signed(item)
    assert not isinstance(exc_info.value, SignatureError)


def test_nep413_preimage_with_callback_url() -> None:
    nonce = bytes(range(32))
    preimage = nep413_preimage("m", nonce, "r.near", "https://x.io")
    assert preimage == (
        bytes.fromhex("9d010080")
        + (1).to_bytes(4, "little")
        + b"m"
        + nonce
        + (6).to_bytes(4, "little")
        + b"r.near"
        + b"\x01"
        + (12).to_bytes(4, "little")
        + b"https://x.io"
    )
    with pytest.raises(ProtocolError, match="32 bytes"):
        nep413_preimage("m", nonce[:31], "r.near")


def test_erc191_known_vector() -> None:
    """web3.js documentation vector (``accounts.sign('Some data', key)``)."""
    private_key = bytes.fromhex("4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318")
    assert secp256k1_address(private_key) == "0x2c7536e3605d9c16a7a3d7b1898e529396a65c23"
    digest = erc191_hash("Some data")
    assert digest.hex() == "1da44b586eb0729ff70a73c326926f6ed5a25f5b056e7f47fbc6e58d86871655"
    signature = bytes.fromhex(
        "b91467e570a6466aa9e9876cbcd013baba02900b8979d43fe208a4a4f339f5fd"
        "6007e74cd82e037b800186422fc2da167c747ef045e5d18a5f5d4300f8e1a029"
        "1c"
    )
    recoverable = signature[:64] + bytes([signature[64] - 27])
    assert coincurve.PrivateKey(private_key).sign_recoverable(digest, hasher=None) == recoverable


# ------------------------------------------------------------------------- round trips


@SIGN_SETTINGS
@given(ed25519_seeds, account_ids(), account_ids(), deadlines, nonces, token_diffs)
def test_nep413_sign_verify_round_trip(
    seed: bytes,
    signer: str,
    contract: str,
    deadline: datetime,
    nonce: bytes,
    intents: list[TokenDiff],
) -> None:
    key = SecretKey(seed)
    items: list[BaseModel] = list(intents)
    signed = sign_nep413(
        key,
        signer_id=signer,
        verifying_contract=contract,
        deadline=deadline,
        nonce=nonce,
        intents=items,
    )
    # The string signed is exactly the string sent in payload.message.
    message = serialize_message(signer, deadline, items)
    assert signed.payload.message == message
    assert signed.payload.nonce == b64encode(nonce)
    assert signed.payload.recipient == contract
    assert signed.payload.callbackUrl is None
    assert signed.public_key == key.public_key.to_text()
    digest = nep413_digest(signed.payload.message, nonce, contract)
    assert key.public_key.verify(digest, parse_signature(signed.signature))

    verified = verify_signed(signed)
    assert verified.standard == "nep413"
    assert verified.intent_hash == digest
    assert verified.intent_hash_text == _b58(digest)
    assert verified.public_key == key.public_key.to_text()
    assert verified.key_owner == key.public_key.implicit_account_id()
    assert verified.message_text == message
    assert verified.message.signer_id == signer
    assert verified.message.deadline == _ms(deadline)
    assert verified.message.intents == intents
    assert verified.nonce == nonce
    assert verified.recipient == contract

    # Through the JSON wire form and back: same item, same hash.
    wire = orjson.loads(orjson.dumps(signed.model_dump(mode="json", exclude_none=True)))
    assert verify_signed(parse_signed(wire)).intent_hash == digest


@SIGN_SETTINGS
@given(ed25519_seeds, account_ids(), account_ids(), deadlines, nonces, token_diffs)
def test_raw_ed25519_sign_verify_round_trip(
    seed: bytes,
    signer: str,
    contract: str,
    deadline: datetime,
    nonce: bytes,
    intents: list[TokenDiff],
) -> None:
    key = SecretKey(seed)
    items: list[BaseModel] = list(intents)
    signed = sign_raw_ed25519(
        key,
        signer_id=signer,
        verifying_contract=contract,
        deadline=deadline,
        nonce=nonce,
        intents=items,
    )
    payload = serialize_payload(signer, contract, deadline, b64encode(nonce), items)
    assert signed.payload == payload
    assert key.public_key.verify(payload.encode(), parse_signature(signed.signature))

    verified = verify_signed(signed)
    assert verified.standard == "raw_ed25519"
    assert verified.intent_hash == hashlib.sha256(payload.encode()).digest()
    assert verified.public_key == key.public_key.to_text()
    assert verified.key_owner == key.public_key.implicit_account_id()
    assert verified.message_text == payload
    assert verified.message.signer_id == signer
    assert verified.message.deadline == _ms(deadline)
    assert verified.message.intents == intents
    assert verified.nonce == nonce
    assert verified.recipient == contract


@SIGN_SETTINGS
@given(secp256k1_keys, account_ids(), deadlines, nonces, token_diffs)
def test_erc191_sign_verify_round_trip(
    private_key: bytes,
    contract: str,
    deadline: datetime,
    nonce: bytes,
    intents: list[TokenDiff],
) -> None:
    address = secp256k1_address(private_key)
    items: list[BaseModel] = list(intents)
    signed = sign_erc191(
        private_key,
        signer_id=address,
        verifying_contract=contract,
        deadline=deadline,
        nonce=nonce,
        intents=items,
    )
    assert signed.signature.startswith("secp256k1:")
    raw_signature = base58.b58decode(signed.signature.removeprefix("secp256k1:"))
    assert len(raw_signature) == 65
    assert raw_signature[64] in (27, 28)

    verified = verify_signed(signed)
    uncompressed = coincurve.PrivateKey(private_key).public_key.format(compressed=False)
    assert verified.standard == "erc191"
    assert verified.key_owner == address
    assert verified.public_key == "secp256k1:" + _b58(uncompressed[1:])
    assert verified.intent_hash == erc191_hash(signed.payload)
    assert verified.message.signer_id == address
    assert verified.message.intents == intents
    assert verified.nonce == nonce
    assert verified.recipient == contract


@SIGN_SETTINGS
@given(ed25519_seeds, nonces, st.text(min_size=1, max_size=40), st.data())
def test_nep413_callback_url_is_signed(
    seed: bytes, nonce: bytes, callback: str, data: st.DataObject
) -> None:
    key = SecretKey(seed)
    message = serialize_message("alice.near", DEADLINE, [TokenDiff(diff={"nep141:a.near": 1})])
    signed = sign_nep413_message(key, message, nonce, "intents.near", callback)
    assert verify_signed(signed).intent_hash == nep413_digest(
        message, nonce, "intents.near", callback
    )
    without = Nep413Payload(message=message, nonce=b64encode(nonce), recipient="intents.near")
    with pytest.raises(SignatureError):
        verify_signed(signed.model_copy(update={"payload": without}))
    other = data.draw(st.text(min_size=1, max_size=40).filter(lambda s: s != callback))
    changed = signed.payload.model_copy(update={"callbackUrl": other})
    with pytest.raises(SignatureError):
        verify_signed(signed.model_copy(update={"payload": changed}))


# ------------------------------------------------------------------------- tampering


def _nep413_item(seed: bytes, nonce: bytes, intents: list[TokenDiff]) -> Nep413Signed:
    items: list[BaseModel] = list(intents)
    return sign_nep413(
        SecretKey(seed),
        signer_id="alice.near",
        verifying_contract="intents.near",
        deadline=DEADLINE,
        nonce=nonce,
        intents=items,
    )


def _rebuild_nep413(item: Nep413Signed, **changes: str) -> Nep413Signed:
    payload = item.payload.model_dump()
    outer: dict[str, Any] = {"public_key": item.public_key, "signature": item.signature}
    for name, value in changes.items():
        (payload if name in payload else outer)[name] = value
    return Nep413Signed(payload=Nep413Payload(**payload), **outer)


@SIGN_SETTINGS
@given(
    ed25519_seeds,
    nonces,
    token_diffs,
    st.sampled_from(["message", "nonce", "recipient", "public_key", "signature"]),
    st.data(),
)
def test_nep413_any_single_byte_change_is_rejected(
    seed: bytes, nonce: bytes, intents: list[TokenDiff], field: str, data: st.DataObject
) -> None:
    item = _nep413_item(seed, nonce, intents)
    verify_signed(item)  # the untouched item verifies
    if field == "message":
        tampered = _rebuild_nep413(item, message=_change_char(item.payload.message, data))
    elif field == "recipient":
        tampered = _rebuild_nep413(item, recipient=_change_char(item.payload.recipient, data))
    elif field == "nonce":
        tampered = _rebuild_nep413(item, nonce=b64encode(_change_raw(nonce, data)))
    elif field == "public_key":
        raw = PublicKey.from_text(item.public_key).raw
        tampered = _rebuild_nep413(item, public_key="ed25519:" + _b58(_change_raw(raw, data)))
    else:
        raw = parse_signature(item.signature)
        tampered = _rebuild_nep413(item, signature="ed25519:" + _b58(_change_raw(raw, data)))
    with pytest.raises(SignatureError):
        verify_signed(tampered)


@SIGN_SETTINGS
@given(ed25519_seeds, nonces, token_diffs, st.sampled_from(["public_key", "signature"]), st.data())
def test_nep413_any_single_character_change_of_key_texts_is_rejected(
    seed: bytes, nonce: bytes, intents: list[TokenDiff], field: str, data: st.DataObject
) -> None:
    item = _nep413_item(seed, nonce, intents)
    text = item.public_key if field == "public_key" else item.signature
    tampered = _rebuild_nep413(item, **{field: _change_char(text, data)})
    # Undecodable key or signature text (bad prefix, alphabet, length) is a SignatureError too.
    with pytest.raises(SignatureError):
        verify_signed(tampered)


@SIGN_SETTINGS
@given(
    ed25519_seeds,
    nonces,
    token_diffs,
    st.sampled_from(["payload", "public_key", "signature"]),
    st.data(),
)
def test_raw_ed25519_any_single_byte_change_is_rejected(
    seed: bytes, nonce: bytes, intents: list[TokenDiff], field: str, data: st.DataObject
) -> None:
    items: list[BaseModel] = list(intents)
    item = sign_raw_ed25519(
        SecretKey(seed),
        signer_id="alice.near",
        verifying_contract="intents.near",
        deadline=DEADLINE,
        nonce=nonce,
        intents=items,
    )
    verify_signed(item)
    fields = item.model_dump()
    if field == "payload":
        fields["payload"] = _change_char(item.payload, data)
    elif field == "public_key":
        raw = PublicKey.from_text(item.public_key).raw
        fields["public_key"] = "ed25519:" + _b58(_change_raw(raw, data))
    else:
        fields["signature"] = "ed25519:" + _b58(_change_raw(parse_signature(item.signature), data))
    with pytest.raises(SignatureError):
        verify_signed(RawEd25519Signed.model_validate(fields))


@SIGN_SETTINGS
@given(secp256k1_keys, nonces, token_diffs, st.sampled_from(["payload", "signature"]), st.data())
def test_erc191_single_byte_change_never_verifies_as_the_signer(
    private_key: bytes, nonce: bytes, intents: list[TokenDiff], field: str, data: st.DataObject
) -> None:
    address = secp256k1_address(private_key)
    items: list[BaseModel] = list(intents)
    item = sign_erc191(
        private_key,
        signer_id=address,
        verifying_contract="intents.near",
        deadline=DEADLINE,
        nonce=nonce,
        intents=items,
    )
    if field == "payload":
        tampered = Erc191Signed(payload=_change_char(item.payload, data), signature=item.signature)
    else:
        raw = base58.b58decode(item.signature.removeprefix("secp256k1:"))
        pos = data.draw(st.integers(min_value=0, max_value=63), label="position")
        delta = data.draw(st.integers(min_value=1, max_value=255), label="delta")
        changed = _change_byte(raw, pos, delta)
        tampered = Erc191Signed(payload=item.payload, signature="secp256k1:" + _b58(changed))
    # erc191 carries no public key: a changed item recovers some other key (or none at all),
    # never the signer's.
    try:
        verified = verify_signed(tampered)
    except ProtocolError:
        return
    assert verified.key_owner != address


@pytest.mark.parametrize("v", [2, 26, 29, 255])
def test_erc191_bad_recovery_id_rejected(v: int) -> None:
    private_key = (7).to_bytes(32, "big")
    item = sign_erc191(
        private_key,
        signer_id=secp256k1_address(private_key),
        verifying_contract="intents.near",
        deadline=DEADLINE,
        nonce=b"\x00" * 32,
        intents=[TokenDiff(diff={"nep141:a.near": -1})],
    )
    raw = base58.b58decode(item.signature.removeprefix("secp256k1:"))
    bad = Erc191Signed(payload=item.payload, signature="secp256k1:" + _b58(raw[:64] + bytes([v])))
    with pytest.raises(SignatureError, match="recovery id"):
        verify_signed(bad)
    wrong_prefix = Erc191Signed(payload=item.payload, signature="ed25519:" + _b58(raw))
    with pytest.raises(SignatureError, match="secp256k1"):
        verify_signed(wrong_prefix)


def test_signature_by_another_key_rejected() -> None:
    item = _nep413_item(b"\x01" * 32, b"\x02" * 32, [TokenDiff(diff={"nep141:a.near": 1})])
    other = SecretKey(b"\x03" * 32).public_key.to_text()
    with pytest.raises(SignatureError, match="invalid signature"):
        verify_signed(_rebuild_nep413(item, public_key=other))


# ------------------------------------------------------------------------- JSON checks


def _signed_message(message: str) -> Nep413Signed:
    return sign_nep413_message(SecretKey(b"\x04" * 32), message, b"\x05" * 32, "intents.near")


def test_invalid_message_reported_after_signature_check() -> None:
    message = (
        '{"deadline":"2026-11-22T10:00:00.000Z","intents":[{"intent":"mint"}],'
        '"signer_id":"alice.near"}'
    )
    with pytest.raises(ProtocolError, match=r"invalid message: intents\.0") as exc_info:
        verify_signed(_signed_message(message))
    assert not isinstance(exc_info.value, SignatureError)


def test_message_key_order_is_free_for_the_verifier() -> None:
    message = (
        '{"signer_id":"alice.near","intents":[{"diff":{"nep141:a.near":"-3"},'
        '"intent":"token_diff"}],"deadline":"2026-11-22T10:00:00.000Z","extra":1}'
    )
    verified = verify_signed(_signed_message(message))
    assert verified.message_text == message
    assert verified.message.intents == [TokenDiff(diff={"nep141:a.near": -3})]


def test_message_with_number_amount_rejected() -> None:
    message = (
        '{"deadline":"2026-11-22T10:00:00.000Z","intents":[{"intent":"token_diff",'
        '"diff":{"nep141:a.near":-3}}],"signer_id":"alice.near"}'
    )
    with pytest.raises(ProtocolError, match="diff"):
        verify_signed(_signed_message(message))


def test_raw_payload_needs_nonce_and_contract() -> None:
    key = SecretKey(b"\x06" * 32)
    payload = serialize_message("alice.near", DEADLINE, [TokenDiff(diff={"nep141:a.near": 1})])
    item = RawEd25519Signed(
        payload=payload,
        public_key=key.public_key.to_text(),
        signature="ed25519:" + _b58(key.sign(payload.encode())),
    )
    with pytest.raises(ProtocolError, match="nonce and verifying_contract"):
        verify_signed(item)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"standard": "nep999"}, "nep999"),
        ({"standard": "nep413", "public_key": "k", "signature": "s"}, "payload"),
        (
            {
                "standard": "nep413",
                "payload": {"nonce": "AA==", "recipient": "r"},
                "public_key": "k",
                "signature": "s",
            },
            "payload.message",
        ),
        ({"standard": "raw_ed25519", "payload": "{}", "signature": "s"}, "public_key"),
        ({"payload": "{}", "signature": "s"}, "standard"),
    ],
)
def test_parse_signed_names_the_field(data: dict[str, Any], where: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(where)):
        parse_signed(data)


def test_bad_nonce_text_is_a_protocol_error() -> None:
    item = _nep413_item(b"\x07" * 32, b"\x08" * 32, [TokenDiff(diff={"nep141:a.near": 1})])
    for bad in ("!!", b64encode(b"\x00" * 31)):
        with pytest.raises(ProtocolError, match=r"payload\.nonce"):
            verify_signed(_rebuild_nep413(item, nonce=bad))
