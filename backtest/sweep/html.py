"""``sweep.html``: the candidates side by side, in one self-contained page.

- **Candidates**: a table, best first (the leaderboard's order), with each swept value, the
  full-stream objective, and with walk-forward the mean in-sample (train) and out-of-sample
  (test) objectives the winner is chosen on; PnL, drawdown, fills and whether the kill switch
  fired. At most :data:`MAX_ROWS` rows (``leaderboard.csv`` has them all).
- **Heatmap** over two swept keys: the best score (what the winner is chosen on) among the
  candidates in each cell. A key keeps its values when it has few (choices, up to
  :data:`MAX_LEVELS` integers, up to :data:`BINS` floats); a numeric key with more is cut into
  :data:`BINS` equal bins (log-spaced when every value is
  positive and they span more than a factor 20). The keys: ``--heatmap A,B``, else the first two
  swept keys that take more than one value.
- **In-sample against out-of-sample** (with walk-forward): each candidate's mean train objective
  against its mean test objective. Points along the diagonal: the ranking carries over; a cloud
  with no slope: the in-sample ranking was luck.
- **Walk-forward splits**: per split, the candidate chosen in sample, its two objectives, where
  it ranked out of sample and the rank correlation.
- **The verdict** first (:mod:`backtest.sweep.verdict`): winner, inconclusive or no winner, why,
  the winner's interval, the reality check over all candidates, and the overfitting warnings.
- **One swept key**: instead of a heatmap, the objective against the key's value (the curve),
  in and out of sample with walk-forward.

Wide tables scroll inside the page; bins read as numbers (``8,670–9,750``), not ``8.67e+03``.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from backtest.report.html import STYLE, table
from backtest.report.plots import _png
from backtest.sweep.result import SweepResult
from backtest.sweep.verdict import Verdict

MAX_ROWS = 200
SWEEP_STYLE = """
.wide { overflow-x: auto; max-width: 100%; }
.verdict { border: 2px solid #888; padding: 0.6em 1em; margin: 1em 0; }
.verdict.winner { border-color: #2a7; background: #efe; }
.verdict.inconclusive { border-color: #c90; background: #ffd; }
.verdict.no_winner { border-color: #b00; background: #fee; }
.warning { color: #a40; }
"""
MAX_LEVELS = 12
BINS = 8


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def short(x: float) -> str:
    """Three significant digits as a person writes them: ``8,670``, ``12.5``, ``0.0123``."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = 2 - math.floor(math.log10(abs(x)))
    if decimals <= 0:
        return f"{round(x, decimals):,.0f}"
    return f"{x:,.{decimals}f}"


def heatmap_keys(result: SweepResult, chosen: Sequence[str] | None = None) -> list[str]:
    """The two keys of the heatmap: ``chosen`` (checked) or the first two that vary."""
    keys = result.spec.keys
    if chosen:
        unknown = [k for k in chosen if k not in keys]
        if unknown or len(chosen) != 2:
            raise ValueError(f"--heatmap needs two swept keys (of {', '.join(keys)})")
        return list(chosen)
    varied = [
        k
        for k in keys
        if len({_value(c.overrides.get(k)) for c in result.candidates if k in c.overrides}) > 1
    ]
    return varied[:2]


def _levels(values: list[Any]) -> tuple[list[str], Any]:
    """Level labels and a function from a value to its level index."""
    distinct = sorted({_value(v) for v in values})
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    integers = numeric and all(float(v).is_integer() for v in values)
    if not numeric or len(distinct) <= (MAX_LEVELS if integers else BINS):
        if numeric:
            distinct = [_value(v) for v in sorted(set(values))]
        index = {label: i for i, label in enumerate(distinct)}
        return distinct, lambda v: index[_value(v)]
    low, high = float(min(values)), float(max(values))
    log = low > 0 and high / low > 20
    a, b = (math.log(low), math.log(high)) if log else (low, high)
    edges = [a + (b - a) * i / BINS for i in range(BINS + 1)]
    shown = [math.exp(e) if log else e for e in edges]
    labels = [f"{short(shown[i])}–{short(shown[i + 1])}" for i in range(BINS)]

    def level(v: Any) -> int:
        x = math.log(v) if log else float(v)
        return min(BINS - 1, int((x - a) / (b - a) * BINS)) if b > a else 0

    return labels, level


def heatmap(result: SweepResult, keys: list[str]) -> str | None:
    from matplotlib.figure import Figure

    if len(keys) != 2:
        return None
    scored = [
        (c, result.score(c.index))
        for c in result.candidates
        if all(k in c.overrides for k in keys) and result.error(c) is None
    ]
    scored = [(c, s) for c, s in scored if s is not None]
    if not scored:
        return None
    x_labels, x_of = _levels([c.overrides[keys[0]] for c, _ in scored])
    y_labels, y_of = _levels([c.overrides[keys[1]] for c, _ in scored])
    grid: list[list[float]] = [[math.nan] * len(x_labels) for _ in y_labels]
    for candidate, score in scored:
        x, y = x_of(candidate.overrides[keys[0]]), y_of(candidate.overrides[keys[1]])
        if math.isnan(grid[y][x]) or score > grid[y][x]:
            grid[y][x] = score
    fig = Figure(figsize=(max(5.0, 0.8 * len(x_labels) + 3), max(3.0, 0.45 * len(y_labels) + 2)))
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="RdYlGn", aspect="auto", origin="lower")
    ax.set_xticks(range(len(x_labels)), x_labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(y_labels)), y_labels, fontsize=8)
    ax.set_xlabel(keys[0])
    ax.set_ylabel(keys[1])
    if len(x_labels) * len(y_labels) <= 150:
        for y, row in enumerate(grid):
            for x, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(x, y, f"{value:.0f}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, label=f"best {result.chosen_on.replace('_', ' ')} objective")
    return _png(fig)


def curve(result: SweepResult, key: str) -> str | None:
    """The objective against the one swept key: the full-stream objective, and with
    walk-forward the mean in-sample and out-of-sample ones; a dashed line at zero (holding,
    with the default objective)."""
    from matplotlib.figure import Figure

    points = [
        (c.overrides[key], c.index)
        for c in result.candidates
        if key in c.overrides and result.error(c) is None
    ]
    if not points:
        return None
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v, _ in points)
    points.sort(key=lambda p: (float(p[0]), p[1]) if numeric else (_value(p[0]), p[1]))
    xs: list[Any] = [v for v, _ in points] if numeric else [_value(v) for v, _ in points]
    lines = [("full stream", [result.objective(i) for _, i in points])]
    if result.splits:
        lines.append(("in sample (mean)", [result.mean_over(i, False) for _, i in points]))
        lines.append(("out of sample (mean)", [result.mean_over(i, True) for _, i in points]))
    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    for label, ys in lines:
        ax.plot(xs, [math.nan if y is None else y for y in ys], "o-", ms=4, label=label)
    ax.axhline(0, color="black", lw=0.8, ls="--")
    ax.set_xlabel(key)
    ax.set_ylabel(f"{result.spec.objective.kind} (USD)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if not numeric:
        ax.tick_params(axis="x", rotation=45)
    return _png(fig)


def in_vs_out(result: SweepResult) -> str | None:
    from matplotlib.figure import Figure

    points = [
        (result.mean_over(c.index, test=False), result.mean_over(c.index, test=True))
        for c in result.candidates
        if result.error(c) is None
    ]
    pairs = [(a, b) for a, b in points if a is not None and b is not None]
    if not pairs:
        return None
    fig = Figure(figsize=(5.5, 4.5))
    ax = fig.subplots()
    ax.scatter([a for a, _ in pairs], [b for _, b in pairs], s=14, alpha=0.7)
    low = min(min(a, b) for a, b in pairs)
    high = max(max(a, b) for a, b in pairs)
    ax.plot([low, high], [low, high], color="gray", lw=0.8, ls="--")
    ax.set_xlabel("mean in-sample objective (train windows)")
    ax.set_ylabel("mean out-of-sample objective (test windows)")
    ax.grid(alpha=0.3)
    return _png(fig)


def _candidates(result: SweepResult) -> str:
    keys = result.spec.keys
    walk = bool(result.splits)
    head = ["rank", "candidate", *keys, "objective (full)"]
    head += ["in-sample mean", "out-of-sample mean"] if walk else []
    head += ["PnL USD", "hold USD", "PnL over hold USD", "max drawdown USD", "won", "win rate"]
    head += ["halted", "error"]
    rows = []
    for rank, c in enumerate(result.ranking()[:MAX_ROWS], start=1):
        full = result.results.get((c.index, 0))
        m = full.metrics if full is not None else {}
        row = [str(rank), str(c.index)]
        row += [_value(c.overrides[k]) if k in c.overrides else "" for k in keys]
        row.append(_n(result.objective(c.index)))
        if walk:
            row += [_n(result.mean_over(c.index, False)), _n(result.mean_over(c.index, True))]
        row += [
            _n(m.get("pnl_usd")),
            _n(m.get("hold_pnl_usd")),
            _n(m.get("pnl_over_hold_usd")),
            _n(m.get("max_drawdown_usd")),
            str(m.get("won", "")),
            f"{100 * m['win_rate']:.1f} %" if "win_rate" in m else "",
            (full.halted or "") if full is not None else "",
            result.error(c) or "",
        ]
        rows.append(row)
    return table(head, rows)


def _splits(result: SweepResult) -> str:
    rows = [
        [
            f"{s.split.train.name} → {s.split.test.name}",
            str(s.chosen),
            _n(s.in_sample),
            _n(s.out_of_sample),
            str(s.oos_rank),
            str(s.best_oos),
            "n/a" if s.rank_correlation is None else f"{s.rank_correlation:.2f}",
        ]
        for s in result.split_results()
    ]
    head = ["train → test", "chosen", "in sample", "out of sample", "oos rank", "best oos", "ρ"]
    return table(head, rows, numeric_from=1)


def _verdict(verdict: Verdict) -> list[str]:
    e = html.escape
    title = {"winner": "Winner", "inconclusive": "Inconclusive", "no_winner": "No winner"}
    out = [
        f'<div class="verdict {e(verdict.verdict)}"><strong>{title[verdict.verdict]}.</strong> '
        f"{e(verdict.reason)}.</div>"
    ]
    rows = []
    if verdict.interval is not None:
        i = verdict.interval
        rows.append(
            [
                f"winner's PnL over hold, {i['on'].replace('_', ' ')}",
                f"{_n(i['estimate'])} USD, {i['level'] * 100:.0f} % interval {_n(i['low'])} to "
                f"{_n(i['high'])} (bootstrap of {i['blocks']} time blocks)",
            ]
        )
    if verdict.reality_check is not None:
        r = verdict.reality_check
        rows.append(
            [
                "best of all candidates against holding",
                f"p = {r['p_value']:.3f} ({r['test']}, {r['candidates']} candidates, "
                f"{r['blocks']} blocks)",
            ]
        )
    if rows:
        out.append(table(["figure", "value"], rows, numeric_from=9))
    out += [f'<p class="warning">{e(w)}</p>' for w in verdict.warnings]
    return out


def render_sweep_html(
    result: SweepResult, heatmap_on: Sequence[str] | None = None, verdict: Verdict | None = None
) -> str:
    from backtest.sweep.verdict import judge

    verdict = verdict or judge(result)
    best = result.best() if verdict.verdict != "no_winner" else None
    e = html.escape
    parts = [f"<h1>Sweep: {e(result.stream.rsplit('/', 1)[-1])}</h1>"]
    objective = result.spec.objective
    chosen = "the mean out-of-sample objective" if result.splits else "the full-stream objective"
    parts.append(
        f'<p class="note">{len(result.candidates)} candidates; objective {e(objective.kind)} '
        f"(risk weight {objective.risk_weight}); the winner is chosen on {chosen}.</p>"
    )
    parts += ["<h2>Verdict</h2>", *_verdict(verdict)]
    if best is not None:
        overrides = json.dumps(best.overrides, sort_keys=True)
        parts.append(f"<p><strong>Winner:</strong> candidate {best.index}: {e(overrides)}</p>")
    parts += ["<h2>Candidates</h2>", f'<div class="wide">{_candidates(result)}</div>']
    if len(result.candidates) > MAX_ROWS:
        parts.append(f'<p class="note">The first {MAX_ROWS}; all in leaderboard.csv.</p>')
    keys = heatmap_keys(result, heatmap_on)
    if len(keys) == 1:
        parts.append("<h2>Objective against the swept key</h2>")
        image = curve(result, keys[0])
        if image is not None:
            parts.append(f'<img alt="objective against {e(keys[0])}" '
                         f'src="data:image/png;base64,{image}">')  # fmt: skip
    else:
        image = heatmap(result, keys)
        parts.append("<h2>Heatmap</h2>")
        if image is not None:
            parts.append(f'<img alt="heatmap" src="data:image/png;base64,{image}">')
        else:
            parts.append("<p>No swept key varies: no heatmap.</p>")
    if result.splits:
        parts.append("<h2>In-sample against out-of-sample</h2>")
        scatter = in_vs_out(result)
        if scatter is not None:
            alt = "in sample against out of sample"
            parts.append(f'<img alt="{alt}" src="data:image/png;base64,{scatter}">')
        parts += ["<h2>Walk-forward splits</h2>", f'<div class="wide">{_splits(result)}</div>']
    body = "\n".join(parts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sweep</title>
<style>{STYLE}{SWEEP_STYLE}</style></head>
<body>
{body}
</body></html>
"""
