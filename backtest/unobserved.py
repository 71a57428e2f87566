"""Competition that was not observed is modelled, never assumed absent (issue 25).

A recording asks the bus for the best competing answer on a share of requests only (10 % by
default, none without ``--competitors``); a synthetic stream writes one for 85 %. A request
without a ``competitor`` event is not a request nobody else answered: it is one whose
competition nobody looked at. Reading it as "no competitor" wins it at any price the taker
accepts, and the replay's win rate then measures the recorder's probe share, not the strategy:
the same flow replayed at 85 %, 10 % and 0 % coverage won 14.9 %, 86 % and 96 % of its quotes.

So the ``competitor`` fill model races such a request against a competitor **drawn from the
ones observed**:

- **What is observed**: the edge of each recorded best competing answer against the reference,
  in bps given to the user, as the fill model sees it (``edge_bps`` of our answer and the ratio
  of the two amounts: no prices needed). Only answers the fill model judged are observed, so the
  model describes the competition on the requests we quote.
- **Buckets**: per pair (both directions), per size decade of the notional in USD, per quarter
  of the day (UTC); a draw uses the finest bucket holding ``min_observed`` observations, else
  the pair and size, else the pair, else all pairs (which needs only one), else the ``prior``.
  Each bucket keeps the ``window`` most recent observations: an empirical distribution that
  follows the market, and fitted only on the past (a replay never looks ahead).
- **The draw** is a quantile taken from a hash of ``(seed, quote_id)``, like the taker's limit
  (:mod:`backtest.takers`): the competitor belongs to the request, so two configurations
  compared on one stream race the same competitors.
- **Nothing to draw from** (no observation yet and no prior): the request is lost
  (``unobserved_no_model``). A stream that says no competition was sought
  (``competitor_share: 0`` in its header: the recorder without ``--competitors``) is refused
  before the replay unless the settings give a prior (:func:`require_competition`).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, deque
from operator import attrgetter
from statistics import NormalDist

from backtest.settings import RaceSpec, UnobservedSpec
from backtest.stream.events import Header
from solver.core.lifecycle import Quote
from solver.errors import ConfigError

_TWO_64 = float(2**64)
_NORMAL = NormalDist()
_from_bytes, _isfinite = int.from_bytes, math.isfinite
_floor, _log10 = math.floor, math.log10
_QUARTER_US = 21_600_000_000
"""A quarter of a day in µs (:func:`day_quarter`)."""
_POOLED_MIN = 1
"""Observations the all-pairs bucket needs: one observed competitor is a better guess than none."""
_ROUTE = attrgetter("asset_in", "asset_out")
"""A judged quote's route, read in C (:meth:`Coverage.fold`)."""

Key = tuple[object, ...]


def pair_key(asset_in: str, asset_out: str) -> tuple[str, str]:
    return (asset_in, asset_out) if asset_in < asset_out else (asset_out, asset_in)


def size_bucket(notional_usd: float) -> int:
    """The decade of the notional: 0 for 1-10 USD, 2 for 100-1000 USD (clamped to -3..9)."""
    if not notional_usd > 0:
        return -3
    # Clamped by comparisons: ``max(-3, min(9, decade))`` is the same int, but on CPython 3.11
    # each of the two builtins parses its arguments for ``key``/``default`` (~0.45 µs a call
    # here, issue 29), and this runs once per answer the fill model judges.
    decade = _floor(_log10(notional_usd))
    return -3 if decade < -3 else 9 if decade > 9 else decade


