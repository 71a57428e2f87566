"""Prometheus metrics of the running bot (DESIGN "The quote path": every outcome is counted).

:class:`Metrics` owns its own :class:`~prometheus_client.CollectorRegistry` — never the global
one — so several bots (or tests) in one process do not collide, and ``/metrics`` shows only the
bot's series, not the client library's process collectors.

Two kinds of writers:

- **The hot path** calls :meth:`Metrics.inc_request`, :meth:`~Metrics.inc_skip`,
  :meth:`~Metrics.observe_decision`, ... The per-request series are plain numbers in dicts and
  lists (:class:`_PairCounter`, :class:`_Latency`) that the registry reads at each scrape: a
  call is a dict add or a bisect — no lock, no ``.labels()`` call, no allocation once warm
  (issue 29: the client's locked children cost ~4 µs a request in all).
- **A periodic job** calls :meth:`Metrics.refresh_gauges` with a :class:`MetricsSnapshot` (or a
  plain mapping of its fields) built by the app. This module imports nothing from
  the runtime: it only knows the snapshot's shape.
- **Read at scrape time**: ``quotes_total`` is no count of its own. It shows the executor's
  outbox's count of answers sent (:meth:`Metrics.count_quotes_from`), the one place that fact is
  counted (docs/architecture.md "Counting sent answers"), so the two cannot disagree.

Series (all prefixed ``solver_``)::

    quote_requests_total{pair}                counter    every quote request seen
    quotes_total{pair}                        counter    quotes signed and sent
    skips_total{pair,reason}                  counter    requests answered with no quote
    quote_outcomes_total{pair,state}          counter    settlement transitions (WON, LOST, ...)
    volume_usd_total{pair}                    counter    USD notional of settled fills
    bad_frames_total{reason}                  counter    bus frames dropped unread
    notifications_total{result}               counter    alert messages sent, failed, dropped, ...
    decision_seconds                          histogram  request -> decision (Quote | Skip)
    response_seconds                          histogram  request -> quote_response written
    loop_lag_seconds                          histogram  how late the 20 ms ticker woke
    loop_lag_held_seconds                     histogram  ... less the thread's wait for a core
    free_inventory{asset}                     gauge      confirmed - reserved - floor
    reserved_inventory{asset}                 gauge      outflow held by open quotes
    pnl_marked_usd                            gauge      PnL marked to reference prices; NaN unknown
    pnl_realized_usd                          gauge      PnL of settled fills only; NaN unknown
    reconciliation_mismatch{asset}            gauge      on-chain minus expected balance
    connected                                 gauge      1 while the bus websocket is up
    state{state="RUNNING"|"PAUSED"}           gauge      1 on the current state, 0 on the other
    mode{mode="LIVE"|"SHADOW"}                gauge      1 on the current mode, 0 on the other
    open_quotes                               gauge      quotes not yet in a terminal state
    query_tables_behind                       gauge      journal entries not projected yet
    store_bytes                               gauge      the store's database and WAL on disk
    store_disk_free_bytes                     gauge      free space on the store's volume

**The pair label has bounded cardinality.** Requests name any two asset ids a taker likes, so a
label made from them would let the outside world create series without limit. Only the pairs
given to ``Metrics(pairs=...)`` get a label value of their own (``BASE/QUOTE``, by symbol when
known, for both directions); everything else — an unconfigured pair, or a call that passes no
pair — is counted under ``pair="other"``. :meth:`Metrics.pair_label` maps a request's two asset
ids to the label with two dict lookups, so the hot path can afford it.

Inventory gauges are in whole tokens when the snapshot carries the asset's decimals, otherwise
in the asset's smallest unit.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of :meth:`Metrics.render` (Prometheus text exposition format)."""

