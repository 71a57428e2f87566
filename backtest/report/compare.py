"""Runs side by side (``solver backtest compare RUN_A RUN_B …``): Freqtrade's
``--strategy-list`` for replays. Two runs of one stream differ in a spread, a fill model or a
week of data; what a person needs is the same figures in adjacent columns, which pairs moved,
the curves on one plot, and exactly which settings differ.

It reads only the files ``solver backtest run`` wrote (``summary.json``; ``equity.csv`` for the
curves, absent from runs made before it existed), so runs made on other machines or long ago
compare as well. Figures a run withheld (Sharpe under its minimum days) stay withheld here.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from solver.errors import ConfigError


@dataclass(frozen=True)
class Run:
    name: str
    path: Path
    summary: dict[str, Any]
    equity: list[tuple[float, float, float]]
    """``(time, PnL, PnL over hold)`` from ``equity.csv``; empty when the run has none."""


def load_run(path: Path, name: str | None = None) -> Run:
    """A run directory (the ``--out`` of ``solver backtest run``); a clear error otherwise."""
    summary_path = path / "summary.json"
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no summary.json (give the --out directory of 'solver backtest run')"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{summary_path}: cannot read it ({exc})") from None
    if not isinstance(summary, dict) or "pnl_usd" not in summary:
        raise ConfigError(f"{summary_path}: not the summary of a backtest run")
    equity: list[tuple[float, float, float]] = []
    equity_path = path / "equity.csv"
    if equity_path.exists():
        with equity_path.open(encoding="utf-8", newline="") as file:
            for row in csv.DictReader(file):
                equity.append(
                    (
                        datetime.fromisoformat(row["time"]).timestamp(),
                        float(row["pnl_usd"]),
                        float(row["pnl_over_hold_usd"]),
                    )
                )
    return Run(name or path.name, path, summary, equity)


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    """Runs named by their directory, or by their whole path when two names clash."""
    if len(paths) < 2:
        raise ConfigError("compare needs at least two run directories")
    dirs = [Path(p) for p in paths]
    names = [d.name for d in dirs]
    clash = len(set(names)) < len(names)
    return [load_run(d, str(d) if clash else d.name) for d in dirs]


def _get(summary: Mapping[str, Any], dotted: str) -> Any:
    value: Any = summary
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


SUMMARY_ROWS: tuple[tuple[str, str, str], ...] = (
    ("requests", "requests", "count"),
    ("quoted", "quoted", "count"),
    ("won", "won", "count"),
    ("win rate", "win_rate", "pct"),
    ("volume USD", "volume_usd", "usd"),
    ("PnL USD", "pnl_usd", "usd"),
    ("hold USD", "hold_pnl_usd", "usd"),
    ("PnL over hold USD", "pnl_over_hold_usd", "usd"),
    ("spread capture USD", "pnl_split.spread_capture_usd", "usd"),
    ("fees USD", "pnl_split.fees_usd", "usd"),
    ("inventory revaluation USD", "pnl_split.inventory_revaluation_usd", "usd"),
    ("return % of capital", "returns_pct.pnl", "num"),
    ("over hold % of capital", "returns_pct.pnl_over_hold", "num"),
    ("max drawdown USD", "max_drawdown_usd", "usd"),
    ("inventory risk USD", "inventory_risk_usd", "usd"),
    ("Sharpe", "daily_ratios.sharpe", "ratio"),
    ("Calmar", "daily_ratios.calmar", "ratio"),
    ("profit factor", "trades.profit_factor", "ratio"),
    ("expectancy per fill USD", "trades.expectancy_usd", "ratio"),
    ("+5 min markout bps", "all.markouts_bps.300s.mean", "num"),
    ("halted", "halted.reason", "text"),
)
"""The summary table: label, dotted key of ``summary.json``, format."""


def fmt(value: Any, kind: str, withheld: str | None = None) -> str:
    if value is None:
        return "withheld" if kind == "ratio" and withheld else ("—" if kind == "text" else "n/a")
    if kind == "count":
        return f"{value:,}"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "usd":
        return f"{value:,.2f}"
    if kind in ("num", "ratio"):
        return f"{value:,.2f}"
    return str(value)


def summary_rows(runs: Sequence[Run]) -> list[list[str]]:
    rows = []
    for label, key, kind in SUMMARY_ROWS:
        cells = []
        for run in runs:
            section = key.split(".")[0]
            withheld = _get(run.summary, f"{section}.withheld") if kind == "ratio" else None
            cells.append(fmt(_get(run.summary, key), kind, withheld))
        rows.append([label, *cells])
    return rows


def pair_rows(runs: Sequence[Run]) -> list[list[str]]:
    """Per pair and run: fills, realized USD and the +5 min markout in bps."""
    names = sorted({name for run in runs for name in run.summary.get("pairs", {})})
    rows = []
    for name in names:
        for label, key, kind in (
            ("won", "won", "count"),
            ("realized USD", "realized_usd", "usd"),
            ("+5 min bps", "markouts_bps.300s.mean", "num"),
        ):
            cells = [
                fmt(_get(run.summary.get("pairs", {}).get(name, {}), key), kind) for run in runs
            ]
            rows.append([f"{name} {label}", *cells])
    return rows


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for i, inner in enumerate(value):
            out.update(_flatten(inner, f"{prefix}.{i}"))
        return out
    return {prefix: value}


def config_differences(runs: Sequence[Run]) -> list[list[str]]:
    """Every setting of ``config`` (strategies, parameters, risk, backtest settings) and the
    stream file whose value differs between runs; the digests are left out (they differ
    whenever anything does)."""
    flat = []
    for run in runs:
        config = dict(run.summary.get("config") or {})
        config.pop("digest", None)
        config.pop("backtest_digest", None)
        config["stream"] = _get(run.summary, "stream.file")
        flat.append(_flatten(config))
    keys = sorted({k for f in flat for k in f})
    rows = []
    for key in keys:
        values = [json.dumps(f.get(key), sort_keys=True) if key in f else "—" for f in flat]
        if len(set(values)) > 1:
            rows.append([key, *values])
    return rows


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain table for a terminal: the first column left, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = []
    for row in [head, *rows]:
        cells = [str(row[0]).ljust(widths[0])]
        cells += [str(c).rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def compare_json(runs: Sequence[Run]) -> dict[str, Any]:
    """The comparison as data (``compare.json``)."""
    keys = [key for _, key, _ in SUMMARY_ROWS]
    return {
        "runs": [
            {"name": r.name, "path": str(r.path), **{k: _get(r.summary, k) for k in keys}}
            for r in runs
        ],
        "config_differences": {
            row[0]: dict(zip([r.name for r in runs], row[1:], strict=True))
            for row in config_differences(runs)
        },
    }
