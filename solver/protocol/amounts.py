"""Amounts on the wire: decimal strings in the smallest unit (spec 2, 2.12, 8).

Amounts are Python ints everywhere inside the project. On the wire they are JSON *strings*:
a JSON number is rejected (protocol-notes 2: "Numbers are rejected"), as is anything outside
u128 (unsigned amounts) or i128 (the signed deltas of ``token_diff``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import PlainSerializer, PlainValidator, ValidationInfo, WithJsonSchema

U128_MAX = (1 << 128) - 1
I128_MIN = -(1 << 127)
I128_MAX = (1 << 127) - 1

_UNSIGNED_RE = re.compile(r"(?:0|[1-9][0-9]*)")
_SIGNED_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")


U128_DIGITS: Final = 39
"""Digits of ``U128_MAX``: a longer decimal string is out of range without parsing it."""


def decimal_u128(value: Any, name: str) -> int:
    """A u128 JSON field read by hand (the request parser's fast path, the stream reader):
    the rule of :func:`parse_u128` with the field's ``name`` in the ``ValueError``, and a JSON
    number named as such (the wire carries amounts as strings, spec 3.1)."""
    if type(value) is not str:
        what = "a JSON number" if type(value) in (int, float) else type(value).__name__
        raise ValueError(f"{name} must be a decimal string, got {what}")
    if (
        not value
        or len(value) > U128_DIGITS
        or not value.isascii()
        or not value.isdigit()
        or (value[0] == "0" and len(value) > 1)
    ):
        raise ValueError(f"{name} {value[:50]!r} is not an unsigned decimal integer")
    number = int(value)
    if number > U128_MAX:
        raise ValueError(f"{name} {value} exceeds u128")
    return number


def parse_u128(value: object) -> int:
    """Parse an unsigned amount string; raise ``ValueError`` naming what is wrong."""
    if not isinstance(value, str):
        raise ValueError(f"amount must be a decimal string, got {type(value).__name__}")
    if len(value) > 40 or not _UNSIGNED_RE.fullmatch(value):
        raise ValueError(f"amount {value[:50]!r} is not an unsigned decimal integer")
    number = int(value)
    if number > U128_MAX:
        raise ValueError(f"amount {value} exceeds u128")
    return number


def parse_i128(value: object) -> int:
    """Parse a signed delta string (``token_diff``); positive deltas may omit the sign."""
    if not isinstance(value, str):
        raise ValueError(f"delta must be a decimal string, got {type(value).__name__}")
    if len(value) > 41 or not _SIGNED_RE.fullmatch(value):
        raise ValueError(f"delta {value[:50]!r} is not a signed decimal integer")
    number = int(value)
    if not I128_MIN <= number <= I128_MAX:
        raise ValueError(f"delta {value} is outside i128")
    return number


def format_units(amount: int, decimals: int, symbol: str | None = None) -> str:
    """A smallest-unit amount in whole units for people: ``1,234.5678 wNEAR``.

    Exact (integer arithmetic, no float): every significant digit is kept and trailing zeros
    are dropped; thousands are separated by commas; negative amounts (deltas, gaps) keep their
    sign. ``symbol`` None: the number alone. Logs, status and history tables use this; the store
    and JSON exports keep the smallest units.
    """
    if decimals < 0:
        raise ValueError("decimals must be >= 0")
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), 10**decimals)
    digits = f"{frac:0{decimals}d}".rstrip("0") if decimals else ""
    text = f"{sign}{whole:,}{'.' + digits if digits else ''}"
    return f"{text} {symbol}" if symbol else text


def check_u128(value: int) -> int:
    """Raise ``ValueError`` unless ``value`` is an int within u128 (for values we compute)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U128_MAX:
        raise ValueError(f"{value!r} is not a u128 amount")
    return value


WIRE: dict[str, Any] = {"wire": True}
"""Validation context for anything that came off the wire: ``Model.model_validate(data,
context=WIRE)``. JSON numbers arrive as Python ints, so only the context tells a number on the
wire (rejected, protocol-notes 2) from an int our own code passes when it builds a model."""


def from_wire(info: ValidationInfo) -> bool:
    context = info.context
    return info.mode == "json" or (isinstance(context, dict) and bool(context.get("wire")))


def _validate_u128(value: Any, info: ValidationInfo) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and not from_wire(info):
        return check_u128(value)
    return parse_u128(value)


def _validate_i128(value: Any, info: ValidationInfo) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and not from_wire(info):
        if not I128_MIN <= value <= I128_MAX:
            raise ValueError(f"{value} is outside i128")
        return value
    return parse_i128(value)


U128 = Annotated[
    int,
    PlainValidator(_validate_u128),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^(0|[1-9][0-9]*)$"}),
]
"""An unsigned amount: int in Python, decimal string on the wire."""

I128 = Annotated[
    int,
    PlainValidator(_validate_i128),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^[-+]?(0|[1-9][0-9]*)$"}),
]
"""A signed delta: int in Python, decimal string on the wire."""
