"""Amounts in whole units for people: ``1,234.56 wNEAR`` from ``(1234560000…, 24, "wNEAR")``.

Amounts travel as ints in the token's smallest unit (u128, DESIGN "Amounts"), and the JSON
outputs keep them so (``summary.json``'s inventories, ``fills.csv``). What a person reads — the
report's inventories, sizes, per-pair tables — is in whole units with the token's symbol. The
conversion is exact (:class:`~decimal.Decimal` from the int, no float), then rounded for
display only: ``places`` decimals, or fewer significant digits are never hidden (a 0.000012 ETH
balance is shown as such, not as ``0.00``).

:func:`solver.cli.history.format_amount` prints every digit (for the history command, where a
person may check an amount to the unit); this one is for tables, with thousands separators.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

DEFAULT_PLACES = 2
SIGNIFICANT = 4


def whole(amount: int, decimals: int) -> Decimal:
    """``amount`` smallest units as an exact Decimal of whole units."""
    return Decimal(amount).scaleb(-decimals)


def format_whole(amount: int, decimals: int, symbol: str = "", places: int = DEFAULT_PLACES) -> str:
    """``1,234.56 wNEAR``: whole units with thousands separators and ``places`` decimals; a
    non-zero amount smaller than that shows :data:`SIGNIFICANT` significant digits instead."""
    text = format_decimal(whole(amount, decimals), places)
    return f"{text} {symbol}" if symbol else text


def format_decimal(value: Decimal, places: int = DEFAULT_PLACES) -> str:
    if value == 0:
        return f"{0:.{places}f}"
    base = places
    quantum = Decimal(1).scaleb(-places)
    if abs(value) < quantum * 100:  # small: keep significant digits rather than zeros
        exponent = value.adjusted() - SIGNIFICANT + 1
        places = max(places, -exponent)
        quantum = Decimal(1).scaleb(-places)
    rounded = value.quantize(quantum, rounding=ROUND_HALF_EVEN)
    text = f"{rounded:,.{places}f}"
    if places > base:  # the extra digits of a small amount: no trailing zeros
        text = text.rstrip("0")
        head, _, tail = text.partition(".")
        text = f"{head}.{tail.ljust(base, '0')}" if base else text.rstrip(".")
    return text
