"""The figures a quant asks of a replay, each with its sample size, and withheld below a minimum.

- **The hold benchmark.** A market maker starts with an inventory, and on a large one the marked
  PnL is mostly the price path: a run can earn 28,000 USD of spread and lose 8,000 USD to
  revaluation, and a ranking by PnL then follows the market, not the strategy. *Hold* is what
  the starting inventory alone made, marked at the same prices as the desk's PnL
  (:meth:`backtest.measure.measurements.Measurements.hold`); **PnL over hold** (``pnl − hold``)
  is what quoting added: the spread captured, net of fees, plus the revaluation of the inventory
  the fills *changed*. The sweep ranks on it by default.
- **Hedged** (optional, ``hedge_cost_bps`` in the backtest settings): as if each fill's change
  of inventory were hedged at once at the reference price, paying ``hedge_cost_bps`` of the
  fill's notional: the revaluation of the changes is gone, the cost is paid, and the PnL over
  hold is the spread earned minus that cost.
- **Ratios need data.** A Sharpe ratio "111.81 over 3 days" annualised by √365 is noise
  multiplied by 19. Sharpe, Sortino and Calmar are given only when the run spans at least
  :data:`MIN_DAYS` days, and say so (``withheld``) otherwise. Per-trade figures (profit factor,
  expectancy, average win and loss) need :data:`MIN_TRADES` fills with their last markout.
- **Breakdowns** per UTC hour, day and ISO week (Freqtrade's ``--breakdown``), each with its
  spread, fees, revaluation, hold and fills, so a bad period says whether it was the market.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from backtest.measure.detail import DAY_S, TradeBook
from backtest.measure.measurements import HORIZONS_S
from backtest.replay_result import ReplayResult
from backtest.report.tables import iso, usd

MIN_DAYS = 30
"""Annualised ratios (Sharpe, Sortino, Calmar) need a run of at least this many days."""
MIN_TRADES = 30
"""Profit factor, expectancy and average win and loss need this many fills."""
ANNUALISE = math.sqrt(365)
"""Daily ratios are annualised by √365: the network trades every day of the year."""


def span_days(result: ReplayResult) -> float:
    """The stream time the run covered, in days (first to last event)."""
    m = result.measures
    if m.first_ts is None or m.last_ts is None:
        return 0.0
    return (m.last_ts - m.first_ts).total_seconds() / DAY_S


def _withheld(what: str, have: str, need: str) -> str:
    return f"{what} withheld: {have}, fewer than the {need} they need"


def ratios(
    daily_pnl: Sequence[float],
    days_spanned: float | None = None,
    max_drawdown_usd: float = 0.0,
    *,
    min_days: int = MIN_DAYS,
) -> dict[str, Any]:
    """Sharpe and Sortino of daily PnL (× √365) and Calmar (annualised PnL over the max
    drawdown), or None with the reason in ``withheld`` when the run is shorter than
    ``min_days`` days (``days_spanned``, default the number of days) or a ratio is undefined."""
    n = len(daily_pnl)
    spanned = float(n) if days_spanned is None else days_spanned
    out: dict[str, Any] = {
        "days": n,
        "span_days": round(spanned, 3),
        "min_days": min_days,
        "annualisation": "sqrt(365)",
        "sharpe": None,
        "sortino": None,
        "calmar": None,
        "withheld": None,
    }
    if spanned < min_days or n < 2:
        have = f"{spanned:.1f} days" if spanned >= 2 else f"{spanned * 24:.1f} hours"
        out["withheld"] = _withheld(
            "Sharpe, Sortino and Calmar", f"{have} of data", f"{min_days} days"
        )
        return out
    mean = sum(daily_pnl) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in daily_pnl) / (n - 1))
    downside = math.sqrt(sum(min(0.0, x) ** 2 for x in daily_pnl) / n)
    if sd > 0:
        out["sharpe"] = round(mean / sd * ANNUALISE, 4)
    if downside > 0:
        out["sortino"] = round(mean / downside * ANNUALISE, 4)
    if max_drawdown_usd > 0:
        out["calmar"] = round(sum(daily_pnl) / spanned * 365 / max_drawdown_usd, 4)
    return out


def trades(book: TradeBook, *, min_trades: int = MIN_TRADES) -> dict[str, Any]:
    """Per-trade figures of the fills, each valued at the last markout horizon."""
    n = book.n
    out: dict[str, Any] = {
        "horizon_s": HORIZONS_S[-1],
        "n": n,
        "min_trades": min_trades,
        "wins": book.wins,
        "losses": book.losses,
        "win_rate": None,
        "profit_factor": None,
        "expectancy_usd": None,
        "average_win_usd": None,
        "average_loss_usd": None,
        "withheld": None,
    }
    if n < min_trades:
        out["withheld"] = _withheld(
            "per-trade figures", f"{n} fills with a +{HORIZONS_S[-1]} s markout", f"{min_trades}"
        )
        return out
    out["win_rate"] = round(book.wins / n, 6)
    out["expectancy_usd"] = usd((book.gross_win - book.gross_loss) / n)
    out["average_win_usd"] = usd(book.gross_win / book.wins) if book.wins else None
    out["average_loss_usd"] = usd(-book.gross_loss / book.losses) if book.losses else None
    if book.gross_loss > 0:
        out["profit_factor"] = round(book.gross_win / book.gross_loss, 4)
    return out


def benchmark(result: ReplayResult, hedge_cost_bps: float | None = None) -> dict[str, Any]:
    """Hold, PnL over hold, returns as a share of the starting equity, and the hedged view."""
    m = result.measures
    book = result.desk.pnl
    pnl = book.pnl or 0.0
    hold = m.hold_usd
    capital = book.start_equity or 0.0
    hedged = None
    if hedge_cost_bps is not None:
        cost = m.volume * hedge_cost_bps / 1e4
        hedged = {
            "cost_bps": hedge_cost_bps,
            "hedge_cost_usd": usd(cost),
            "pnl_over_hold_usd": usd(book.realized_usd - cost),
            "pnl_usd": usd(book.realized_usd - cost + hold),
        }

    def pct(value: float) -> float | None:
        return round(100 * value / capital, 6) if capital > 0 else None

    return {
        "hold_pnl_usd": usd(hold),
        "pnl_over_hold_usd": usd(pnl - hold),
        "returns_pct": {
            "capital_usd": usd(capital),
            "pnl": pct(pnl),
            "hold": pct(hold),
            "pnl_over_hold": pct(pnl - hold),
        },
        "hedged": hedged,
    }


def breakdowns(result: ReplayResult) -> dict[str, list[dict[str, Any]]]:
    """Per UTC hour, day and ISO week: PnL and its parts, and fills."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, book in result.measures.periods.items():
        rows = []
        for start, (pnl, realized, hold, fees, fills) in book.rows():
            rows.append(
                {
                    "from": iso(start),
                    "fills": fills,
                    "pnl_usd": usd(pnl),
                    "spread_capture_usd": usd(realized + fees),
                    "fees_usd": usd(-fees),
                    "inventory_revaluation_usd": usd(pnl - realized),
                    "hold_pnl_usd": usd(hold),
                    "pnl_over_hold_usd": usd(pnl - hold),
                }
            )
        out[name] = rows
    return out
