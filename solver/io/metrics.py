"""Prometheus metrics of the running bot (DESIGN "The quote path": every outcome is counted).

:class:`Metrics` owns its own :class:`~prometheus_client.CollectorRegistry` — never the global
one — so several bots (or tests) in one process do not collide, and ``/metrics`` shows only the
bot's series, not the client library's process collectors.

Two kinds of writers:

- **The hot path** calls :meth:`Metrics.inc_request`, :meth:`~Metrics.inc_quote`,
  :meth:`~Metrics.inc_skip`, :meth:`~Metrics.observe_decision`, ... Labelled children are
  cached in plain dicts (``reason -> child``), so a call is a dict lookup plus the client's
  locked add — no ``.labels()`` call, no string formatting, no allocation once warm.
- **A periodic job** calls :meth:`Metrics.refresh_gauges` with a :class:`MetricsSnapshot` (or a
  plain mapping of its fields) built by the app. This module imports nothing from
  the runtime: it only knows the snapshot's shape.

Series (all prefixed ``solver_``)::

    quote_requests_total                      counter    every quote request seen
    quotes_total                              counter    quotes signed and sent
    skips_total{reason}                       counter    requests answered with no quote
    quote_outcomes_total{state}               counter    settlement transitions (WON, LOST, ...)
    bad_frames_total{reason}                  counter    bus frames dropped unread
    decision_seconds                          histogram  request -> decision (Quote | Skip)
    response_seconds                          histogram  request -> quote_response written
    free_inventory{asset}                     gauge      confirmed - reserved - floor
    reserved_inventory{asset}                 gauge      outflow held by open quotes
    pnl_usd                                   gauge      NaN while unknown
    reconciliation_mismatch{asset}            gauge      on-chain minus expected balance
    connected                                 gauge      1 while the bus websocket is up
    state{state="RUNNING"|"PAUSED"}           gauge      1 on the current state, 0 on the other
    open_quotes                               gauge      quotes not yet in a terminal state

Inventory gauges are in whole tokens when the snapshot carries the asset's decimals, otherwise
in the asset's smallest unit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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

STATES = ("RUNNING", "PAUSED")


@dataclass(slots=True)
class MetricsSnapshot:
    """What the periodic job reads from the app for the gauges (plain data, no app objects)."""

    free: Mapping[str, int] = field(default_factory=dict)
    """asset -> free inventory, smallest units."""
    reserved: Mapping[str, int] = field(default_factory=dict)
    """asset -> outflow reserved by open quotes, smallest units."""
    decimals: Mapping[str, int] = field(default_factory=dict)
    """asset -> decimals; an asset listed here is reported in whole tokens."""
    pnl_usd: float | None = None
    mismatch: Mapping[str, int] = field(default_factory=dict)
    """asset -> on-chain balance minus expected, smallest units (0 or absent: reconciled)."""
    connected: bool = False
    paused: bool = False
    """True while the whole bot is paused (scope ``*``); per-pair pauses keep it RUNNING."""
    open_quotes: int = 0


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


def _units(amount: int, decimals: int | None) -> float:
    if decimals is None:
        return float(amount)
    # Exact integer split first: float(10**24-scale ints) / 10**24 loses more than this does.
    scale: int = 10**decimals
    whole, frac = divmod(int(amount), scale)
    return whole + frac / scale


class Metrics:
    """The bot's metrics, in a registry of their own. Cheap to call from the quote path."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = Counter(
            "solver_quote_requests", "Quote requests received from the bus.", registry=r
        )
        self._quotes = Counter("solver_quotes", "Quotes signed and sent.", registry=r)
        self._skips = Counter(
            "solver_skips", "Quote requests not quoted, by reason.", ["reason"], registry=r
        )
        self._outcomes = Counter(
            "solver_quote_outcomes",
            "Quote state transitions (WON, SETTLED, LOST, ...), by new state.",
            ["state"],
            registry=r,
        )
        self._bad_frames = Counter(
            "solver_bad_frames", "Bus frames dropped unread, by reason.", ["reason"], registry=r
        )
        self._decision = Histogram(
            "solver_decision_seconds",
            "Time from quote request to decision (quote or skip).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._response = Histogram(
            "solver_response_seconds",
            "Time from quote request to the quote_response written to the bus.",
            buckets=LATENCY_BUCKETS,
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
        self._pnl = Gauge("solver_pnl_usd", "Realised PnL in USD (NaN while unknown).", registry=r)
        self._pnl.set(math.nan)
        self._connected = Gauge(
            "solver_connected", "1 while the bus websocket is connected.", registry=r
        )
        state = Gauge(
            "solver_state",
            "1 on the bot's current state (RUNNING or PAUSED).",
            ["state"],
            registry=r,
        )
        self._state = {name: state.labels(name) for name in STATES}
        self._state["RUNNING"].set(1)
        self._open = Gauge(
            "solver_open_quotes", "Quotes signed and not yet in a terminal state.", registry=r
        )
        # Hot-path caches: label value -> child.
        self._skip_children: dict[str, Any] = {}
        self._outcome_children: dict[str, Any] = {}
        self._bad_frame_children: dict[str, Any] = {}
        self._bad_frames_seen: dict[str, int] = {}

    # ------------------------------------------------------------------ hot path

    def inc_request(self) -> None:
        self._requests.inc()

    def inc_quote(self) -> None:
        self._quotes.inc()

    def inc_skip(self, reason: str) -> None:
        child = self._skip_children.get(reason)
        if child is None:
            child = self._skip_children[reason] = self._skips.labels(reason)
        child.inc()

    def inc_outcome(self, state: str) -> None:
        child = self._outcome_children.get(state)
        if child is None:
            child = self._outcome_children[state] = self._outcomes.labels(state)
        child.inc()

    def inc_bad_frame(self, reason: str, count: int = 1) -> None:
        child = self._bad_frame_children.get(reason)
        if child is None:
            child = self._bad_frame_children[reason] = self._bad_frames.labels(reason)
        child.inc(count)

    def observe_decision(self, seconds: float) -> None:
        self._decision.observe(seconds)

    def observe_response(self, seconds: float) -> None:
        self._response.observe(seconds)

    def preset(self, *, skip_reasons: Iterable[str] = (), states: Iterable[str] = ()) -> None:
        """Create labelled series at 0 up front, so ``rate()`` sees their first increment."""
        for reason in skip_reasons:
            if reason not in self._skip_children:
                self._skip_children[reason] = self._skips.labels(reason)
        for state in states:
            if state not in self._outcome_children:
                self._outcome_children[state] = self._outcomes.labels(state)

    # ------------------------------------------------------------------ periodic job

    def sync_bad_frames(self, totals: Mapping[str, int]) -> None:
        """Catch up with cumulative per-reason counts kept elsewhere (``WsCounters.bad_frames``):
        adds what grew since the last call, so the counter follows without a hot-path hook."""
        for reason, total in totals.items():
            grew = total - self._bad_frames_seen.get(reason, 0)
            if grew > 0:
                self.inc_bad_frame(reason, grew)
                self._bad_frames_seen[reason] = total

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
        self._pnl.set(math.nan if snapshot.pnl_usd is None else snapshot.pnl_usd)
        self._connected.set(1 if snapshot.connected else 0)
        current = "PAUSED" if snapshot.paused else "RUNNING"
        for name, child in self._state.items():
            child.set(1 if name == current else 0)
        self._open.set(snapshot.open_quotes)

    # ------------------------------------------------------------------ exposition

    def render(self) -> bytes:
        """The registry in Prometheus text format (serve with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
