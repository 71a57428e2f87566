"""The bot's gauges: set by the periodic job from a :class:`MetricsSnapshot`, and the ticker's
heartbeat (DESIGN "The quote path"; docs/operations.md "Metrics").

Split out of :mod:`solver.io.metrics`, which keeps the per-request series: a gauge is written
every few seconds from plain data the app builds, never from the quote path, so what it shows
and how a snapshot becomes values reads on its own here. This module imports nothing from the
runtime: it only knows the snapshot's shape.

Inventory gauges are in whole tokens when the snapshot carries the asset's decimals, otherwise
in the asset's smallest unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

STATES = ("RUNNING", "PAUSED")
MODES = ("LIVE", "SHADOW")


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


def _units(amount: int, decimals: int | None) -> float:
    if decimals is None:
        return float(amount)
    # Exact integer split first: float(10**24-scale ints) / 10**24 loses more than this does.
    scale: int = 10**decimals
    whole, frac = divmod(int(amount), scale)
    return whole + frac / scale


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


class BotGauges:
    """The gauges of :class:`~solver.io.metrics.Metrics`, registered in its registry in the
    order ``/metrics`` shows them."""

    def __init__(self, r: CollectorRegistry) -> None:
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
        self.heartbeat = Gauge(
            "solver_heartbeat_timestamp_seconds",
            "Unix time of the bot's last heartbeat (its ticker, every 0.5 s; issues 24, 29).",
            registry=r,
        )
        """Set by :meth:`Metrics.heartbeat <solver.io.metrics.Metrics.heartbeat>`, not from
        the snapshot."""
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

    def refresh(self, snapshot: MetricsSnapshot | Mapping[str, Any]) -> None:
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
