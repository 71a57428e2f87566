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
- **Weights**: observations may stand for several quotes each (a store keeps a sample of its
  lost quotes, each weighing 1 / the sample rate: issue 29). The fit then maximises the
  weighted likelihood, which is unbiased for the whole population, and its covariance is the
  sandwich (robust) estimator ``I⁻¹ (Σ w² (y - p)² x xᵀ) I⁻¹``: the Fisher information of the
  weighted likelihood would count each sampled row as many quotes seen, and the intervals
  would be too narrow by about the square root of the weight.
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

from backtest.calibration.buckets import Z95, Bucket, edge_buckets, misfits, quantiles, wilson
from solver.errors import ConfigError

__all__ = [
    "Z95",
    "Bucket",
    "Calibration",
    "CalibrationRefused",
    "Criteria",
    "LogisticFit",
    "calibrate",
    "edge_buckets",
    "fit_logistic",
    "wilson",
]


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
    weight: float | None = None
    """The quotes the ``n`` observations stand for (None: unweighted, one each)."""

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
    weights: Sequence[float] | np.ndarray | None = None,
    ridge: float = 1e-6,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> LogisticFit:
    """Maximum-likelihood ``(a, b)`` with their covariance; needs won and lost observations.

    This is the bare fit: it does not judge whether the data identify the model (see
    :func:`calibrate`, which every user-facing path goes through). ``weights``: how many
    quotes each observation stands for (module doc, "Weights"); ``n`` and ``won`` count
    observations.
    """
    x = np.asarray(edges, dtype=np.float64)
    y = np.asarray(won, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("edges and outcomes must be two sequences of the same length")
    w = np.ones(x.size) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != x.shape or not np.all(np.isfinite(w)) or not np.all(w > 0):
        raise ValueError("weights must be positive, one per observation")
    weighted = bool(np.any(w != 1.0))
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
        return float(np.sum(w * (y * z - np.logaddexp(0.0, z))) - 0.5 * ridge * b[1] ** 2)

    current = loglik(beta)
    converged = False
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        p = 1.0 / (1.0 + np.exp(-(design @ beta)))
        gradient = design.T @ (w * (y - p)) - penalty @ beta
        hessian = (design.T * (w * p * (1.0 - p))) @ design + penalty
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
    information = (design.T * (w * p * (1.0 - p))) @ design
    try:
        cov_std = np.linalg.inv(information)
    except np.linalg.LinAlgError:
        cov_std = np.full((2, 2), math.inf)
    if weighted and np.all(np.isfinite(cov_std)):  # the sandwich (module doc, "Weights")
        meat = (design.T * (w * w * (y - p) ** 2)) @ design
        cov_std = cov_std @ meat @ cov_std
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
        float(w.sum()) if weighted else None,
    )


# ------------------------------------------------------------------------------ checks


@dataclass(frozen=True)
class Criteria:
    """When the observations are too poor to identify the model (``calibrate`` refuses)."""

    min_wins: int = 20
    min_losses: int = 20
    min_edge_sd_bps: float = 1.0
    """Below this spread of edges the slope is noise (a constant-spread strategy)."""


@dataclass
class Calibration:
    """A fit with everything needed to judge it: refusals, warnings, buckets, the data."""

    edges: np.ndarray
    won: np.ndarray
    fit: LogisticFit | None = None
    weights: np.ndarray | None = None
    """How many quotes each observation stands for (None: one each)."""
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
        x, w = self.edges, self.weights
        if x.size == 0:
            return {}
        q = quantiles(x, [0.0, 0.05, 0.5, 0.95, 1.0], w)
        keys = ("min", "p5", "median", "p95", "max")
        sd = float(x.std()) if w is None else math.sqrt(float(np.cov(x, aweights=w, ddof=0)))
        return {k: round(float(v), 2) for k, v in zip(keys, q, strict=True)} | {"sd": round(sd, 3)}


def calibrate(
    edges: Sequence[float] | np.ndarray,
    won: Sequence[bool] | np.ndarray,
    criteria: Criteria | None = None,
    weights: Sequence[float] | np.ndarray | None = None,
) -> Calibration:
    """Fit and judge. Never raises on poor data: :meth:`Calibration.require` does.
    ``weights``: as :func:`fit_logistic`'s; the checks count observations (what identifies the
    model is the rows there are, not the quotes they stand for)."""
    criteria = criteria or Criteria()
    x = np.asarray(edges, dtype=np.float64)
    y = np.asarray(won, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("edges and outcomes must be two sequences of the same length")
    finite = np.isfinite(x)
    x, y = x[finite], y[finite]
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)[finite]
        if np.all(w == 1.0):
            w = None
    result = Calibration(x, y, weights=w)
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
    result.buckets = edge_buckets(x, y.astype(np.float64), result.fit, weights=w)
    if result.fit is not None:
        result.warnings += misfits(x, y, result.fit, result.buckets, w)
    return result


def _fit_and_judge(result: Calibration) -> None:
    fit = fit_logistic(result.edges, result.won, weights=result.weights)
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
