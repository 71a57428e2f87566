"""Backtest outputs: ``summary.json``, ``fills.csv``, ``timing.json`` and ``report.html``.

``summary.json`` and ``fills.csv`` are byte-identical between runs of the same stream, config
and settings: keys are sorted, USD figures are rounded to 1e-6 (numbers) and amounts are integer
strings, and nothing in them depends on the wall clock or the machine. Wall-clock figures
(``requests_per_s``, elapsed time) go to ``timing.json`` instead.

``summary.json`` keys: ``requests``, ``quoted``, ``won``, ``win_rate`` (won / quoted), ``lost``
and ``skips`` and ``settle_failed`` (counts by reason), ``volume_usd``, ``pnl_usd`` (marked to
market), ``realized_pnl_usd``, ``max_drawdown_usd``, ``inventory_risk_usd`` and
``max_inventory_risk_usd`` (how far inventory moved from the start, in USD: time-weighted mean
and peak, see :mod:`backtest.measure.measurements`), ``fees_paid_usd``, ``start_equity_usd``,
``end_equity_usd``, ``start_inventory`` and ``final_inventory`` (per asset, smallest units as
strings), ``markouts_usd`` (per horizon of the desk, ``1s`` / ``10s`` / ``60s`` / ``300s``:
``mean``, ``total``, ``n``), ``events`` (counts by kind), ``open_at_end`` (quotes the desk still
held open), ``halted`` (the desk's kill switch: when and why, or null), ``competition``
(how much competition was observed and what the fills rest on: :mod:`backtest.unobserved`),
``fill_model``, ``seed``, ``first_ts``, ``last_ts``; the breakdowns of
:mod:`backtest.report.tables` (``pnl_split``, ``daily``, ``drawdown``, ``pairs``, ``all``,
``latency_ms``, ``outcomes_over_time``); the benchmark and statistics of
:mod:`backtest.report.stats` (``hold_pnl_usd``, ``pnl_over_hold_usd``, ``returns_pct``,
``hedged``, ``daily_ratios``, ``trades``, ``breakdown``); ``solver backtest run`` adds
``stream`` (its file name, malformed lines and unknown kinds the reader skipped) and ``config``
(strategies, parameters, settings and digests).

``report.html`` (:mod:`backtest.report.html`) is one self-contained page: those figures as
tables in whole units, and plots embedded as base64 PNGs (:mod:`backtest.report.plots`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from backtest.measure.fill_record import FillRecord
from backtest.measure.measurements import HORIZONS_S
from backtest.replay_result import ReplayResult
from backtest.report.stats import benchmark, breakdowns, ratios, span_days, trades
from backtest.report.tables import report_sections, usd

__all__ = ["FILL_COLUMNS", "FillsCsv", "dump_json", "summary", "usd", "write_json", "write_report"]

FILL_COLUMNS = (
    "quote_id",
    "requested_at",
    "settled_at",
    "asset_in",
    "asset_out",
    "exact_in",
    "amount_in",
    "amount_out",
    "fee",
    "price_in_usd",
    "price_out_usd",
    "edge_bps",
    "realized_usd",
    *(f"markout_{h}s_usd" for h in HORIZONS_S),
)


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


class FillsCsv:
    """``fills.csv``: one row per settled quote, in settlement order, written as the run goes."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._writer = csv.writer(out, lineterminator="\n")
        self._writer.writerow(FILL_COLUMNS)
        self.rows = 0

    def __call__(self, record: FillRecord) -> None:
        self._writer.writerow(
            (
                record.quote_id,
                _time(record.requested_at),
                _time(record.settled_at),
                record.asset_in,
                record.asset_out,
                "1" if record.exact_in else "0",
                str(record.amount_in),
                str(record.amount_out),
                str(record.fee),
                repr(record.price_in),
                repr(record.price_out),
                f"{record.edge_bps:.4f}",
                f"{usd(record.realized_usd):.6f}",
                *(
                    f"{usd(record.markouts[h]):.6f}" if h in record.markouts else ""
                    for h in HORIZONS_S
                ),
            )
        )
        self.rows += 1


EQUITY_COLUMNS = (
    "time",
    "equity_usd",
    "pnl_usd",
    "spread_earned_usd",
    "fees_usd",
    "inventory_revaluation_usd",
    "hold_pnl_usd",
    "pnl_over_hold_usd",
    "drawdown_usd",
)


