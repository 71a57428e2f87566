"""PnL accounting, pure (issue 5 "PnL"): realized edge per fill at the reference price of the
fill time, markouts at fixed horizons, and equity marked to market.

- **realized** (per fill): value received − value given (amount_out plus the protocol fee), both
  at the reference prices of the fill time. It is the edge the quote captured.
- **markout at +h**: the same difference at the prices h seconds later; a negative markout means
  the fill was adversely selected (the price moved against us right after).
- **equity**: Σ balance × current price; ``pnl = equity − starting equity`` includes the
  revaluation of held inventory, which is what a drawdown limit must see.

Values are :class:`~decimal.Decimal` computed from int amounts; floats only enter as prices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

MARKOUT_HORIZONS_S = (1, 10, 60, 300)


def usd_value(amount: int, decimals: int, price_usd: float) -> Decimal:
    return Decimal(amount) * Decimal(repr(price_usd)) / (Decimal(10) ** decimals)


@dataclass
class Fill:
    quote_id: str
    at: datetime
    asset_in: str
    amount_in: int
    asset_out: str
    amount_out: int
    fee: int
    price_in: float
    price_out: float
    realized_usd: Decimal
    markouts_usd: dict[int, Decimal] = field(default_factory=dict)


class PnlTracker:
    def __init__(
        self, decimals: Mapping[str, int], horizons_s: tuple[int, ...] = MARKOUT_HORIZONS_S
    ) -> None:
        self.decimals = dict(decimals)
        self.horizons_s = horizons_s
        self.fills: list[Fill] = []
        self._pending: list[tuple[datetime, int, Fill]] = []  # (due, horizon, fill)
        self.realized_usd = Decimal(0)
        self.start_equity: Decimal | None = None
        self.peak_pnl = Decimal(0)
        self.day_start: tuple[str, Decimal] | None = None  # (UTC date, pnl at its start)

    def record_fill(
        self,
        *,
        quote_id: str,
        at: datetime,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        amount_out: int,
        fee: int,
        price: Callable[[str], float | None],
    ) -> Fill | None:
        p_in, p_out = price(asset_in), price(asset_out)
        if p_in is None or p_out is None:
            return None
        realized = usd_value(amount_in, self.decimals[asset_in], p_in) - usd_value(
            amount_out + fee, self.decimals[asset_out], p_out
        )
        fill = Fill(
            quote_id, at, asset_in, amount_in, asset_out, amount_out, fee, p_in, p_out, realized
        )
        self.fills.append(fill)
        self.realized_usd += realized
        for horizon in self.horizons_s:
            self._pending.append((at + timedelta(seconds=horizon), horizon, fill))
        return fill

    def due_markouts(self, now: datetime, price: Callable[[str], float | None]) -> list[Fill]:
        """Compute every markout whose horizon has passed; returns the fills that changed."""
        changed: list[Fill] = []
        keep: list[tuple[datetime, int, Fill]] = []
        for due, horizon, fill in self._pending:
            p_in, p_out = price(fill.asset_in), price(fill.asset_out)
            if due > now or p_in is None or p_out is None:
                keep.append((due, horizon, fill))
                continue
            fill.markouts_usd[horizon] = usd_value(
                fill.amount_in, self.decimals[fill.asset_in], p_in
            ) - usd_value(fill.amount_out + fill.fee, self.decimals[fill.asset_out], p_out)
            if fill not in changed:
                changed.append(fill)
        self._pending = keep
        return changed

    def equity_usd(
        self, balances: Mapping[str, int], price: Callable[[str], float | None]
    ) -> Decimal | None:
        total = Decimal(0)
        for asset, amount in balances.items():
            p = price(asset)
            if p is None:
                return None
            total += usd_value(amount, self.decimals[asset], p)
        return total

    def mark(
        self, now: datetime, balances: Mapping[str, int], price: Callable[[str], float | None]
    ) -> Decimal | None:
        """PnL marked to market now; updates the peak and the start-of-day reference."""
        equity = self.equity_usd(balances, price)
        if equity is None:
            return None
        if self.start_equity is None:
            self.start_equity = equity
        pnl = equity - self.start_equity
        self.peak_pnl = max(self.peak_pnl, pnl)
        today = now.date().isoformat()
        if self.day_start is None or self.day_start[0] != today:
            self.day_start = (today, pnl)
        return pnl

    def drawdown_usd(self, pnl: Decimal) -> Decimal:
        return self.peak_pnl - pnl

    def daily_loss_usd(self, pnl: Decimal) -> Decimal:
        return Decimal(0) if self.day_start is None else max(Decimal(0), self.day_start[1] - pnl)

    def mean_markouts(self) -> dict[int, Decimal]:
        sums: dict[int, list[Decimal]] = {}
        for fill in self.fills:
            for horizon, value in fill.markouts_usd.items():
                sums.setdefault(horizon, []).append(value)
        return {h: sum(v, Decimal(0)) / len(v) for h, v in sorted(sums.items())}