LATENCY_BUCKETS: tuple[float, ...] = (
    25e-6,
    50e-6,
    75e-6,
    100e-6,
    150e-6,
    250e-6,
    500e-6,
    750e-6,
    1e-3,
    2.5e-3,
    5e-3,
    10e-3,
    25e-3,
    50e-3,
    100e-3,
)
"""Seconds. Dense from 25 µs to 1 ms, where a healthy quote path lives (a minimal handler is
~30 µs; p99 under 1 ms at 2,000/s), then coarse up to 100 ms to show stalls; ``+Inf`` beyond."""
LOOP_LAG_BUCKETS: tuple[float, ...] = (2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)
"""Seconds, from 2 ms: the loop's timers wake within a millisecond of their time at best
(libuv counts in milliseconds), so finer buckets would only show the timer."""

STATES = ("RUNNING", "PAUSED")
MODES = ("LIVE", "SHADOW")
OTHER = "other"
"""The ``pair`` label of everything that is not a configured pair."""
NOTIFICATION_RESULTS = ("sent", "failed", "dropped", "duplicate", "rate_limited")
"""``solver_notifications_total{result}``: see :class:`solver.io.notify.NotifierStats`."""


@dataclass(slots=True)
class MetricsSnapshot:
    """What the periodic job reads from the app for the gauges (plain data, no app objects)."""

    free: Mapping[str, int] = field(default_factory=dict)
    """asset -> free inventory, smallest units."""
    reserved: Mapping[str, int] = field(default_factory=dict)
    """asset -> outflow reserved by open quotes, smallest units."""
    decimals: Mapping[str, int] = field(default_factory=dict)
    """asset -> decimals; an asset listed here is reported in whole tokens."""
    pnl_marked_usd: float | None = None
    """Realised plus unrealised PnL, inventory marked to reference prices (None: unknown)."""
    pnl_realized_usd: float | None = None
    """PnL of settled fills only, at the prices of their settlement (None: unknown)."""
    mismatch: Mapping[str, int] = field(default_factory=dict)
    """asset -> on-chain balance minus expected, smallest units (0 or absent: reconciled)."""
    connected: bool = False
    paused: bool = False
    """True while the whole bot is paused (scope ``*``); per-pair pauses keep it RUNNING."""
    shadow: bool = False
    """True in shadow mode (quotes decided and counted, nothing signed or sent)."""
    open_quotes: int = 0
    query_tables_behind: int = 0
    """Journal entries not projected yet: the query tables lag by this much (they catch up
    while the process has CPU to spare; docs/bot.md "Persistence and restart safety")."""
    store_bytes: int | None = None
    """The store's database and WAL files, bytes (None: no store, or it cannot be read)."""
    store_disk_free_bytes: int | None = None
    """Free space on the store's volume for the bot's user, bytes (a full disk pauses
    quoting; docs/operations.md "Disk")."""


_SNAPSHOT_FIELDS = frozenset(f.name for f in fields(MetricsSnapshot))


class _AssetGauge:
    """A gauge labelled by asset whose label sets follow the snapshot (gone assets removed)."""

    __slots__ = ("_children", "_gauge")

    def __init__(self, gauge: Gauge) -> None:
        self._gauge = gauge
        self._children: dict[str, Any] = {}

    def update(self, values: Mapping[str, int], decimals: Mapping[str, int]) -> None:
        for asset in set(self._children) - set(values):
            self._gauge.remove(asset)
            del self._children[asset]
        for asset, amount in values.items():
            child = self._children.get(asset)
            if child is None:
                child = self._children[asset] = self._gauge.labels(asset)
            child.set(_units(amount, decimals.get(asset)))


class _PairCounter(Collector):
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


class _Latency(Collector):
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


class _PairTotals(Collector):
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


def _units(amount: int, decimals: int | None) -> float:
    if decimals is None:
        return float(amount)
    # Exact integer split first: float(10**24-scale ints) / 10**24 loses more than this does.
    scale: int = 10**decimals
    whole, frac = divmod(int(amount), scale)
    return whole + frac / scale


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


