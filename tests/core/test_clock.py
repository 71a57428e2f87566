"""The desk's clock (issue 29): integer µs, and the texts and nonces built from them equal those
built from the ``datetime`` of the same instant (the edges must not move by a µs)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from solver.core.clock import SECOND, from_micros, iso_micros, micros, now_micros, span
from solver.io.store.schema import ts, ts_us
from solver.protocol.errors import ProtocolError
from solver.protocol.intents import format_deadline, format_deadline_us
from solver.protocol.nonce import NonceSequence, QuoteNonces, versioned_nonce

RNG = random.Random(29)
MOMENTS = [
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC),
    datetime(2026, 11, 27, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2028, 2, 29, 12, 30, 0, 1, tzinfo=UTC),
    *(
        datetime(2020, 1, 1, tzinfo=UTC) + timedelta(microseconds=RNG.randrange(10**15))
        for _ in range(40)
    ),
]


@pytest.mark.parametrize("moment", MOMENTS)
def test_micros_round_trip(moment: datetime) -> None:
    us = micros(moment)
    assert from_micros(us) == moment
    assert iso_micros(us) == moment.isoformat()


def test_an_offset_names_the_same_instant_and_a_naive_time_is_refused() -> None:
    moment = datetime(2026, 11, 27, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert micros(moment) == micros(datetime(2026, 11, 27, 10, 0, tzinfo=UTC))
    with pytest.raises(ValueError, match="timezone-aware"):
        micros(datetime(2026, 11, 27, 10, 0))  # noqa: DTZ001 (naive on purpose)


def test_span_and_now() -> None:
    assert span(1.5) == 1_500_000
    assert span(0.0000004) == 0 and span(0.0000006) == 1  # rounded, not truncated
    before = micros(datetime.now(UTC))
    now = now_micros()
    assert before <= now <= micros(datetime.now(UTC))
    assert span(1) == SECOND


@pytest.mark.parametrize("moment", MOMENTS)
def test_texts_from_micros_equal_texts_from_datetimes(moment: datetime) -> None:
    us = micros(moment)
    assert format_deadline_us(us) == format_deadline(moment)
    assert ts_us(us) == ts(moment)


@pytest.mark.parametrize("moment", MOMENTS[:50])
def test_a_quote_nonce_from_micros_equals_the_versioned_nonce_of_the_datetime(
    moment: datetime,
) -> None:
    prefix = bytes(range(7))
    salt = b"\x01\x02\x03\x04"
    nonces = QuoteNonces("versioned", NonceSequence(prefix))
    got = nonces.next(salt, micros(moment))
    expected = versioned_nonce(salt, moment, prefix + (1).to_bytes(8, "big"))
    assert got == expected
    salted = QuoteNonces("salted", NonceSequence(prefix))
    assert salted.next(salt, micros(moment)) == salt + prefix + (1).to_bytes(21, "big")


def test_a_quote_nonce_refuses_a_bad_salt() -> None:
    nonces = QuoteNonces("versioned", NonceSequence(bytes(7)))
    with pytest.raises(ProtocolError, match="salt"):
        nonces.next(b"\x01\x02\x03", now_micros())
