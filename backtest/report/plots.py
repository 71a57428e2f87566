"""The report's plots, as base64 PNGs (matplotlib's Agg backend through ``Figure``, no pyplot:
no display, no global state, safe in worker processes).

Every plot is chosen to carry information whatever the strategy: a fixed spread gives every
answer the same edge (one bar by edge), so the win rate is also shown by size, where it varies
with the competition; inventory shares the PnL's time axis, so a loss can be read against the
position that made it; markouts are in bps of each fill's notional, with 95 % error bars
(± 1.96 standard errors of the mean), up to the five-minute horizon.
"""

from __future__ import annotations

import base64
import io
import math
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from backtest.measure.detail import LATENCY_CAP_MS
from backtest.measure.measurements import HORIZONS_S, SIZE_BINS_PER_DECADE
from backtest.replay_result import ReplayResult
from backtest.report.tables import markout_groups

DPI = 80
TOP_REASONS = 6
HORIZON_LABELS = {0: "fill", 1: "+1 s", 10: "+10 s", 60: "+1 min", 300: "+5 min"}


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _dates(times: list[float]) -> Any:
    from matplotlib.dates import date2num

    return date2num([datetime.fromtimestamp(t, UTC) for t in times])  # type: ignore[no-untyped-call]


def wilson(won: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """The win rate and its Wilson 95 % interval ``(rate, low, high)``."""
    if n == 0:
        return 0.0, 0.0, 1.0
    p = won / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def pnl_and_inventory(
    result: ReplayResult, symbols: Mapping[str, str], halted_at: float | None
) -> str:
    """PnL (marked), its split (spread earned, inventory revaluation), the hold benchmark, PnL
    over hold and drawdown on top;
    each held token's inventory in whole units below, on the same time axis."""
    from matplotlib.figure import Figure

    m = result.measures
    points = m.pnl_series.series()
    inventory = m.inventory_series.series()
    held = [i for i, _ in enumerate(m.tokens) if any(v[i] for _, v in inventory)]
    fig = Figure(figsize=(9, 3.4 + 1.5 * len(held)))
    axes = fig.subplots(
        1 + len(held), 1, sharex=True, squeeze=False, height_ratios=[2.3] + [1] * len(held)
    )
    ax = axes[0][0]
    when = _dates([t for t, _ in points])
    ax.plot(when, [v[0] for _, v in points], color="tab:blue", label="PnL (marked)")
    ax.plot(when, [v[2] for _, v in points], color="tab:green", lw=1, label="spread earned")
    ax.plot(
        when, [v[0] - v[2] for _, v in points], color="tab:orange", lw=1,
        label="inventory revaluation",
    )  # fmt: skip
    ax.plot(
        when, [v[3] for _, v in points], color="gray", lw=1, ls="--",
        label="hold (the starting inventory)",
    )  # fmt: skip
    ax.plot(when, [v[0] - v[3] for _, v in points], color="black", lw=1.4, label="PnL over hold")
    ax.fill_between(
        when, [-v[1] for _, v in points], 0, color="tab:red", alpha=0.25, label="drawdown"
    )
    ax.axhline(0, color="black", lw=0.6)
    ax.set_ylabel("USD")
    ax.grid(alpha=0.3)
    lines = [ax]
    for row, i in enumerate(held, start=1):
        axi = axes[row][0]
        stamps = [t for t, _ in inventory]
        values = [v[i] / m.scale[m.tokens[i]] for _, v in inventory]
        if points and stamps and points[-1][0] > stamps[-1]:
            stamps, values = [*stamps, points[-1][0]], [*values, values[-1]]
        axi.step(_dates(stamps), values, where="post", color="tab:purple")
        axi.set_ylabel(symbols.get(m.tokens[i], m.tokens[i]), rotation=0, ha="right")
        axi.grid(alpha=0.3)
        lines.append(axi)
    if halted_at is not None:
        for axi in lines:
            axi.axvline(_dates([halted_at])[0], color="black", ls="--", lw=1)
        ax.text(
            _dates([halted_at])[0], 0.02, " kill switch", rotation=90, fontsize=8,
            va="bottom", transform=ax.get_xaxis_transform(),
        )  # fmt: skip
    ax.legend(loc="lower left", fontsize=7, ncol=2)
    lines[-1].xaxis_date(UTC)
    fig.autofmt_xdate()
    return _png(fig)


def _win_rate_axes(ax: Any, xs: list[float], bins: list[list[int]], width: Any, log: bool) -> None:
    """Quotes by bin (bars, left axis), win rate with Wilson intervals (points, right axis)."""
    ax.bar(xs, [n for n, _ in bins], width=width, color="lightgray", label="quotes resolved")
    ax.set_ylabel("quotes")
    if log:
        ax.set_xscale("log")
    twin = ax.twinx()
    rates = [wilson(won, n) for n, won in bins]
    twin.errorbar(
        xs,
        [r[0] for r in rates],
        yerr=[[r[0] - r[1] for r in rates], [r[2] - r[0] for r in rates]],
        fmt="o-",
        color="tab:green",
        ms=4,
        capsize=2,
    )
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("win rate (95 % interval)")


def win_rates(result: ReplayResult) -> str:
    """The win rate by the edge we gave the user (bps) and by size (USD)."""
    from matplotlib.figure import Figure

    m = result.measures
    fig = Figure(figsize=(9, 6.4))
    top, bottom = fig.subplots(2, 1)
    edges = sorted(m.edge_bins)
    width = max(1, math.ceil((edges[-1] - edges[0]) / 30)) if edges else 1  # ~30 bars
    grouped: dict[int, list[int]] = {}
    for edge, (n, won) in m.edge_bins.items():
        acc = grouped.setdefault(edge // width * width, [0, 0])
        acc[0] += n
        acc[1] += won
    keys = sorted(grouped)
    _win_rate_axes(
        top, [k + width / 2 for k in keys], [grouped[k] for k in keys], width * 0.9, False
    )
    top.set_xlabel("edge given to the user (bps against the reference; negative: we charge)")
    if len(keys) == 1:
        top.set_title(f"every answer at one edge ({keys[0]} bps): see the size panel", fontsize=9)
    sizes = sorted(m.size_bins)
    xs = [10 ** ((k + 0.5) / SIZE_BINS_PER_DECADE) for k in sizes]
    widths = [
        10 ** ((k + 1) / SIZE_BINS_PER_DECADE) - 10 ** (k / SIZE_BINS_PER_DECADE) for k in sizes
    ]
    bins = [[m.size_bins[k][0] + m.size_bins[k][1], m.size_bins[k][1]] for k in sizes]
    _win_rate_axes(bottom, xs, bins, [w * 0.9 for w in widths], bool(sizes))
    bottom.set_xlabel("size (USD notional)")
    fig.tight_layout()
    return _png(fig)


def markouts(figures: Mapping[str, Any]) -> str:
    return _png(markouts_figure(figures))


def markouts_figure(figures: Mapping[str, Any]) -> Any:
    """Mean markout in bps of notional per horizon (fill = realized edge), ± 1.96 se, per pair
    and for all pairs (top); below, the move since the fill: each horizon's mean minus the
    fill-time edge, so a 0.8 bps adverse move is not lost under a 25 bps edge; at the bottom the
    same move for fills whose competitor was observed and the others. The top axis follows the
    data; the two below span at least ±1.2 bps, so a 1 bps adverse move is visible."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 7.6))
    ax, move, flows = fig.subplots(3, 1, sharex=True, height_ratios=[1.3, 1, 1])
    horizons = [0, *HORIZONS_S]
    xs = list(range(len(horizons)))
    series = [("all pairs", figures["all"]), *list(figures["pairs"].items())]
    for k, (name, stats) in enumerate(series):
        cells = [stats["realized_bps"], *(stats["markouts_bps"][f"{h}s"] for h in HORIZONS_S)]
        ys = [c["mean"] if c["mean"] is not None else math.nan for c in cells]
        err = [1.96 * c["se"] if c["se"] is not None else 0.0 for c in cells]
        offset = (k - (len(series) - 1) / 2) * 0.06
        style = {"capsize": 3, "ms": 4, "lw": 2.2 if k == 0 else 1, "fmt": "o-"}
        label = f"{name} ({cells[0]['n']} fills)"
        ax.errorbar([x + offset for x in xs], ys, yerr=err, label=label, **style)
        moved = [y - ys[0] for y in ys]
        move.errorbar([x + offset for x in xs], moved, yerr=err, **style)
    # The same move for the fills whose competitor was observed and the others, and for
    # informed and uninformed flow when the stream labels it.
    groups = markout_groups(figures)
    for k, (label, stats) in enumerate(groups):
        cells = [stats["realized_bps"], *(stats["markouts_bps"][f"{h}s"] for h in HORIZONS_S)]
        if cells[0]["mean"] is None:
            continue
        ys = [c["mean"] if c["mean"] is not None else math.nan for c in cells]
        err = [1.96 * c["se"] if c["se"] is not None else 0.0 for c in cells]
        offset = (k - (len(groups) - 1) / 2) * 0.06
        flows.errorbar(
            [x + offset for x in xs], [y - ys[0] for y in ys], yerr=err, capsize=3, ms=4,
            fmt="o-", label=f"{label} ({cells[0]['n']} fills)",
        )  # fmt: skip
    for axis in (move, flows):
        axis.axhline(0, color="black", lw=0.6)
        low, high = axis.get_ylim()  # at least ±1.2 bps, so a 1 bps adverse move shows
        axis.set_ylim(min(low, -1.2), max(high, 1.2))
    flows.set_xticks(xs, [HORIZON_LABELS.get(h, f"+{h} s") for h in horizons])
    ax.set_ylabel("bps of notional\n(mean, 95 % interval)")
    move.set_ylabel("move since the fill, bps\n(below 0: against us)")
    flows.set_ylabel("move since the fill, bps\nby competition, flow")
    for axis in (ax, move, flows):
        axis.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if flows.get_legend_handles_labels()[0]:
        flows.legend(fontsize=8)
    fig.tight_layout()
    return fig


def outcomes_over_time(figures: Mapping[str, Any]) -> str:
    """Requests per time bucket, stacked by outcome: quoted, or the skip's reason."""
    from matplotlib.figure import Figure

    rows = figures["outcomes_over_time"]["rows"]
    width_s = figures["outcomes_over_time"]["bucket_s"]
    totals: Counter[str] = Counter()
    for row in rows:
        totals.update({k: v for k, v in row.items() if k != "from"})
    reasons = [r for r, _ in totals.most_common() if r != "quoted"]
    shown = ["quoted", *reasons[:TOP_REASONS]] if "quoted" in totals else reasons[:TOP_REASONS]
    rest = reasons[TOP_REASONS:]
    fig = Figure(figsize=(9, 3.4))
    ax = fig.subplots()
    if rows:
        times = [datetime.fromisoformat(row["from"]).timestamp() for row in rows]
        when = _dates(times)
        bottom = [0.0] * len(rows)
        layers = [(name, [row.get(name, 0) for row in rows]) for name in shown]
        if rest:
            layers.append(("other", [sum(row.get(r, 0) for r in rest) for row in rows]))
        for name, values in layers:
            ax.bar(
                when, values, bottom=bottom, width=width_s / 86_400 * 0.95, align="edge", label=name
            )
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.xaxis_date(UTC)
        ax.legend(fontsize=8, ncol=4)
    ax.set_ylabel(f"requests per {width_s:g} s")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


def latency(result: ReplayResult) -> str:
    """Requests by the latency the replay applied (ms)."""
    from matplotlib.figure import Figure

    hist = result.measures.latency
    fig = Figure(figsize=(9, 2.8))
    ax = fig.subplots()
    if hist.bins:
        keys = sorted(hist.bins)
        width = max(1, math.ceil((keys[-1] - keys[0] + 1) / 60))
        grouped: Counter[int] = Counter()
        for ms, n in hist.bins.items():
            grouped[ms // width * width] += n
        xs = sorted(grouped)
        ax.bar(xs, [grouped[x] for x in xs], width=width * 0.9, align="edge", color="tab:blue")
        if keys[-1] >= LATENCY_CAP_MS:
            ax.set_title(f"latencies of {LATENCY_CAP_MS} ms and more in the last bar", fontsize=9)
    ax.set_xlabel("latency (ms): request ts to the desk's decision")
    ax.set_ylabel("requests")
    ax.grid(alpha=0.3)
    return _png(fig)
