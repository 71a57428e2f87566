"""Counting a queue of requests or outcomes a run at a time (:meth:`Measurements.fold_queues`).

The replay queues what each request became and how each answer ended, and counts them a batch
at a time. Counted one by one, in Python, this was ~1.4 µs a request; here the runs that land
in one bucket (a time bucket, an edge bin, a size bin) are counted by :class:`~collections.Counter`
in C and added once. The counts are the same, and so is the order in which keys first appear in
every mapping (``Counter`` keeps first appearance): the reports iterate them in that order.
A queue the short way cannot take (times that go back, a NaN or an edge out of the clamp, a size
not positive or not finite) is counted one by one as before.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import repeat
from operator import mul

from backtest.measure.detail import Timeline

__all__ = ["count_outcomes", "count_timeline"]

_isnan, _isfinite, _log10, _floor = math.isnan, math.isfinite, math.log10, math.floor


def count_timeline(timeline: Timeline, times: list[int], skips: list[str | None]) -> None:
    """:meth:`Timeline.add` for each queued request, in order: its time (µs, ``times[i]``)
    under ``"quoted"`` or its skip reason (``skips[i]``).

    The replay's clock never goes back, so the requests of one bucket are a run: its end is
    found by bisection on the bucket index (the arithmetic of ``add``, monotonic in the time)
    and its labels counted at once. A request with no bucket yet goes through ``add`` (the
    first, a new bucket, or a merge that widens them all)."""
    if times != sorted(times):  # not the replay's clock: one at a time
        for t_us, skip in zip(times, skips, strict=True):
            timeline.add(t_us / 1e6, "quoted" if skip is None else skip)
        return
    i, n = 0, len(times)
    while i < n:
        origin, width = timeline.origin, timeline.width_s
        t = times[i] / 1e6
        index = 0 if origin is None else int((t - origin) // width)
        bucket = None if origin is None else timeline.buckets.get(index)
        if bucket is None:
            skip = skips[i]
            timeline.add(t, "quoted" if skip is None else skip)
            i += 1
            continue
        assert origin is not None
        lo, hi = i + 1, n  # the first request past the bucket: in [i + 1, n]
        while lo < hi:
            mid = (lo + hi) // 2
            if int((times[mid] / 1e6 - origin) // width) > index:
                hi = mid
            else:
                lo = mid + 1
        for skip, count in Counter(skips[i:lo]).items():
            label = "quoted" if skip is None else skip
            bucket[label] = bucket.get(label, 0) + count
        i = lo


def count_outcomes(
    edge_bins: dict[int, list[int]],
    size_bins: dict[int, list[int]],
    edges: list[float],
    sizes: list[float],
    wins: list[int],
    *,
    clamp_bps: int,
    per_decade: int,
) -> None:
    """Each outcome (``edges[i]`` bps, ``sizes[i]`` USD notional, won when ``i`` is in
    ``wins``, the won ones' positions in increasing order) into its edge bin (``[resolved,
    won]``, the edge rounded and clamped to ``±clamp_bps``, NaN to ``-clamp_bps``) and its size
    bin (``[lost, won]``, ``per_decade`` bins a decade of USD, ``-10 * per_decade`` for a size
    that is not positive).

    The outcomes come as columns (:class:`~backtest.measure.measurements.Measurements` queues
    them so: issue 29, no tuple per answer), read here as they are."""
    if not edges:
        return
    if (
        any(map(_isnan, edges))
        or min(edges) < -clamp_bps
        or max(edges) > clamp_bps
        or any(map(_isnan, sizes))
        or min(sizes) <= 0
        or not _isfinite(max(sizes))
    ):
        _count_one_by_one(edge_bins, size_bins, edges, sizes, wins, clamp_bps, per_decade)
        return
    # Every outcome's bin counted, then the won ones' (few: a queue is mostly losses); a bin
    # first appears where its first outcome is, won or not, as in the loop.
    bins = list(map(round, edges))
    won_bins = Counter([bins[i] for i in wins])
    for bin_, count in Counter(bins).items():
        _add(edge_bins, bin_, count, won_bins.get(bin_, 0))
    decades = list(map(_floor, map(mul, map(_log10, sizes), repeat(per_decade))))
    won_decades = Counter([decades[i] for i in wins])
    for size, count in Counter(decades).items():
        sizes_won = won_decades.get(size, 0)
        _add(size_bins, size, count - sizes_won, sizes_won)


def _count_one_by_one(
    edge_bins: dict[int, list[int]],
    size_bins: dict[int, list[int]],
    edges: list[float],
    sizes: list[float],
    wins: list[int],
    clamp_bps: int,
    per_decade: int,
) -> None:
    won_at = set(wins)
    for i, (edge_bps, notional_usd) in enumerate(zip(edges, sizes, strict=True)):
        won = i in won_at
        # round(min(clamp, max(-clamp, edge))), NaN to -clamp
        if -clamp_bps <= edge_bps <= clamp_bps:
            bin_ = round(edge_bps)
        else:
            bin_ = clamp_bps if edge_bps > clamp_bps else -clamp_bps
        _add(edge_bins, bin_, 1, 1 if won else 0)
        size = _floor(_log10(notional_usd) * per_decade) if notional_usd > 0 else -10 * per_decade
        _add(size_bins, size, 0 if won else 1, 1 if won else 0)


def _add(bins: dict[int, list[int]], key: int, first: int, second: int) -> None:
    """Add to a bin's two counts, the bin made where it first appears (the keys' order)."""
    counts = bins.get(key)
    if counts is None:
        counts = bins[key] = [0, 0]
    counts[0] += first
    counts[1] += second
