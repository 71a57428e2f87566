"""Totals per pair from the store's ``quote_counts`` and ``fills`` tables (``solver history``,
issue 14).

Quotes, wins and settlements are counted from ``quote_counts`` (every quote, by the minute it
was created in: :mod:`solver.io.store.quote_rows`), not from the rows of ``quotes``, which keep
only a sample of the lost quotes: the totals are exact whatever the sample rate, and a lower
bound in time counts from the start of its minute.

Pairs are unordered here (both directions of a pair count together) and named by their two
asset ids in sorted order; the caller names them ``BASE/QUOTE`` from its config. Amounts stay
ints in the smallest unit and USD sums are exact decimals, so nothing is lost before a person
reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from solver.core.lifecycle import QuoteState

WON_STATES = frozenset(
    {QuoteState.WON.value, QuoteState.SETTLING.value, QuoteState.SETTLED.value,
     QuoteState.FAILED.value}
)  # fmt: skip
"""Quotes a user took (whatever happened next)."""

# Both directions of ?1/?2, or every pair when ?1 is NULL; ?3 the lower time bound (quotes:
# its minute, the first 16 characters of a store time, which every time of that minute follows
# in text order).
_QUOTES = (
    "SELECT asset_in, asset_out, state, SUM(n) FROM quote_counts WHERE minute >= ?3 AND "
    "(?1 IS NULL OR (asset_in = ?1 AND asset_out = ?2) OR (asset_in = ?2 AND asset_out = ?1)) "
    "GROUP BY asset_in, asset_out, state"
)
_FILLS = (
    "SELECT asset_in, amount_in, asset_out, amount_out, price_in_usd, realized_pnl_usd "
    "FROM fills WHERE at >= ?3 AND "
    "(?1 IS NULL OR (asset_in = ?1 AND asset_out = ?2) OR (asset_in = ?2 AND asset_out = ?1))"
)


@dataclass(slots=True)
class PairTotals:
    assets: tuple[str, str]
    """The pair's asset ids, sorted."""
    quotes: int = 0
    won: int = 0
    settled: int = 0
    fills: int = 0
    received: dict[str, int] = field(default_factory=dict)
    """asset -> smallest units taken in by fills."""
    paid: dict[str, int] = field(default_factory=dict)
    """asset -> smallest units paid out by fills (the protocol fee not included)."""
    volume_usd: Decimal | None = Decimal(0)
    """USD value of what fills took in, at their reference prices (None: a price or the
    decimals of an asset were unknown)."""
    realized_pnl_usd: Decimal = Decimal(0)
    """Sum of the fills' realized edge (fills without a price count 0)."""

    @property
    def win_rate(self) -> float | None:
        return self.won / self.quotes if self.quotes else None


def pair_totals(
    conn: Any,
    since: str,
    pair: tuple[str, str] | None = None,
    decimals: Mapping[str, int] | None = None,
) -> list[PairTotals]:
    """Totals per pair of quotes created (from the minute of ``since``) and fills settled at
    or after ``since`` (a store timestamp; ``""`` for all), sorted by asset ids. ``decimals``
    values the volume in USD."""
    a, b = pair if pair is not None else (None, None)
    params = (a, b, since)
    totals: dict[tuple[str, str], PairTotals] = {}

    def of(asset_in: str, asset_out: str) -> PairTotals:
        key = (asset_in, asset_out) if asset_in <= asset_out else (asset_out, asset_in)
        found = totals.get(key)
        if found is None:
            found = totals[key] = PairTotals(key)
        return found

    for asset_in, asset_out, state, total in conn.execute(_QUOTES, (a, b, since[:16])):
        count = int(total)
        if count == 0:  # every quote of the key has moved on (an open count gone back to 0)
            continue
        row = of(asset_in, asset_out)
        row.quotes += count
        row.won += count if state in WON_STATES else 0
        row.settled += count if state == QuoteState.SETTLED.value else 0
    known = decimals or {}
    for asset_in, amount_in, asset_out, amount_out, price_in, realized in conn.execute(
        _FILLS, params
    ):
        row = of(asset_in, asset_out)
        row.fills += 1
        row.received[asset_in] = row.received.get(asset_in, 0) + int(amount_in)
        row.paid[asset_out] = row.paid.get(asset_out, 0) + int(amount_out)
        if realized is not None:
            row.realized_pnl_usd += Decimal(realized)
        scale = known.get(asset_in)
        if row.volume_usd is not None and price_in is not None and scale is not None:
            row.volume_usd += Decimal(int(amount_in)).scaleb(-scale) * Decimal(price_in)
        else:
            row.volume_usd = None
    return [totals[key] for key in sorted(totals)]
