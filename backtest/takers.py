"""The taker model: the most a simulated user lets an answer charge them (docs/backtest.md).

A fill model says whether our answer beats the competition; it cannot say whether the user takes
*any* answer at that price. Without a limit, a request nobody else answered is "won" at any
price, and a replay reports fills that charge the user 5-76 % over the reference, or all of
their input for nothing from an AMM whose inventory has drained (issue 12). Real users ask for a
quote with a price in mind; the sandbox takers accept when what they receive is worth at least
``1 - tolerance_bps / 1e4`` of what they give (:mod:`sandbox.takers`). This is the same rule,
with a limit per request:

- ``edge_bps`` is the user's gain against the reference price (:func:`backtest.fills.edge_bps`,
  negative when we charge), so the user accepts when ``edge_bps >= -limit_bps``.
- ``fixed``: ``limit_bps = tolerance_bps`` for everyone (the sandbox's rule, default 60 bps).
- ``lognormal`` (the default): ``limit_bps = min(max_bps, tolerance_bps * exp(sigma * z))``,
  ``z ~ N(0, 1)``: users differ; the median is ``tolerance_bps`` (60), ``sigma`` 0.5 puts 90 %
  of users between 26 and 137 bps, and nobody accepts worse than ``max_bps`` (500).
- An edge that is not a number (no reference price) is refused: the user cannot value it.

Why the draw is a hash of ``(seed, quote_id)`` and not the next number of a generator: the
limit belongs to the *request*, so it is the same whatever we quoted, whichever earlier
requests were skipped, and in whatever order the replay asks. Two configurations compared on
one stream face exactly the same users (common random numbers), and calibration replays and
logistic replays of the same stream agree on which user refused.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable
from statistics import NormalDist

from backtest.settings import TakerSpec

_TWO_64 = float(2**64)
_exp, _from_bytes = math.exp, int.from_bytes  # bound once: read per answer
_NORMAL = NormalDist()


def _standard_inv_cdf(p: float, mu: float, sigma: float) -> float:
    return NormalDist(mu, sigma).inv_cdf(p)


INV_CDF: Callable[[float, float, float], float] = getattr(
    statistics, "_normal_dist_inv_cdf", _standard_inv_cdf
)
"""``NormalDist(mu, sigma).inv_cdf(p)`` without its checks (``0 < p < 1`` holds for a draw
from a hash, ``sigma`` is 1): the function it calls, C in CPython; the same value."""


class TakerModel:
    """Per-request price limits of simulated users. Pure: no state changes between calls."""

    __slots__ = ("_fixed", "_hash", "_max", "_sigma", "_tolerance", "seed", "spec")

    def __init__(self, spec: TakerSpec | None = None, seed: int = 0) -> None:
        self.spec = spec if spec is not None else TakerSpec()
        self.seed = seed
        # The key's hash state, copied per request: a third cheaper than hashing key + id anew.
        self._hash = hashlib.blake2b(f"taker:{seed}:".encode(), digest_size=8)
        s = self.spec
        self._max = s.max_bps
        self._tolerance, self._sigma = s.tolerance_bps, s.sigma
        self._fixed: float | None = None
        if s.kind == "fixed" or s.sigma == 0:
            self._fixed = min(s.tolerance_bps, s.max_bps)

    def limit_bps(self, quote_id: str) -> float:
        """The most, in bps of what they pay, that the user of ``quote_id`` gives up."""
        if self._fixed is not None:
            return self._fixed
        hasher = self._hash.copy()
        hasher.update(quote_id.encode())
        u = (int.from_bytes(hasher.digest(), "little") + 0.5) / _TWO_64  # strictly inside (0, 1)
        return min(self._max, self._tolerance * math.exp(self._sigma * INV_CDF(u, 0.0, 1.0)))

    def accepts(self, quote_id: str, edge_bps: float) -> bool:
        """Whether the user takes an answer giving them ``edge_bps`` against the reference."""
        # A limit is never negative nor above max_bps: no draw is needed for an answer that
        # costs the user nothing, or more than anyone accepts. NaN compares False: an answer
        # the user cannot value is refused.
        if edge_bps >= 0.0:
            return True
        if edge_bps < -self._max:
            return False
        # limit_bps, inline (once per answer that charges the user): the same operations
        if self._fixed is not None:
            return edge_bps >= -self._fixed
        hasher = self._hash.copy()
        hasher.update(quote_id.encode())
        u = (_from_bytes(hasher.digest(), "little") + 0.5) / _TWO_64
        limit = self._tolerance * _exp(self._sigma * INV_CDF(u, 0.0, 1.0))
        # min(max_bps, limit) without the builtin's call: the same value (max_bps on a tie or
        # a NaN, as min keeps its first argument unless the second is smaller)
        return edge_bps >= -(limit if limit < self._max else self._max)
