"""Calibrate the ``logistic`` fill model: ``P(win) = 1 / (1 + exp(-(a + b * edge_bps)))``.

The fit, its intervals and the checks that refuse data which cannot identify the model live in
:mod:`backtest.calibration.logistic_fit` (re-exported here); the plot in
:mod:`backtest.calibration.plot`.
This module gathers the observations ``(edge_bps, won)``.

``edge_bps`` is what the user gains against the reference price (see :func:`backtest.fills.
edge_bps`), so ``b > 0`` means better prices win more often. Observations come from:

- **a store** (``solver backtest calibrate --db STORE``): the bot's own signed quotes. States
  WON, SETTLING, SETTLED and FAILED count as won (the user took the quote; FAILED only failed
  later, on chain), LOST as lost; REJECTED (never seen by users) and OPEN (undecided) are left
  out. The reference prices at quote time are taken from the store's fills (the prices recorded
  with each settlement) and from ``price`` events of an optional stream (``--prices``): the last
  observation at or before the quote, else the first after it, within ``max_gap_s``. Quotes
  without both prices, or with an asset of unknown decimals, are skipped and counted. A store
  keeps a sample of its lost quotes (``storage.lost_quote_sample_rate``, issue 29): each row
  has its ``weight`` (1 / the rate for a sampled lost quote, 1 for the others), and the fit,
  the buckets and the summary weigh them (:mod:`backtest.calibration.logistic_fit`).
- **a stream replay** (``solver backtest calibrate STREAM --config FILE``): the stream's requests
  through the configured pipeline, each answer judged by the ``competitor`` model (with the
  settings' taker limits) against the stream's recorded competing answers; the logistic then
  smooths that competition into a probability of the edge. The strategy's edge must vary
  (a constant spread identifies nothing, and is refused).
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from backtest.calibration.buckets import quantiles
from backtest.calibration.logistic_fit import (
    Calibration,
    CalibrationRefused,
    Criteria,
    LogisticFit,
    calibrate,
    fit_logistic,
)
from backtest.fills import LOST_TAKER, edge_bps
from backtest.settings import BacktestSettings
from backtest.stream.events import Header, PriceEvent, StreamEvent
from solver.config import BotConfig
from solver.errors import ConfigError

__all__ = [
    "LOST_STATES",
    "WON_STATES",
    "Calibration",
    "CalibrationRefused",
    "Criteria",
    "LogisticFit",
    "Observations",
    "PriceBook",
    "calibrate",
    "calibration_summary",
    "fit_logistic",
    "observations_from_replay",
    "observations_from_store",
    "write_fit",
]

WON_STATES = frozenset({"WON", "SETTLING", "SETTLED", "FAILED"})
LOST_STATES = frozenset({"LOST"})


# ------------------------------------------------------------------------------ observations


@dataclass
class Observations:
    edges: list[float] = field(default_factory=list)
    won: list[bool] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    """How many quotes each observation stands for (a store's sampled lost quotes: 1/rate)."""
    skipped: Counter[str] = field(default_factory=Counter)
    fitted: str = "joint"
    """What a win means here: ``competition`` (beat the competitor, taker refusals left out: a
    stream replay) or ``joint`` (the user took it: a store, where a refusal and a lost race
    look alike). Written into the fit (``fill.fitted``) so the taker is applied once."""

    def add(self, edge: float, won: bool, weight: float = 1.0) -> None:
        self.edges.append(edge)
        self.won.append(won)
        self.weights.append(weight)

    def fit(self) -> LogisticFit:
        """The bare fit (no checks); use :meth:`calibrate` for anything reported."""
        return fit_logistic(self.edges, self.won, weights=self.weights)

    def calibrate(self, criteria: Criteria | None = None) -> Calibration:
        return calibrate(self.edges, self.won, criteria, self.weights)


class PriceBook:
    """Reference prices over time, per asset, for lookups at arbitrary times."""

    def __init__(self) -> None:
        self._raw: dict[str, list[tuple[float, float]]] = {}
        self._times: dict[str, list[float]] = {}
        self._prices: dict[str, list[float]] = {}

    def add(self, asset: str, t: float, usd: float) -> None:
        if usd > 0 and math.isfinite(usd):
            self._raw.setdefault(asset, []).append((t, usd))
            self._times.pop(asset, None)

    def at(self, asset: str, t: float, max_gap_s: float) -> float | None:
        times = self._times.get(asset)
        if times is None:
            raw = sorted(self._raw.get(asset, ()))
            times = self._times[asset] = [p[0] for p in raw]
            self._prices[asset] = [p[1] for p in raw]
        prices = self._prices[asset]
        i = bisect.bisect_right(times, t) - 1
        if i >= 0 and t - times[i] <= max_gap_s:
            return prices[i]
        if i + 1 < len(times) and times[i + 1] - t <= max_gap_s:
            return prices[i + 1]
        return None


def _connect_read_only(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise ConfigError(f"no store at {path}")
    try:
        return sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot open the store {path}: {exc}") from None


def observations_from_store(
    db: str | Path,
    decimals: Mapping[str, int],
    prices: Iterable[PriceEvent] = (),
    *,
    max_gap_s: float = 300.0,
) -> Observations:
    book = PriceBook()
    for event in prices:
        book.add(event.asset, event.ts.timestamp(), float(event.usd))
    obs = Observations()
    conn = _connect_read_only(Path(db))
    try:
        for at, asset_in, p_in, asset_out, p_out in conn.execute(
            "SELECT at, asset_in, price_in_usd, asset_out, price_out_usd FROM fills"
        ):
            t = datetime.fromisoformat(at).timestamp()
            if p_in is not None:
                book.add(asset_in, t, float(p_in))
            if p_out is not None:
                book.add(asset_out, t, float(p_out))
        columns = {row[1] for row in conn.execute("PRAGMA table_info(quotes)")}
        weight = "weight" if "weight" in columns else "1.0"  # a store before issue 29: all rows
        rows = conn.execute(
            "SELECT created_at, asset_in, asset_out, amount_in, amount_out, state, "  # noqa: S608
            f"{weight} FROM quotes ORDER BY created_at, quote_id"
        )
        for created, asset_in, asset_out, amount_in, amount_out, state, w in rows:
            if state in WON_STATES:
                won = True
            elif state in LOST_STATES:
                won = False
            else:
                obs.skipped[f"state {state}"] += 1
                continue
            if asset_in not in decimals or asset_out not in decimals:
                obs.skipped["unknown decimals"] += 1
                continue
            t = datetime.fromisoformat(created).timestamp()
            price_in = book.at(asset_in, t, max_gap_s)
            price_out = book.at(asset_out, t, max_gap_s)
            if price_in is None or price_out is None:
                obs.skipped["no reference price"] += 1
                continue
            obs.add(
                edge_bps(
                    int(amount_in),
                    price_in / 10 ** decimals[asset_in],
                    int(amount_out),
                    price_out / 10 ** decimals[asset_out],
                ),
                won,
                float(w),
            )
    except sqlite3.Error as exc:
        hint = ""
        if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY"):
            hint = " (a running bot holds its store: calibrate on a copy, solver store backup)"
        raise ConfigError(f"cannot read the store {db}: {exc}{hint}") from None
    finally:
        conn.close()
    return obs


def observations_from_replay(
    events: Iterable[StreamEvent],
    header: Header,
    config: BotConfig,
    settings: BacktestSettings,
) -> Observations:
    """Replay with the ``competitor`` model and record each answer's edge and whether it beat
    the recorded competitor: the competition alone.

    An answer the taker refused (``taker_limit``) is left out, not counted lost: it says nothing
    about the race, and the ``logistic`` model applies the taker again before the curve
    (won = taker accepts × beats the competitor), so counting it here would count it twice
    (issue 25: −16.5 % of fills at 40 bps, intervals that missed the truth). Answers without an
    observed competitor are left out too: their outcome would be a model's, not the record's.
    """
    from backtest.engine import Replay  # the replay is heavy; the fit alone does not need it

    obs = Observations(fitted="competition")
    unobserved = settings.fill.unobserved.model_copy(update={"mode": "exclude"})
    fill = settings.fill.model_copy(update={"model": "competitor", "unobserved": unobserved})
    competitor = settings.model_copy(update={"fill": fill})

    def judged(edge: float, lost: str | None, observed: bool) -> None:
        if not observed:
            obs.skipped["no observed competitor"] += 1
        elif lost == LOST_TAKER:
            obs.skipped["refused by the taker"] += 1
        else:
            obs.add(edge, lost is None)

    Replay(config, competitor, observe=judged).run(events, header)
    return obs


def write_fit(path: str | Path, fit: LogisticFit, source: str, fitted: str = "competition") -> Path:
    """Write the fit as a ``--backtest-config`` file: JSON for ``.json``, else YAML (with the
    intervals as comments). A fit in which a better price wins less is never written."""
    if not fit.b > 0:
        raise CalibrationRefused(
            f"not writing a fit with b = {fit.b:.4g}: a better price wins less"
        )
    target = Path(path)
    document = fit.settings()
    document["fill"]["fitted"] = fitted
    if target.suffix.lower() == ".json":
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    else:
        where = " ".join(source.split())
        intervals = ""
        if math.isfinite(fit.se_a) and math.isfinite(fit.se_b):
            (a_lo, a_hi), (b_lo, b_hi) = fit.a_interval(), fit.b_interval()
            intervals = (
                f"# 95 % intervals: a {a_lo:.4g} .. {a_hi:.4g}, b {b_lo:.4g} .. {b_hi:.4g}; "
                f"50 % win at {fit.edge_at(0.5):.2f} bps of edge.\n"
            )
        sample = ""
        if fit.weight is not None:
            sample = f" (lost quotes sampled: they stand for {fit.weight:.0f} quotes, weighed)"
        text = (
            f"# Fitted by solver backtest calibrate from {where}: {fit.n} quotes, {fit.won} "
            f"won{sample}; log-likelihood {fit.log_likelihood:.3f}, converged: "
            f"{fit.converged}.\n"
            + intervals
            + "# P(win) = 1 / (1 + exp(-(a + b * edge_bps))); use with --backtest-config.\n"
            + _FITTED[fitted]
            + yaml.safe_dump(document, sort_keys=True)
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}") from None
    return target


_FITTED = {
    "competition": "# fitted: competition - the race alone; the replay applies the taker first.\n",
    "joint": "# fitted: joint - taker and race together (a store cannot tell them apart); the "
    "replay does not apply the taker again.\n",
}


def _sig(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: what a reader needs, not float noise."""
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def calibration_summary(calibration: Calibration) -> dict[str, object]:
    """The readable report of ``solver backtest calibrate`` (JSON-ready; docs/backtest.md)."""
    x, y, w = calibration.edges, calibration.won, calibration.weights
    wins = int(y.sum())
    summary: dict[str, object] = {
        "model": "P(win) = 1 / (1 + exp(-(a + b * edge_bps)))",
        "quotes": int(x.size),
        "won": wins,
        "lost": int(x.size) - wins,
        "edge_bps": calibration.edge_summary(),
    }
    if w is not None:  # a sample of the lost quotes, weighed: what they stand for, and the rows
        summary |= {
            "quotes": round(float(w.sum())),
            "won": round(float(w[y].sum())),
            "lost": round(float(w[~y].sum())),
            "rows": {"quotes": int(x.size), "won": wins, "lost": int(x.size) - wins},
            "sampled": "lost quotes are a sample: each row weighs 1 / the sample rate "
            "(storage.lost_quote_sample_rate); the fit, buckets and edges are weighted",
        }
    fit = calibration.fit
    if fit is not None and calibration.ok:
        a_lo, a_hi = fit.a_interval()
        b_lo, b_hi = fit.b_interval()
        summary |= {
            "a": _sig(fit.a),
            "a_95": [_sig(a_lo), _sig(a_hi)],
            "b": _sig(fit.b),
            "b_95": [_sig(b_lo), _sig(b_hi)],
            "edge_bps_at_50pct_win": round(fit.edge_at(0.5), 2),
            "win_probability": [
                {
                    "edge_bps": round(float(e), 2),
                    "fitted": round(fit.probability(float(e)), 4),
                    "fitted_95": [round(p, 4) for p in fit.probability_interval(float(e))],
                }
                for e in quantiles(x, [0.05, 0.5, 0.95], w)
            ],
            "log_likelihood": round(fit.log_likelihood, 3),
            "iterations": fit.iterations,
            "converged": fit.converged,
        }
    summary["buckets"] = [b.as_dict() for b in calibration.buckets]
    summary["warnings"] = list(calibration.warnings)
    if calibration.refusals:
        summary["refused"] = list(calibration.refusals)
    return summary
