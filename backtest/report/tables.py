"""The report's derived figures, as plain data for ``summary.json`` and the HTML tables.

Each function reads a finished :class:`~backtest.replay_result.ReplayResult` (the desk's books and
:mod:`backtest.measure.measurements`'s breakdowns) and returns JSON-ready values: USD rounded to
1e-6, bps to 1e-4, times as ISO 8601 UTC, nothing from the wall clock, so ``summary.json`` stays
byte-identical between identical runs.

- **PnL split**: *spread earned* is the realized edge of every fill at its fill time (the desk's
  ``realized_usd``: value received − value given at the fill's reference prices, fees included);
  *spread capture* is the same before fees, and *fees* apart; *inventory revaluation* is the
  rest of the marked PnL (``pnl − spread earned``): what the balances gained or lost as prices
  moved, itself the *hold* benchmark's revaluation of the starting inventory plus the
  revaluation of what the fills changed (:mod:`backtest.report.stats`).
- **Daily PnL**: the change of the desk's marked PnL from one UTC day's close (its last tick) to
  the next; the first day counts from zero. Partial first and last days count as days.
- **Sharpe, Sortino, Calmar** and the per-trade figures: :mod:`backtest.report.stats` (withheld
  below their minimum samples).
- **Markouts in bps**: each fill's markout divided by its notional (the USD value of what we
  received at fill time), per horizon; mean and its standard error (error bars: ± 1.96 se).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from backtest.measure.detail import DAY_S, Moments, PairStats
from backtest.measure.measurements import HORIZONS_S
from backtest.replay_result import ReplayResult
from backtest.settings import BacktestSettings
from solver.config import BotConfig


def usd(value: float) -> float:
    """A USD figure as written: rounded to 1e-6, never ``-0.0``."""
    return float(f"{value:.6f}") + 0.0


def bps(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4f}") + 0.0


def iso(t: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 UTC (milliseconds), or None."""
    if t is None:
        return None
    return datetime.fromtimestamp(round(t, 3), UTC).isoformat(timespec="milliseconds")


def moments(m: Moments) -> dict[str, Any]:
    return {"n": m.n, "mean": bps(m.mean), "se": bps(m.stderr)}


# ------------------------------------------------------------------------------ money


def pnl_split(result: ReplayResult) -> dict[str, float]:
    """``pnl = spread_capture + fees + inventory_revaluation`` (fees negative), and
    ``inventory_revaluation = hold_revaluation + position_revaluation``."""
    book = result.desk.pnl
    pnl = book.pnl or 0.0
    fees = result.measures.fees
    revaluation = pnl - book.realized_usd
    hold = result.measures.hold_usd
    return {
        "spread_capture_usd": usd(book.realized_usd + fees),
        "fees_usd": usd(-fees),
        "spread_earned_usd": usd(book.realized_usd),
        "inventory_revaluation_usd": usd(revaluation),
        "hold_revaluation_usd": usd(hold),
        "position_revaluation_usd": usd(revaluation - hold),
    }


def daily(result: ReplayResult) -> list[dict[str, Any]]:
    rows = []
    close = 0.0
    for day, pnl, spread in result.measures.daily.days():
        close += pnl
        rows.append(
            {
                "date": datetime.fromtimestamp(day * DAY_S, UTC).date().isoformat(),
                "pnl_usd": usd(pnl),
                "spread_earned_usd": usd(spread),
                "inventory_revaluation_usd": usd(pnl - spread),
                "close_pnl_usd": usd(close),
            }
        )
    return rows


def drawdown(result: ReplayResult) -> dict[str, Any]:
    watch = result.measures.drawdown
    return {
        "usd": usd(result.measures.max_drawdown),
        "peak_at": iso(watch.max_peak_t) if watch.trough_t is not None else None,
        "trough_at": iso(watch.trough_t),
        "recovered_at": iso(watch.recovered_t),
    }


# ------------------------------------------------------------------------------ pairs


def _pair(stats: PairStats) -> dict[str, Any]:
    return {
        "requests": stats.requests,
        "quoted": stats.quoted,
        "won": stats.won,
        "win_rate": round(stats.won / stats.quoted, 6) if stats.quoted else 0.0,
        "skips": dict(sorted(stats.skips.items())),
        "volume_usd": usd(stats.volume_usd),
        "realized_usd": usd(stats.realized_usd),
        "realized_bps": moments(stats.realized_bps),
        "markouts_usd": {f"{h}s": usd(stats.markout_usd.get(h, 0.0)) for h in HORIZONS_S},
        "markouts_bps": {f"{h}s": moments(stats.markout_bps.get(h, Moments())) for h in HORIZONS_S},
    }


