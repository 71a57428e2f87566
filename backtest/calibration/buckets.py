"""Edge buckets of a calibration: the empirical win rate against the fitted curve, weighted.

Observations may carry weights: a bot's store keeps a sample of its lost quotes, each standing
for 1 / the sample rate of them (``storage.lost_quote_sample_rate``, issue 29). A bucket's win
rate, its mean edge and the curve's mean in it are then weighted sums, and its interval is the
Wilson interval at the sample's effective size (Kish: ``(Σw)² / Σw²``), so a bucket of a few
heavy rows is as uncertain as its rows say, not as the quotes they stand for. Buckets are cut
by rows (equal numbers of observations, ties together): the rows are the information.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

Z95 = 1.959963984540054
"""The two-sided 95 % quantile of the standard normal."""


class Curve(Protocol):
    """The fitted curve's parameters (:class:`~backtest.calibration.logistic_fit.LogisticFit`)."""

    @property
    def a(self) -> float: ...

    @property
    def b(self) -> float: ...


@dataclass(frozen=True)
class Bucket:
    """Observations whose edge falls in ``[lo, hi]``: the empirical win rate against the curve."""

    lo: float
    hi: float
    n: int
    """Rows (observations)."""
    wins: int
    """Rows won."""
    mean_edge: float
    rate_interval: tuple[float, float]
    """Wilson 95 % interval of the win rate."""
    fitted: float | None = None
    """Mean fitted probability of the bucket's observations (None without a fit)."""
    weight: float | None = None
    """The quotes the rows stand for (None: unweighted, one each)."""
    weighted_wins: float | None = None

    @property
    def rate(self) -> float:
        if self.weight is not None and self.weighted_wins is not None:
            return self.weighted_wins / self.weight
        return self.wins / self.n

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "edge_bps": [round(self.lo, 2), round(self.hi, 2)],
            "quotes": self.n if self.weight is None else round(self.weight),
            "won": self.wins if self.weighted_wins is None else round(self.weighted_wins),
            "win_rate": round(self.rate, 4),
            "fitted": None if self.fitted is None else round(self.fitted, 4),
        }
        if self.weight is not None:
            doc["rows"] = self.n
        return doc


def wilson(wins: float, n: float) -> tuple[float, float]:
    """The Wilson 95 % interval of a proportion (sane at 0 and n, unlike Wald); ``n`` may be
    an effective size (weighted data)."""
    if n <= 0:
        return (0.0, 1.0)
    p, z2 = wins / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def edge_buckets(
    x: np.ndarray,
    y: np.ndarray,
    fit: Curve | None,
    count: int | None = None,
    weights: np.ndarray | None = None,
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
        xs, ys, wins = x[members], y[members], int(y[members].sum())
        fitted = None
        if weights is None:
            if fit is not None:
                fitted = float(np.mean(1.0 / (1.0 + np.exp(-(fit.a + fit.b * xs)))))
            bucket = Bucket(
                float(xs.min()), float(xs.max()), m, wins, float(xs.mean()), wilson(wins, m),
                fitted,
            )  # fmt: skip
        else:
            w = weights[members]
            total, won = float(w.sum()), float((w * ys).sum())
            effective = total * total / float((w * w).sum())
            if fit is not None:
                p = 1.0 / (1.0 + np.exp(-(fit.a + fit.b * xs)))
                fitted = float((w * p).sum() / total)
            bucket = Bucket(
                float(xs.min()), float(xs.max()), m, wins, float((w * xs).sum() / total),
                wilson(won / total * effective, effective), fitted, total, won,
            )  # fmt: skip
        buckets.append(bucket)
    return buckets


def misfits(
    x: np.ndarray,
    y: np.ndarray,
    fit: Curve,
    buckets: list[Bucket],
    weights: np.ndarray | None = None,
) -> list[str]:
    """Where the curve misses the data by far more than chance (and by 5+ points): the
    warnings. With weights, the wins and their variance are weighted sums."""
    warnings = []
    for bucket in buckets:
        if bucket.n < 30 or bucket.fitted is None:
            continue
        members = (x >= bucket.lo) & (x <= bucket.hi)
        p = 1.0 / (1.0 + np.exp(-(fit.a + fit.b * x[members])))
        w = np.ones(p.size) if weights is None else weights[members]
        expected, var = float((w * p).sum()), float((w * w * p * (1 - p)).sum())
        wins = float((w * y[members]).sum())
        z = (wins - expected) / math.sqrt(var) if var > 0 else math.inf
        if abs(z) > 4 and abs(bucket.rate - bucket.fitted) > 0.05:
            warnings.append(
                f"edges {bucket.lo:.2f} .. {bucket.hi:.2f} bps: won {bucket.rate:.1%} of "
                f"{bucket.n}, the curve says {bucket.fitted:.1%}: the logistic shape does not "
                "fit there (see the plot)"
            )
    return warnings


def quantiles(x: np.ndarray, qs: list[float], weights: np.ndarray | None = None) -> np.ndarray:
    """Quantiles of ``x``, weighted (the inverse of the weighted distribution function, each
    row's weight centred on it) when ``weights`` is given."""
    if weights is None:
        return np.asarray(np.quantile(x, qs), dtype=np.float64)
    order = np.argsort(x, kind="stable")
    xs, w = x[order], weights[order]
    cumulative = (np.cumsum(w) - 0.5 * w) / float(w.sum())
    return np.asarray(np.interp(qs, cumulative, xs), dtype=np.float64)
