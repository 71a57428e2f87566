"""The quote path's series kept as plain numbers, shown at each scrape (issue 29).

Split out of :mod:`solver.io.metrics` so that module says *which* series the bot has, and this
one *how* the per-request ones are kept: a call from the quote path is a dict add or a bisect —
no lock, no ``.labels()`` call, no allocation once warm (the client's locked children cost ~4 µs
a request in all). Each class is a :class:`~prometheus_client.registry.Collector` that the
registry reads at scrape time.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

OTHER = "other"
"""The ``pair`` label of everything that is not a configured pair."""


class PairCounter(Collector):
    """A counter labelled by pair (and optionally one more label), kept as plain numbers and
    shown at each scrape (issue 29: the quote path adds to a dict entry; the client's
    ``Counter`` took a lock and a child object per call, ~1 µs a request in all).

    The pair label is clamped to the configured set plus ``other`` here, in one place, so no
    caller can widen the cardinality by passing an arbitrary string.
    """

    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], pairs: frozenset[str]
    ) -> None:
        self._name, self._documentation, self._labels = name, documentation, list(labels)
        # pair -> second label value ("" when the counter has none) -> total
        self.values: dict[str, dict[str, float]] = {pair: {} for pair in pairs}

    def inc(self, pair: str, other: str = "", amount: float = 1.0) -> None:
        by_label = self.values.get(pair)
        if by_label is None:  # not a configured pair: clamp
            by_label = self.values[OTHER]
        by_label[other] = by_label.get(other, 0.0) + amount

    def preset(self, pair: str, other: str = "") -> None:
        """Show the series at 0 from the first scrape."""
        self.inc(pair, other, 0.0)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._documentation, labels=self._labels)

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        for pair, by_label in self.values.items():
            for other, total in list(by_label.items()):
                family.add_metric([pair, other] if other else [pair], total)
        yield family


class LatencyHistogram(Collector):
    """A histogram kept as bucket counts and a sum, shown at each scrape (issue 29: an
    observation is a bisect and two adds; the client's ``Histogram`` took ~1.5 µs with its
    locks, twice a request)."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self._name, self._documentation = name, documentation
        self._bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self._bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self._name, self._documentation)

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[HistogramMetricFamily]:
        cumulative, buckets = 0, []
        for bound, count in zip((*self._bounds, math.inf), list(self.counts), strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), cumulative))
        family = HistogramMetricFamily(
            self._name, self._documentation, buckets=buckets, sum_value=self.total
        )
        yield family


class PairTotals(Collector):
    """A counter labelled by pair whose values are read at each scrape from a count kept
    elsewhere (``pair -> total``); a pair outside ``pairs`` is shown under ``other``."""

    def __init__(self, name: str, documentation: str, pairs: frozenset[str]) -> None:
        self._name, self._documentation = name, documentation
        self._pairs = sorted(pairs)
        self.totals: Mapping[str, int] = {}

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._documentation, labels=["pair"])

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        shown = dict.fromkeys(self._pairs, 0)
        for pair, total in self.totals.items():
            shown[pair if pair in shown else OTHER] += total
        family = self._family()
        for pair, total in shown.items():
            family.add_metric([pair], total)
        yield family
