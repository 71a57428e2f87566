"""Nonces: 32 bytes, base64 (spec 5.3; protocol-notes 3).

Two layouts exist:

- **salted** (the spec's): ``salt(4) ‖ unique(28)``.
- **versioned V1** (the deployed verifier's): ``magic(4) ‖ version(1)=0 ‖ salt(4) ‖
  deadline(8, i64 LE ns since epoch) ‖ random(15)``; the magic is sha256("versioned_nonce")[:4].

Uniqueness: the unique part is drawn from ``os.urandom`` (28 or 15 bytes) rather than a
persisted counter. A counter must survive crashes (``kill -9`` between signing and the write
would repeat it) and be shared by every process signing for the account; random bytes need no
state at all. With 224 bits (salted) a repeat is out of reach; with 120 bits (versioned) the
birthday bound after 2^40 nonces is ~2^-41, and versioned nonces additionally differ by salt
and nanosecond deadline. The verifier rejects a reused nonce anyway (``nonce was already used``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from solver.protocol.encoding import b64decode, b64encode
from solver.protocol.errors import ProtocolError

NONCE_LEN = 32
SALT_LEN = 4
VERSIONED_MAGIC = hashlib.sha256(b"versioned_nonce").digest()[:4]
NonceLayout = Literal["salted", "versioned"]


def parse_salt(text: str) -> bytes:
    """A salt as the verifier prints it: 8 hex characters (``current_salt``, spec 4.6)."""
    if not isinstance(text, str) or len(text) != 8:
        raise ProtocolError("salt must be 8 hex characters")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ProtocolError("salt must be 8 hex characters") from None


def datetime_to_ns(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ProtocolError("deadline must be timezone-aware")
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class _RandomPool:
    """``os.urandom`` read 4 KiB at a time and handed out in slices: the same bytes from the
    same source, one ``getrandom`` call per ~140 nonces instead of one each (a few percent of
    the quote path at saturation, issue 11). A forked child empties its copy at once
    (``os.register_at_fork``): two processes never hand out the same bytes. Bytes handed out
    are never kept."""

    SIZE = 4096

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        pos = self._pos
        if pos + n > len(self._buf):
            self._buf, pos = os.urandom(self.SIZE), 0
        self._pos = pos + n
        return self._buf[pos : pos + n]

    def forget(self) -> None:
        self._buf, self._pos = b"", 0


_pool = _RandomPool()
os.register_at_fork(after_in_child=_pool.forget)


def salted_nonce(salt: bytes) -> bytes:
    """Spec layout: the current salt and 28 random bytes."""
    if len(salt) != SALT_LEN:
        raise ProtocolError("salt must be 4 bytes")
    return salt + _pool.take(28)


def versioned_nonce(salt: bytes, deadline: datetime, random_part: bytes | None = None) -> bytes:
    """Versioned V1 layout; the nonce deadline is set equal to the intent deadline."""
    if len(salt) != SALT_LEN:
        raise ProtocolError("salt must be 4 bytes")
    rnd = _pool.take(15) if random_part is None else random_part
    if len(rnd) != 15:
        raise ProtocolError("random part must be 15 bytes")
    ns = datetime_to_ns(deadline)
    return VERSIONED_MAGIC + b"\x00" + salt + ns.to_bytes(8, "little", signed=True) + rnd


def new_nonce(layout: NonceLayout, salt: bytes, deadline: datetime) -> bytes:
    return versioned_nonce(salt, deadline) if layout == "versioned" else salted_nonce(salt)


@dataclass(frozen=True, slots=True)
class ParsedNonce:
    """What a verifier reads from a nonce: its layout, salt and (versioned) deadline."""

    layout: NonceLayout
    salt: bytes
    deadline_ns: int | None
    raw: bytes

    @property
    def deadline(self) -> datetime | None:
        if self.deadline_ns is None:
            return None
        return datetime.fromtimestamp(self.deadline_ns / 1e9, tz=UTC)


def parse_nonce(value: bytes | str) -> ParsedNonce:
    """Tell the layouts apart by the versioned magic prefix (protocol-notes 3)."""
    raw = b64decode(value, length=NONCE_LEN, what="nonce") if isinstance(value, str) else value
    if len(raw) != NONCE_LEN:
        raise ProtocolError(f"nonce must be {NONCE_LEN} bytes, got {len(raw)}")
    if raw[:4] == VERSIONED_MAGIC:
        if raw[4] != 0:
            raise ProtocolError(f"unknown versioned nonce version {raw[4]}")
        deadline_ns = int.from_bytes(raw[9:17], "little", signed=True)
        return ParsedNonce("versioned", raw[5:9], deadline_ns, raw)
    return ParsedNonce("salted", raw[:4], None, raw)


def nonce_to_text(raw: bytes) -> str:
    return b64encode(raw)
