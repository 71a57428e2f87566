"""Compact records: a stream's events as the replay consumes them (DESIGN "The quote path": time
as integers, one slotted record per request).

An event of :mod:`backtest.stream.events` is a frozen dataclass holding a ``datetime``; building
one per line, then a second time object per request, and reading them back through attribute
lookups cost the replay more than its own work. A record is a plain tuple ``(kind, t_us, ...)``
with ``t_us`` the event's time in whole microseconds since the epoch:

- ``(REC_REQUEST, t_us, request)`` — ``request`` the one :class:`QuoteRequest` of the line;
- ``(REC_PRICE, t_us, asset, usd)`` — ``usd`` the decimal string, exact;
- ``(REC_COMPETITOR, t_us, quote_id, best_amount)``;
- ``(REC_STATUS, t_us, quote_hash, intent_hash, tx_hash)``;
- ``(REC_INFORMED, t_us, quote_id)``.

:meth:`backtest.stream.read.StreamReader.batches` makes them straight from the lines (the
events API is the same records turned into events); :func:`record` and :func:`event` convert
one way and the other, exactly. :class:`Timestamps` reads the writer's fixed timestamp format
without building a ``datetime``; anything else goes through the full ISO 8601 parser.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

from backtest.stream.events import (
    CompetitorEvent,
    InformedEvent,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    StreamEvent,
)
from solver.core.clock import from_micros, micros

REC_REQUEST, REC_PRICE, REC_COMPETITOR, REC_STATUS, REC_INFORMED = 0, 1, 2, 3, 4
KIND_NAMES = ("quote_request", "price", "competitor", "quote_status", "informed")
"""The kinds a stream holds, each at the index of its record tag (``REC_*``)."""
KIND_TAGS = {name: index for index, name in enumerate(KIND_NAMES)}
"""The record tag (``REC_*``) of each kind."""
Record = tuple[Any, ...]


def ms_to_us(ms: float) -> int:
    """Whole microseconds of ``ms`` (≥ 0) milliseconds, rounded as ``timedelta(milliseconds=ms)``
    rounds them (half to even on the fraction), without building the timedelta."""
    whole = int(ms)
    return whole * 1000 + round((ms - whole) * 1000)


# ---------------------------------------------------------------------------- timestamps

_DAY_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
TAILS: Final = {f".{ms:03d}Z": ms * 1000 for ms in range(1000)}
"""The µs of each tail ``.mmmZ`` of the writer's form (after the 19 characters of its second)."""
_HOURS: Final = {f"{h:02d}": h * 3_600_000_000 for h in range(24)}
_MINUTES: Final = {f"{m:02d}": m * 60_000_000 for m in range(60)}
_SECONDS: Final = {f"{s:02d}": s * 1_000_000 for s in range(60)}
_DAYS_MAX: Final = 1024


class Timestamps:
    """Reads timestamps in the writer's own form, ``2025-01-01T00:00:00.123Z``
    (:func:`backtest.stream.format.format_ts`), without building a ``datetime``.

    :meth:`micros` is None for any other text, which the caller reads with the full parser (it
    may still be valid ISO 8601, or say why it is not). A date is read once by
    ``datetime.fromisoformat`` and remembered; the time of day by tables of the two- and
    three-ASCII-digit strings in range. So a timestamp is accepted here only where
    ``fromisoformat`` accepts it, with the same value; and the last second read is kept, since
    most events share their second with the one before. :meth:`second` is the part a reader
    caches: a text whose first 19 characters are a second it read and whose rest is a key of
    :data:`TAILS` is that second's µs plus the tail's, no call needed (the stream reader's loop).
    """

    __slots__ = ("_days", "_last")

    def __init__(self) -> None:
        self._days: dict[str, int] = {}
        self._last = ("", 0)  # the last second read: its text, its µs

    def micros(self, text: str) -> int | None:
        second = self.second(text)
        return None if second is None else second + TAILS[text[19:]]

    def second(self, text: str) -> int | None:
        """The µs of the whole second of ``text`` if it is in the writer's form, else None."""
        if len(text) != 24 or text[19:] not in TAILS:
            return None
        second = text[:19]
        last = self._last
        if second == last[0]:
            return last[1]
        day = self._days.get(text[:10])
        if day is None:
            day = self._day(text[:10])
        h, m, s = _HOURS.get(text[11:13]), _MINUTES.get(text[14:16]), _SECONDS.get(text[17:19])
        if (
            day is None
            or h is None
            or m is None
            or s is None
            or text[10] != "T"
            or text[13] != ":"
            or text[16] != ":"
        ):
            return None
        t_us = day + h + m + s
        self._last = (second, t_us)
        return t_us

    def _day(self, text: str) -> int | None:
        if not _DAY_RE.fullmatch(text):
            return None
        try:
            day = micros(datetime.fromisoformat(text + "T00:00:00.000Z"))
        except ValueError:
            return None
        if len(self._days) >= _DAYS_MAX:
            self._days.clear()
        self._days[text] = day
        return day


# ---------------------------------------------------------------------------- conversions


def record(event: StreamEvent) -> Record:
    """The record of ``event``."""
    t_us = micros(event.ts)
    kind = type(event)
    if kind is RequestEvent:
        return (REC_REQUEST, t_us, event.request)  # type: ignore[union-attr]
    if kind is CompetitorEvent:
        return (REC_COMPETITOR, t_us, event.quote_id, event.best_amount)  # type: ignore[union-attr]
    if kind is PriceEvent:
        return (REC_PRICE, t_us, event.asset, event.usd)  # type: ignore[union-attr]
    if kind is InformedEvent:
        return (REC_INFORMED, t_us, event.quote_id)  # type: ignore[union-attr]
    return (REC_STATUS, t_us, event.quote_hash, event.intent_hash, event.tx_hash)  # type: ignore[union-attr]


def event(rec: Record) -> StreamEvent:
    """The event of record ``rec`` (its time as an aware UTC datetime)."""
    kind, ts = rec[0], from_micros(rec[1])
    if kind == REC_REQUEST:
        return RequestEvent(ts, rec[2])
    if kind == REC_COMPETITOR:
        return CompetitorEvent(ts, rec[2], rec[3])
    if kind == REC_PRICE:
        return PriceEvent(ts, rec[2], rec[3])
    if kind == REC_INFORMED:
        return InformedEvent(ts, rec[2])
    return StatusEvent(ts, rec[2], rec[3], rec[4])
