"""The report's breakdowns, measured during the replay: per pair, per UTC day, latency, skips
over time, and the dates of the largest drawdown.

:class:`~backtest.measure.measurements.Measurements` feeds these; they only observe, and each is
bounded in memory whatever the stream's length (a fixed set of pairs, one entry per day, latency in
1 ms bins up to :data:`LATENCY_CAP_MS`, at most ``2 * max_buckets`` time buckets). They exist
because a whole-run total hides what a person needs to act on: which pair loses, which day,
when the bot stopped quoting and why.

**Pairs** are named ``BASE/QUOTE`` with the config's symbols, whichever way a request goes: the
config's pairs give the orientation; a request for a pair not configured gets its two symbols in
alphabetical order. A pair's PnL is what can be attributed to its fills: the realized edge at
fill time and the markouts of those fills at each horizon (what that edge became h seconds
later). Inventory revaluation beyond the last horizon belongs to the balances, not to a pair.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

LATENCY_CAP_MS = 100_000
DAY_S = 86_400


def pair_names(
    pairs: Iterable[tuple[str, str]], symbols: Mapping[str, str]
) -> dict[tuple[str, str], str]:
    """``(asset_in, asset_out) -> "BASE/QUOTE"`` for both directions of each configured pair."""
    names: dict[tuple[str, str], str] = {}
    for base, quote in pairs:
        name = f"{symbols.get(base, base)}/{symbols.get(quote, quote)}"
        names.setdefault((base, quote), name)
        names.setdefault((quote, base), name)
    return names


@dataclass(slots=True)
class Moments:
    """Count, sum and sum of squares: a mean and its standard error without keeping values."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self.squares += value * value

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def stderr(self) -> float | None:
        """The standard error of the mean (sample sd / √n); None under two values."""
        if self.n < 2:
            return None
        var = (self.squares - self.total * self.total / self.n) / (self.n - 1)
        return math.sqrt(max(0.0, var) / self.n)


@dataclass(slots=True)
class PairStats:
    requests: int = 0
    quoted: int = 0
    won: int = 0
    skips: Counter[str] = field(default_factory=Counter)
    volume_usd: float = 0.0
    realized_usd: float = 0.0
    realized_bps: Moments = field(default_factory=Moments)
    markout_usd: dict[int, float] = field(default_factory=dict)
    markout_bps: dict[int, Moments] = field(default_factory=dict)

    def markout(self, horizon_s: int, value_usd: float, notional_usd: float) -> None:
        self.markout_usd[horizon_s] = self.markout_usd.get(horizon_s, 0.0) + value_usd
        if notional_usd > 0:
            moments = self.markout_bps.get(horizon_s)
            if moments is None:
                moments = self.markout_bps[horizon_s] = Moments()
            moments.add(value_usd / notional_usd * 1e4)


class PairBook:
    """:class:`PairStats` by pair name, and the same for every pair together (``all``)."""

    def __init__(self, names: Mapping[tuple[str, str], str], symbols: Mapping[str, str]) -> None:
        self.names = dict(names)
        self.symbols = symbols
        self.pairs: dict[str, PairStats] = {}
        self.all = PairStats()
        self._by_route: dict[tuple[str, str], PairStats] = {}

    def name(self, asset_in: str, asset_out: str) -> str:
        name = self.names.get((asset_in, asset_out))
        if name is None:
            a, b = sorted(
                (self.symbols.get(asset_in, asset_in), self.symbols.get(asset_out, asset_out))
            )
            name = self.names[(asset_in, asset_out)] = f"{a}/{b}"
        return name

    def stats(self, asset_in: str, asset_out: str) -> PairStats:
        stats = self._by_route.get((asset_in, asset_out))
        if stats is None:
            name = self.name(asset_in, asset_out)
            stats = self.pairs.get(name)
            if stats is None:
                stats = self.pairs[name] = PairStats()
            self._by_route[(asset_in, asset_out)] = stats
        return stats

    def both(self, asset_in: str, asset_out: str) -> tuple[PairStats, PairStats]:
        return self.stats(asset_in, asset_out), self.all


