"""The balance side of the desk: snapshots taken in, expected balances, mismatches found
(DESIGN "Settlement"; the range rule is :mod:`solver.core.risk`'s).

Expected balances are the first snapshot plus every own settlement since (quotes, and the
rebalancer's moves), plus gaps already reported (absorbed, so only new unexplained moves are
reported again), or the balances an operator accepted. A settlement we heard of may be missing
from a snapshot requested before we heard: until a later snapshot, its reverse is tolerated.

Pure, and changed only by the desk's facts, so the journal rebuilds it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from solver.core.inventory import Reservation
from solver.core.risk import Reconciler, RiskLimits

Totals = tuple[Mapping[str, int], Mapping[str, int]]


class Reconciliation:
    def __init__(self, limits: RiskLimits) -> None:
        self.limits = limits
        self.reconciler = Reconciler()
        self.snapshot_at: datetime | None = None
        self.last: dict[str, int] | None = None  # the last snapshot taken in
        self.found: dict[str, int] = {}  # its gaps (0 = explained)
        self.own_settling = False
        # Gaps beyond tolerance found since the operator last resumed: the reconciler absorbs
        # a gap at once (so only new moves are reported again), but the operator must still
        # see it in status, /healthz and the mismatch gauge until ``solver resume``.
        self.unresolved: dict[str, int] = {}
        # Own settlements heard of (at the datetime) that no snapshot is known to include yet,
        # as the reverse of the move (what the snapshot may still lack or hold).
        self.unconfirmed: dict[str, tuple[Reservation, datetime]] = {}
        self.report: dict[str, Any] | None = None

    def settled(
        self, key: str, asset_in: str, amount_in: int, asset_out: str, outflow: int, at: datetime
    ) -> None:
        """An own settlement (a quote's, or a rebalance move) heard of at ``at``."""
        self.reconciler.on_settled(asset_in, amount_in, asset_out, outflow)
        self.unconfirmed[key] = (Reservation(key, asset_in, amount_in, asset_out, outflow, at), at)

    def reconcile(
        self,
        balances: Mapping[str, int],
        observed: datetime,
        own_open: Sequence[Reservation],
        own_settling: bool,
        totals: Totals,
    ) -> dict[str, int]:
        """Take in a snapshot; its gaps per asset (``totals``: what open quotes may move)."""
        self.snapshot_at, self.last, self.own_settling = observed, dict(balances), own_settling
        for key, (_, heard_at) in list(self.unconfirmed.items()):
            if heard_at <= observed:
                del self.unconfirmed[key]  # this snapshot, and every later one, has it
        tolerated = [reverse for reverse, _ in self.unconfirmed.values()]
        tolerated += own_open
        found = self.reconciler.on_snapshot(balances, tolerated, totals=totals)
        for asset, gap in found.items():
            if gap and abs(gap) > self.limits.max_mismatch.get(asset, 0):
                self.unresolved[asset] = self.unresolved.get(asset, 0) + gap
        self.found = found
        gaps = {a: g for a, g in found.items() if g} | self.unresolved
        self.report = {
            "at": observed.isoformat(timespec="milliseconds"),
            "ok": not self.unresolved,
            "mismatches": {a: str(g) for a, g in gaps.items()},
        }
        return found

    def expected_now(self) -> dict[str, int]:
        """Expected balances as of the last snapshot: without the settlements it may lack."""
        expected = dict(self.reconciler.expected or self.last or {})
        for reverse, _ in self.unconfirmed.values():
            # reverse of a settlement: asset_out/amount_out is what came in, asset_in/amount_in
            # what went out
            expected[reverse.asset_out] = expected.get(reverse.asset_out, 0) - reverse.amount_out
            expected[reverse.asset_in] = expected.get(reverse.asset_in, 0) + reverse.amount_in
        return expected

    def accept(self, balances: Mapping[str, int]) -> None:
        """The operator's new baseline: ``balances`` plus the settlements they may lack."""
        expected = dict(balances)
        for reverse, _ in self.unconfirmed.values():
            expected[reverse.asset_out] = expected.get(reverse.asset_out, 0) + reverse.amount_out
            expected[reverse.asset_in] = expected.get(reverse.asset_in, 0) - reverse.amount_in
        self.reconciler.expected = expected
        self.reconciler.last = dict.fromkeys(balances, 0)
        self.found = dict.fromkeys(balances, 0)
        self.unresolved.clear()
        if self.report is not None:
            self.report = {**self.report, "ok": True, "mismatches": {}}
