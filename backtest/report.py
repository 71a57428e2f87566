"""Backtest outputs: ``summary.json``, ``fills.csv``, ``timing.json`` and ``report.html``.

``summary.json`` and ``fills.csv`` are byte-identical between runs of the same stream, config
and settings: keys are sorted, USD figures are rounded to 1e-6 (numbers) and amounts are integer
strings, and nothing in them depends on the wall clock or the machine. Wall-clock figures
(``requests_per_s``, elapsed time) go to ``timing.json`` instead.

``summary.json`` keys: ``requests``, ``quoted``, ``won``, ``win_rate`` (won / quoted), ``lost``
and ``skips`` and ``settle_failed`` (counts by reason), ``volume_usd``, ``pnl_usd`` (marked to
market), ``realized_pnl_usd``, ``max_drawdown_usd``, ``inventory_risk_usd`` and
``max_inventory_risk_usd`` (how far inventory moved from the start, in USD: time-weighted mean
and peak, see :mod:`backtest.measure`), ``fees_paid_usd``, ``start_equity_usd``,
``end_equity_usd``, ``start_inventory`` and ``final_inventory`` (per asset, smallest units as
strings), ``markouts_usd`` (per horizon of the desk, ``1s`` / ``10s`` / ``60s`` / ``300s``:
``mean``, ``total``, ``n``), ``events`` (counts by kind), ``open_at_end`` (quotes the desk still
held open), ``halted`` (the desk's kill switch: when and why, or null),
``fill_model``, ``seed``, ``first_ts``, ``last_ts``; ``solver backtest run`` adds ``stream``
(malformed lines and unknown kinds the reader skipped).

``report.html`` is one self-contained page (PNG plots embedded as base64): PnL and drawdown over
time, inventory per token, win rate against margin, size distribution of won and lost quotes,
markouts.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from backtest.engine import ReplayResult
from backtest.measure import HORIZONS_S, SIZE_BINS_PER_DECADE, FillRecord

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


def usd(value: float) -> float:
    """A USD figure as written: rounded to 1e-6, never ``-0.0``."""
    return float(f"{value:.6f}") + 0.0


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


def summary(result: ReplayResult, *, fill_model: str, seed: int) -> dict[str, Any]:
    """The figures of a replay. PnL, realized edge, markouts and equity are the desk's
    (:class:`~solver.core.pnl.PnlBook`); the rest is measured by :mod:`backtest.measure`."""
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
        "fill_model": fill_model,
        "seed": seed,
        "first_ts": _time(t.first_ts) if t.first_ts else None,
        "last_ts": _time(t.last_ts) if t.last_ts else None,
    }


def dump_json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, value: Mapping[str, Any]) -> None:
    path.write_text(dump_json(value), encoding="utf-8")


# ------------------------------------------------------------------------------ report.html


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _dates(points: list[tuple[float, tuple[float, ...]]]) -> Any:
    """Matplotlib date numbers of the points' times (UTC)."""
    from matplotlib.dates import date2num

    return date2num([datetime.fromtimestamp(t, UTC) for t, _ in points])  # type: ignore[no-untyped-call]


