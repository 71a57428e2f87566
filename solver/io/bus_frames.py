"""Parsing the bus's event frames into typed events (protocol-notes 6; spec 4.7).

Pure functions, no socket: :func:`parse_quote_event` and :func:`parse_quote_status_event` turn
an event's ``data`` into the typed value or a :class:`Skip` naming what was wrong, which the
websocket client (:mod:`solver.io.bus_ws`) counts by reason. A quote event becomes the one
request record the whole path uses (:class:`~solver.protocol.quote_request.QuoteRequest`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from solver.protocol.amounts import WIRE
from solver.protocol.bus import DEFAULT_MIN_DEADLINE_MS, QuoteStatusEvent
from solver.protocol.quote_request import BadQuoteRequest, QuoteRequest, QuoteRequestParser


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a frame was not delivered: the key of ``counters.bad_frames``."""

    reason: str


BUS_REQUESTS = QuoteRequestParser(default_deadline_ms=DEFAULT_MIN_DEADLINE_MS)
"""The bus's rules: any well-formed asset id; an absent ``min_deadline_ms`` is the relay's
default (protocol-notes 6)."""


def parse_quote_event(
    data: Mapping[str, Any], partner_id: str | None = None
) -> QuoteRequest | Skip:
    """``quote`` event data (already ``core``-prefixed) as it came off the wire: the request,
    parsed once (:mod:`solver.protocol.quote_request`), or a :class:`Skip` whose reason names
    the offending field: ``quote.quote_id``, ``quote.asset``, ``quote.exact_amount`` (both or
    neither given), ``quote.amount`` (not a u128 string, or zero), ``quote.min_deadline_ms``.
    """
    try:
        return BUS_REQUESTS.parse(data, partner_id)
    except BadQuoteRequest as exc:
        return Skip("quote." + exc.field)


def parse_quote_status_event(data: Mapping[str, Any]) -> QuoteStatusEvent | Skip:
    try:
        return QuoteStatusEvent.model_validate(data, context=WIRE)
    except ValidationError:
        return Skip("quote_status.invalid")
