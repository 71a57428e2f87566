"""The logistic win model, fitted so that its numbers can be trusted (docs/backtest.md
"Calibration").

``P(win) = 1 / (1 + exp(-(a + b * edge_bps)))``, ``edge_bps`` the user's gain against the
reference price (:func:`backtest.fills.edge_bps`), so ``b > 0`` means a better price wins more.

- **Fit**: maximum likelihood by Newton's method (IRLS) on the standardised edge, mapped back to
  raw basis points. A vanishing ridge keeps every iteration finite; it changes no estimate that
  passes the checks below.
- **Intervals**: the covariance of ``(a, b)`` is the inverse of the Fisher information at the
  estimate (``Xᵀ W X``), so a 95 % interval is ``estimate ± 1.96 se`` (Wald). The curve's band
  at an edge comes from the variance of ``a + b * edge`` (delta method on the log-odds).
- **Checks** (:func:`calibrate`): a stream whose answers all had about the same edge (a constant
  spread), or with too few wins or losses, or in which every win had a better edge than every
  loss, cannot identify ``b``; Newton still "converges" on such data to numbers like
  ``a = -473, b = -18.9`` (issue 12). Those are refused, as is any fit with ``b <= 0`` (a better
  price never wins less). Weak slopes (the interval of ``b`` reaches 0) and edge buckets far
  from the curve are warnings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solver.errors import ConfigError

Z95 = 1.959963984540054
"""The two-sided 95 % quantile of the standard normal."""


class CalibrationRefused(ConfigError):
    """The observations cannot identify the model; the message says why (exit code 2)."""


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


@dataclass(frozen=True)
class LogisticFit:
    a: float
    b: float
    n: int
    won: int
    log_likelihood: float
    iterations: int
    converged: bool
    var_a: float = math.nan
    var_b: float = math.nan
    cov_ab: float = math.nan

    @property
    def se_a(self) -> float:
        return math.sqrt(self.var_a) if self.var_a >= 0 else math.nan

    @property
    def se_b(self) -> float:
        return math.sqrt(self.var_b) if self.var_b >= 0 else math.nan

    def a_interval(self) -> tuple[float, float]:
        """95 % interval of ``a`` (log-odds of a win at zero edge)."""
        return (self.a - Z95 * self.se_a, self.a + Z95 * self.se_a)

    def b_interval(self) -> tuple[float, float]:
        """95 % interval of ``b`` (log-odds per bps of edge)."""
        return (self.b - Z95 * self.se_b, self.b + Z95 * self.se_b)

    def probability(self, edge: float) -> float:
        return _sigmoid(self.a + self.b * edge)

    def probability_interval(self, edge: float) -> tuple[float, float]:
        """95 % band of the curve at ``edge`` (delta method on the log-odds)."""
        z = self.a + self.b * edge
        var = self.var_a + 2 * edge * self.cov_ab + edge * edge * self.var_b
        half = Z95 * math.sqrt(max(var, 0.0))
        return (_sigmoid(z - half), _sigmoid(z + half))

    def edge_at(self, probability: float) -> float:
        """The edge, in bps, at which the curve wins with ``probability``."""
        return (math.log(probability / (1 - probability)) - self.a) / self.b

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
    """Maximum-likelihood ``(a, b)`` with their covariance; needs won and lost observations.

    This is the bare fit: it does not judge whether the data identify the model (see
    :func:`calibrate`, which every user-facing path goes through).
    """
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
    # Fisher information at the estimate (no ridge), inverted, mapped to raw bps:
    # (a, b) = J (alpha, slope) with J = [[1, -mean/scale], [0, 1/scale]].
    p = 1.0 / (1.0 + np.exp(-(design @ beta)))
    information = (design.T * (p * (1.0 - p))) @ design
    try:
        cov_std = np.linalg.inv(information)
    except np.linalg.LinAlgError:
        cov_std = np.full((2, 2), math.inf)
    jacobian = np.array([[1.0, -mean / scale], [0.0, 1.0 / scale]])
    cov = jacobian @ cov_std @ jacobian.T
    return LogisticFit(
        a,
        b,
        n,
        wins,
        current,
        iterations,
        converged,
        float(cov[0, 0]),
        float(cov[1, 1]),
        float(cov[0, 1]),
    )


# ------------------------------------------------------------------------------ checks


@dataclass(frozen=True)
class Criteria:
    """When the observations are too poor to identify the model (``calibrate`` refuses)."""

    min_wins: int = 20
    min_losses: int = 20
    min_edge_sd_bps: float = 1.0
    """Below this spread of edges the slope is noise (a constant-spread strategy)."""


@dataclass(frozen=True)
class Bucket:
    """Observations whose edge falls in ``[lo, hi]``: the empirical win rate against the curve."""

    lo: float
    hi: float
    n: int
    wins: int
    mean_edge: float
    rate_interval: tuple[float, float]
    """Wilson 95 % interval of the win rate."""
    fitted: float | None = None
    """Mean fitted probability of the bucket's observations (None without a fit)."""

    @property
    def rate(self) -> float:
        return self.wins / self.n

    def as_dict(self) -> dict[str, Any]:
        return {
            "edge_bps": [round(self.lo, 2), round(self.hi, 2)],
            "quotes": self.n,
            "won": self.wins,
            "win_rate": round(self.rate, 4),
            "fitted": None if self.fitted is None else round(self.fitted, 4),
        }


