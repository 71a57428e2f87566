"""ed25519 keys and signatures in text form (spec 2.11; protocol-notes 4)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import base58
import nacl.signing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import ProtocolError, SignatureError
from solver.protocol import keys
from solver.protocol.ids import is_implicit_account, validate_account_id
from solver.protocol.keys import (
    PublicKey,
    SecretKey,
    format_signature,
    parse_signature,
)

seeds = st.binary(min_size=32, max_size=32)


def _b58(data: bytes) -> str:
    return base58.b58encode(data).decode("ascii")


def _secret_fragments(key: SecretKey) -> list[str]:
    """Every text form of the secret that must never leak."""
    text = key.to_text()
    body = text.removeprefix("ed25519:")
    seed = base58.b58decode(body)[:32]
    return [text, body, seed.hex(), _b58(seed)]


# ------------------------------------------------------------------------- public keys


@settings(max_examples=100)
@given(st.binary(min_size=32, max_size=32))
def test_public_key_text_round_trip(raw: bytes) -> None:
    key = PublicKey(raw)
    text = key.to_text()
    assert text == "ed25519:" + _b58(raw)
    assert str(key) == text
    assert PublicKey.from_text(text) == key


@settings(max_examples=100)
@given(seeds)
def test_implicit_account_id_is_hex_of_key(seed: bytes) -> None:
    key = SecretKey(seed)
    account = key.public_key.implicit_account_id()
    assert account == bytes(nacl.signing.SigningKey(seed).verify_key).hex()
    assert len(account) == 64
    assert is_implicit_account(account)
    assert validate_account_id(account) == account


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("ed25519:" + _b58(b"\x01" * 31), ProtocolError),
        ("ed25519:" + _b58(b"\x01" * 33), ProtocolError),
        ("ed25519:0OIl", ProtocolError),  # not in the base58 alphabet
        ("secp256k1:" + _b58(b"\x01" * 32), SignatureError),
        (_b58(b"\x01" * 32), SignatureError),
        ("ED25519:" + _b58(b"\x01" * 32), SignatureError),
    ],
)
def test_public_key_rejects_malformed_text(text: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        PublicKey.from_text(text)


# ------------------------------------------------------------------------- signatures


@settings(max_examples=100)
@given(st.binary(min_size=64, max_size=64))
def test_signature_text_round_trip(raw: bytes) -> None:
    text = format_signature(raw)
    assert text == "ed25519:" + _b58(raw)
    assert parse_signature(text) == raw


@pytest.mark.parametrize(
    "text", ["ed25519:" + _b58(b"\x02" * 63), "ed25519:" + _b58(b"\x02" * 65), _b58(b"\x02" * 64)]
)
def test_signature_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ProtocolError):
        parse_signature(text)


@settings(max_examples=100)
@given(seeds, st.binary(max_size=200))
def test_sign_verify(seed: bytes, message: bytes) -> None:
    key = SecretKey(seed)
    signature = key.sign(message)
    assert len(signature) == 64
    assert signature == nacl.signing.SigningKey(seed).sign(message).signature
    assert key.public_key.verify(message, signature)
    assert not key.public_key.verify(message + b"x", signature)
    assert not PublicKey(b"\x00" * 32).verify(message, signature)


@settings(max_examples=100)
@given(seeds, st.binary(max_size=300))
def test_the_direct_libsodium_call_equals_the_bindings(seed: bytes, message: bytes) -> None:
    key = SecretKey(seed)
    secret = seed + key.public_key.raw
    assert keys._detached(message, secret) == keys._bindings_sign(message, secret)
    assert keys._detached(message, secret) == key.sign(message)


def test_signing_from_threads_gives_each_its_own_signature() -> None:
    """cffi releases the GIL while libsodium signs: no buffer may be shared between calls."""
    key = SecretKey(bytes(range(32)))
    messages = [i.to_bytes(32, "big") for i in range(400)]
    expected = [nacl.signing.SigningKey(bytes(range(32))).sign(m).signature for m in messages]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(key.sign, messages)) == expected


def test_the_sign_method_never_shows_the_secret() -> None:
    key = SecretKey(bytes(range(32)))
    for text in (repr(key.sign), str(key.sign)):
        for fragment in _secret_fragments(key):
            assert fragment not in text


# ------------------------------------------------------------------------- secret keys


@settings(max_examples=100)
@given(seeds)
def test_secret_key_text_round_trip(seed: bytes) -> None:
    key = SecretKey(seed)
    text = key.to_text()
    raw = base58.b58decode(text.removeprefix("ed25519:"))
    assert text.startswith("ed25519:")
    assert raw == seed + key.public_key.raw  # 64-byte form: seed ‖ public key
    again = SecretKey.from_text(text)
    assert again.public_key == key.public_key
    assert again.to_text() == text
    assert again.sign(b"m") == key.sign(b"m")
    # Surrounding whitespace (a trailing newline in a key file) is tolerated.
    assert SecretKey.from_text(f"  {text}\n").public_key == key.public_key


@settings(max_examples=50)
@given(seeds, seeds)
def test_secret_key_public_half_must_match_seed(seed: bytes, other: bytes) -> None:
    if seed == other:
        other = bytes([other[0] ^ 1]) + other[1:]
    wrong_public = SecretKey(other).public_key.raw
    text = "ed25519:" + _b58(seed + wrong_public)
    with pytest.raises(SignatureError, match="public half") as exc_info:
        SecretKey.from_text(text)
    message = str(exc_info.value)
    assert text not in message
    assert _b58(seed) not in message
    assert seed.hex() not in message


@pytest.mark.parametrize(
    "text",
    [
        "ed25519:" + _b58(b"\x03" * 32),  # the 32-byte seed alone is not the text form
        "ed25519:" + _b58(b"\x03" * 65),
        "ed25519:0OIl0OIl",
        _b58(b"\x03" * 64),
        "",
    ],
)
def test_secret_key_rejects_malformed_text(text: str) -> None:
    with pytest.raises(SignatureError) as exc_info:
        SecretKey.from_text(text)
    body = text.removeprefix("ed25519:")
    if body:
        assert body not in str(exc_info.value)
    assert exc_info.value.__cause__ is None


def test_secret_key_seed_must_be_32_bytes() -> None:
    with pytest.raises(SignatureError):
        SecretKey(b"\x04" * 31)


@settings(max_examples=100)
@given(seeds)
def test_repr_and_str_never_show_the_secret(seed: bytes) -> None:
    key = SecretKey(seed)
    shown = [repr(key), str(key), f"{key}", f"{key!r}", repr([key]), repr({"k": key})]
    for text in shown:
        for fragment in _secret_fragments(key):
            assert fragment not in text
    assert key.public_key.to_text() in repr(key)
    assert "redacted" in repr(key)


@settings(max_examples=100)
@given(seeds, st.data())
def test_errors_for_damaged_secret_never_contain_it(seed: bytes, data: st.DataObject) -> None:
    text = SecretKey(seed).to_text()
    pos = data.draw(st.integers(min_value=len("ed25519:"), max_value=len(text) - 1))
    replacement = data.draw(st.sampled_from("0OIl+/=zZ9"))
    damaged = text[:pos] + replacement + text[pos + 1 :]
    if damaged == text:
        return
    with pytest.raises(SignatureError) as exc_info:
        SecretKey.from_text(damaged)
    message = str(exc_info.value)
    body = damaged.removeprefix("ed25519:")
    assert body not in message
    assert body[:16] not in message
    assert seed.hex() not in message
    assert exc_info.value.__cause__ is None
