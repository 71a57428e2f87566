"""Parsing the bus's event frames into typed events (protocol-notes 6; spec 4.7).

Pure functions, no socket: :func:`parse_quote_event` and :func:`parse_quote_status_event` turn
an event's ``data`` into the typed event or a :class:`Skip` naming what was wrong, which the
websocket client (:mod:`solver.io.bus_ws`) counts by reason. The quote event has a fast path
for the common, well-formed case: it is the first step of every answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from solver.protocol.amounts import U128_MAX, WIRE
from solver.protocol.bus import (
    DEFAULT_MIN_DEADLINE_MS,
    MAX_MIN_DEADLINE_MS,
    QuoteRequestEvent,
    QuoteStatusEvent,
)

_AMOUNT_FIELDS = ("exact_amount_in", "exact_amount_out")
_FIELD_REASONS = {
    "exact_amount_in": "quote.amount",
    "exact_amount_out": "quote.amount",
    "core_asset_identifier_in": "quote.asset",
    "core_asset_identifier_out": "quote.asset",
    "min_deadline_ms": "quote.min_deadline_ms",
    "quote_id": "quote.quote_id",
}


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a frame was not delivered: the key of ``counters.bad_frames``."""

    reason: str


_KNOWN_ASSETS: set[str] = set()
"""Asset ids a full validation has accepted (bounded): the fast path takes only these."""
_MAX_KNOWN_ASSETS = 4096


def _fast_quote_event(data: Mapping[str, Any]) -> QuoteRequestEvent | None:
    """The common, well-formed event without pydantic's machinery (a third of the cost), or
    None to let the full validator decide and name the problem. Accepts only what the full
    validation accepts, with the same values (a property test holds the two together)."""
    quote_id = data.get("quote_id")
    asset_in = data.get("core_asset_identifier_in")
    asset_out = data.get("core_asset_identifier_out")
    if (
        type(quote_id) is not str
        or not 0 < len(quote_id) <= 256
        or asset_in not in _KNOWN_ASSETS
        or asset_out not in _KNOWN_ASSETS
        or asset_in == asset_out
    ):
        return None
    amount_in, amount_out = data.get("exact_amount_in"), data.get("exact_amount_out")
    if (amount_in is None) == (amount_out is None):
        return None
    text = amount_in if amount_in is not None else amount_out
    if (
        type(text) is not str
        or not 0 < len(text) <= 39
        or text[0] == "0"
        or not text.isascii()
        or not text.isdigit()
    ):
        return None
    amount = int(text)
    if amount > U128_MAX:
        return None
    deadline = data.get("min_deadline_ms", DEFAULT_MIN_DEADLINE_MS)
    if type(deadline) is not int or not 0 <= deadline <= MAX_MIN_DEADLINE_MS:
        return None
    return QuoteRequestEvent.model_construct(
        quote_id=quote_id,
        core_asset_identifier_in=asset_in,
        core_asset_identifier_out=asset_out,
        exact_amount_in=amount if amount_in is not None else None,
        exact_amount_out=amount if amount_out is not None else None,
        min_deadline_ms=deadline,
    )


def parse_quote_event(data: Mapping[str, Any]) -> QuoteRequestEvent | Skip:
    """Validate ``quote`` event data (already ``core``-prefixed) as it came off the wire.

    Returns the typed event or a :class:`Skip` whose reason names the offending field:
    ``quote.exact_amount`` (both or neither given), ``quote.amount`` (not a u128 string, or
    zero), ``quote.asset``, ``quote.min_deadline_ms``, ``quote.quote_id``, ``quote.invalid``.
    """
    fast = _fast_quote_event(data)
    if fast is not None:
        return fast
    given = sum(1 for name in _AMOUNT_FIELDS if data.get(name) is not None)
    if given != 1:
        return Skip("quote.exact_amount")
    try:
        event = QuoteRequestEvent.model_validate(data, context=WIRE)
        if len(_KNOWN_ASSETS) < _MAX_KNOWN_ASSETS:
            _KNOWN_ASSETS.add(event.core_asset_identifier_in)
            _KNOWN_ASSETS.add(event.core_asset_identifier_out)
        return event
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        loc = first["loc"]
        if loc:
            return Skip(_FIELD_REASONS.get(str(loc[0]), "quote.invalid"))
        # Model-level checks: a zero exact amount, or the same asset on both sides.
        return Skip("quote.asset" if "asset" in first["msg"] else "quote.amount")


def parse_quote_status_event(data: Mapping[str, Any]) -> QuoteStatusEvent | Skip:
    try:
        return QuoteStatusEvent.model_validate(data, context=WIRE)
    except ValidationError:
        return Skip("quote_status.invalid")