class DailyBook:
    """The desk's marked PnL and realized edge at the last tick of each UTC day (its close).

    A day's PnL is its close minus the previous close (the first day's: minus zero, where the
    desk's PnL starts); the spread earned that day likewise from the realized edge; the rest is
    inventory revaluation.
    """

    def __init__(self) -> None:
        self.closes: dict[int, tuple[float, float]] = {}

    def on_tick(self, t: float, pnl: float, realized: float) -> None:
        self.closes[int(t // DAY_S)] = (pnl, realized)

    def days(self) -> list[tuple[int, float, float]]:
        """``(day number since the epoch, PnL that day, spread earned that day)``, in order."""
        out = []
        prev_pnl = prev_realized = 0.0
        for day in sorted(self.closes):
            pnl, realized = self.closes[day]
            out.append((day, pnl - prev_pnl, realized - prev_realized))
            prev_pnl, prev_realized = pnl, realized
        return out


WEEK_OFFSET_DAYS = 3
"""1970-01-01 was a Thursday: day numbers shifted by 3 put every ISO week (Monday to Sunday)
in one block of 7."""


def period_start(name: str, t: float) -> float:
    """The start (seconds since the epoch) of the UTC hour, day or ISO week holding ``t``."""
    if name == "hour":
        return t - t % 3600
    day = int(t // DAY_S)
    if name == "day":
        return float(day * DAY_S)
    return float(((day + WEEK_OFFSET_DAYS) // 7 * 7 - WEEK_OFFSET_DAYS) * DAY_S)


class PeriodBook:
    """Closes per UTC hour, day or ISO week: the cumulative figures at each period's last tick.

    Freqtrade's ``--breakdown`` answers "which day lost it"; a market maker also needs to see
    whether it was the spread or the price path, so each close keeps the marked PnL, the spread
    earned (net of fees), the hold benchmark, fees and fills. One entry per period: a year is
    8,760 hours.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.closes: dict[float, tuple[float, float, float, float, int]] = {}

    def on_tick(
        self, t: float, pnl: float, realized: float, hold: float, fees: float, fills: int
    ) -> None:
        self.closes[period_start(self.name, t)] = (pnl, realized, hold, fees, fills)

    def rows(self) -> list[tuple[float, tuple[float, float, float, float, int]]]:
        """``(period start, (PnL, spread earned, hold, fees, fills) in that period)``, in
        order: each close minus the previous one (the first: minus zero)."""
        out = []
        prev: tuple[float, float, float, float, int] = (0.0, 0.0, 0.0, 0.0, 0)
        for start in sorted(self.closes):
            close = self.closes[start]
            pnl, realized, hold, fees, fills = (a - b for a, b in zip(close, prev, strict=True))
            out.append((start, (pnl, realized, hold, fees, int(fills))))
            prev = close
        return out


@dataclass(slots=True)
class TradeBook:
    """Each fill's value at the last markout horizon, as trades: wins, losses and their sums
    (profit factor, expectancy, average win and loss), without keeping the values."""

    wins: int = 0
    losses: int = 0
    gross_win: float = 0.0
    gross_loss: float = 0.0

    def add(self, value_usd: float) -> None:
        if value_usd > 0:
            self.wins += 1
            self.gross_win += value_usd
        else:
            self.losses += 1
            self.gross_loss -= value_usd

    @property
    def n(self) -> int:
        return self.wins + self.losses


class DrawdownWatch:
    """When the largest drawdown began (the peak), bottomed (the trough) and recovered.

    The desk's drawdown is measured from its peak PnL (which starts at zero), so the peak's time
    is the last tick at which the PnL stood at or above the running peak.
    """

    def __init__(self) -> None:
        self.peak = 0.0
        self.peak_t: float | None = None
        self.max = 0.0
        self.max_peak_t: float | None = None
        self.max_peak = 0.0
        self.trough_t: float | None = None
        self.recovered_t: float | None = None

    def on_tick(self, t: float, pnl: float, drawdown: float) -> None:
        if self.peak_t is None or pnl >= self.peak:
            self.peak, self.peak_t = max(self.peak, pnl), t
        if drawdown > self.max:
            self.max, self.trough_t = drawdown, t
            self.max_peak_t, self.max_peak = self.peak_t, pnl + drawdown
            self.recovered_t = None
        elif self.trough_t is not None and self.recovered_t is None and pnl >= self.max_peak:
            self.recovered_t = t


class LatencyHistogram:
    """The replay's latency per request (what ``ts + latency`` used), in 1 ms bins."""

    __slots__ = ("bins", "max", "n", "total")

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.n = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, ms: float) -> None:
        self.n += 1
        self.total += ms
        self.max = max(self.max, ms)
        self.bins[int(ms) if ms < LATENCY_CAP_MS else LATENCY_CAP_MS] += 1

    def quantile(self, q: float) -> float | None:
        """The lower edge of the bin holding the ``q`` quantile (1 ms resolution)."""
        if not self.n:
            return None
        rank = q * (self.n - 1)
        seen = 0
        for ms in sorted(self.bins):
            seen += self.bins[ms]
            if seen > rank:
                return float(ms)
        return float(max(self.bins))


class Timeline:
    """Counts by label per time bucket; the bucket width doubles (buckets merge two by two)
    whenever the run outgrows ``max_buckets``, so any run length fits."""

    __slots__ = ("buckets", "max_buckets", "origin", "width_s")

    def __init__(self, width_s: float = 60.0, max_buckets: int = 96) -> None:
        self.width_s = width_s
        self.max_buckets = max_buckets
        self.origin: float | None = None
        self.buckets: dict[int, Counter[str]] = {}

    def add(self, t: float, label: str) -> None:
        origin = self.origin
        if origin is None:
            origin = self.origin = t - t % self.width_s
        index = int((t - origin) // self.width_s)
        while index >= self.max_buckets:
            self._merge()
            index = int((t - origin) // self.width_s)
        bucket = self.buckets.get(index)
        if bucket is None:
            bucket = self.buckets[index] = Counter()
        bucket[label] = bucket.get(label, 0) + 1

    def _merge(self) -> None:
        merged: dict[int, Counter[str]] = {}
        for index, counts in self.buckets.items():
            merged.setdefault(index // 2, Counter()).update(counts)
        self.buckets = merged
        self.width_s *= 2

    def rows(self) -> list[tuple[float, Counter[str]]]:
        """``(bucket start, counts)`` for every bucket from the first to the last, empty ones
        included (a gap is information: nothing was asked)."""
        if self.origin is None or not self.buckets:
            return []
        return [
            (self.origin + i * self.width_s, self.buckets.get(i, Counter()))
            for i in range(max(self.buckets) + 1)
        ]