def pairs(result: ReplayResult) -> dict[str, Any]:
    """Per pair (``BASE/QUOTE``, both directions), ``all`` of them together, and the fills by
    whether their competitor was observed (``by_competition``: ``observed``, ``unobserved``) and
    by whether the stream labelled them informed (``by_flow``: ``labelled`` says whether it
    labels any; ``informed``, ``uninformed``)."""
    book = result.measures.pairs
    out = {name: _pair(book.pairs[name]) for name in sorted(book.pairs)}
    flows = result.measures.by_competition
    return {
        "pairs": out,
        "all": _pair(book.all),
        "by_competition": {"observed": _pair(flows[True]), "unobserved": _pair(flows[False])},
        "by_flow": {
            "labelled": result.measures.events.get("informed", 0) > 0,
            "informed": _pair(result.measures.by_flow[True]),
            "uninformed": _pair(result.measures.by_flow[False]),
        },
    }


def markout_groups(figures: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The fills split by competition (observed or not) and, when the stream labels it, by
    flow (informed or not): ``(label, stats)`` (a summary from before issue 25 has none)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    competition = figures.get("by_competition") or {}
    for key, label in (("observed", "competitor observed"), ("unobserved", "not observed")):
        if key in competition:
            out.append((label, competition[key]))
    flow = figures.get("by_flow") or {}
    if flow.get("labelled"):
        out += [("informed flow", flow["informed"]), ("uninformed flow", flow["uninformed"])]
    return out


# ------------------------------------------------------------------------------ the run


def latency(result: ReplayResult) -> dict[str, Any]:
    hist = result.measures.latency
    return {
        "n": hist.n,
        "mean_ms": round(hist.total / hist.n, 3) if hist.n else None,
        "p50_ms": hist.quantile(0.5),
        "p90_ms": hist.quantile(0.9),
        "p99_ms": hist.quantile(0.99),
        "max_ms": round(hist.max, 3) if hist.n else None,
    }


def outcomes_over_time(result: ReplayResult) -> dict[str, Any]:
    timeline = result.measures.outcomes
    return {
        "bucket_s": timeline.width_s,
        "rows": [
            {"from": iso(start), **dict(sorted(counts.items()))}
            for start, counts in timeline.rows()
        ],
    }


def digest(data: Any) -> str:
    """``sha256:`` of the canonical JSON of ``data`` (sorted keys, no spaces)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def config_block(config: BotConfig, settings: BacktestSettings) -> dict[str, Any]:
    """What ran: each pair's strategy and parameters, the backtest settings, and digests of the
    validated bot config and settings (two runs with equal digests ran the same configuration,
    whatever the YAML's comments and key order)."""
    symbols = {asset: token.symbol for asset, token in config.tokens.items()}
    bot = config.model_dump(mode="json")
    backtest = settings.model_dump(mode="json")
    return {
        "digest": digest(bot),
        "backtest_digest": digest(backtest),
        "pairs": [
            {
                "pair": f"{symbols.get(p.base, p.base)}/{symbols.get(p.quote, p.quote)}",
                "strategy": p.strategy,
                "params": p.params,
            }
            for p in config.pairs
        ],
        "risk": {
            "max_drawdown_usd": bot.get("risk", {}).get("max_drawdown_usd"),
            "max_daily_loss_usd": bot.get("risk", {}).get("max_daily_loss_usd"),
        },
        "backtest": backtest,
    }


def report_sections(result: ReplayResult) -> dict[str, Any]:
    """Everything above, keyed as in ``summary.json``."""
    return {
        "pnl_split": pnl_split(result),
        "daily": daily(result),
        "drawdown": drawdown(result),
        **pairs(result),
        "latency_ms": latency(result),
        "outcomes_over_time": outcomes_over_time(result),
    }


def halted_note(figures: Mapping[str, Any]) -> str | None:
    """One sentence for stdout and the report when the kill switch stopped quoting."""
    halted = figures.get("halted")
    if not halted:
        return None
    paused = figures.get("skips", {}).get("paused", 0)
    return (
        f"halted at {halted['at']} by the kill switch ({halted['reason']}); "
        f"{paused:,} of {figures.get('requests', 0):,} requests were skipped as paused after "
        "that. Rerun with --no-kill-switch to see the strategy without it."
    )
