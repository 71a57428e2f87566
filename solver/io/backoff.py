"""Retry policy as data (STYLE 8): a generator of delays and a classifier of failures.

Modelled on websockets' ``client.backoff()`` / ``process_exception()``: the reconnecting loop
in :mod:`solver.io.bus_ws` is ``for delay in backoff(...)``, and whether a failure is worth
another attempt is decided by :func:`classify`, not by ``except`` clauses scattered through the
adapters. Both are pure: no I/O, no clock, and the randomness comes from a seedable
``random.Random`` so tests can pin every delay.

Jitter (see "Exponential Backoff And Jitter", AWS Architecture Blog, 2015):

- ``"none"``: ``min(max_s, initial_s * factor**n)``.
- ``"full"``: uniform in ``[0, min(max_s, initial_s * factor**n)]`` — spreads a herd of bots
  that lost the relay at the same moment over the whole window.
- ``"decorrelated"``: uniform in ``[initial_s, previous * 1.5 * factor]``, capped at ``max_s``
  — each delay depends on the previous one, not on ``n``. With the default factor 2 this is the
  blog's ``previous * 3``; the 1.5 is needed because a uniform draw's log-mean is
  ``log(upper) - 1``, so ``previous * 2`` would drift *down* instead of growing.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

import httpx
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)

from solver.errors import RemoteError, TransportError

Jitter = Literal["none", "full", "decorrelated"]
Decision = Literal["retry", "fatal"]

RETRY: Decision = "retry"
FATAL: Decision = "fatal"

# HTTP statuses (and JSON-RPC "internal error") after which the same request may succeed.
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
RETRYABLE_CODES = RETRYABLE_STATUS | {-32603}


def backoff(
    initial_s: float = 0.5,
    max_s: float = 30.0,
    factor: float = 2.0,
    jitter: Jitter = "full",
    *,
    seed: int | None = None,
    rng: random.Random | None = None,
) -> Iterator[float]:
    """Yield delays (seconds) forever: capped exponential growth with optional jitter.

    ``rng`` wins over ``seed``; with neither, a fresh unseeded ``random.Random`` is used.
    """
    if initial_s <= 0 or max_s < initial_s or factor < 1:
        raise ValueError("backoff needs 0 < initial_s <= max_s and factor >= 1")
    if jitter not in ("none", "full", "decorrelated"):
        raise ValueError(f"unknown jitter {jitter!r}")
    rand = rng if rng is not None else random.Random(seed)
    if jitter == "decorrelated":
        previous = initial_s
        while True:
            previous = min(max_s, rand.uniform(initial_s, max(initial_s, previous * 1.5 * factor)))
            yield previous
    ceiling = initial_s
    while True:
        yield ceiling if jitter == "none" else rand.uniform(0.0, ceiling)
        # Stop multiplying once capped so the float never overflows on a long outage.
        ceiling = min(max_s, ceiling * factor)


def classify(exc: BaseException) -> Decision:
    """Tell whether a failed attempt is worth retrying with the same parameters.

    Retry: the network failed (our :class:`TransportError`, ``OSError``, timeouts, httpx
    transport errors, a closed websocket or a broken handshake), an HTTP 408/425/429/5xx, or a
    JSON-RPC internal error. Fatal: configuration errors, refusals such as 401/403/404, any
    other remote error (the same request gets the same answer) and anything unexpected.
    """
    if isinstance(exc, (TransportError, OSError, TimeoutError, httpx.TransportError)):
        return RETRY
    if isinstance(exc, ConnectionClosed):
        return RETRY
    if isinstance(exc, InvalidStatus):
        return RETRY if exc.response.status_code in RETRYABLE_STATUS else FATAL
    if isinstance(exc, InvalidURI):
        return FATAL
    if isinstance(exc, InvalidHandshake):
        # The server answered something that is not a websocket handshake: often a proxy or a
        # relay mid-restart; the next attempt may well succeed.
        return RETRY
    if isinstance(exc, RemoteError):
        return RETRY if exc.code in RETRYABLE_CODES else FATAL
    return FATAL  # ConfigError, ProtocolError and anything unexpected
