"""The report's sections on the benchmark and the statistics (:mod:`backtest.report.stats`):
against holding, statistics with their sample sizes, breakdowns per hour, day and week.

A figure withheld for want of data is shown as the sentence that says so, never as a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backtest.report.html import _note, count, money, num, table

MAX_HOURS_SHOWN = 48
"""Hourly rows beyond this are folded (the whole breakdown is in ``summary.json``)."""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.3f} %"


def against_holding(figures: Mapping[str, Any]) -> list[str]:
    split, returns = figures["pnl_split"], figures["returns_pct"]
    rows = [
        ["hold: the starting inventory, held", money(figures["hold_pnl_usd"]),
         _pct(returns["hold"])],
        ["PnL, marked to market", money(figures["pnl_usd"]), _pct(returns["pnl"])],
        ["PnL over hold", money(figures["pnl_over_hold_usd"]), _pct(returns["pnl_over_hold"])],
        ["  spread capture (before fees)", money(split["spread_capture_usd"]), ""],
        ["  fees", money(split["fees_usd"]), ""],
        ["  revaluation of what the fills changed", money(split["position_revaluation_usd"]),
         ""],
    ]  # fmt: skip
    hedged = figures.get("hedged")
    if hedged is not None:
        rows.append(
            [
                f"hedged at {hedged['cost_bps']:g} bps: PnL over hold",
                money(hedged["pnl_over_hold_usd"]),
                "",
            ]
        )
        rows.append(["  hedging cost", money(-hedged["hedge_cost_usd"]), ""])
    capital = money(returns["capital_usd"])
    return [
        table(["figure", "USD", f"% of {capital} USD"], rows),
        _note(
            "Hold is what the starting inventory alone made, marked at the same prices as the "
            "PnL. PnL over hold is what quoting added: the spread captured, net of fees, and "
            "the revaluation of the inventory the fills changed. A strategy that makes money "
            "only because the market rose shows a PnL over hold near zero or below."
            + ("" if hedged is not None else " Set hedge_cost_bps for a hedged view.")
        ),
    ]


def statistics(figures: Mapping[str, Any]) -> list[str]:
    ratios, trades = figures["daily_ratios"], figures["trades"]
    horizon = f"+{trades['horizon_s']} s"
    rows = [
        ["span", f"{ratios['span_days']:.2f} days ({ratios['days']} UTC days)"],
        ["Sharpe (daily PnL, × √365)", ratios["withheld"] or num(ratios["sharpe"])],
        ["Sortino (daily PnL, × √365)", ratios["withheld"] or num(ratios["sortino"])],
        ["Calmar (annualised PnL / max drawdown)", ratios["withheld"] or num(ratios["calmar"])],
        [f"trades (fills with a {horizon} markout)", count(trades["n"])],
    ]
    if trades["withheld"]:
        rows.append(["profit factor, expectancy, average win / loss", trades["withheld"]])
    else:
        rows += [
            [f"win rate at {horizon}", f"{100 * trades['win_rate']:.1f} %"],
            ["profit factor (gross win / gross loss)", num(trades["profit_factor"])],
            ["expectancy per fill", f"{money(trades['expectancy_usd'])} USD"],
            [
                "average win / loss",
                f"{money(trades['average_win_usd'])} / {money(trades['average_loss_usd'])} USD",
            ],
        ]
    return [
        table(["statistic", "value"], rows, numeric_from=9),
        _note(
            f"Annualised ratios need {ratios['min_days']} days of data and per-trade figures "
            f"{trades['min_trades']} fills: below that they are withheld, not estimated. A "
            f"trade is a fill valued at its {horizon} markout (what its edge became once the "
            "price had moved)."
        ),
    ]


def _rows(rows: list[Mapping[str, Any]], fmt: str) -> str:
    head = ["from (UTC)", "fills", "PnL", "spread capture", "fees", "revaluation", "hold",
            "PnL over hold"]  # fmt: skip
    body = [
        [
            r["from"][:fmt_len(fmt)].replace("T", " "),
            count(r["fills"]),
            *(money(r[k]) for k in ("pnl_usd", "spread_capture_usd", "fees_usd",
                                    "inventory_revaluation_usd", "hold_pnl_usd",
                                    "pnl_over_hold_usd")),
        ]
        for r in rows
    ]  # fmt: skip
    return table(head, body)


def fmt_len(fmt: str) -> int:
    """How much of an ISO time a period needs: ``2025-01-01`` for days, ``… 13:00`` for hours."""
    return 16 if fmt == "hour" else 10


def breakdown(figures: Mapping[str, Any]) -> list[str]:
    periods = figures["breakdown"]
    out = ["<h3>By ISO week (from Monday)</h3>", _rows(periods["week"], "week")]
    out += ["<h3>By UTC day</h3>", _rows(periods["day"], "day")]
    hours = periods["hour"]
    hourly = _rows(hours, "hour")
    if len(hours) > MAX_HOURS_SHOWN:
        hourly = f"<details><summary>{len(hours):,} hours</summary>{hourly}</details>"
    out += ["<h3>By UTC hour</h3>", hourly]
    out.append(_note("USD. Each period's figures are the change from the previous close."))
    return out
