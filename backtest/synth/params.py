"""The knobs of :mod:`backtest.synth.generate` and what a run produced (split out to keep modules
small).

Every field has its default here, and ``docs/backtest.md`` "Synthetic streams" and "Informed
flow" document each one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class SynthParams:
    """Every knob of the generator, with its default. See the module docstring."""

    rate_per_s: float = 5.0
    """Long-run average of quote requests per second (calm and burst together)."""
    burst_factor: float = 6.0
    """Arrival rate in a burst, as a multiple of the calm rate (1: no bursts)."""
    calm_mean_s: float = 300.0
    burst_mean_s: float = 20.0
    size_usd_median: float = 50.0
    size_usd_sigma: float = 1.0
    exact_out_share: float = 0.3
    min_deadline_ms: int = 60_000
    price_interval_s: float = 1.0
    competitor_share: float = 0.85
    """Share of requests with a ``competitor`` event (the rest: no competing answer known)."""
    competitor_edge_bps: float = 8.0
    """Mean edge of the best competitor against the reference price at the median size."""
    competitor_edge_sd_bps: float = 6.0
    competitor_edge_bps_per_decade: float = 2.0
    """Extra edge per tenfold size above the median (less below it)."""
    competitor_edge_dist: Literal["normal", "logistic"] = "normal"
    """Shape of the competitor's edge (same mean and sd). ``logistic`` makes the chance that an
    answer at a given edge beats the competitor exactly the logistic fill model, with
    ``b = pi / (sd * sqrt(3))`` and ``a = b * mean`` (what calibration must recover)."""
    informed_share: float = 0.1
    """Share of requests whose direction follows the reference price ``informed_horizon_s``
    ahead (the user buys what is about to rise): adverse selection for whoever fills them."""
    informed_horizon_s: float = 60.0
    """How far ahead the informed users see (the longest markout horizon of the replay)."""
    partner_id: str | None = "synth"

    def check(self) -> None:
        """Raise ``ValueError`` naming the first parameter out of range."""
        positive = {
            "rate_per_s": self.rate_per_s,
            "calm_mean_s": self.calm_mean_s,
            "burst_mean_s": self.burst_mean_s,
            "size_usd_median": self.size_usd_median,
            "price_interval_s": self.price_interval_s,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive, got {value}")
        if not (math.isfinite(self.burst_factor) and self.burst_factor >= 1):
            raise ValueError("burst_factor must be >= 1")
        if not 0 <= self.size_usd_sigma <= 5:
            raise ValueError("size_usd_sigma must be in 0..5")
        for name in ("exact_out_share", "competitor_share", "informed_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in 0..1")
        if not 0 <= self.min_deadline_ms <= 86_400_000:
            raise ValueError("min_deadline_ms must be in 0..86400000")
        if not (math.isfinite(self.competitor_edge_sd_bps) and self.competitor_edge_sd_bps >= 0):
            raise ValueError("competitor_edge_sd_bps must be >= 0")
        for name in ("competitor_edge_bps", "competitor_edge_bps_per_decade"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        if self.competitor_edge_dist not in ("normal", "logistic"):
            raise ValueError("competitor_edge_dist must be normal or logistic")
        if not (math.isfinite(self.informed_horizon_s) and 0 < self.informed_horizon_s <= 86_400):
            raise ValueError("informed_horizon_s must be in (0, 86400]")

    @property
    def calm_rate(self) -> float:
        """The calm-state rate that makes the long-run average ``rate_per_s``."""
        calm_share = self.calm_mean_s / (self.calm_mean_s + self.burst_mean_s)
        return self.rate_per_s / (calm_share + self.burst_factor * (1 - calm_share))


@dataclass
class SynthSummary:
    """What one run produced."""

    path: Path | None = None
    duration_s: float = 0.0
    requests: int = 0
    exact_out: int = 0
    prices: int = 0
    competitors: int = 0
    bursts: int = 0
    burst_time_s: float = 0.0
    informed: int = 0
    requests_by_pair: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    @property
    def events(self) -> int:
        return self.requests + self.prices + self.competitors

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path) if self.path else None,
            "duration_s": self.duration_s,
            "events": self.events,
            "requests": self.requests,
            "exact_out": self.exact_out,
            "prices": self.prices,
            "competitors": self.competitors,
            "bursts": self.bursts,
            "burst_time_s": round(self.burst_time_s, 3),
            "informed": self.informed,
            "requests_by_pair": dict(self.requests_by_pair),
            "bytes": self.bytes,
        }
