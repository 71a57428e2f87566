"""Amounts on the wire: u128 / i128 decimal strings (spec 2.12, 8; protocol-notes 2)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from solver.protocol.amounts import (
    I128,
    I128_MAX,
    I128_MIN,
    U128,
    U128_MAX,
    WIRE,
    check_u128,
    format_units,
    parse_i128,
    parse_u128,
)

U128_ADAPTER: TypeAdapter[int] = TypeAdapter(U128)
I128_ADAPTER: TypeAdapter[int] = TypeAdapter(I128)

u128s = st.integers(min_value=0, max_value=U128_MAX)
i128s = st.integers(min_value=I128_MIN, max_value=I128_MAX)
non_strings = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
    st.lists(st.text(alphabet="0123456789", min_size=1, max_size=3), max_size=2),
)


def test_limits_are_the_rust_ones() -> None:
    assert U128_MAX == 340282366920938463463374607431768211455
    assert I128_MAX == 170141183460469231731687303715884105727
    assert I128_MIN == -170141183460469231731687303715884105728


# ------------------------------------------------------------------------- round trips


@settings(max_examples=200)
@given(u128s)
def test_u128_round_trip(n: int) -> None:
    text = str(n)
    assert parse_u128(text) == n
    assert U128_ADAPTER.validate_python(text) == n
    assert U128_ADAPTER.validate_json(f'"{text}"') == n
    assert U128_ADAPTER.dump_python(n, mode="json") == text
    assert U128_ADAPTER.dump_json(n) == f'"{text}"'.encode()


@settings(max_examples=200)
@given(i128s)
def test_i128_round_trip(n: int) -> None:
    text = str(n)
    assert parse_i128(text) == n
    assert I128_ADAPTER.validate_python(text) == n
    assert I128_ADAPTER.validate_json(f'"{text}"') == n
    serialized = I128_ADAPTER.dump_python(n, mode="json")
    assert serialized == text
    # Positive deltas are written without a sign (protocol-notes 6).
    assert not serialized.startswith("+")


@settings(max_examples=100)
@given(st.integers(min_value=0, max_value=I128_MAX))
def test_i128_accepts_explicit_plus_sign(n: int) -> None:
    assert parse_i128(f"+{n}") == n


def test_boundaries_accepted() -> None:
    assert parse_u128("0") == 0
    assert parse_u128(str(U128_MAX)) == U128_MAX
    assert parse_i128(str(I128_MIN)) == I128_MIN
    assert parse_i128(str(I128_MAX)) == I128_MAX
    assert parse_i128("-0") == 0


# ------------------------------------------------------------------------- out of range


@settings(max_examples=100)
@given(st.integers(min_value=U128_MAX + 1, max_value=U128_MAX * 1000))
def test_u128_above_max_rejected(n: int) -> None:
    with pytest.raises(ValueError, match=r"u128|unsigned"):
        parse_u128(str(n))
    with pytest.raises(ValidationError):
        U128_ADAPTER.validate_python(str(n))
    with pytest.raises(ValueError):
        check_u128(n)


@settings(max_examples=100)
@given(st.integers(max_value=-1))
def test_u128_negative_rejected(n: int) -> None:
    with pytest.raises(ValueError):
        parse_u128(str(n))
    with pytest.raises(ValueError):
        check_u128(n)
    with pytest.raises(ValidationError):
        U128_ADAPTER.validate_python(n)


@settings(max_examples=100)
@given(
    st.one_of(
        st.integers(min_value=I128_MAX + 1, max_value=I128_MAX * 1000),
        st.integers(min_value=I128_MIN * 1000, max_value=I128_MIN - 1),
    )
)
def test_i128_outside_range_rejected(n: int) -> None:
    with pytest.raises(ValueError):
        parse_i128(str(n))
    with pytest.raises(ValidationError):
        I128_ADAPTER.validate_python(str(n))
    with pytest.raises(ValidationError):
        I128_ADAPTER.validate_python(n)


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "01", "00", "+1", "1.0", "1e3", "1_000", "0x10", "١٢", "１", "-", "NaN"],
)
def test_u128_rejects_non_canonical_text(text: str) -> None:
    with pytest.raises(ValueError):
        parse_u128(text)


@pytest.mark.parametrize(
    "text", ["", "--1", "+-1", "-01", " -1", "1.5", "-1e3", "−1", "+", "- 1", "١"]
)
def test_i128_rejects_non_canonical_text(text: str) -> None:
    with pytest.raises(ValueError):
        parse_i128(text)


# ------------------------------------------------------------------------- non-strings


@settings(max_examples=100)
@given(non_strings)
def test_parse_rejects_non_strings(value: Any) -> None:
    with pytest.raises(ValueError, match="decimal string"):
        parse_u128(value)
    with pytest.raises(ValueError, match="decimal string"):
        parse_i128(value)


@pytest.mark.parametrize("value", [True, False, 1.0, None, b"1", [1]])
def test_adapters_reject_non_int_python_values(value: Any) -> None:
    with pytest.raises(ValidationError):
        U128_ADAPTER.validate_python(value)
    with pytest.raises(ValidationError):
        I128_ADAPTER.validate_python(value)


def test_check_u128_accepts_ints_only() -> None:
    assert check_u128(0) == 0
    assert check_u128(U128_MAX) == U128_MAX
    for value in (True, 1.5, None, "1"):
        with pytest.raises(ValueError):
            check_u128(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("adapter", [U128_ADAPTER, I128_ADAPTER], ids=["u128", "i128"])
def test_json_number_rejected(adapter: TypeAdapter[int]) -> None:
    """protocol-notes 2: numbers are rejected; only the string form is an amount."""
    for number in ("5", "0", "-5", "5.0", "1e3"):
        with pytest.raises(ValidationError, match="decimal string"):
            adapter.validate_json(number)
    assert adapter.validate_json('"5"') == 5


@settings(max_examples=100)
@given(u128s)
def test_wire_context_rejects_python_ints(n: int) -> None:
    """Parsed JSON (orjson.loads) hands numbers over as ints: the WIRE context refuses them."""
    for adapter in (U128_ADAPTER, I128_ADAPTER):
        with pytest.raises(ValidationError, match="decimal string"):
            adapter.validate_python(n, context=WIRE)
    assert U128_ADAPTER.validate_python(str(n), context=WIRE) == n
    # Our own code builds models from ints, without the context.
    assert U128_ADAPTER.validate_python(n) == n


@pytest.mark.parametrize(
    ("amount", "decimals", "symbol", "text"),
    [
        (12_345_678 * 10**20, 24, "wNEAR", "1,234.5678 wNEAR"),
        (5_985_000, 6, "USDC", "5.985 USDC"),
        (0, 6, "USDC", "0 USDC"),
        (1, 24, "wNEAR", "0.000000000000000000000001 wNEAR"),
        (-7 * 10**6, 6, "USDC", "-7 USDC"),
        (-1_500_000, 6, None, "-1.5"),
        (1_000_000_000, 0, "X", "1,000,000,000 X"),
        (U128_MAX, 18, "ETH", "340,282,366,920,938,463,463.374607431768211455 ETH"),
    ],
)
def test_format_units_is_exact_whole_units_with_the_symbol(
    amount: int, decimals: int, symbol: str | None, text: str
) -> None:
    assert format_units(amount, decimals, symbol) == text
