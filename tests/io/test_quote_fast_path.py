"""The quote event's fast path accepts only what the full validation accepts, with the same
values (solver/io/bus_frames.py ``_fast_quote_event``): a property test over hostile inputs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from solver.io import bus_frames
from solver.io.bus_frames import Skip, parse_quote_event

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


def full(data: dict[str, Any]) -> object:
    """What the full validation alone says (the fast path switched off)."""
    saved = set(bus_frames._KNOWN_ASSETS)
    bus_frames._KNOWN_ASSETS.clear()
    try:
        return parse_quote_event(data)
    finally:
        bus_frames._KNOWN_ASSETS.update(saved)


@settings(max_examples=3000)
@given(events)
def test_the_fast_path_agrees_with_the_full_validation(data: dict[str, Any]) -> None:
    data = {k: v for k, v in data.items() if v is not ...}
    bus_frames._KNOWN_ASSETS.update({USDC, NEAR})
    fast = bus_frames._fast_quote_event(data)
    expected = full(data)
    if fast is None:
        return  # the full validation decides (and names the problem)
    assert not isinstance(expected, Skip), (data, expected)
    assert fast.model_dump() == expected.model_dump()  # type: ignore[attr-defined]


def test_a_well_formed_event_takes_the_fast_path() -> None:
    bus_frames._KNOWN_ASSETS.update({USDC, NEAR})
    data = {
        "quote_id": "q1",
        "core_asset_identifier_in": USDC,
        "core_asset_identifier_out": NEAR,
        "exact_amount_in": str(2**100),
        "min_deadline_ms": 1000,
        "min_wait_ms": 100,  # an extra field real relays add
    }
    fast = bus_frames._fast_quote_event(data)
    assert fast is not None and fast.exact_amount == 2**100 and fast.is_exact_in
    assert bus_frames._fast_quote_event({**data, "exact_amount_in": "007"}) is None
    assert (
        bus_frames._fast_quote_event({**data, "core_asset_identifier_in": "nep141:new.x"}) is None
    )
