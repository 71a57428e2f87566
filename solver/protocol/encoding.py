"""Byte encodings of the wire: base58 (Bitcoin alphabet) and standard base64 with padding."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, Literal

import base58 as _base58
import gmpy2

from solver.protocol.errors import ProtocolError

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_GMP_TO_BITCOIN = bytes.maketrans(
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv", _ALPHABET.encode("ascii")
)  # GMP writes base-58 digits as 0-9, A-Z, a-v


def _mpz_via_int(data: bytes, order: Literal["big"]) -> Any:
    return gmpy2.mpz(int.from_bytes(data, order))


# gmpy2 2.3 has mpz.from_bytes: 0.2 µs less than through a Python int
_mpz_from_bytes: Callable[[bytes, Literal["big"]], Any] = getattr(
    gmpy2.mpz, "from_bytes", _mpz_via_int
)


def b58encode(data: bytes) -> str:
    """Base58 text of ``data`` (keys, signatures, intent hashes; protocol-notes 1).

    GMP's radix conversion (``mpz.digits(58)``, through gmpy2) and one ``bytes.translate`` to
    the Bitcoin alphabet; leading zero bytes are one ``1`` each, as base58 writes them. 64 bytes
    (a signature) in ~1 µs of CPU: ~7x less than the best pure-Python version measured (58**4
    chunks), ~9x less than the two-digit table it replaces, ~20x less than the ``base58``
    package (``benchmarks/signing_path.md``); property-tested against that package.
    """
    if data and data[0]:
        digits = _mpz_from_bytes(data, "big").digits(58).encode()
        text: str = digits.translate(_GMP_TO_BITCOIN).decode()
        return text
    rest = data.lstrip(b"\0")
    return "1" * (len(data) - len(rest)) + (b58encode(rest) if rest else "")


def b58decode(text: str, *, length: int | None = None, what: str = "base58 value") -> bytes:
    """Decode base58 text, optionally requiring an exact byte length."""
    try:
        data: bytes = _base58.b58decode(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise ProtocolError(f"{what} is not valid base58") from exc
    if length is not None and len(data) != length:
        raise ProtocolError(f"{what} must be {length} bytes, got {len(data)}")
    return data


def b64encode(data: bytes) -> str:
    """Standard base64 with padding (the nonce's form, spec 2.10 / 5.3)."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")  # base64.b64encode's text


def b64decode(text: str, *, length: int | None = None, what: str = "base64 value") -> bytes:
    """Strict standard base64 decode, optionally requiring an exact byte length.

    Canonical only: the text must be exactly what :func:`b64encode` gives for the bytes, so
    set unused trailing bits (``…AB=`` for ``…AA=``) are refused, as the verifier's decoder (a
    strict standard engine) refuses them. Otherwise one nonce would have several spellings.
    """
    try:
        raw = text.encode("ascii")
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError, AttributeError) as exc:
        raise ProtocolError(f"{what} is not valid base64") from exc
    if base64.b64encode(data) != raw:
        raise ProtocolError(f"{what} is not canonical base64 (unused trailing bits are set)")
    if length is not None and len(data) != length:
        raise ProtocolError(f"{what} must be {length} bytes, got {len(data)}")
    return data