def plots(result: ReplayResult, symbols: Mapping[str, str]) -> dict[str, str]:
    """The report's figures as base64 PNGs, by title (matplotlib's Agg backend, no pyplot)."""
    from matplotlib.figure import Figure

    tracker, book = result.measures, result.desk.pnl

    figures: dict[str, str] = {}

    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    points = tracker.pnl_series.series()
    when = _dates(points)
    ax.plot(when, [v[0] for _, v in points], label="PnL (marked)", color="tab:blue")
    ax.fill_between(
        when, [-v[1] for _, v in points], 0, color="tab:red", alpha=0.3, label="drawdown"
    )
    ax.xaxis_date(UTC)
    ax.set_ylabel("USD")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    figures["PnL and drawdown"] = _png(fig)

    tokens = tracker.tokens
    fig = Figure(figsize=(9, 1.9 * max(1, len(tokens))))
    axes = fig.subplots(max(1, len(tokens)), 1, sharex=True, squeeze=False)
    points = tracker.inventory_series.series()
    when = _dates(points)
    for i, asset in enumerate(tokens):
        ax = axes[i][0]
        ax.step(when, [v[i] for _, v in points], where="post")
        ax.xaxis_date(UTC)
        ax.set_ylabel(symbols.get(asset, asset), rotation=0, ha="right")
        ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    figures["Inventory per token (whole units, after each fill)"] = _png(fig)

    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    edges = sorted(tracker.edge_bins)
    width = max(1, math.ceil((edges[-1] - edges[0]) / 40)) if edges else 1  # about 40 bars
    grouped: dict[int, list[int]] = {}
    for edge, (n, won) in tracker.edge_bins.items():
        key = -edge // width * width  # margin = what we charge = -edge
        acc = grouped.setdefault(key, [0, 0])
        acc[0] += n
        acc[1] += won
    keys = sorted(grouped)
    ax.bar(
        keys, [grouped[k][0] for k in keys], width=width * 0.9, color="lightgray", label="quotes"
    )
    ax.set_xlabel("margin (bps charged against the reference)")
    ax.set_ylabel("quotes")
    twin = ax.twinx()
    twin.plot(
        keys,
        [grouped[k][1] / grouped[k][0] for k in keys],
        "o-",
        color="tab:green",
        label="win rate",
    )
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("win rate")
    figures["Win rate against margin"] = _png(fig)

    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    keys = sorted(tracker.size_bins)
    xs = [10 ** ((k + 0.5) / SIZE_BINS_PER_DECADE) for k in keys]
    widths = [
        10 ** ((k + 1) / SIZE_BINS_PER_DECADE) - 10 ** (k / SIZE_BINS_PER_DECADE) for k in keys
    ]
    ax.bar(
        xs,
        [tracker.size_bins[k][0] for k in keys],
        width=widths,
        alpha=0.5,
        label="lost",
        color="tab:red",
    )
    ax.bar(
        xs,
        [tracker.size_bins[k][1] for k in keys],
        width=widths,
        alpha=0.5,
        label="won",
        color="tab:green",
    )
    if keys:
        ax.set_xscale("log")
    ax.set_xlabel("size (USD)")
    ax.set_ylabel("quotes")
    ax.legend()
    figures["Size distribution: won and lost"] = _png(fig)

    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    labels = ["0s (realized)", *(f"+{h}s" for h in HORIZONS_S)]
    fills = max(1, book.fills)
    means = [book.realized_usd / fills] + [
        book.markout_sum[h] / book.markout_n[h] if book.markout_n.get(h) else 0.0
        for h in HORIZONS_S
    ]
    ax.bar(labels, means, color=["tab:blue" if m >= 0 else "tab:red" for m in means])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("mean USD per fill")
    figures["Markouts"] = _png(fig)
    return figures


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.6f}" if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) or "—"
    return "—" if value is None else str(value)


def render_html(
    result: ReplayResult, summary_: Mapping[str, Any], symbols: Mapping[str, str], title: str
) -> str:
    rows = "\n".join(
        f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(_fmt(value))}</td></tr>"
        for key, value in summary_.items()
    )
    images = "\n".join(
        f'<h2>{html.escape(name)}</h2>\n<img alt="{html.escape(name)}" '
        f'src="data:image/png;base64,{data}">'
        for name, data in plots(result, symbols).items()
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 900px; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ text-align: left; padding: 0.2em 0.8em; border-bottom: 1px solid #ddd;
  vertical-align: top; }}
th {{ font-weight: 600; white-space: nowrap; }}
img {{ max-width: 100%; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
<table>
{rows}
</table>
{images}
</body></html>
"""


def write_report(
    path: Path,
    result: ReplayResult,
    summary_: Mapping[str, Any],
    symbols: Mapping[str, str],
    title: str = "Backtest report",
) -> None:
    path.write_text(render_html(result, summary_, symbols, title), encoding="utf-8")
