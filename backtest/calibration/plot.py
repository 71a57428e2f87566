"""The calibration plot: win rate by edge bucket against the fitted curve (a PNG).

A fit is a claim about the whole range of edges; the plot lets the reader check it at a
glance. Top: each bucket's win rate with its Wilson 95 % interval, the fitted curve and its
95 % band over the observed range. Bottom: how many quotes were won and lost at each edge, so a
curve fitted on a handful of quotes at one edge is visibly so. Without a fit (refused), the
buckets alone are drawn: the picture shows why.

matplotlib's Agg canvas, no pyplot: no global state, no display needed.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from backtest.calibration.logistic_fit import Calibration
from solver.errors import ConfigError


def plot_calibration(path: str | Path, calibration: Calibration, title: str) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    target = Path(path)
    fig = Figure(figsize=(8, 6.5), dpi=110)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    x, y = calibration.edges, calibration.won
    buckets = calibration.buckets
    if buckets:
        centres = np.array([b.mean_edge for b in buckets])
        rates = np.array([b.rate for b in buckets])
        lows = np.array([b.rate - b.rate_interval[0] for b in buckets])
        highs = np.array([b.rate_interval[1] - b.rate for b in buckets])
        top.errorbar(
            centres, rates, yerr=[lows, highs], fmt="o", color="black", capsize=3,
            label="win rate by edge bucket (95 % interval)",
        )  # fmt: skip
    fit = calibration.fit
    if fit is not None and x.size:
        grid = np.linspace(float(x.min()), float(x.max()), 200)
        curve = [fit.probability(e) for e in grid]
        band = np.array([fit.probability_interval(e) for e in grid])
        a_lo, a_hi = fit.a_interval()
        b_lo, b_hi = fit.b_interval()
        label = (
            f"fit: a = {fit.a:.3g} [{a_lo:.3g}, {a_hi:.3g}], b = {fit.b:.3g} [{b_lo:.3g}, "
            f"{b_hi:.3g}]"
        )
        top.plot(grid, curve, color="tab:blue", label=label)
        top.fill_between(grid, band[:, 0], band[:, 1], color="tab:blue", alpha=0.2)
    if calibration.refusals:
        why = "\n".join(textwrap.wrap("REFUSED: " + "; ".join(calibration.refusals), 100)[:6])
        top.text(0.02, 0.97, why, transform=top.transAxes, color="tab:red", va="top", fontsize=8)
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("P(win)")
    top.set_title(title, fontsize=10)
    top.grid(alpha=0.3)
    top.legend(loc="lower right", fontsize=8)
    if x.size:
        low, high = float(x.min()), float(x.max())
        if high - low < 10:  # a spot, not a range: show it as one, 0.25-bps bins
            middle = (low + high) / 2
            bins = np.linspace(middle - 5, middle + 5, 41)
            bottom.set_xlim(middle - 5, middle + 5)
        else:
            bins = np.histogram_bin_edges(x, bins=min(60, max(5, x.size // 20)))
        w = calibration.weights  # sampled lost quotes: drawn as the quotes they stand for
        weights = None if w is None else [w[y], w[~y]]
        bottom.hist([x[y], x[~y]], bins=bins, stacked=True, color=["tab:green", "tab:gray"],
                    label=["won", "lost"], weights=weights)  # fmt: skip
        bottom.legend(fontsize=8)
    bottom.ticklabel_format(axis="x", useOffset=False)
    bottom.set_xlabel("edge given to the user, bps (negative: we charge)")
    bottom.set_ylabel("quotes")
    fig.tight_layout()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format="png")
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}") from None
    return target
