"""Nonces: the spec's salted layout and the deployed versioned layout (spec 5.3, 8;
protocol-notes 3)."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.errors import ProtocolError
from solver.protocol.nonce import (
    NONCE_LEN,
    PREFIX_LEN,
    VERSIONED_MAGIC,
    NonceSequence,
    QuoteNonces,
    datetime_to_ns,
    new_nonce,
    nonce_to_text,
    parse_nonce,
    parse_salt,
    salted_nonce,
    versioned_nonce,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
salts = st.binary(min_size=4, max_size=4)
plain_salts = salts.filter(lambda s: s != VERSIONED_MAGIC)
randoms = st.binary(min_size=15, max_size=15)
# Deadlines where a float of seconds still resolves microseconds (see the xfail below).
deadlines = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


def _exact_ns(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


# ------------------------------------------------------------------------- known vector


def test_versioned_magic_is_sha256_prefix() -> None:
    assert hashlib.sha256(b"versioned_nonce").digest()[:4] == VERSIONED_MAGIC
    assert VERSIONED_MAGIC.hex() == "5628f6c6"


def test_versioned_nonce_known_vector() -> None:
    salt = parse_salt("252812b3")
    deadline = datetime.fromtimestamp(2280047743, tz=UTC)
    random_part = bytes.fromhex("027015ec13dc11864973138fe6812f")
    nonce = versioned_nonce(salt, deadline, random_part)
    assert nonce.hex() == "5628f6c600252812b300367290575ba41f027015ec13dc11864973138fe6812f"

    parsed = parse_nonce(nonce)
    assert parsed.layout == "versioned"
    assert parsed.salt == bytes.fromhex("252812b3")
    assert parsed.deadline_ns == 2280047743 * 1_000_000_000
    assert parsed.deadline == deadline
    assert parsed.raw == nonce
    # The same through the base64 text form the wire carries.
    again = parse_nonce(nonce_to_text(nonce))
    assert (again.layout, again.salt, again.deadline_ns) == ("versioned", salt, parsed.deadline_ns)


# ------------------------------------------------------------------------- salted


@settings(max_examples=100)
@given(salts)
def test_salted_nonce_keeps_salt(salt: bytes) -> None:
    nonce = salted_nonce(salt)
    assert len(nonce) == NONCE_LEN == 32
    assert nonce[:4] == salt


@settings(max_examples=20)
@given(plain_salts)
def test_salted_nonces_never_repeat(salt: bytes) -> None:
    nonces = [salted_nonce(salt) for _ in range(2000)]
    assert len(set(nonces)) == len(nonces)
    assert len({n[4:] for n in nonces}) == len(nonces)
    assert all(n[:4] == salt for n in nonces)


def test_versioned_nonces_never_repeat_for_same_deadline() -> None:
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    nonces = [versioned_nonce(b"\x01\x02\x03\x04", deadline) for _ in range(2000)]
    assert len(set(nonces)) == len(nonces)
    assert {n[:17] for n in nonces} == {nonces[0][:17]}


@settings(max_examples=100)
@given(plain_salts)
def test_parse_salted(salt: bytes) -> None:
    nonce = salted_nonce(salt)
    for value in (nonce, nonce_to_text(nonce)):
        parsed = parse_nonce(value)
        assert parsed.layout == "salted"
        assert parsed.salt == salt
        assert parsed.deadline_ns is None
        assert parsed.deadline is None
        assert parsed.raw == nonce


# ------------------------------------------------------------------------- versioned


@settings(max_examples=200)
@given(salts, deadlines, randoms)
def test_versioned_round_trip(salt: bytes, deadline: datetime, random_part: bytes) -> None:
    nonce = versioned_nonce(salt, deadline, random_part)
    assert len(nonce) == 32
    assert nonce[:4] == VERSIONED_MAGIC
    assert nonce[4] == 0
    assert nonce[5:9] == salt
    assert int.from_bytes(nonce[9:17], "little", signed=True) == _exact_ns(deadline)
    assert nonce[17:] == random_part

    parsed = parse_nonce(nonce_to_text(nonce))
    assert parsed.layout == "versioned"
    assert parsed.salt == salt
    assert parsed.deadline_ns == _exact_ns(deadline)
    assert parsed.deadline == deadline


@settings(max_examples=100)
@given(salts, deadlines)
def test_layouts_told_apart(salt: bytes, deadline: datetime) -> None:
    versioned = new_nonce("versioned", salt, deadline)
    assert parse_nonce(versioned).layout == "versioned"
    assert parse_nonce(versioned).salt == salt
    if salt != VERSIONED_MAGIC:
        salted = new_nonce("salted", salt, deadline)
        assert parse_nonce(salted).layout == "salted"
        assert parse_nonce(salted).salt == salt


@settings(max_examples=100)
@given(salts, deadlines, randoms, st.integers(min_value=1, max_value=255))
def test_unknown_versioned_version_rejected(
    salt: bytes, deadline: datetime, random_part: bytes, version: int
) -> None:
    nonce = bytearray(versioned_nonce(salt, deadline, random_part))
    nonce[4] = version
    with pytest.raises(ProtocolError, match="version"):
        parse_nonce(bytes(nonce))


def test_datetime_to_ns_is_exact() -> None:
    moment = datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)
    assert datetime_to_ns(moment) == 1795341600_123456000
    other_zone = moment.astimezone(datetime.now(UTC).astimezone().tzinfo)
    assert datetime_to_ns(other_zone) == 1795341600_123456000


# ------------------------------------------------------------------------- rejects


@pytest.mark.parametrize("size", [0, 4, 31, 33, 64])
def test_parse_nonce_wrong_length(size: int) -> None:
    with pytest.raises(ProtocolError, match="32 bytes"):
        parse_nonce(b"\x01" * size)
    with pytest.raises(ProtocolError, match="32 bytes"):
        parse_nonce(base64.b64encode(b"\x01" * size).decode())


@pytest.mark.parametrize(
    "text",
    [
        "not base64!",
        base64.urlsafe_b64encode(b"\xff" * 32).decode(),  # url-safe alphabet
        base64.b64encode(b"\x01" * 32).decode().rstrip("="),  # padding dropped
        " " + base64.b64encode(b"\x01" * 32).decode(),
        "é" * 44,
    ],
)
def test_parse_nonce_bad_base64(text: str) -> None:
    with pytest.raises(ProtocolError, match="nonce"):
        parse_nonce(text)


def test_builders_reject_bad_inputs() -> None:
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    with pytest.raises(ProtocolError, match="salt"):
        salted_nonce(b"\x01\x02\x03")
    with pytest.raises(ProtocolError, match="salt"):
        versioned_nonce(b"\x01\x02\x03\x04\x05", deadline)
    with pytest.raises(ProtocolError, match="random part"):
        versioned_nonce(b"\x01\x02\x03\x04", deadline, b"\x00" * 14)
    with pytest.raises(ProtocolError, match="timezone"):
        versioned_nonce(b"\x01\x02\x03\x04", datetime(2030, 1, 1))  # noqa: DTZ001


@pytest.mark.parametrize("text", ["", "252812b", "252812b3a", "zz2812b3", 12345678, None])
def test_parse_salt_rejects(text: object) -> None:
    with pytest.raises(ProtocolError, match="8 hex"):
        parse_salt(text)  # type: ignore[arg-type]


def test_parse_salt_accepts_hex() -> None:
    assert parse_salt("252812b3") == b"\x25\x28\x12\xb3"
    assert parse_salt("DEADBEEF") == b"\xde\xad\xbe\xef"


# ------------------------------------------------------------------------- known bugs


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=(
        "BUG: ParsedNonce.deadline converts deadline_ns to a float of seconds (ns / 1e9); from "
        "2106 (2^32 s) the float cannot resolve microseconds and the parsed deadline can be "
        "1 us early, even for a whole-second deadline"
    ),
)
def test_versioned_deadline_round_trip_late_dates() -> None:
    deadline = datetime(2117, 1, 1, 0, 0, 1, tzinfo=UTC)
    parsed = parse_nonce(versioned_nonce(b"\x01\x02\x03\x04", deadline, b"\x00" * 15))
    assert parsed.deadline_ns == _exact_ns(deadline)
    assert parsed.deadline == deadline


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=(
        "BUG: datetime_to_ns uses int(timestamp()) (truncation toward zero) plus the "
        "microseconds, so a pre-1970 instant with a fraction lands a whole second late"
    ),
)
def test_datetime_to_ns_before_epoch() -> None:
    moment = EPOCH - timedelta(microseconds=500_000)
    assert datetime_to_ns(moment) == -500_000_000


@pytest.mark.xfail(
    strict=True,
    raises=OverflowError,
    reason=(
        "BUG: a deadline beyond the i64-nanosecond range (after 2262-04-11) makes "
        "versioned_nonce raise a bare OverflowError instead of ProtocolError"
    ),
)
def test_versioned_nonce_deadline_out_of_range() -> None:
    with pytest.raises(ProtocolError):
        versioned_nonce(b"\x01\x02\x03\x04", datetime(2300, 1, 1, tzinfo=UTC), b"\x00" * 15)


def test_parse_nonce_rejects_non_canonical_base64() -> None:
    canonical = nonce_to_text(b"\x00" * 32)
    assert canonical.endswith("AA=")
    with pytest.raises(ProtocolError):
        parse_nonce(canonical[:-2] + "B=")


def test_a_nonce_sequence_never_repeats_and_a_forked_child_cannot_continue_it() -> None:
    """Quote nonces are ``prefix ‖ counter`` (spec 5.3 allows sequential unique data): no two
    alike in either layout, each under its prefix; a child forked from the process must not
    continue the parent's counter, so it is refused there."""
    import os

    salt = bytes(4)
    seq = NonceSequence(b"\x01" * PREFIX_LEN)
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    salted = [new_nonce("salted", salt, deadline, seq) for _ in range(1000)]
    versioned = [new_nonce("versioned", salt, deadline, seq) for _ in range(1000)]
    assert len(set(salted + versioned)) == 2000 and seq.issued == 2000
    assert all(n[:4] == salt and n[4:11] == seq.prefix for n in salted)
    assert all(parse_nonce(n).layout == "versioned" and n[17:24] == seq.prefix for n in versioned)
    assert int.from_bytes(versioned[-1][24:], "big") == 2000  # the counter, big-endian
    with pytest.raises(ProtocolError, match="prefix must be 7 bytes"):
        NonceSequence(b"\x01" * 8)
    quote_nonces = QuoteNonces("salted", seq)
    assert quote_nonces.next(salt, 0)[:4] == salt  # its salt's bytes built before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: try to continue, tell the parent how it went, then out at once
        try:
            os.write(write, seq.take(28))
        except ProtocolError:
            try:  # the quote path's source takes the counter itself: refused there too
                os.write(write, quote_nonces.next(salt, 0))
            except ProtocolError:
                os.write(write, b"refused")
        os._exit(0)
    os.close(write)
    child = os.read(read, 32)
    os.close(read)
    os.waitpid(pid, 0)
    assert child == b"refused"
    assert seq.take(28)[:PREFIX_LEN] == seq.prefix  # the parent goes on
    random_ones = {salted_nonce(salt) for _ in range(1000)}  # the random default, elsewhere
    assert len(random_ones) == 1000


