"""What a replay measures besides the desk's own books: counts, fill records, series, risk.

The desk (:mod:`solver.core`) owns PnL and the kill switch, in the replay as live: realized
edge per fill, markouts, PnL marked to market, drawdown and daily loss are the desk's
(:class:`~solver.core.pnl.PnlBook`). What is here only observes:

- **counts**: requests, quotes, skips (the desk's counters, copied at the end), outcomes the
  fill model decided, settlements the ledger refused, stream events by kind;
- **fills** (``fills.csv``): one :class:`~backtest.measure.fill_record.FillRecord` per
  settlement, with the prices and realized edge of the desk's ``QuoteMoved`` fact and its
  markouts from the desk's ``Markout`` facts; a record leaves memory once its last horizon has
  passed and it was handed to the sink;
- **series** for the report: PnL and drawdown (the desk's, sampled at every tick), inventory per
  token (after every fill); ``max_drawdown_usd`` is the largest drawdown seen at a tick;
- **the hold benchmark**: what the starting inventory alone would have made, marked at the same
  prices as the desk's PnL from the tick at which the desk took its starting equity. A market
  maker's PnL on a large inventory is mostly the price path; PnL over hold is what quoting added;
- **trades**: each fill's value at the last markout horizon (a fill is a trade: it wins or
  loses by what its edge became once the price had moved), for profit factor and expectancy;
- **volume** (USD value of what we received, at settlement prices) and **fees** paid;
- **inventory risk**: how far the inventory is from where it started, in USD: half the sum over
  tokens of ``|balance - starting balance| * price`` (a swap of $x of one token for $x of
  another moves it by x), updated at every price change and settlement.
  ``inventory_risk_usd`` is its time-weighted mean over the run, ``max_inventory_risk_usd`` its
  peak. The sweep's default objective penalises it (:mod:`backtest.sweep.run`).

- **breakdowns** for the report (:mod:`backtest.measure.detail`): per pair (requests, quotes,
  skips, fills, volume, realized edge and markouts in USD and bps), per UTC day (the PnL's
  close), the dates of the largest drawdown, the latency of each request, and outcomes (quoted
  or the skip's reason) per time bucket.

Memory is flat in the stream length: histograms have fixed bins, time series are downsampled
(:class:`~backtest.measure.downsampled.Downsampled`), fills wait at most the longest markout
horizon.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import reduce
from itertools import repeat
from operator import add, itemgetter

from backtest.measure.columns import count_outcomes, count_timeline
from backtest.measure.detail import (
    LATENCY_CAP_MS,
    DailyBook,
    DrawdownWatch,
    LatencyHistogram,
    PairBook,
    PairStats,
    PeriodBook,
    Timeline,
    TradeBook,
)
from backtest.measure.downsampled import Downsampled
from backtest.measure.fill_record import FillRecord
from solver.core.market import QuoteRequest
from solver.core.pnl import MARKOUT_HORIZONS_S

HORIZONS_S: tuple[int, ...] = MARKOUT_HORIZONS_S
"""The desk's markout horizons (seconds): the columns of ``fills.csv``."""
EDGE_CLAMP_BPS = 500  # win rate against margin: 1-bp bins in [-500, 500]
QUEUE_MAX = 4096
"""Requests or outcomes queued before they are counted anyway (memory stays flat between
ticks however dense the stream)."""
SIZE_BINS_PER_DECADE = 5
_IN, _OUT = itemgetter(1), itemgetter(2)
"""A queued :class:`~solver.protocol.quote_request.QuoteRequest`'s assets, taken in C."""
_isnan = math.isnan
_ZEROS = repeat(0)
"""The default of every token's balance lookup (``map`` stops at the tokens' end)."""


