"""Retry policy as pure functions (STYLE 8): delays and the retry/fatal classifier."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import httpx
import pytest
from websockets.datastructures import Headers
from websockets.exceptions import (
    ConnectionClosedError,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)
from websockets.frames import Close
from websockets.http11 import Response

from solver.errors import ConfigError, ProtocolError, RemoteError, TransportError
from solver.io.backoff import backoff, classify


def take(n: int, delays: Iterator[float]) -> list[float]:
    return list(itertools.islice(delays, n))


def test_no_jitter_grows_geometrically_then_caps() -> None:
    assert take(8, backoff(0.5, 10, 2, jitter="none")) == [0.5, 1, 2, 4, 8, 10, 10, 10]
    assert take(4, backoff(1, 100, 3, jitter="none")) == [1, 3, 9, 27]


def test_full_jitter_stays_under_the_growing_ceiling() -> None:
    delays = take(2000, backoff(0.1, 5, 2, jitter="full", seed=1))
    ceilings = take(2000, backoff(0.1, 5, 2, jitter="none"))
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert max(delays) <= 5
    # Really jittered: late delays spread over the whole [0, cap] window.
    late = delays[100:]
    assert min(late) < 1 and max(late) > 4
    assert len(set(late)) == len(late)


def test_decorrelated_jitter_is_bounded_and_grows() -> None:
    delays = take(5000, backoff(0.2, 8, 2, jitter="decorrelated", seed=3))
    assert all(0.2 <= d <= 8 for d in delays)
    assert delays[0] <= 0.6  # the first draw is in [initial, initial * 1.5 * factor]
    # It climbs towards the cap: the average of later delays is far above the start.
    assert sum(delays[50:]) / len(delays[50:]) > 2
    assert len(set(delays)) > 100


def test_same_seed_same_delays_and_rng_injection() -> None:
    for jitter in ("full", "decorrelated"):
        a = take(50, backoff(0.1, 3, jitter=jitter, seed=42))
        b = take(50, backoff(0.1, 3, jitter=jitter, seed=42))
        c = take(50, backoff(0.1, 3, jitter=jitter, seed=43))
        assert a == b and a != c
        d = take(50, backoff(0.1, 3, jitter=jitter, rng=random.Random(42)))
        assert d == a


def test_a_long_outage_never_overflows() -> None:
    delays = backoff(1, 60, 10, jitter="none")
    assert take(5000, delays)[-1] == 60


@pytest.mark.parametrize(
    ("initial", "maximum", "factor"), [(0, 1, 2), (-1, 1, 2), (2, 1, 2), (1, 2, 0.5)]
)
def test_bad_parameters_are_refused(initial: float, maximum: float, factor: float) -> None:
    with pytest.raises(ValueError):
        next(backoff(initial, maximum, factor))


def test_unknown_jitter_is_refused() -> None:
    with pytest.raises(ValueError):
        next(backoff(1, 2, jitter="some"))  # type: ignore[arg-type]


def _status(code: int) -> InvalidStatus:
    return InvalidStatus(Response(code, "x", Headers()))


@pytest.mark.parametrize(
    "exc",
    [
        TransportError("down"),
        ConnectionRefusedError(),
        OSError("unreachable"),
        TimeoutError(),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        ConnectionClosedError(Close(1012, "restart"), None),
        _status(500),
        _status(503),
        _status(429),
        InvalidHandshake("garbage"),
        RemoteError("internal", code=-32603),
        RemoteError("busy", code=503),
    ],
)
def test_transient_failures_are_retried(exc: BaseException) -> None:
    assert classify(exc) == "retry"


@pytest.mark.parametrize(
    "exc",
    [
        _status(401),
        _status(403),
        _status(404),
        InvalidURI("nope", "not a ws url"),
        RemoteError("unauthorized", code=401),
        RemoteError("subscribe refused", code=-32602),
        RemoteError("no code"),
        ConfigError("bad"),
        ProtocolError("garbage"),
        ValueError("a bug"),
    ],
)
def test_permanent_failures_are_fatal(exc: BaseException) -> None:
    assert classify(exc) == "fatal"
