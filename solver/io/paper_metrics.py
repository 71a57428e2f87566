"""Prometheus series of shadow mode's paper book (docs/paper-trading.md), beside the bot's own.

Registered on the bot's registry (:attr:`solver.io.metrics.Metrics.registry`) only in shadow
mode, so a live bot shows none of them and a dashboard can tell paper from real money by name::

    paper_fills_total                         counter    shadow quotes a simulated user took
    paper_lost_total{reason}                  counter    shadow quotes not filled, by reason
    paper_pnl_marked_usd                      gauge      paper flows at current reference prices
    paper_pnl_realized_usd                    gauge      realized edge of the paper fills
    paper_inventory{asset}                    gauge      real confirmed balance + paper flows

(all prefixed ``solver_``; the inventory in whole tokens). The mode itself is
``solver_mode{mode="SHADOW"}`` of :class:`~solver.io.metrics.Metrics`. Like that module, this one
knows only plain data (:class:`PaperSnapshot`), nothing of the runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(slots=True)
class PaperSnapshot:
    fills: int = 0
    """Cumulative paper fills."""
    lost: Mapping[str, int] = field(default_factory=dict)
    """Cumulative paper losses by reason."""
    pnl_marked_usd: float | None = None
    pnl_realized_usd: float = 0.0
    inventory: Mapping[str, int] = field(default_factory=dict)
    """asset -> paper balance, smallest units."""
    decimals: Mapping[str, int] = field(default_factory=dict)


class PaperMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._fills = Counter(
            "solver_paper_fills", "Shadow quotes a simulated user took (paper).", registry=r
        )
        self._lost = Counter(
            "solver_paper_lost",
            "Shadow quotes not filled in the paper book, by reason.",
            ["reason"],
            registry=r,
        )
        self._marked = Gauge(
            "solver_paper_pnl_marked_usd",
            "Paper PnL: the paper flows at current reference prices (NaN while unknown).",
            registry=r,
        )
        self._realized = Gauge(
            "solver_paper_pnl_realized_usd",
            "Paper PnL: realized edge of the paper fills at their reference prices.",
            registry=r,
        )
        self._inventory = Gauge(
            "solver_paper_inventory",
            "Paper inventory per asset (real confirmed balance plus paper flows), whole tokens.",
            ["asset"],
            registry=r,
        )
        self._marked.set(math.nan)
        self._fills_seen = 0
        self._lost_seen: dict[str, int] = {}
        self._lost_children: dict[str, Any] = {}

    def refresh(self, snapshot: PaperSnapshot) -> None:
        """Catch the counters up with the cumulative totals and set the gauges."""
        if snapshot.fills > self._fills_seen:
            self._fills.inc(snapshot.fills - self._fills_seen)
            self._fills_seen = snapshot.fills
        for reason, total in snapshot.lost.items():
            grew = total - self._lost_seen.get(reason, 0)
            if grew > 0:
                child = self._lost_children.get(reason)
                if child is None:
                    child = self._lost_children[reason] = self._lost.labels(reason)
                child.inc(grew)
                self._lost_seen[reason] = total
        marked = snapshot.pnl_marked_usd
        self._marked.set(math.nan if marked is None else marked)
        self._realized.set(snapshot.pnl_realized_usd)
        for asset, amount in snapshot.inventory.items():
            decimals = snapshot.decimals.get(asset)
            value = amount if decimals is None else amount / 10**decimals
            self._inventory.labels(asset).set(value)
