"""Prometheus metrics of the running bot (DESIGN "The quote path": every outcome is counted).

:class:`Metrics` owns its own :class:`~prometheus_client.CollectorRegistry` — never the global
one — so several bots (or tests) in one process do not collide, and ``/metrics`` shows only the
bot's series, not the client library's process collectors.

Two kinds of writers:

- **The hot path** calls :meth:`Metrics.inc_request`, :meth:`~Metrics.inc_skip`,
  :meth:`~Metrics.observe_decision`, ... The per-request series are plain numbers in dicts and
  lists (:mod:`solver.io.metrics_series`) that the registry reads at each scrape: a call is a
  dict add or a bisect — no lock, no ``.labels()`` call, no allocation once warm (issue 29: the
  client's locked children cost ~4 µs a request in all).
- **A periodic job** calls :meth:`Metrics.refresh_gauges` with a
  :class:`~solver.io.metrics_gauges.MetricsSnapshot` (or a plain mapping of its fields) built by
  the app (the gauges: :mod:`solver.io.metrics_gauges`). These modules import nothing from the
  runtime: they only know the snapshot's shape.
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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from solver.io.metrics_gauges import BotGauges, MetricsSnapshot
from solver.io.metrics_series import OTHER, LatencyHistogram, PairCounter, PairTotals

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

NOTIFICATION_RESULTS = ("sent", "failed", "dropped", "duplicate", "rate_limited")
"""``solver_notifications_total{result}``: see :class:`solver.io.notify.NotifierStats`."""


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
        self._requests = PairCounter(
            "solver_quote_requests", "Quote requests received from the bus.", ("pair",), labels
        )
        r.register(self._requests)
        self._quotes = PairTotals("solver_quotes", "Quotes signed and sent.", labels)
        r.register(self._quotes)
        self._skips = PairCounter(
            "solver_skips",
            "Quote requests not quoted, by pair and reason.",
            ("pair", "reason"),
            labels,
        )
        self._outcomes = PairCounter(
            "solver_quote_outcomes",
            "Quote state transitions (WON, SETTLED, LOST, ...), by pair and new state.",
            ("pair", "state"),
            labels,
        )
        self._volume = PairCounter(
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
        self._decision = LatencyHistogram(
            "solver_decision_seconds",
            "Time from quote request to decision (quote or skip).",
            LATENCY_BUCKETS,
        )
        self._response = LatencyHistogram(
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
        self._gauges = BotGauges(r)
        self._heartbeat = self._gauges.heartbeat
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
        self._gauges.refresh(snapshot)

    # ------------------------------------------------------------------ exposition

    def render(self) -> bytes:
        """The registry in Prometheus text format (serve with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
