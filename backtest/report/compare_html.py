"""``compare.html``: runs side by side (:mod:`backtest.report.compare`), one self-contained page:
the summary, per pair, the PnL and PnL-over-hold curves of every run on one plot, and the
settings that differ."""

from __future__ import annotations

import html
from collections.abc import Sequence

from backtest.report.compare import (
    Run,
    config_differences,
    pair_rows,
    summary_rows,
)
from backtest.report.html import STYLE, table
from backtest.report.plots import _dates, _png


def equity_curves(runs: Sequence[Run]) -> str | None:
    """Every run's PnL (top) and PnL over hold (bottom) on one time axis."""
    from datetime import UTC

    from matplotlib.figure import Figure

    if not any(run.equity for run in runs):
        return None
    fig = Figure(figsize=(9, 5.6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for run in runs:
        if not run.equity:
            continue
        when = _dates([t for t, _, _ in run.equity])
        top.plot(when, [p for _, p, _ in run.equity], lw=1.2, label=run.name)
        bottom.plot(when, [o for _, _, o in run.equity], lw=1.2, label=run.name)
    top.set_ylabel("PnL, USD")
    bottom.set_ylabel("PnL over hold, USD")
    for ax in (top, bottom):
        ax.axhline(0, color="black", lw=0.6)
        ax.grid(alpha=0.3)
    top.legend(fontsize=8)
    bottom.xaxis_date(UTC)
    fig.autofmt_xdate()
    return _png(fig)


def render_compare_html(runs: Sequence[Run]) -> str:
    e = html.escape
    names = [run.name for run in runs]
    parts = [
        f"<h1>Backtests compared: {e(', '.join(names))}</h1>",
        "<h2>Summary</h2>",
        f'<div class="wide">{table(["figure", *names], summary_rows(runs))}</div>',
        "<h2>Per pair</h2>",
        f'<div class="wide">{table(["pair", *names], pair_rows(runs))}</div>',
        "<h2>Equity curves</h2>",
    ]
    image = equity_curves(runs)
    if image is None:
        parts.append("<p>No run has an equity.csv (made before it existed): no curves.</p>")
    else:
        parts.append(f'<img alt="equity curves" src="data:image/png;base64,{image}">')
        missing = [run.name for run in runs if not run.equity]
        if missing:
            parts.append(f"<p>Without equity.csv: {e(', '.join(missing))}.</p>")
    parts.append("<h2>Configuration differences</h2>")
    diffs = config_differences(runs)
    if diffs:
        parts.append(f'<div class="wide">{table(["setting", *names], diffs, numeric_from=9)}</div>')
    else:
        parts.append("<p>The runs have the same configuration and stream.</p>")
    body = "\n".join(parts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Backtests compared</title>
<style>{STYLE}.wide {{ overflow-x: auto; max-width: 100%; }}</style></head>
<body>
{body}
</body></html>
"""
