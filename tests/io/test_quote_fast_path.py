"""The one quote-request parser (solver/protocol/quote_request.py) accepts exactly what the
pydantic wire model accepts, with the same values, on its fast path and off it: a property test
over hostile inputs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from solver.io.bus_frames import Skip, parse_quote_event
from solver.protocol.amounts import WIRE
from solver.protocol.bus import QuoteRequestEvent
from solver.protocol.quote_request import QuoteRequest

USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"

amounts = st.one_of(
    st.none(),
    st.integers(-5, 2**130).map(str),
    st.sampled_from(["0", "00", "01", "+1", "1.0", "1e3", " 1", "１２", "", "9" * 39, "9" * 40]),
    st.integers(0, 10),
    st.booleans(),
)
deadlines = st.one_of(
    st.integers(-1, 86_400_001), st.sampled_from([True, 1.5, "100", None]), st.just(...)
)
events = st.fixed_dictionaries(
    {
        "quote_id": st.one_of(st.text(max_size=300), st.integers(), st.none()),
        "core_asset_identifier_in": st.sampled_from([USDC, NEAR, "nep141:x", "bad", 5]),
        "core_asset_identifier_out": st.sampled_from([USDC, NEAR, "nep141:y", "bad"]),
        "exact_amount_in": amounts,
        "exact_amount_out": amounts,
        "min_deadline_ms": deadlines,
    }
)


def wire_model(data: dict[str, Any]) -> QuoteRequest | None:
    """What the pydantic wire model says of ``data``, as a request (None: refused)."""
    try:
        event = QuoteRequestEvent.model_validate(data, context=WIRE)
    except ValidationError:
        return None
    return QuoteRequest(
        event.quote_id,
        event.core_asset_identifier_in,
        event.core_asset_identifier_out,
        event.is_exact_in,
        event.exact_amount,
        event.min_deadline_ms,
    )


@settings(max_examples=3000)
@given(events)
def test_the_parser_accepts_exactly_what_the_wire_model_accepts(data: dict[str, Any]) -> None:
    data = {k: v for k, v in data.items() if v is not ...}
    expected = wire_model(data)
    for _ in range(2):  # the second time, its assets are known: the fast path
        parsed = parse_quote_event(data)
        if expected is None:
            assert isinstance(parsed, Skip), (data, parsed)
        else:
            assert parsed == expected, (data, parsed)


def test_extra_relay_fields_are_tolerated_and_leading_zeros_refused() -> None:
    data = {
        "quote_id": "q1",
        "core_asset_identifier_in": USDC,
        "core_asset_identifier_out": NEAR,
        "exact_amount_in": str(2**100),
        "min_deadline_ms": 1000,
        "min_wait_ms": 100,  # an extra field real relays add
    }
    parsed = parse_quote_event(data, "partner-1")
    assert parsed == QuoteRequest("q1", USDC, NEAR, True, 2**100, 1000, "partner-1")
    assert parse_quote_event({**data, "exact_amount_in": "007"}) == Skip("quote.amount")