class Metrics:
    """The bot's metrics, in a registry of their own. Cheap to call from the quote path.

    ``pairs`` are the configured pairs as ``(base, quote)`` asset ids; ``symbols`` (asset id ->
    symbol) makes their labels readable (``wNEAR/USDC``). See the module doc on cardinality.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        pairs: Iterable[tuple[str, str]] = (),
        symbols: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        names = symbols or {}
        # asset_in -> asset_out -> label, both directions of every configured pair.
        self._pair_of: dict[str, dict[str, str]] = {}
        for base, quote in pairs:
            label = f"{names.get(base, base)}/{names.get(quote, quote)}"
            self._pair_of.setdefault(base, {})[quote] = label
            self._pair_of.setdefault(quote, {})[base] = label
        labels = frozenset(
            {label for by_out in self._pair_of.values() for label in by_out.values()} | {OTHER}
        )
        self.pairs: tuple[str, ...] = (*sorted(labels - {OTHER}), OTHER)
        """Every value the ``pair`` label can take, ``other`` last."""
        self._requests = _PairCounter(
            "solver_quote_requests", "Quote requests received from the bus.", ("pair",), labels
        )
        r.register(self._requests)
        self._quotes = _PairTotals("solver_quotes", "Quotes signed and sent.", labels)
        r.register(self._quotes)
        self._skips = _PairCounter(
            "solver_skips",
            "Quote requests not quoted, by pair and reason.",
            ("pair", "reason"),
            labels,
        )
        self._outcomes = _PairCounter(
            "solver_quote_outcomes",
            "Quote state transitions (WON, SETTLED, LOST, ...), by pair and new state.",
            ("pair", "state"),
            labels,
        )
        self._volume = _PairCounter(
            "solver_volume_usd", "USD notional of settled fills, by pair.", ("pair",), labels
        )
        for counter in (self._skips, self._outcomes, self._volume):
            r.register(counter)
        for pair in labels:  # every pair visible at 0 from the first scrape
            self._requests.preset(pair)
            self._volume.preset(pair)
        self._bad_frames = Counter(
            "solver_bad_frames", "Bus frames dropped unread, by reason.", ["reason"], registry=r
        )
        notifications = Counter(
            "solver_notifications",
            "Alert notifications by result (sent, failed, dropped, duplicate, rate_limited).",
            ["result"],
            registry=r,
        )
        self._notifications = {name: notifications.labels(name) for name in NOTIFICATION_RESULTS}
        self._notifications_seen: dict[str, int] = {}
        self._outcomes_seen: dict[tuple[str, str], int] = {}
        self._volume_seen: dict[str, float] = {}
        self._decision = _Latency(
            "solver_decision_seconds",
            "Time from quote request to decision (quote or skip).",
            LATENCY_BUCKETS,
        )
        self._response = _Latency(
            "solver_response_seconds",
            "Time from quote request to the quote_response written to the bus.",
            LATENCY_BUCKETS,
        )
        r.register(self._decision)
        r.register(self._response)
        self._loop_lag = Histogram(
            "solver_loop_lag_seconds",
            "How late the bot's 20 ms ticker woke: the event loop held by other work "
            "(timers have 1 ms resolution).",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self._loop_lag_held = Histogram(
            "solver_loop_lag_held_seconds",
            "How late the 20 ms ticker woke, less the time the loop's thread waited for a core "
            "during the sleep (Linux schedstat): what the bot's own work or blocking held the "
            "loop, at least; a core taken by another process is not in it.",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self._free = _AssetGauge(
            Gauge("solver_free_inventory", "Free inventory per asset.", ["asset"], registry=r)
        )
        self._reserved = _AssetGauge(
            Gauge(
                "solver_reserved_inventory",
                "Inventory reserved by open quotes per asset.",
                ["asset"],
                registry=r,
            )
        )
        self._mismatch = _AssetGauge(
            Gauge(
                "solver_reconciliation_mismatch",
                "On-chain balance minus expected balance per asset (0 when reconciled).",
                ["asset"],
                registry=r,
            )
        )
        self._pnl_marked = Gauge(
            "solver_pnl_marked_usd",
            "PnL in USD, inventory marked to reference prices (NaN while unknown).",
            registry=r,
        )
        self._pnl_realized = Gauge(
            "solver_pnl_realized_usd",
            "Realised PnL in USD of settled fills only (NaN while unknown).",
            registry=r,
        )
        self._pnl_marked.set(math.nan)
        self._pnl_realized.set(math.nan)
        self._connected = Gauge(
            "solver_connected", "1 while the bus websocket is connected.", registry=r
        )
        self._heartbeat = Gauge(
            "solver_heartbeat_timestamp_seconds",
            "Unix time of the bot's last heartbeat (its ticker, every 0.5 s; issues 24, 29).",
            registry=r,
        )
        state = Gauge(
            "solver_state",
            "1 on the bot's current state (RUNNING or PAUSED).",
            ["state"],
            registry=r,
        )
        self._state = {name: state.labels(name) for name in STATES}
        self._state["RUNNING"].set(1)
        mode = Gauge(
            "solver_mode", "1 on the bot's current mode (LIVE or SHADOW).", ["mode"], registry=r
        )
        self._mode = {name: mode.labels(name) for name in MODES}
        self._mode["LIVE"].set(1)
        self._open = Gauge(
            "solver_open_quotes", "Quotes signed and not yet in a terminal state.", registry=r
        )
        self._behind = Gauge(
            "solver_query_tables_behind",
            "Journal entries the query tables (quotes, fills, ...) do not show yet.",
            registry=r,
        )
        self._store_bytes = Gauge(
            "solver_store_bytes", "The store's database and WAL files, bytes.", registry=r
        )
        self._disk_free = Gauge(
            "solver_store_disk_free_bytes",
            "Free space on the store's volume for the bot's user, bytes.",
            registry=r,
        )
        # Hot-path cache: label value -> child.
        self._bad_frame_children: dict[str, Any] = {}
        self._bad_frames_seen: dict[str, int] = {}

    # ------------------------------------------------------------------ hot path

    def pair_label(self, asset_in: str, asset_out: str) -> str:
        """The ``pair`` label of a request from ``asset_in`` to ``asset_out`` (either direction
        of a configured pair), or ``other``."""
        by_out = self._pair_of.get(asset_in)
        if by_out is None:
            return OTHER
        return by_out.get(asset_out, OTHER)

    def inc_request(self, pair: str = OTHER) -> None:
        self._requests.inc(pair)

    def inc_skip(self, reason: str, pair: str = OTHER) -> None:
        self._skips.inc(pair, reason)

    def inc_outcome(self, state: str, pair: str = OTHER) -> None:
        self._outcomes.inc(pair, state)

    def add_volume(self, usd: float, pair: str = OTHER) -> None:
        """Count a settled fill's USD notional (ignored when unknown or not finite)."""
        if usd > 0 and math.isfinite(usd):
            self._volume.inc(pair, "", usd)

    def inc_bad_frame(self, reason: str, count: int = 1) -> None:
        child = self._bad_frame_children.get(reason)
        if child is None:
            child = self._bad_frame_children[reason] = self._bad_frames.labels(reason)
        child.inc(count)

    def observe_decision(self, seconds: float) -> None:
        self._decision.observe(seconds)

    def observe_response(self, seconds: float) -> None:
        self._response.observe(seconds)

    def observe_loop_lag(self, seconds: float, held_s: float) -> None:
        """A tick ``seconds`` late, ``held_s`` of it the bot's (:mod:`solver.runtime.run_queue`)."""
        self._loop_lag.observe(seconds)
        self._loop_lag_held.observe(held_s)

    def heartbeat(self, unix_s: float) -> None:
        """The ticker is alive at ``unix_s``: ``SolverHeartbeatStale`` watches it."""
        self._heartbeat.set(unix_s)

    def preset(self, *, skip_reasons: Iterable[str] = (), states: Iterable[str] = ()) -> None:
        """Create labelled series at 0 up front (for every pair label), so ``rate()`` sees
        their first increment."""
        reasons, new_states = tuple(skip_reasons), tuple(states)
        for pair in self.pairs:
            for reason in reasons:
                self._skips.preset(pair, reason)
            for state in new_states:
                self._outcomes.preset(pair, state)

    # ------------------------------------------------------------------ read at scrape time

    def count_quotes_from(self, sent: Mapping[str, int]) -> None:
        """``quotes_total{pair}`` shows ``sent`` (``pair -> answers sent``, kept up to date by
        its owner, the executor's outbox) at every scrape."""
        self._quotes.totals = sent

    # ------------------------------------------------------------------ periodic job

    def sync_bad_frames(self, totals: Mapping[str, int]) -> None:
        """Catch up with cumulative per-reason counts kept elsewhere (``WsCounters.bad_frames``):
        adds what grew since the last call, so the counter follows without a hot-path hook."""
        for reason, total in totals.items():
            grew = total - self._bad_frames_seen.get(reason, 0)
            if grew > 0:
                self.inc_bad_frame(reason, grew)
                self._bad_frames_seen[reason] = total

    def sync_notifications(self, totals: Mapping[str, int]) -> None:
        """Catch up with the notifier's cumulative counts (``Notifier.stats.as_dict()``);
        results outside :data:`NOTIFICATION_RESULTS` are ignored (bounded label set)."""
        for result, total in totals.items():
            child = self._notifications.get(result)
            grew = total - self._notifications_seen.get(result, 0)
            if child is not None and grew > 0:
                child.inc(grew)
                self._notifications_seen[result] = total

    def sync_outcomes(
        self, totals: Mapping[tuple[str, str], int], *, baseline: bool = False
    ) -> None:
        """Catch up with cumulative ``(pair, state) -> count`` kept by the desk (its per-pair
        stats, which know each quote's pair even after it left the book). ``baseline``: take
        the totals as already counted (the facts replayed at start happened before this
        process)."""
        for key, total in totals.items():
            grew = total - self._outcomes_seen.get(key, 0)
            if grew > 0:
                if not baseline:
                    self._outcomes.inc(*key, amount=grew)
                self._outcomes_seen[key] = total

    def sync_volume(self, totals: Mapping[str, float], *, baseline: bool = False) -> None:
        """Catch up with cumulative ``pair -> USD volume`` of settled fills (as above)."""
        for pair, total in totals.items():
            grew = total - self._volume_seen.get(pair, 0.0)
            if grew > 0 and math.isfinite(grew):
                if not baseline:
                    self.add_volume(grew, pair)
                self._volume_seen[pair] = total

    def refresh_gauges(self, snapshot: MetricsSnapshot | Mapping[str, Any]) -> None:
        """Set every gauge from a snapshot; a mapping must use :class:`MetricsSnapshot`'s keys."""
        if not isinstance(snapshot, MetricsSnapshot):
            unknown = set(snapshot) - _SNAPSHOT_FIELDS
            if unknown:
                raise ValueError(f"unknown snapshot keys: {sorted(unknown)}")
            snapshot = MetricsSnapshot(**snapshot)
        self._free.update(snapshot.free, snapshot.decimals)
        self._reserved.update(snapshot.reserved, snapshot.decimals)
        self._mismatch.update(snapshot.mismatch, snapshot.decimals)
        self._pnl_marked.set(_nan_if_none(snapshot.pnl_marked_usd))
        self._pnl_realized.set(_nan_if_none(snapshot.pnl_realized_usd))
        self._connected.set(1 if snapshot.connected else 0)
        current = "PAUSED" if snapshot.paused else "RUNNING"
        for name, child in self._state.items():
            child.set(1 if name == current else 0)
        mode = "SHADOW" if snapshot.shadow else "LIVE"
        for name, child in self._mode.items():
            child.set(1 if name == mode else 0)
        self._open.set(snapshot.open_quotes)
        self._behind.set(snapshot.query_tables_behind)
        self._store_bytes.set(_nan_if_none(snapshot.store_bytes))
        self._disk_free.set(_nan_if_none(snapshot.store_disk_free_bytes))

    # ------------------------------------------------------------------ exposition

    def render(self) -> bytes:
        """The registry in Prometheus text format (serve with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
