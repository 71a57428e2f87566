"""Nonces: 32 bytes, base64 (spec 5.3; protocol-notes 3).

Two layouts exist:

- **salted** (the spec's): ``salt(4) ‖ unique(28)``.
- **versioned V1** (the deployed verifier's): ``magic(4) ‖ version(1)=0 ‖ salt(4) ‖
  deadline(8, i64 LE ns since epoch) ‖ unique(15)``; the magic is sha256("versioned_nonce")[:4].

Uniqueness. The bot's quote nonces take their unique part (28 or 15 bytes) from a
:class:`NonceSequence`: a prefix the store registers for the account at each start, then a
counter. A counter alone would repeat after a crash (``kill -9`` between signing and the write)
and could not be shared by processes signing for one account; a fresh registered prefix per
process start needs no per-nonce state and cannot repeat. Other nonces (operations, rebalance
deposits, the CLI) are random: 224 bits (salted) put a repeat out of reach, 120 bits
(versioned) give a birthday bound of ~2^-41 after 2^40 nonces, and versioned nonces also differ
by salt and nanosecond deadline. The verifier refuses a reused nonce anyway
(``nonce was already used``).
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


PREFIX_LEN = 7
"""Bytes of a :class:`NonceSequence`'s prefix; the counter fills the rest of the unique part
(8 bytes in the versioned layout, 21 in the salted one)."""

_forks = 0


def _after_fork_in_child() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


class NonceSequence:
    """The unique part of the bot's quote nonces: ``prefix ‖ counter`` (spec 5.3: "unique
    data, random or sequential, never reused for the same account").

    Unique by construction rather than by lookup. The bot's store registers the prefix for the
    signing account when the bot starts and never hands out a registered one again
    (:meth:`solver.io.store.sqlite_store.Store.claim_nonce_prefix`), and the counter only goes up
    within the
    process, so no two quote nonces of the account repeat, across restarts and ``kill -9``
    included, with no row written per quote. Recording each nonce in an indexed table to refuse
    a repeat cost ~26 µs a quote on the quote path, more than the Ed25519 signature (a random
    key in a B-tree; measured in-process, issue 11).

    A forked child must not continue its parent's counter: a sequence refuses to work in a
    process forked after it was made. :meth:`unregistered` draws a random prefix for signers
    without a store (backtests, tools); its uniqueness is then only that of 56 random bits.
    """

    __slots__ = ("_born", "_count", "prefix")

    def __init__(self, prefix: bytes) -> None:
        if len(prefix) != PREFIX_LEN:
            raise ProtocolError(f"nonce prefix must be {PREFIX_LEN} bytes, got {len(prefix)}")
        self.prefix = prefix
        self._count = 0
        self._born = _forks

    @classmethod
    def unregistered(cls) -> NonceSequence:
        return cls(os.urandom(PREFIX_LEN))

    @property
    def issued(self) -> int:
        return self._count

    def issue(self) -> int:
        """The next counter value: the one rule every nonce of this sequence goes through
        (refused in a forked child, whose copy of the counter would repeat the parent's)."""
        if self._born != _forks:
            raise ProtocolError("a nonce sequence cannot be used in a forked process")
        self._count += 1
        return self._count

    def take(self, length: int) -> bytes:
        """The next unique part of ``length`` bytes (15 or 28)."""
        return self.prefix + self.issue().to_bytes(length - PREFIX_LEN, "big")

    def __repr__(self) -> str:
        return f"NonceSequence(prefix={self.prefix.hex()}, issued={self._count})"


def salted_nonce(salt: bytes, unique: bytes | None = None) -> bytes:
    """Spec layout: the current salt and 28 unique bytes (random unless given)."""
    if len(salt) != SALT_LEN:
        raise ProtocolError("salt must be 4 bytes")
    part = os.urandom(28) if unique is None else unique
    if len(part) != 28:
        raise ProtocolError("unique part must be 28 bytes")
    return salt + part


def versioned_nonce(salt: bytes, deadline: datetime, random_part: bytes | None = None) -> bytes:
    """Versioned V1 layout; the nonce deadline is set equal to the intent deadline."""
    if len(salt) != SALT_LEN:
        raise ProtocolError("salt must be 4 bytes")
    rnd = os.urandom(15) if random_part is None else random_part
    if len(rnd) != 15:
        raise ProtocolError("random part must be 15 bytes")
    ns = datetime_to_ns(deadline)
    return VERSIONED_MAGIC + b"\x00" + salt + ns.to_bytes(8, "little", signed=True) + rnd


def new_nonce(
    layout: NonceLayout, salt: bytes, deadline: datetime, sequence: NonceSequence | None = None
) -> bytes:
    """A nonce in ``layout``; its unique part from ``sequence`` if given, else random."""
    if layout == "versioned":
        return versioned_nonce(salt, deadline, None if sequence is None else sequence.take(15))
    return salted_nonce(salt, None if sequence is None else sequence.take(28))


class QuoteNonces:
    """The executor's nonce source (:mod:`solver.runtime.ports`): every quote's nonce in
    ``layout`` under the current salt, its unique part from ``sequence`` — the live bot's
    sequence is registered by its store, the backtest's derived from its seed.

    One call a nonce (issue 29): the bytes before the counter are built once per salt (the
    salt changes every few hours, the executor hands the desk's own ``bytes`` object until
    then), and the counter comes from :meth:`NonceSequence.issue` (its fork guard) without
    :meth:`NonceSequence.take`'s intermediate bytes."""

    __slots__ = ("_head", "_salt", "_salted", "layout", "sequence")

    def __init__(self, layout: NonceLayout, sequence: NonceSequence) -> None:
        self.layout = layout
        self.sequence = sequence
        self._salted = layout != "versioned"
        self._salt: bytes | None = None  # the salt ``_head`` was built for
        self._head = b""

    def next(self, salt: bytes, deadline_us: int) -> bytes:
        """The nonce of a quote whose deadline is ``deadline_us`` µs since the epoch (the
        desk's clock, :mod:`solver.core.clock`): no ``datetime`` on the quote path."""
        if salt is not self._salt:
            self._use_salt(salt)
        count = self.sequence.issue()
        if self._salted:  # salted_nonce's layout: salt ‖ prefix ‖ counter (21 bytes)
            return self._head + count.to_bytes(28 - PREFIX_LEN)  # big-endian: the default
        # versioned_nonce's layout: magic ‖ version ‖ salt ‖ deadline (ns) ‖ prefix ‖ counter
        return b"".join(
            (
                self._head,
                (deadline_us * 1000).to_bytes(8, "little", signed=True),
                self.sequence.prefix,
                count.to_bytes(15 - PREFIX_LEN),
            )
        )

    def _use_salt(self, salt: bytes) -> None:
        if len(salt) != SALT_LEN:
            raise ProtocolError("salt must be 4 bytes")
        if self._salted:
            self._head = salt + self.sequence.prefix
        else:
            self._head = VERSIONED_MAGIC + b"\x00" + salt
        self._salt = salt


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
