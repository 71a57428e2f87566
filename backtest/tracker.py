"""What a replay measures: counts, PnL marked to market, drawdown, fills and their markouts.

Definitions are those of :mod:`solver.core.pnl`, computed in floats (prices are floats; the report
rounds to 1e-6 USD):

- **realized** per fill: value received − value given (``amount_out`` plus the protocol fee), at
  the reference prices of the settlement time; ``realized_pnl_usd`` is their sum.
- **markout at +h**: the same difference at the prices ``h`` seconds after settlement.
- **pnl**: equity (Σ balance × latest price) − starting equity; it includes the revaluation of
  held inventory. ``max_drawdown_usd`` is the largest fall of pnl from its running peak, checked
  at every price change and settlement.
- **volume**: USD value of what we received, at settlement prices.
- **inventory risk**: how far the inventory is from where it started, in USD: half the sum over
  tokens of ``|balance - starting balance| * price`` (a swap of $x of one token for $x of
  another moves it by x), updated at every price change and settlement.
  ``inventory_risk_usd`` is its time-weighted mean over the run, ``max_inventory_risk_usd`` its
  peak. The sweep's default objective penalises it (:mod:`backtest.sweep`).

Memory is flat in the stream length: histograms have fixed bins, time series are downsampled
(:class:`Downsampled`), and a fill leaves memory once its last markout is known and it was
handed to the sink (``fills.csv``).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

HORIZONS_S: tuple[int, ...] = (1, 10, 60)
EDGE_CLAMP_BPS = 500  # win rate against margin: 1-bp bins in [-500, 500]
SIZE_BINS_PER_DECADE = 5


@dataclass(slots=True)
class FillRecord:
    quote_id: str
    requested_at: datetime
    settled_at: datetime
    asset_in: str
    asset_out: str
    exact_in: bool
    amount_in: int
    amount_out: int
    fee: int
    price_in: float
    price_out: float
    edge_bps: float
    realized_usd: float
    markouts: dict[int, float] = field(default_factory=dict)
    done: bool = False


class Downsampled:
    """A time series of at most ``2 * capacity`` points over any run length.

    Every ``stride``-th point is kept; when the series is full, every other point is dropped and
    the stride doubles. Deterministic, and the kept points stay evenly spread over the run.
    """

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self.points: list[tuple[float, tuple[float, ...]]] = []
        self.stride = 1
        self._count = 0
        self.last: tuple[float, tuple[float, ...]] | None = None

    def add(self, t: float, values: tuple[float, ...]) -> None:
        self.last = (t, values)
        if self._count % self.stride == 0:
            self.points.append((t, values))
            if len(self.points) >= 2 * self.capacity:
                self.points = self.points[::2]
                self.stride *= 2
        self._count += 1

    def series(self) -> list[tuple[float, tuple[float, ...]]]:
        """The kept points and the latest one (so a plot reaches the end of the run)."""
        if self.last is not None and (not self.points or self.points[-1] is not self.last):
            return [*self.points, self.last]
        return list(self.points)


class Tracker:
    def __init__(
        self,
        decimals: Mapping[str, int],
        tokens: Iterable[str],
        sink: Callable[[FillRecord], None] | None = None,
    ) -> None:
        self.tokens = sorted(tokens)
        self.scale = {asset: 10.0 ** decimals[asset] for asset in decimals}
        self.sink = sink
        self.requests = self.quoted = self.won = 0
        self.events: Counter[str] = Counter()
        self.skips: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()
        self.settle_failed: Counter[str] = Counter()
        self.edge_bins: dict[int, list[int]] = {}  # bps bin -> [resolved, won]
        self.size_bins: dict[int, list[int]] = {}  # log10(usd) bin -> [lost, won]
        self.marks: dict[str, float] = {}
        self.balances: dict[str, int] = {}
        self.values: dict[str, float] = {}
        self.start_equity = self.equity = self.pnl = self.peak = self.max_drawdown = 0.0
        self.started = False
        self.day: int | None = None
        self.day_start_pnl = 0.0
        self.realized = self.volume = self.fees = 0.0
        self.markout_sum = dict.fromkeys(HORIZONS_S, 0.0)
        self.markout_n = dict.fromkeys(HORIZONS_S, 0)
        self.fills = 0
        self.open_fills: deque[FillRecord] = deque()
        self.pnl_series = Downsampled()
        self.inventory_series = Downsampled()
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.start_balances: dict[str, int] = {}
        self.exposure = self.max_exposure = self.exposure_integral = 0.0
        self._exposure_t0 = self._exposure_t = 0.0

    # ------------------------------------------------------------------ equity

    def start(self, balances: Mapping[str, int], prices: Mapping[str, float], t: float) -> None:
        """Starting balances and the prices known at the start. The starting equity is taken
        at the first moment every asset held has a price (normally now: the replay reads ahead
        for first prices); until then PnL is not marked."""
        self.marks.update(prices)
        self.balances.update(balances)
        self.start_balances = dict(self.balances)
        for asset in self.balances:
            self._value(asset)
        self._record(t)

    def _all_priced(self) -> bool:
        return all(asset in self.marks for asset, amount in self.balances.items() if amount)

    def _value(self, asset: str) -> None:
        price = self.marks.get(asset)
        if price is not None:
            self.values[asset] = self.balances.get(asset, 0) * price / self.scale[asset]

    def _record(self, t: float) -> None:
        self.equity = sum(self.values.values())
        if not self.started:
            if not self._all_priced():
                return
            self.started = True
            self.start_equity = self.equity
            self._exposure_t0 = self._exposure_t = t
        self._update_exposure(t)
        pnl = self.pnl = self.equity - self.start_equity
        self.peak = max(self.peak, pnl)
        drawdown = self.peak - pnl
        self.max_drawdown = max(self.max_drawdown, drawdown)
        day = int(t // 86_400)
        if day != self.day:
            self.day, self.day_start_pnl = day, pnl
        self.pnl_series.add(t, (pnl, drawdown))

    def _update_exposure(self, t: float) -> None:
        """Integrate the inventory risk up to ``t``, then take its new value."""
        if t > self._exposure_t:
            self.exposure_integral += self.exposure * (t - self._exposure_t)
            self._exposure_t = t
        marks, scale, start = self.marks, self.scale, self.start_balances
        moved = 0.0
        for asset, amount in self.balances.items():
            price = marks.get(asset)
            if price is not None:
                delta = amount - start.get(asset, 0)
                if delta:
                    moved += abs(delta) * price / scale[asset]
        self.exposure = moved / 2
        self.max_exposure = max(self.max_exposure, self.exposure)

    def inventory_risk(self) -> float:
        """The time-weighted mean inventory risk (USD) from the start to the last update."""
        span = self._exposure_t - self._exposure_t0
        if span <= 0:
            return self.exposure
        return self.exposure_integral / span

    def daily_loss(self) -> float:
        return max(0.0, self.day_start_pnl - self.pnl)

    def breach(self, max_drawdown_usd: float, max_daily_loss_usd: float) -> str | None:
        """The kill switch's reason (as :func:`solver.core.risk.check_pnl`), or None."""
        drawdown, daily = self.peak - self.pnl, self.daily_loss()
        if drawdown > max_drawdown_usd:
            return f"drawdown: {drawdown:.2f} USD > {max_drawdown_usd}"
        if daily > max_daily_loss_usd:
            return f"daily_loss: {daily:.2f} USD > {max_daily_loss_usd}"
        return None

    def on_price(self, asset: str, usd: float, t: float) -> None:
        self.marks[asset] = usd
        if asset in self.balances:
            self._value(asset)
            self._record(t)

    def on_balances(self, balances: Mapping[str, int], t: float) -> None:
        self.balances.update(balances)
        for asset in balances:
            self._value(asset)
        self._record(t)
        self.inventory_series.add(
            t, tuple(self.balances.get(a, 0) / self.scale[a] for a in self.tokens)
        )

    # ------------------------------------------------------------------ quotes

    def on_resolved(self, edge_bps: float, notional_usd: float, won: bool) -> None:
        # round(min(EDGE_CLAMP_BPS, max(-EDGE_CLAMP_BPS, edge_bps))), NaN to -EDGE_CLAMP_BPS
        if -EDGE_CLAMP_BPS <= edge_bps <= EDGE_CLAMP_BPS:
            bin_ = round(edge_bps)
        else:
            bin_ = EDGE_CLAMP_BPS if edge_bps > EDGE_CLAMP_BPS else -EDGE_CLAMP_BPS
        counts = self.edge_bins.get(bin_)
        if counts is None:
            counts = self.edge_bins[bin_] = [0, 0]
        counts[0] += 1
        counts[1] += won
        size = (
            math.floor(math.log10(notional_usd) * SIZE_BINS_PER_DECADE)
            if notional_usd > 0
            else -10 * SIZE_BINS_PER_DECADE
        )
        sizes = self.size_bins.get(size)
        if sizes is None:
            sizes = self.size_bins[size] = [0, 0]
        sizes[1 if won else 0] += 1

    def on_fill(self, record: FillRecord) -> None:
        self.fills += 1
        self.realized += record.realized_usd
        self.volume += record.amount_in * record.price_in / self.scale[record.asset_in]
        self.fees += record.fee * record.price_out / self.scale[record.asset_out]
        self.open_fills.append(record)

    def fill_value(self, record: FillRecord, price_in: float, price_out: float) -> float:
        return (
            record.amount_in * price_in / self.scale[record.asset_in]
            - (record.amount_out + record.fee) * price_out / self.scale[record.asset_out]
        )

    def markout(self, record: FillRecord, horizon: int) -> None:
        p_in, p_out = self.marks.get(record.asset_in), self.marks.get(record.asset_out)
        if p_in is not None and p_out is not None:
            value = self.fill_value(record, p_in, p_out)
            record.markouts[horizon] = value
            self.markout_sum[horizon] += value
            self.markout_n[horizon] += 1
        if horizon == HORIZONS_S[-1]:
            record.done = True
            self._flush()

    def _flush(self, everything: bool = False) -> None:
        while self.open_fills and (everything or self.open_fills[0].done):
            record = self.open_fills.popleft()
            if self.sink is not None:
                self.sink(record)

    def finish(self, t: float | None = None) -> None:
        """Hand the fills whose markouts fell after the end of the stream to the sink, and
        carry the inventory risk to ``t`` (the end of the replay)."""
        if t is not None and self.started and t > self._exposure_t:
            self.exposure_integral += self.exposure * (t - self._exposure_t)
            self._exposure_t = t
        self._flush(everything=True)
