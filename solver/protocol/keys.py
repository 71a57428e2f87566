"""ed25519 keys and signatures in their text forms (spec 2.11; protocol-notes 4).

- public key: ``ed25519:`` + base58(32 bytes)
- signature:  ``ed25519:`` + base58(64 bytes)
- secret key: ``ed25519:`` + base58(32-byte seed ‖ 32-byte public key)

A :class:`SecretKey` never shows its secret in ``repr``/``str``. Reading one from an environment
variable or an owner-only file is I/O, in :mod:`solver.io.key_files`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import nacl.bindings
import nacl.exceptions
import nacl.signing

from solver.protocol.encoding import b58decode, b58encode
from solver.protocol.errors import SignatureError

ED25519_PREFIX = "ed25519:"


def _strip_prefix(text: str, what: str) -> str:
    if not isinstance(text, str) or not text.startswith(ED25519_PREFIX):
        raise SignatureError(f"{what} must have the form ed25519:<base58>")
    return text[len(ED25519_PREFIX) :]


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A 32-byte ed25519 public key."""

    raw: bytes

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        raw = b58decode(_strip_prefix(text, "public key"), length=32, what="public key")
        return cls(raw)

    def to_text(self) -> str:
        return ED25519_PREFIX + b58encode(self.raw)

    def implicit_account_id(self) -> str:
        """The implicit account owning this key: 64 lowercase hex characters."""
        return self.raw.hex()

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when ``signature`` is a valid ed25519 signature of ``message`` by this key."""
        try:
            nacl.signing.VerifyKey(self.raw).verify(message, signature)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
            return False
        return True

    def __str__(self) -> str:
        return self.to_text()


def parse_signature(text: str) -> bytes:
    """The 64 raw bytes of an ``ed25519:<base58>`` signature."""
    return b58decode(_strip_prefix(text, "signature"), length=64, what="signature")


def format_signature(raw: bytes) -> str:
    return ED25519_PREFIX + b58encode(raw)


def _detached_signer() -> Callable[[bytes, bytes], bytes]:
    """The cheapest way to a detached ed25519 signature through PyNaCl's libsodium.

    PyNaCl has no ``crypto_sign_detached``; ``SigningKey.sign`` builds two objects around
    ``crypto_sign`` (signature ‖ message), and ``nacl.bindings.crypto_sign`` copies that out and
    checks its result in Python. Calling libsodium's ``crypto_sign`` through PyNaCl's own cffi
    module writes into one 96-byte buffer (new per call: cffi releases the GIL, so a shared one
    could be written by two threads) and copies the 64 signature bytes: ~1 µs less than the
    bindings and ~2.5 less than ``SigningKey.sign`` (``benchmarks/signing_path.md``). A PyNaCl
    without that module falls back to the bindings; a test holds both equal.
    """
    try:
        from nacl._sodium import ffi, lib
    except ImportError:  # every PyNaCl 1.x has it
        return _bindings_sign
    new, buffer, sign, null = ffi.new, ffi.buffer, lib.crypto_sign, ffi.NULL

    def detached(message: bytes, secret: bytes) -> bytes:
        out = new("unsigned char[]", len(message) + 64)
        if sign(out, null, message, len(message), secret) != 0:
            raise SignatureError("libsodium failed to sign")
        return buffer(out, 64)[:]  # type: ignore[no-any-return]

    return detached


def _bindings_sign(message: bytes, secret: bytes) -> bytes:
    return nacl.bindings.crypto_sign(message, secret)[:64]


_detached = _detached_signer()


class SecretKey:
    """An ed25519 signing key. Its secret never appears in repr, str, logs or exceptions."""

    __slots__ = ("_secret", "public_key")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise SignatureError("secret key seed must be 32 bytes")
        signing = nacl.signing.SigningKey(seed)  # PyNaCl's checks of the seed
        public = bytes(signing.verify_key)
        self._secret = bytes(signing) + public  # libsodium's secret key: seed ‖ public key
        self.public_key = PublicKey(public)

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(os.urandom(32))

    @classmethod
    def from_text(cls, text: str) -> SecretKey:
        """Parse ``ed25519:<base58(seed ‖ public)>``; the public half must match the seed."""
        body = text.strip()
        if not body.startswith(ED25519_PREFIX):
            raise SignatureError("secret key must have the form ed25519:<base58 of 64 bytes>")
        try:
            raw = b58decode(body[len(ED25519_PREFIX) :], length=64, what="secret key")
        except SignatureError:
            raise
        except Exception:
            # Never chain the original exception: it could quote the secret text.
            raise SignatureError("secret key must be base58 of 64 bytes") from None
        key = cls(raw[:32])
        if key.public_key.raw != raw[32:]:
            raise SignatureError("secret key's public half does not match its seed")
        return key

    def to_text(self) -> str:
        """The secret in text form: only for writing a key file or an explicit --show-secret."""
        return ED25519_PREFIX + b58encode(self._secret)

    def sign(self, message: bytes) -> bytes:
        """The 64-byte ed25519 signature of ``message``."""
        return _detached(message, self._secret)

    def __repr__(self) -> str:
        return f"SecretKey(public_key={self.public_key.to_text()!r}, secret=<redacted>)"

    __str__ = __repr__