def wilson(wins: int, n: int) -> tuple[float, float]:
    """The Wilson 95 % interval of a proportion (sane at 0 and n, unlike Wald)."""
    if n == 0:
        return (0.0, 1.0)
    p, z2 = wins / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def edge_buckets(
    x: np.ndarray, y: np.ndarray, fit: LogisticFit | None, count: int | None = None
) -> list[Bucket]:
    """Equal-count buckets of edge (ties kept together), about 50+ observations each."""
    n = int(x.size)
    if n == 0:
        return []
    count = count or max(1, min(12, n // 50))
    cuts = np.unique(np.quantile(x, np.linspace(0.0, 1.0, count + 1)))
    index = np.clip(np.searchsorted(cuts, x, side="right") - 1, 0, max(len(cuts) - 2, 0))
    buckets = []
    for i in range(max(len(cuts) - 1, 1)):
        members = index == i
        m = int(members.sum())
        if m == 0:
            continue
        xs, wins = x[members], int(y[members].sum())
        fitted = None
        if fit is not None:
            fitted = float(np.mean(1.0 / (1.0 + np.exp(-(fit.a + fit.b * xs)))))
        bucket = Bucket(
            float(xs.min()), float(xs.max()), m, wins, float(xs.mean()), wilson(wins, m), fitted
        )
        buckets.append(bucket)
    return buckets


@dataclass
class Calibration:
    """A fit with everything needed to judge it: refusals, warnings, buckets, the data."""

    edges: np.ndarray
    won: np.ndarray
    fit: LogisticFit | None = None
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    buckets: list[Bucket] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.fit is not None and not self.refusals

    def require(self) -> LogisticFit:
        """The fit, or :class:`CalibrationRefused` listing every reason."""
        if self.fit is None or self.refusals:
            reasons = "\n".join(f"  - {r}" for r in self.refusals)
            raise CalibrationRefused(
                f"refusing to calibrate: these {self.edges.size} quotes cannot identify "
                f"P(win) = 1 / (1 + exp(-(a + b * edge_bps))):\n{reasons}"
            )
        return self.fit

    def edge_summary(self) -> dict[str, float]:
        x = self.edges
        if x.size == 0:
            return {}
        q = np.quantile(x, [0.0, 0.05, 0.5, 0.95, 1.0])
        keys = ("min", "p5", "median", "p95", "max")
        return {k: round(float(v), 2) for k, v in zip(keys, q, strict=True)} | {
            "sd": round(float(x.std()), 3)
        }


def calibrate(
    edges: Sequence[float] | np.ndarray,
    won: Sequence[bool] | np.ndarray,
    criteria: Criteria | None = None,
) -> Calibration:
    """Fit and judge. Never raises on poor data: :meth:`Calibration.require` does."""
    criteria = criteria or Criteria()
    x = np.asarray(edges, dtype=np.float64)
    y = np.asarray(won, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("edges and outcomes must be two sequences of the same length")
    finite = np.isfinite(x)
    x, y = x[finite], y[finite]
    result = Calibration(x, y)
    refuse = result.refusals.append
    wins, losses = int(y.sum()), int((~y).sum())
    if wins < criteria.min_wins:
        refuse(f"{wins} won quotes; at least {criteria.min_wins} are needed (--min-wins)")
    if losses < criteria.min_losses:
        refuse(f"{losses} lost quotes; at least {criteria.min_losses} are needed (--min-losses)")
    sd = float(x.std()) if x.size else 0.0
    if sd < criteria.min_edge_sd_bps:
        refuse(
            f"the edge hardly varies (sd {sd:.3g} bps < {criteria.min_edge_sd_bps:g}; "
            "a constant spread?): the stream cannot say how the price changes the chance to "
            "win. Replay with a strategy whose spread varies, or calibrate from more varied "
            "quotes (--min-edge-sd-bps)"
        )
    if wins and losses:
        lost_max, won_min = float(x[~y].max()), float(x[y].min())
        if lost_max <= won_min:
            refuse(
                f"every won quote gave the user at least {won_min:.2f} bps and every lost one at "
                f"most {lost_max:.2f}: the data are separated, the slope is unbounded"
            )
        elif float(x[y].max()) <= float(x[~y].min()):
            refuse("every won quote gave the user less than every lost one")
    if not result.refusals:
        _fit_and_judge(result)
    result.buckets = edge_buckets(x, y.astype(np.float64), result.fit)
    if result.fit is not None:
        _check_buckets(result)
    return result


def _fit_and_judge(result: Calibration) -> None:
    fit = fit_logistic(result.edges, result.won)
    refuse, warn = result.refusals.append, result.warnings.append
    if not fit.converged:
        refuse(f"the fit did not converge in {fit.iterations} iterations")
    if not (math.isfinite(fit.se_a) and math.isfinite(fit.se_b)):
        refuse("the Fisher information is singular: the parameters are not identified")
    if not fit.b > 0:
        lo, hi = fit.b_interval()
        refuse(
            f"the fitted slope b = {fit.b:.4g} (95 % {lo:.3g} .. {hi:.3g}) says a better price "
            "wins less often: competition in these data does not follow the price; not reported"
        )
    elif fit.b_interval()[0] <= 0:
        lo, hi = fit.b_interval()
        warn(
            f"the slope is weakly identified: b = {fit.b:.4g}, 95 % interval {lo:.3g} .. "
            f"{hi:.3g} includes 0 (price may not matter at all in these data)"
        )
    result.fit = fit


def _check_buckets(result: Calibration) -> None:
    """Warn where the curve misses the data by far more than chance (and by 5+ points)."""
    fit = result.fit
    assert fit is not None
    x, y = result.edges, result.won
    for bucket in result.buckets:
        if bucket.n < 30 or bucket.fitted is None:
            continue
        members = (x >= bucket.lo) & (x <= bucket.hi)
        p = 1.0 / (1.0 + np.exp(-(fit.a + fit.b * x[members])))
        expected, var = float(p.sum()), float((p * (1 - p)).sum())
        wins = int(y[members].sum())
        z = (wins - expected) / math.sqrt(var) if var > 0 else math.inf
        if abs(z) > 4 and abs(bucket.rate - bucket.fitted) > 0.05:
            result.warnings.append(
                f"edges {bucket.lo:.2f} .. {bucket.hi:.2f} bps: won {bucket.rate:.1%} of "
                f"{bucket.n}, the curve says {bucket.fitted:.1%}: the logistic shape does not "
                "fit there (see the plot)"
            )