class Measurements:
    def __init__(
        self,
        decimals: Mapping[str, int],
        tokens: Iterable[str],
        sink: Callable[[FillRecord], None] | None = None,
        *,
        pair_names: Mapping[tuple[str, str], str] | None = None,
        symbols: Mapping[str, str] | None = None,
    ) -> None:
        self.tokens = sorted(tokens)
        self.symbols = dict(symbols or {})
        self.scale = {asset: 10.0 ** decimals[asset] for asset in decimals}
        self.sink = sink
        # The desk counts requests, quotes and skips; copied here by :meth:`counts`.
        self.requests = self.quoted = 0
        self.skips: Counter[str] = Counter()
        self.won = 0
        self.events: Counter[str] = Counter()
        self.lost: dict[str, int] = {}
        """Answers lost, by why (``LOST_*``): the relay's queued reasons
        (:attr:`outcome_reasons`) counted at :meth:`fold_queues`, a late answer's at once."""
        self.settle_failed: Counter[str] = Counter()
        self.edge_bins: dict[int, list[int]] = {}  # bps bin -> [resolved, won]
        self.size_bins: dict[int, list[int]] = {}  # log10(usd) bin -> [lost, won]
        self.marks: dict[str, float] = {}
        self.balances: dict[str, int] = {}
        self.volume = self.fees = 0.0
        self.max_drawdown = 0.0
        self.open_fills: deque[FillRecord] = deque()
        self._by_quote: dict[str, FillRecord] = {}
        self._last_horizon_us = max(HORIZONS_S) * 1_000_000
        self.pnl_series = Downsampled()
        self.inventory_series = Downsampled()
        """Balances per token (in :attr:`tokens` order), smallest units: ints, never floats."""
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.start_balances: dict[str, int] = {}
        self.exposure = self.max_exposure = self.exposure_integral = 0.0
        self._exposure_t0 = self._exposure_t = 0.0
        self._exposure_started = False
        self.pairs = PairBook(pair_names or {}, self.symbols)
        self._requests: Counter[tuple[str, str, str | None]] = Counter()
        self.request_queue: list[QuoteRequest] = []
        self.request_times: list[int] = []
        self.request_latencies: list[float] = []
        self.request_skips: list[str | None] = []
        """What :meth:`on_request` queues, as columns: each request, its time (µs), its
        latency and its skip (None: quoted); the replay appends to them directly (its hot
        path), then calls :meth:`fold_queues` when they hold :data:`QUEUE_MAX`. Columns, not a
        tuple per request (issue 29): nothing per request for the cyclic collector to count
        or walk while the queue fills. Every queue's list is cleared in place, never replaced:
        the replay and the relay hold their ``append``."""
        self.outcome_edges: list[float] = []
        self.outcome_sizes: list[float] = []
        self.outcome_wins: list[int] = []
        """What :meth:`on_resolved` queues, as columns: each answer's edge and notional, and
        the positions of the won ones (the relay appends a loss directly, likewise). Columns,
        not a tuple per answer (issue 29): nothing per answer for the cyclic collector to
        count or walk while the queue fills."""
        self.outcome_reasons: list[str] = []
        """Why each loss the relay queued lost (``LOST_*``), counted into :attr:`lost` in C
        at :meth:`fold_queues` (issue 29: a dict's get and store per answer)."""
        self.by_competition = {True: PairStats(), False: PairStats()}
        self.by_flow = {True: PairStats(), False: PairStats()}
        """The same by whether the stream labelled the request informed."""
        """Fills and markouts by whether the request's competitor was observed: adverse
        selection hides in the fills nobody raced against on the record."""
        self.daily = DailyBook()
        self.periods = {name: PeriodBook(name) for name in ("hour", "day", "week")}
        self.trades = TradeBook()
        self.hold_reference: dict[str, float] | None = None
        self.hold_usd = 0.0
        self.drawdown = DrawdownWatch()
        self.latency = LatencyHistogram()
        self.outcomes = Timeline()

    # ------------------------------------------------------------------ counts

    def counts(self, requests: int, quoted: int, skips: Mapping[str, int]) -> None:
        """The desk's counters (``DeskStats``), taken at progress reports and at the end."""
        self.requests, self.quoted = requests, quoted
        self.skips = Counter(skips)
        self.fold()

    def on_request(
        self, request: QuoteRequest, t_us: int, latency_ms: float, skip: str | None
    ) -> None:
        """A request the desk answered at ``ts + latency_ms``: quoted (``skip`` None) or skipped
        with that reason (the desk counts totals; this keeps pairs, latency and time).
        Queued, and counted a batch at a time (:meth:`fold`)."""
        queue = self.request_queue
        queue.append(request)
        self.request_times.append(t_us)
        self.request_latencies.append(latency_ms)
        self.request_skips.append(skip)
        if len(queue) >= QUEUE_MAX:
            self.fold_queues()

    def on_resolved(self, edge_bps: float, notional_usd: float, won: bool) -> None:
        """An answer's outcome, by its edge and size (win rates); queued like a request."""
        edges = self.outcome_edges
        if won:
            self.outcome_wins.append(len(edges))
        edges.append(edge_bps)
        self.outcome_sizes.append(notional_usd)
        if len(edges) >= QUEUE_MAX:
            self.fold_queues()

    def fold(self) -> None:
        """Count what was queued: at progress reports and at the end (and whenever a queue is
        full), so the figures are current whenever they are read."""
        self.fold_queues()
        pairs, everything = self.pairs, self.pairs.all
        for (asset_in, asset_out, skip), n in self._requests.items():
            pair = pairs.stats(asset_in, asset_out)
            pair.requests += n
            everything.requests += n
            if skip is None:
                pair.quoted += n
                everything.quoted += n
            else:
                pair.skips[skip] += n
                everything.skips[skip] += n
        self._requests.clear()

    def fold_queues(self) -> None:
        """The queued requests and outcomes into their counts, in the order they came (the
        latency total is summed in that order, the timeline merges at the same points)."""
        queue = self.request_queue
        if queue:
            # Column by column: the counts in C (Counter.update counts in order of first
            # appearance, as the loop did), the latency total summed in order.
            skips, latencies = self.request_skips, self.request_latencies
            # the pairs' at fold(): (asset in, asset out, skip), zip's one tuple reused
            self._requests.update(zip(map(_IN, queue), map(_OUT, queue), skips, strict=True))
            latency, timeline = self.latency, self.outcomes
            # LatencyHistogram.add, by column: the same additions in order, in C
            latency.total = reduce(add, latencies, latency.total)
            latency.max = max(latency.max, *latencies)
            cap = LATENCY_CAP_MS
            if max(latencies) < cap and not any(map(_isnan, latencies)):
                latency.bins.update(map(int, latencies))  # in C: none is capped
            else:
                latency.bins.update([int(ms) if ms < cap else cap for ms in latencies])
            latency.n += len(queue)
            count_timeline(timeline, self.request_times, skips)
            queue.clear()
            self.request_times.clear()
            latencies.clear()
            skips.clear()
        edges = self.outcome_edges
        if edges:
            count_outcomes(
                self.edge_bins,
                self.size_bins,
                edges,
                self.outcome_sizes,
                self.outcome_wins,
                clamp_bps=EDGE_CLAMP_BPS,
                per_decade=SIZE_BINS_PER_DECADE,
            )
            edges.clear()
            self.outcome_sizes.clear()
            self.outcome_wins.clear()
        reasons = self.outcome_reasons
        if reasons:
            lost = self.lost
            for reason, n in Counter(reasons).items():
                lost[reason] = lost.get(reason, 0) + n
            reasons.clear()

    # ------------------------------------------------------------------ inventory risk

    def start(self, balances: Mapping[str, int], prices: Mapping[str, float], t: float) -> None:
        """Starting balances and the prices known at the start (inventory risk's reference)."""
        self.marks.update(prices)
        self.balances.update(balances)
        self.start_balances = dict(self.balances)
        self._update_exposure(t)
        self.inventory_series.add(t, tuple(self.balances.get(a, 0) for a in self.tokens))

    def _update_exposure(self, t: float) -> None:
        """Integrate the inventory risk up to ``t``, then take its new value."""
        if not self._exposure_started:
            self._exposure_started = True
            self._exposure_t0 = self._exposure_t = t
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
        self.exposure = exposure = moved / 2
        # max(max_exposure, exposure) without the builtin's ~0.45 µs call (issue 29): per fill
        highest = self.max_exposure
        self.max_exposure = exposure if exposure > highest else highest

    def inventory_risk(self) -> float:
        """The time-weighted mean inventory risk (USD) from the start to the last update."""
        span = self._exposure_t - self._exposure_t0
        if span <= 0:
            return self.exposure
        return self.exposure_integral / span

    def on_price(self, asset: str, usd: float, t: float) -> None:
        self.marks[asset] = usd
        if asset in self.balances and self.balances[asset] != self.start_balances.get(asset, 0):
            self._update_exposure(t)

    def on_balances(self, balances: Mapping[str, int], t: float) -> None:
        self.balances.update(balances)
        self._update_exposure(t)
        # Each token's balance, read in C (once per fill: issue 29), as ``.get(a, 0)`` does.
        self.inventory_series.add(t, tuple(map(self.balances.get, self.tokens, _ZEROS)))

    # ------------------------------------------------------------------ the desk's PnL

    def on_tick(self, t: float, pnl: float | None, drawdown: float, realized: float = 0.0) -> None:
        """The desk's marked PnL, drawdown and realized edge at a tick (None: not marked yet)."""
        if pnl is None:
            return
        if self.hold_reference is None:
            # The desk took its starting equity at this tick: the benchmark starts here too.
            self.hold_reference = {a: self.marks[a] for a in self.start_balances if a in self.marks}
        hold = self.hold_usd = self.hold()
        self.max_drawdown = max(self.max_drawdown, drawdown)
        self.pnl_series.add(t, (pnl, drawdown, realized, hold, self.fees))
        self.daily.on_tick(t, pnl, realized)
        for book in self.periods.values():
            book.on_tick(t, pnl, realized, hold, self.fees, self.won)
        self.drawdown.on_tick(t, pnl, drawdown)

    def hold(self) -> float:
        """The hold benchmark now (USD): the starting inventory revalued from the prices at
        which the desk took its starting equity to the current ones."""
        reference = self.hold_reference
        if not reference:
            return 0.0
        total = 0.0
        for asset, amount in self.start_balances.items():
            start = reference.get(asset)
            price = self.marks.get(asset)
            if amount and start is not None and price is not None:
                total += amount * (price - start) / self.scale[asset]
        return total

    # ------------------------------------------------------------------ fills

    def on_fill(self, record: FillRecord, settled_us: int) -> None:
        self.won += 1
        notional = record.amount_in * record.price_in / self.scale[record.asset_in]
        self.volume += notional
        pair, everything = self.pairs.both(record.asset_in, record.asset_out)
        split = (self.by_competition[record.observed], self.by_flow[record.informed])
        for stats in (pair, everything, *split):
            stats.won += 1
            stats.volume_usd += notional
            stats.realized_usd += record.realized_usd
            if notional > 0:
                stats.realized_bps.add(record.realized_usd / notional * 1e4)
        self.fees += record.fee * record.price_out / self.scale[record.asset_out]
        record.done_us = settled_us + self._last_horizon_us
        self.open_fills.append(record)
        self._by_quote[record.quote_id] = record

    def markout(self, quote_id: str, horizon_s: int, value_usd: float) -> None:
        """A ``Markout`` fact of the desk."""
        record = self._by_quote.get(quote_id)
        if record is not None:
            record.markouts[horizon_s] = value_usd
            notional = record.amount_in * record.price_in / self.scale[record.asset_in]
            for stats in self.pairs.both(record.asset_in, record.asset_out):
                stats.markout(horizon_s, value_usd, notional)
            self.by_competition[record.observed].markout(horizon_s, value_usd, notional)
            self.by_flow[record.informed].markout(horizon_s, value_usd, notional)
            if horizon_s == HORIZONS_S[-1]:
                self.trades.add(value_usd)

    def flush(self, now_us: int | None = None) -> None:
        """Hand the fills whose last markout was due by ``now_us`` (None: all) to the sink."""
        fills, by_quote, sink = self.open_fills, self._by_quote, self.sink
        while fills and (now_us is None or fills[0].done_us <= now_us):
            record = fills.popleft()
            if by_quote.get(record.quote_id) is record:
                del by_quote[record.quote_id]
            if sink is not None:
                sink(record)

    def finish(self, t: float | None = None) -> None:
        """Hand the fills whose markouts fell after the end of the replay to the sink, and
        carry the inventory risk to ``t`` (the end of the replay)."""
        if t is not None and self._exposure_started and t > self._exposure_t:
            self.exposure_integral += self.exposure * (t - self._exposure_t)
            self._exposure_t = t
        self.flush()
        self.fold()