def day_quarter(t_us: int) -> int:
    """0..3: the quarter of the UTC day (competition differs between sessions)."""
    return (t_us // _QUARTER_US) % 4


def competitor_edge_bps(edge_bps: float, exact_in: bool, ours: int, best: int) -> float:
    """The competitor's edge given ours: exact-in compares what the user receives (``ours`` is
    our ``amount_out``), exact-out what they pay (our ``amount_in``)."""
    ratio = best / ours if exact_in else ours / best
    return ((1.0 + edge_bps / 10_000.0) * ratio - 1.0) * 10_000.0


class CompetitionModel:
    """Observed competitors' edges by bucket, and draws for requests without one."""

    def __init__(self, spec: UnobservedSpec, seed: int) -> None:
        self.spec = spec
        self._hash = hashlib.blake2b(f"competition:{seed}:".encode(), digest_size=8)  # per draw
        self._buckets: dict[Key, deque[float]] = {}
        # The four buckets an observation goes to, by (asset_in, asset_out, size, quarter):
        # looked up once instead of building and finding four keys per observation.
        self._by_route: dict[tuple[str, str, int, int], tuple[deque[float], ...]] = {}
        self._minimum = spec.min_observed

    def _levels(self, pair: tuple[str, str], size: int, quarter: int) -> tuple[Key, ...]:
        return ((pair, size, quarter), (pair, size), (pair,), ())

    def observe(
        self, asset_in: str, asset_out: str, notional_usd: float, t_us: int, edge_bps: float
    ) -> None:
        if not _isfinite(edge_bps):
            return
        finest, by_size, by_pair, pooled = self._buckets_of(asset_in, asset_out, notional_usd, t_us)
        finest.append(edge_bps)
        by_size.append(edge_bps)
        by_pair.append(edge_bps)
        pooled.append(edge_bps)

    def _buckets_of(
        self, asset_in: str, asset_out: str, notional_usd: float, t_us: int
    ) -> tuple[deque[float], ...]:
        """The four buckets of an answer's route, finest first, by its :func:`size_bucket` and
        :func:`day_quarter` (looked up once per route; :meth:`_route` makes them): where
        :meth:`draw` and :meth:`observe` find them.

        The size and the quarter are computed here as those functions do, not called (issue
        29: two calls and their frames per answer the fill model judges)."""
        if notional_usd > 0:
            decade = _floor(_log10(notional_usd))
            size = -3 if decade < -3 else 9 if decade > 9 else decade
        else:
            size = -3
        route = (asset_in, asset_out, size, (t_us // _QUARTER_US) % 4)
        return self._by_route.get(route) or self._route(route)

    def _route(self, route: tuple[str, str, int, int]) -> tuple[deque[float], ...]:
        asset_in, asset_out, size, quarter = route
        window, buckets = self.spec.window, self._buckets
        found = []
        for key in self._levels(pair_key(asset_in, asset_out), size, quarter):
            bucket = buckets.get(key)
            if bucket is None:
                bucket = buckets[key] = deque(maxlen=window)
            found.append(bucket)
        levels = self._by_route[route] = tuple(found)
        return levels

    def draw(
        self, quote_id: str, asset_in: str, asset_out: str, notional_usd: float, t_us: int
    ) -> float | None:
        """A competitor's edge for ``quote_id``, or None when there is nothing to draw from."""
        hasher = self._hash.copy()
        hasher.update(quote_id.encode())
        u = (_from_bytes(hasher.digest(), "little") + 0.5) / _TWO_64  # strictly inside (0, 1)
        # The route's four buckets, as observe finds them (made empty if none yet: an empty
        # bucket is passed over as a missing one was); the finest holding enough gives the
        # quantile.
        finest, by_size, by_pair, pooled = self._buckets_of(asset_in, asset_out, notional_usd, t_us)
        minimum = self._minimum
        for bucket in (finest, by_size, by_pair):
            if len(bucket) >= minimum:
                return bucket[int(u * len(bucket))]
        if len(pooled) >= _POOLED_MIN:
            return pooled[int(u * len(pooled))]
        prior = self.spec.prior
        if prior is None:
            return None
        return prior.edge_bps + prior.sd_bps * _NORMAL.inv_cdf(u)


class Race:
    """Who answered first when two answers are equal: ours (its latency) or the competitor's,
    drawn from ``RaceSpec`` by a hash of ``(seed, quote_id)`` (the competitor belongs to the
    request, as its price does)."""

    def __init__(self, spec: RaceSpec, seed: int) -> None:
        self.spec = spec
        self._key = f"race:{seed}:".encode()

    def competitor_ms(self, quote_id: str) -> float:
        spec = self.spec
        if spec.sigma == 0 or spec.median_ms == 0:
            return spec.median_ms
        digest = hashlib.blake2b(self._key + quote_id.encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "little") + 0.5) / _TWO_64
        return spec.median_ms * math.exp(spec.sigma * _NORMAL.inv_cdf(u))

    def first(self, quote_id: str, latency_ms: float) -> bool:
        """Whether our answer, ``latency_ms`` after the request, came before the competitor's
        (a dead heat goes to the competitor)."""
        return latency_ms < self.competitor_ms(quote_id)


def require_competition(header: Header, spec: UnobservedSpec, stream: str = "the stream") -> None:
    """Refuse a stream in which no competition was sought, unless a prior stands in for it."""
    if spec.mode == "model" and spec.prior is None and header.competitor_share == 0:
        raise ConfigError(
            f"{stream}: no competitor was observed (competitor_share 0 in its header: the "
            "recorder without --competitors, or synth --competitor-share 0), and the competitor "
            "model will not assume there was none. Give a prior (fill.unobserved.prior: "
            "{edge_bps: -8, sd_bps: 6} in the backtest config: the best competitor charging "
            "8 bps), or fill.unobserved.mode: uncontested for the upper bound"
        )


class Coverage:
    """How much of the competition the replay observed, and what the fills rest on: per pair,
    answers judged and those with an observed competitor; fills with and without one.

    The relay queues each judged answer's quote (:attr:`judged`, and :attr:`observed` when it
    had an observed competitor); they are counted by route in C when the counts are read and
    at the replay's ticks (:meth:`fold`). Issue 29: counting per answer in Python built and
    hashed a route tuple and added twice, ~35 bytecodes an answer; a queued quote is alive in
    the desk's book until its deadline anyway."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.judged: list[Quote] = []
        self.observed: list[Quote] = []
        """Queued: the quotes judged (with an observed competitor) since the last fold."""
        self._judged: Counter[tuple[str, str]] = Counter()
        self._observed: Counter[tuple[str, str]] = Counter()
        self.fills = [0, 0]  # [with an observed competitor, without]

    def fold(self) -> None:
        """Count the queued quotes by route (``asset_in, asset_out``), in C."""
        judged, observed = self.judged, self.observed
        if judged:
            self._judged.update(map(_ROUTE, judged))
            judged.clear()
        if observed:
            self._observed.update(map(_ROUTE, observed))
            observed.clear()

    @property
    def routes(self) -> dict[tuple[str, str], list[int]]:
        """``(asset_in, asset_out) -> [judged, observed]``."""
        self.fold()
        seen = self._observed
        return {route: [n, seen[route]] for route, n in self._judged.items()}

    @property
    def by_pair(self) -> dict[tuple[str, str], list[int]]:
        """``pair_key -> [judged, observed]``: both directions of a pair together."""
        pairs: dict[tuple[str, str], list[int]] = {}
        for (asset_in, asset_out), (judged, observed) in self.routes.items():
            counts = pairs.setdefault(pair_key(asset_in, asset_out), [0, 0])
            counts[0] += judged
            counts[1] += observed
        return pairs

    def filled(self, observed: bool) -> None:
        self.fills[0 if observed else 1] += 1

    def summary(
        self, names: dict[tuple[str, str], str], stream_share: float | None
    ) -> dict[str, object]:
        """``summary.json``'s ``competition`` (docs/backtest.md, "Reading a backtest")."""
        by_pair = self.by_pair
        judged = sum(c[0] for c in by_pair.values())
        observed = sum(c[1] for c in by_pair.values())
        fills = sum(self.fills)
        return {
            "unobserved_mode": self.mode,
            "stream_competitor_share": stream_share,
            "decided": judged,
            "observed": observed,
            "unobserved": judged - observed,
            "coverage": round(observed / judged, 6) if judged else None,
            "fills": fills,
            "fills_unobserved": self.fills[1],
            "fills_unobserved_share": round(self.fills[1] / fills, 6) if fills else None,
            "by_pair": {
                names.get(pair, "/".join(pair)): {
                    "decided": c[0],
                    "observed": c[1],
                    "coverage": round(c[1] / c[0], 6),
                }
                for pair, c in sorted(by_pair.items())
            },
        }