def write_series(out: Path, result: ReplayResult) -> dict[str, Path]:
    """``equity.csv`` (equity, PnL and its parts, hold, PnL over hold and drawdown at the desk's
    ticks) and ``inventory.csv`` (each token's balance after each settlement, smallest units),
    beside ``fills.csv``: the curves of the report as data, for a notebook or a spreadsheet.
    Both are thinned evenly to at most about 2,000 rows
    (:class:`~backtest.measure.downsampled.Downsampled`)."""
    m = result.measures
    start = result.desk.pnl.start_equity or 0.0
    paths = {"equity": out / "equity.csv", "inventory": out / "inventory.csv"}
    with paths["equity"].open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(EQUITY_COLUMNS)
        for t, (pnl, drawdown, realized, hold, fees) in m.pnl_series.series():
            writer.writerow(
                (
                    _time(datetime.fromtimestamp(t, UTC)),
                    *(
                        f"{usd(v):.6f}"
                        for v in (start + pnl, pnl, realized, -fees, pnl - realized, hold)
                    ),
                    f"{usd(pnl - hold):.6f}",
                    f"{usd(drawdown):.6f}",
                )
            )
    with paths["inventory"].open("w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(("time", *m.tokens))
        for t, balances in m.inventory_series.series():
            writer.writerow(
                (_time(datetime.fromtimestamp(t, UTC)), *(str(int(b)) for b in balances))
            )
    return paths


def summary(
    result: ReplayResult, *, fill_model: str, seed: int, hedge_cost_bps: float | None = None
) -> dict[str, Any]:
    """The figures of a replay. PnL, realized edge, markouts and equity are the desk's
    (:class:`~solver.core.pnl.PnlBook`); the rest is measured by
    :mod:`backtest.measure.measurements`; the benchmark and the statistics are
    :mod:`backtest.report.stats`'s."""
    t = result.measures
    book = result.desk.pnl
    markouts = {
        f"{h}s": {
            "n": book.markout_n.get(h, 0),
            "total": usd(book.markout_sum.get(h, 0.0)),
            "mean": usd(book.markout_sum[h] / book.markout_n[h]) if book.markout_n.get(h) else None,
        }
        for h in HORIZONS_S
    }
    start_equity = book.start_equity or 0.0
    pnl = book.pnl or 0.0
    sections = report_sections(result)
    bench = benchmark(result, hedge_cost_bps)
    return {
        "requests": t.requests,
        "quoted": t.quoted,
        "won": t.won,
        "win_rate": round(t.won / t.quoted, 6) if t.quoted else 0.0,
        "lost": dict(sorted(t.lost.items())),
        "skips": dict(sorted(t.skips.items())),
        "settle_failed": dict(sorted(t.settle_failed.items())),
        "volume_usd": usd(t.volume),
        "pnl_usd": usd(pnl),
        "realized_pnl_usd": usd(book.realized_usd),
        "max_drawdown_usd": usd(t.max_drawdown),
        "inventory_risk_usd": usd(t.inventory_risk()),
        "max_inventory_risk_usd": usd(t.max_exposure),
        "fees_paid_usd": usd(t.fees),
        "start_equity_usd": usd(start_equity),
        "end_equity_usd": usd(start_equity + pnl),
        "start_inventory": {a: str(v) for a, v in sorted(result.start_inventory.items())},
        "final_inventory": {a: str(v) for a, v in sorted(result.final_inventory.items())},
        "markouts_usd": markouts,
        "events": dict(sorted(t.events.items())),
        "open_at_end": result.open_at_end,
        "halted": result.halted,
        "competition": result.coverage.summary(
            t.pairs.names, result.header.competitor_share if result.header else None
        ),
        "fill_model": fill_model,
        "seed": seed,
        "first_ts": _time(t.first_ts) if t.first_ts else None,
        "last_ts": _time(t.last_ts) if t.last_ts else None,
        **sections,
        **bench,
        "daily_ratios": ratios(
            [row["pnl_usd"] for row in sections["daily"]], span_days(result), t.max_drawdown
        ),
        "trades": trades(t.trades),
        "breakdown": breakdowns(result),
    }


def dump_json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, value: Mapping[str, Any]) -> None:
    path.write_text(dump_json(value), encoding="utf-8")


# ------------------------------------------------------------------------------ report.html


def write_report(
    path: Path,
    result: ReplayResult,
    summary_: Mapping[str, Any],
    symbols: Mapping[str, str],
    title: str = "Backtest report",
) -> None:
    """``report.html`` (:mod:`backtest.report.html`): one self-contained page."""
    from backtest.report.html import render_html

    path.write_text(render_html(result, summary_, symbols, title), encoding="utf-8")
