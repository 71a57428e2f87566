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
from statistics import NormalDist

from backtest.settings import TakerSpec

_TWO_64 = float(2**64)
_NORMAL = NormalDist()


class TakerModel:
    """Per-request price limits of simulated users. Pure: no state changes between calls."""

    __slots__ = ("_fixed", "_key", "seed", "spec")

    def __init__(self, spec: TakerSpec | None = None, seed: int = 0) -> None:
        self.spec = spec if spec is not None else TakerSpec()
        self.seed = seed
        self._key = f"taker:{seed}:".encode()
        s = self.spec
        self._fixed: float | None = None
        if s.kind == "fixed" or s.sigma == 0:
            self._fixed = min(s.tolerance_bps, s.max_bps)

    def limit_bps(self, quote_id: str) -> float:
        """The most, in bps of what they pay, that the user of ``quote_id`` gives up."""
        if self._fixed is not None:
            return self._fixed
        digest = hashlib.blake2b(self._key + quote_id.encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "little") + 0.5) / _TWO_64  # strictly inside (0, 1)
        s = self.spec
        return min(s.max_bps, s.tolerance_bps * math.exp(s.sigma * _NORMAL.inv_cdf(u)))

    def accepts(self, quote_id: str, edge_bps: float) -> bool:
        """Whether the user takes an answer giving them ``edge_bps`` against the reference."""
        # NaN compares False: an answer the user cannot value is refused.
        return edge_bps >= -self.limit_bps(quote_id)
