"""The balance side of the desk: snapshots taken in, expected balances, mismatches found
(DESIGN "Settlement", "Reconciliation explains before it pauses"; the range rule is
:mod:`solver.core.risk`'s).

Expected balances are the first snapshot plus every own settlement since (quotes, and the
rebalancer's moves), plus gaps already confirmed (absorbed, so only new unexplained moves are
reported again), or the balances an operator accepted. A settlement we heard of may be missing
from a snapshot requested before we heard: until a later snapshot, its reverse is tolerated.

A snapshot is compared with the expected balances of the same moment (issue 24): a gap beyond
tolerance may be *held* (not absorbed, nothing paused) while its explanation is looked for —
nonce checks of quotes closed without one (:mod:`solver.core.desk_gaps`), or settlements an
accepted baseline may already have held (its **doubts**) — and is confirmed only by a later
snapshot that still shows it.

Pure, and changed only by the desk's facts, so the journal rebuilds it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solver.core.clock import MINUTE, Micros, from_micros
from solver.core.inventory import Reservation
from solver.core.risk import Reconciler, RiskLimits, flow_totals, mismatches_from_totals

Totals = tuple[Mapping[str, int], Mapping[str, int]]

DOUBTS_MAX = 10
"""Settlements after an accepted baseline kept as doubts, the first ones heard (the likeliest
to be in it: executed before its read, heard just after): a gap is matched against their
subsets (2^10 = 1,024 comparisons of a few µs at most, once per gap)."""
DOUBT_WINDOW = 10 * MINUTE


@dataclass(frozen=True, slots=True)
class Doubt:
    """A settlement heard after an accepted baseline's snapshot was requested, of a quote that
    existed before the accept: the snapshot may already hold it, and the baseline then counts
    it twice (issue 24, finding 3)."""

    key: str
    diff: Mapping[str, int]
    heard_at: Micros


def diff_of(asset_in: str, amount_in: int, asset_out: str, outflow: int) -> dict[str, int]:
    """What a settlement does to our balances: ``amount_in`` comes in, ``outflow`` goes out."""
    diff = {asset_in: amount_in}
    diff[asset_out] = diff.get(asset_out, 0) - outflow
    return diff


class Reconciliation:
    def __init__(self, limits: RiskLimits) -> None:
        self.limits = limits
        self.reconciler = Reconciler()
        self.snapshot_at: Micros | None = None
        self.last: dict[str, int] | None = None  # the last snapshot taken in
        self.found: dict[str, int] = {}  # its gaps (0 = explained)
        self.own_settling = False
        # Gaps beyond tolerance confirmed since the operator last accepted: the reconciler
        # absorbs a confirmed gap at once (so only new moves are reported again), but the
        # operator must still see it in status, /healthz and the mismatch gauge until
        # ``solver resume --accept-balances`` (or until verified fills explain it).
        self.unresolved: dict[str, int] = {}
        # Own settlements heard of (at the Micros) that no snapshot is known to include yet,
        # as the reverse of the move (what the snapshot may still lack or hold).
        self.unconfirmed: dict[str, tuple[Reservation, Micros]] = {}
        self._report: dict[str, Any] | None = None
        # The last snapshot's report, not built yet: (observed, found, unresolved, held).
        self._report_parts: tuple[Micros, dict[str, int], dict[str, int], dict[str, int]] | None
        self._report_parts = None
        # A gap held while its explanation is looked for: since when (the snapshot's time).
        self.held: dict[str, int] = {}
        self.held_at: Micros | None = None
        # The accepted baseline: its snapshot's time, when it was accepted, and its doubts.
        self.baseline_at: Micros | None = None
        self.accepted_at: Micros | None = None
        self.doubts: dict[str, Doubt] = {}

    def settled(
        self,
        key: str,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        outflow: int,
        at: Micros,
        opened_at: Micros | None = None,
    ) -> None:
        """An own settlement (a quote's opened at ``opened_at``, or a rebalance move) heard of
        at ``at``."""
        self.reconciler.on_settled(asset_in, amount_in, asset_out, outflow)
        self.unconfirmed[key] = (Reservation(key, asset_in, amount_in, asset_out, outflow, at), at)
        base, accepted = self.baseline_at, self.accepted_at
        if base is not None and at > base and (opened_at is None or accepted is None
                                               or opened_at <= accepted):  # fmt: skip
            self._doubt(Doubt(key, diff_of(asset_in, amount_in, asset_out, outflow), at))

    def _doubt(self, doubt: Doubt) -> None:
        for key, old in list(self.doubts.items()):
            if doubt.heard_at - old.heard_at > DOUBT_WINDOW:
                del self.doubts[key]
        if len(self.doubts) < DOUBTS_MAX:
            self.doubts[doubt.key] = doubt

    def late_fill(self, key: str, diff: Mapping[str, int], at: Micros, opened_at: Micros) -> None:
        """A fill found after its quote was closed (its nonce was used: a status was missed).
        The part of it that a confirmed gap already absorbed is taken off that gap (it is
        explained now), the rest moves the expected balances; the snapshots taken since it
        executed hold it already, so nothing is tolerated for it. An accepted baseline taken
        since it executed may hold it already: a doubt, as any settlement heard after that."""
        base, accepted = self.baseline_at, self.accepted_at
        if base is not None and at > base and (accepted is None or opened_at <= accepted):
            self._doubt(Doubt(key, dict(diff), at))
        expected = self.reconciler.expected
        for asset, delta in diff.items():
            gap = self.unresolved.get(asset, 0)
            covered = 0
            if gap and (gap > 0) == (delta > 0):
                covered = min(abs(gap), abs(delta)) * (1 if delta > 0 else -1)
                if gap - covered:
                    self.unresolved[asset] = gap - covered
                else:
                    del self.unresolved[asset]
            if expected is not None:
                expected[asset] = expected.get(asset, 0) + delta - covered

    def correct(self, adjustment: Mapping[str, int], keys: Sequence[str]) -> None:
        """The accepted baseline counted these doubts twice: take them out."""
        expected = self.reconciler.expected
        if expected is not None:
            for asset, delta in adjustment.items():
                expected[asset] = expected.get(asset, 0) + delta
        for key in keys:
            self.doubts.pop(key, None)

    def tolerated(self, observed: Micros) -> list[Reservation]:
        """Reverses of the settlements a snapshot requested at ``observed`` may lack."""
        return [reverse for reverse, heard in self.unconfirmed.values() if heard > observed]

    def compare(
        self,
        balances: Mapping[str, int],
        observed: Micros,
        own_open: Sequence[Reservation],
        totals: Totals,
        adjust: Mapping[str, int] | None = None,
    ) -> dict[str, int]:
        """The gaps beyond tolerance this snapshot would show (with ``adjust`` added to the
        expected balances), changing nothing."""
        expected = self.reconciler.expected
        if expected is None:
            return {}
        if adjust:
            expected = dict(expected)
            for asset, delta in adjust.items():
                expected[asset] = expected.get(asset, 0) + delta
        outflow, inflow = flow_totals([*self.tolerated(observed), *own_open], totals)
        found = mismatches_from_totals(expected, balances, outflow, inflow)
        tolerance = self.limits.max_mismatch
        return {a: g for a, g in found.items() if g and abs(g) > tolerance.get(a, 0)}

    def reconcile(
        self,
        balances: Mapping[str, int],
        observed: Micros,
        own_open: Sequence[Reservation],
        own_settling: bool,
        totals: Totals,
        held: bool = False,
    ) -> dict[str, int]:
        """Take in a snapshot; its gaps per asset (``totals``: what open quotes may move).
        ``held``: a gap it shows is not absorbed yet (its explanation is being looked for)."""
        self.snapshot_at, self.last, self.own_settling = observed, dict(balances), own_settling
        for key, (_, heard_at) in list(self.unconfirmed.items()):
            if heard_at <= observed:
                del self.unconfirmed[key]  # this snapshot, and every later one, has it
        tolerated = [reverse for reverse, _ in self.unconfirmed.values()]
        tolerated += own_open
        found = self.reconciler.on_snapshot(balances, tolerated, totals=totals, absorb=not held)
        if held:
            # Nothing is confirmed yet: the gaps people see (status, the gauge) stay the
            # confirmed ones until a later snapshot confirms these.
            self.held = {a: g for a, g in found.items() if g}
            self.held_at = self.held_at or observed
            found = dict.fromkeys(found, 0)
        else:
            self.held, self.held_at = {}, None
            for asset, gap in found.items():
                if gap and abs(gap) > self.limits.max_mismatch.get(asset, 0):
                    self.unresolved[asset] = self.unresolved.get(asset, 0) + gap
        self.found = found
        # The report is built when read (issue 29: a datetime and texts for people, once per
        # read rather than once per snapshot); ``unresolved`` changes in place, so it is
        # copied (it is empty but after an unexplained gap); ``found`` and ``held`` are
        # replaced, never changed.
        self._report_parts = (observed, found, dict(self.unresolved), self.held)
        return found

    @property
    def report(self) -> dict[str, Any] | None:
        """The last snapshot's reconciliation for people (the status page, the snapshot):
        when it was observed, whether it is ok, the gaps per asset as exact texts, and the
        gaps held (only while some are)."""
        parts = self._report_parts
        if parts is not None:
            observed, found, unresolved, held = parts
            gaps = {a: g for a, g in found.items() if g} | unresolved
            report: dict[str, Any] = {
                "at": from_micros(observed).isoformat(timespec="milliseconds"),
                "ok": not unresolved,
                "mismatches": {a: str(g) for a, g in gaps.items()},
            }
            if held:
                report["held"] = {a: str(g) for a, g in held.items()}
            self._report, self._report_parts = report, None
        return self._report

    @report.setter
    def report(self, value: dict[str, Any] | None) -> None:
        self._report, self._report_parts = value, None

    def expected_now(self) -> dict[str, int]:
        """Expected balances as of the last snapshot: without the settlements it may lack."""
        expected = dict(self.reconciler.expected or self.last or {})
        for reverse, _ in self.unconfirmed.values():
            # reverse of a settlement: asset_out/amount_out is what came in, asset_in/amount_in
            # what went out
            expected[reverse.asset_out] = expected.get(reverse.asset_out, 0) - reverse.amount_out
            expected[reverse.asset_in] = expected.get(reverse.asset_in, 0) + reverse.amount_in
        return expected

    def accept(self, balances: Mapping[str, int], at: Micros) -> None:
        """The operator's new baseline: ``balances`` plus the settlements heard after it was
        requested. Those may already be in it (executed before the read): they are kept as
        doubts, like every settlement heard after it of a quote that existed at ``at``."""
        expected = dict(balances)
        self.baseline_at, self.accepted_at = self.snapshot_at, at
        self.doubts.clear()
        for reverse, heard in self.unconfirmed.values():
            expected[reverse.asset_out] = expected.get(reverse.asset_out, 0) + reverse.amount_out
            expected[reverse.asset_in] = expected.get(reverse.asset_in, 0) - reverse.amount_in
            diff = diff_of(reverse.asset_out, reverse.amount_out, reverse.asset_in,
                           reverse.amount_in)  # fmt: skip
            self._doubt(Doubt(reverse.quote_id, diff, heard))
        self.reconciler.expected = expected
        self.reconciler.last = dict.fromkeys(balances, 0)
        self.found = dict.fromkeys(balances, 0)
        self.unresolved.clear()
        self.held, self.held_at = {}, None
        if self.report is not None:
            self.report = {**self.report, "ok": True, "mismatches": {}}
