"""Fit the ``logistic`` fill model: ``P(win) = 1 / (1 + exp(-(a + b * edge_bps)))``.

``edge_bps`` is what the user gains against the reference price (see :func:`backtest.fills.
edge_bps`), so ``b > 0`` means better prices win more often. The fit is maximum likelihood by
Newton's method (IRLS) on the standardised edge, with a vanishing ridge so perfectly separated
data still gives finite numbers; ``(a, b)`` are mapped back to raw basis points.

Observations come from:

- **a store** (``solver backtest calibrate --db STORE``): the bot's own signed quotes. States
  WON, SETTLING, SETTLED and FAILED count as won (the user took the quote; FAILED only failed
  later, on chain), LOST as lost; REJECTED (never seen by users) and OPEN (undecided) are left
  out. The reference prices at quote time are taken from the store's fills (the prices recorded
  with each settlement) and from ``price`` events of an optional stream (``--prices``): the last
  observation at or before the quote, else the first after it, within ``max_gap_s``. Quotes
  without both prices, or with an asset of unknown decimals, are skipped and counted.
- **a stream replay** (``solver backtest calibrate STREAM --config FILE``): the stream's requests
  through the configured pipeline, each answer judged by the ``competitor`` model against the
  stream's recorded competing answers; the logistic then smooths that competition into a
  probability of the edge.
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from backtest.engine import Replay
from backtest.events import Header, PriceEvent, StreamEvent
from backtest.fills import edge_bps
from backtest.settings import BacktestSettings, FillSpec
from solver.config import BotConfig
from solver.errors import ConfigError

WON_STATES = frozenset({"WON", "SETTLING", "SETTLED", "FAILED"})
LOST_STATES = frozenset({"LOST"})


@dataclass(frozen=True)
class LogisticFit:
    a: float
    b: float
    n: int
    won: int
    log_likelihood: float
    iterations: int
    converged: bool

    def probability(self, edge: float) -> float:
        z = self.a + self.b * edge
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def settings(self) -> dict[str, Any]:
        """A ``--backtest-config`` document selecting this model."""
        return {"fill": {"model": "logistic", "a": self.a, "b": self.b}}


def fit_logistic(
    edges: Sequence[float] | np.ndarray,
    won: Sequence[bool] | np.ndarray,
    *,
    ridge: float = 1e-6,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> LogisticFit:
    """Maximum-likelihood ``(a, b)``; needs both won and lost observations."""
    x = np.asarray(edges, dtype=np.float64)
    y = np.asarray(won, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("edges and outcomes must be two sequences of the same length")
    n, wins = int(x.size), int(y.sum())
    if n < 2 or wins in (0, n):
        raise ConfigError(
            f"cannot fit a win probability from {n} quotes of which {wins} won: "
            "both won and lost quotes are needed"
        )
    if not np.all(np.isfinite(x)):
        raise ValueError("edges must be finite")
    mean = float(x.mean())
    scale = float(x.std()) or 1.0
    design = np.column_stack((np.ones(n), (x - mean) / scale))
    penalty = np.diag([0.0, ridge])
    beta = np.zeros(2)

    def loglik(b: np.ndarray) -> float:
        z = design @ b
        # log(1 + e^z) computed stably; the ridge is part of the objective.
        return float(np.sum(y * z - np.logaddexp(0.0, z)) - 0.5 * ridge * b[1] ** 2)

    current = loglik(beta)
    converged = False
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        p = 1.0 / (1.0 + np.exp(-(design @ beta)))
        gradient = design.T @ (y - p) - penalty @ beta
        hessian = (design.T * (p * (1.0 - p))) @ design + penalty
        step = np.linalg.solve(hessian + 1e-12 * np.eye(2), gradient)
        t = 1.0
        while True:  # step halving keeps every iteration an improvement
            candidate = beta + t * step
            value = loglik(candidate)
            if value >= current - 1e-12 or t < 1e-8:
                break
            t /= 2
        beta, previous, current = candidate, current, value
        if float(np.max(np.abs(t * step))) < tol or abs(current - previous) < tol * (
            1 + abs(current)
        ):
            converged = True
            break
    alpha, slope = float(beta[0]), float(beta[1])
    b = slope / scale
    a = alpha - b * mean
    return LogisticFit(a, b, n, wins, current, iterations, converged)


# ------------------------------------------------------------------------------ observations


@dataclass
class Observations:
    edges: list[float] = field(default_factory=list)
    won: list[bool] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, edge: float, won: bool) -> None:
        self.edges.append(edge)
        self.won.append(won)

    def fit(self) -> LogisticFit:
        return fit_logistic(self.edges, self.won)


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
        rows = conn.execute(
            "SELECT created_at, asset_in, asset_out, amount_in, amount_out, state FROM quotes "
            "ORDER BY created_at, quote_id"
        )
        for created, asset_in, asset_out, amount_in, amount_out, state in rows:
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
            )
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read the store {db}: {exc}") from None
    finally:
        conn.close()
    return obs


def observations_from_replay(
    events: Iterable[StreamEvent],
    header: Header,
    config: BotConfig,
    settings: BacktestSettings,
) -> Observations:
    """Replay with the ``competitor`` model and record each answer's edge and verdict."""
    obs = Observations()
    competitor = settings.model_copy(update={"fill": FillSpec(model="competitor")})
    Replay(config, competitor, observe=obs.add).run(events, header)
    return obs


def write_fit(path: str | Path, fit: LogisticFit, source: str) -> Path:
    """Write the fit as a ``--backtest-config`` file: JSON for ``.json``, else YAML."""
    target = Path(path)
    document = fit.settings()
    if target.suffix.lower() == ".json":
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    else:
        where = " ".join(source.split())
        text = (
            f"# Fitted by solver backtest calibrate from {where}: {fit.n} quotes, {fit.won} "
            f"won; log-likelihood {fit.log_likelihood:.3f}, converged: {fit.converged}.\n"
            "# P(win) = 1 / (1 + exp(-(a + b * edge_bps))); use with --backtest-config.\n"
            + yaml.safe_dump(document, sort_keys=True)
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}") from None
    return target