def test_quote_nonces_follow_the_salt_and_count_on_their_sequence() -> None:
    """The quote path's nonces (issue 29: the bytes before the counter built once per salt):
    a new salt is used from the next nonce on, an equal salt in another object too; the
    counter is the sequence's own, so nothing it issues repeats one of them; a bad salt is
    refused with nothing issued."""
    seq = NonceSequence(b"\x02" * PREFIX_LEN)
    nonces = QuoteNonces("salted", seq)
    first, second = bytes([0, 0, 0, 1]), bytes([0, 0, 0, 2])
    assert nonces.next(first, 0) == first + seq.prefix + (1).to_bytes(21, "big")
    assert nonces.next(second, 0) == second + seq.prefix + (2).to_bytes(21, "big")
    assert nonces.next(bytes([0, 0, 0, 1]), 0)[:4] == first  # an equal salt, another object
    with pytest.raises(ProtocolError, match="salt"):
        nonces.next(b"\x01", 0)
    assert seq.issued == 3 and seq.take(28) == seq.prefix + (4).to_bytes(21, "big")
    versioned = QuoteNonces("versioned", seq)
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    got = versioned.next(second, int(deadline.timestamp()) * 1_000_000)
    assert got == versioned_nonce(second, deadline, seq.prefix + (5).to_bytes(8, "big"))
    assert versioned.next(first, 0)[5:9] == first and seq.issued == 6
