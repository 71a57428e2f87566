"""PnL accounting, pure: realized edge per fill, markouts at fixed horizons, equity marked to
market, and the references the kill switch needs (DESIGN "Settlement").

- **realized** (per fill): value received − value given (amount_out plus the protocol fee), both
  at the reference prices of the fill time. It is the edge the quote captured.
- **markout at +h**: the same difference at the prices h seconds later; a negative markout means
  the fill was adversely selected (the price moved against us right after).
- **marked PnL**: equity (Σ balance × current price) − starting equity. It includes the
  revaluation of held inventory, which is what a drawdown limit must see. Deliberate deposits
  and withdrawals are taken out of the starting equity (:meth:`PnlBook.shift_baseline`).

USD values are floats computed from int amounts (an estimate for people and limits; no signed
amount is ever derived from them). Memory is flat: fills are not kept, only the markouts still
due (bounded by the longest horizon) and running sums.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from solver.core.clock import SECOND, Micros, from_micros

MARKOUT_HORIZONS_S = (1, 10, 60, 300)
Price = Callable[[str], float | None]


def usd_value(amount: int, decimals: int, price_usd: float) -> float:
    return amount * price_usd / 10.0**decimals


def _decimal_value(amount: int, decimals: int, price_usd: float) -> Decimal:
    return Decimal(amount).scaleb(-decimals) * Decimal(repr(price_usd))


_EXACT = 10**28
"""Amounts below this many smallest units have at most 28 digits (the decimal context's
precision): ``Decimal(amount).scaleb(-decimals)`` is exact for them, so ``Decimal(amount)``
times the price already scaled rounds the same exact product once, as :func:`_decimal_value`
does."""


@dataclass(frozen=True, slots=True)
class FillValue:
    """What a settled quote moved, for markouts: value in − value out at given prices."""

    quote_id: str
    asset_in: str
    amount_in: int
    asset_out: str
    outflow: int


_DAY = 86_400 * SECOND


class PnlBook:
    def __init__(
        self, decimals: Mapping[str, int], horizons_s: tuple[int, ...] = MARKOUT_HORIZONS_S
    ) -> None:
        self.decimals = dict(decimals)
        self.scale = {asset: 10.0**d for asset, d in decimals.items()}
        self.horizons_s = horizons_s
        # One FIFO per horizon: fills come in time order, so each queue is due in order.
        self._due: dict[int, deque[tuple[Micros, FillValue]]] = {h: deque() for h in horizons_s}
        self.fills = 0
        self.realized_usd = 0.0
        self._day_number, self._day_text = -1, ""
        # Per asset, the last price seen and it as a decimal scaled by the asset's decimals
        # (issue 29): the fill and every markout due at a tick value at the same prices, and
        # the price's repr and decimal are most of a value's cost.
        self._unit: dict[str, tuple[float, Decimal]] = {}
        self.markout_sum = dict.fromkeys(horizons_s, 0.0)
        self.markout_n = dict.fromkeys(horizons_s, 0)
        self.start_equity: float | None = None
        self.peak_pnl = 0.0
        self.day: str | None = None
        self.day_start_pnl = 0.0
        self.pnl: float | None = None

    def value(self, fill: FillValue, price_in: float, price_out: float) -> float:
        """Value in − value out, computed exactly in decimal from the int amounts and the
        prices' shortest reprs, then rounded once to a float (``0.075``, not ``0.07500...6``):
        per fill, off the quote path."""
        exact = self._worth(fill.asset_in, fill.amount_in, price_in)
        exact -= self._worth(fill.asset_out, fill.outflow, price_out)
        return float(exact)

    def _worth(self, asset: str, amount: int, price: float) -> Decimal:
        """:func:`_decimal_value` of ``amount`` of ``asset`` at ``price``, the same decimal
        value, with the scaled price kept while the price stays the same object."""
        if not -_EXACT < amount < _EXACT:
            return _decimal_value(amount, self.decimals[asset], price)
        unit = self._unit.get(asset)
        if unit is None or unit[0] is not price:
            unit = self._unit[asset] = (price, Decimal(repr(price)).scaleb(-self.decimals[asset]))
        return Decimal(amount) * unit[1]

    def record_fill(self, fill: FillValue, at: Micros, realized_usd: float) -> None:
        self.fills += 1
        self.realized_usd += realized_usd
        for horizon in self.horizons_s:
            self._due[horizon].append((at + horizon * SECOND, fill))

    def due_markouts(self, now: Micros, price: Price) -> list[tuple[FillValue, int, float]]:
        """``(fill, horizon, value)`` of every markout due by ``now`` with both prices known.

        A markout whose prices are unknown when due is dropped (it cannot be made up later)."""
        done: list[tuple[FillValue, int, float]] = []
        for horizon, queue in self._due.items():
            while queue and queue[0][0] <= now:
                _, fill = queue.popleft()
                p_in, p_out = price(fill.asset_in), price(fill.asset_out)
                if p_in is not None and p_out is not None:
                    done.append((fill, horizon, self.value(fill, p_in, p_out)))
        return done

    def drop_due(self, horizon: int, by: Micros) -> None:
        """Forget the markouts of ``horizon`` due by ``by``: a ``Markout`` fact at ``by`` says
        they were taken then (recorded, or dropped for want of a price). Live,
        :meth:`due_markouts` popped them already; replaying the journal, the fills queued them
        again, and they must not be taken (and counted) a second time."""
        queue = self._due.get(horizon)
        while queue and queue[0][0] <= by:
            queue.popleft()

    def add_markout(self, horizon: int, value: float) -> None:
        if horizon in self.markout_sum:
            self.markout_sum[horizon] += value
            self.markout_n[horizon] += 1

    def mean_markouts(self) -> dict[int, float]:
        return {h: self.markout_sum[h] / n for h, n in self.markout_n.items() if n}

    def equity_usd(self, balances: Mapping[str, int], price: Price) -> float | None:
        total = 0.0
        for asset, amount in balances.items():
            if not amount:
                continue
            p = price(asset)
            scale = self.scale.get(asset)
            if p is None or scale is None:
                return None
            total += amount * p / scale
        return total

    def mark(self, now: Micros, balances: Mapping[str, int], price: Price) -> bool:
        """Mark PnL to market now (``self.pnl``); True when a reference that must survive a
        restart changed (the starting equity was taken, a new peak, a new UTC day)."""
        equity = self.equity_usd(balances, price)
        if equity is None:
            return False
        changed = False
        if self.start_equity is None:
            self.start_equity, changed = equity, True
        pnl = self.pnl = equity - self.start_equity
        if pnl > self.peak_pnl:
            self.peak_pnl, changed = pnl, True
        today = self._day_of(now)
        if self.day != today:
            self.day, self.day_start_pnl, changed = today, pnl, True
        return changed

    def _day_of(self, now: Micros) -> str:
        """The UTC date of ``now`` as text, built once a day (marks come every tick)."""
        number = now // _DAY
        if number != self._day_number:
            self._day_number, self._day_text = number, from_micros(now).date().isoformat()
        return self._day_text

    def restore(self, start_equity: float, peak_pnl: float, day: str, day_start: float) -> None:
        self.start_equity, self.peak_pnl = start_equity, peak_pnl
        self.day, self.day_start_pnl = day, day_start

    def shift_baseline(self, equity_change_usd: float) -> None:
        """A deliberate deposit (+) or withdrawal (−) of this much: not a profit or a loss."""
        if self.start_equity is not None:
            self.start_equity += equity_change_usd
        if self.pnl is not None:
            self.pnl -= equity_change_usd

    def drawdown_usd(self) -> float:
        return 0.0 if self.pnl is None else max(0.0, self.peak_pnl - self.pnl)

    def daily_loss_usd(self) -> float:
        return 0.0 if self.pnl is None else max(0.0, self.day_start_pnl - self.pnl)
