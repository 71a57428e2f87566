"""The desk's risk and pauses: balance snapshots and the reconciliation, the kill switch (daily
loss, drawdown, stale inputs), every pause and the operator's commands (DESIGN "Settlement";
docs/architecture.md).

Decisions only: every change goes through a fact (:meth:`solver.core.desk.Desk.record`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, Alert, OperatorReply, PauseChanged
from solver.core.clock import SECOND, Micros
from solver.core.inventory import Reservation
from solver.core.pauses import GLOBAL, OPERATOR, RISK_KINDS, SHUTTING_DOWN, STORE_ERROR, Pause
from solver.core.risk import Breach, check_mismatch, check_pnl, check_stale

if TYPE_CHECKING:
    from solver.core.desk import Desk

RECONCILIATION, STALE_DATA = "reconciliation", "stale_data"


class RiskDesk:
    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self.settings = desk.settings
        self.limits = desk.limits
        self.balances = desk.balances
        self.inventory = desk.inventory
        self.pauses = desk.pauses
        self.pnl = desk.pnl
        self.book = desk.book
        self.state = desk.state
        self.pipeline = desk.pipeline
        self.readable = desk.readable
        self.symbols = desk.symbols
        self.record = desk.record
        # Open alert-only incidents, so their recovery is told once (not journaled: a stale
        # pause restored from the journal sets stale_open again through its PauseSet).
        self.stale_open = False
        self.mismatch_open = False

    def handlers(self) -> dict[type, Callable[[Any, Micros], list[Action]]]:
        return {
            ev.BalancesSeen: self._balances,
            ev.OwnFlowSettled: self._own_flow,
            ev.OperatorPause: self._operator_pause,
            ev.OperatorResume: self._operator_resume,
            ev.ShutdownStarted: self._shutdown,
            ev.StoreWorks: self._store_works,
        }

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {
            f.BalancesReconciled: self._apply_balances,
            f.OwnFlow: self._apply_own_flow,
            f.PauseSet: self._apply_pause_set,
            f.PauseCleared: self._apply_pause_cleared,
            f.BaselineAccepted: self._apply_baseline,
        }

    def paused(self) -> bool:
        """A risk pause holds (daily loss, drawdown, stale data, reconciliation)."""
        return any(p.kind in RISK_KINDS for p in self.pauses)

    def mark(self, now: Micros, actions: list[Action]) -> None:
        """The clock's part: PnL marked, then the kill switch's limits and the inputs' ages."""
        pnl = self.pnl
        kill_switch = self.settings.kill_switch
        if self.desk.pnl_marks.mark(now, actions) and pnl.pnl is not None and kill_switch:
            loss, drawdown = pnl.daily_loss_usd(), pnl.drawdown_usd()
            for breach in check_pnl(self.limits, loss, drawdown, pnl.start_equity):
                self._breach(breach, now, actions, halt=True)
        if kill_switch:
            ages = [(now - at) / SECOND for at in self.state.price_at.values()]
            balance_age = self.inventory.balance_age_s(now)
            stale = check_stale(self.limits, balance_age, max(ages, default=None))
            self._staleness(stale, now, actions)

    def _staleness(self, breaches: list[Breach], now: Micros, actions: list[Action]) -> None:
        """Stale inputs pause (latched until ``resume``); the person is also told when the
        inputs are fresh again, and again if they go stale again under the same pause."""
        if breaches:
            paused = self.pauses.get(GLOBAL, STALE_DATA) is not None
            for breach in breaches:
                self._breach(breach, now, actions, halt=True)
                if paused and not self.stale_open:
                    actions.append(Alert(breach.kind, breach.detail))
            self.stale_open = True
        elif self.stale_open:
            self.stale_open = False
            held = self.pauses.get(GLOBAL, STALE_DATA) is not None
            detail = "inputs fresh again" + (
                "; quoting stays paused until `solver resume`" if held else ""
            )
            actions.append(Alert(STALE_DATA, detail, resolved=True))

    def _balances(self, event: ev.BalancesSeen, now: Micros) -> list[Action]:
        """A snapshot: compared with the expected balances of its moment; a gap beyond
        tolerance first looks for its explanation (:mod:`solver.core.desk_gaps`) and is held
        meanwhile; only a gap that stays unexplained alerts and, with ``halt_on_mismatch``,
        pauses. A reconciliation pause whose whole gap verified fills explained lifts itself
        once a snapshot reconciles (docs/operations.md states the rule)."""
        if self.balances.snapshot_at is not None and event.observed < self.balances.snapshot_at:
            return []  # older than the last one taken in: tells nothing new
        own = tuple(
            (r.quote_id, r.asset_out, r.amount_out, r.asset_in, r.amount_in) for r in event.own_open
        )
        actions: list[Action] = []
        totals = (self.book.open_outflow, self.book.open_inflow)
        gaps = self.balances.compare(event.balances, event.observed, event.own_open, totals)
        held, note = False, ""
        if gaps:
            gaps_desk = self.desk.gaps
            held, note = gaps_desk.on_gap(gaps, event, event.own_open, totals, now, actions)
        expected = self.balances.reconciler.expected or event.balances
        fact = f.BalancesReconciled(
            event.observed, dict(event.balances), own, event.own_settling, dict(expected), held
        )
        self.record(fact, actions)
        if held:
            return actions
        breaches = check_mismatch(self.limits, self.balances.found, self.readable.amount)
        breaches = [Breach(b.kind, b.detail + note) for b in breaches]
        if not breaches:
            self.desk.gaps.reconciled(actions)
            self._recovered(now, actions)
        halt = self.limits.halt_on_mismatch
        for breach in breaches:
            self._breach(breach, now, actions, halt=halt)
        if halt:
            return actions  # the pause's own alert, resolved when the operator resumes
        # Alert only: nothing to resume, so recovery is the next snapshot that reconciles.
        if breaches:
            self.mismatch_open = True
        elif self.mismatch_open:
            self.mismatch_open = False
            gaps = self.balances.unresolved
            shown = ", ".join(f"{a}: {self.readable.amount(a, g)}" for a, g in sorted(gaps.items()))
            kept = (
                f" (the earlier gap {shown} stays shown until `solver resume --accept-balances`)"
                if gaps
                else ""
            )
            actions.append(Alert(RECONCILIATION, f"balances reconcile again{kept}", resolved=True))
        return actions

    def _recovered(self, now: Micros, actions: list[Action]) -> None:
        """The safe rule for a reconciliation pause to lift itself: this snapshot reconciles
        *and* nothing of the gap that paused is left unexplained (fills found from used nonces
        took all of it). Anything else waits for ``solver resume --accept-balances``."""
        pause = self.pauses.get(GLOBAL, RECONCILIATION)
        if pause is None or any(self.balances.unresolved.values()):
            return
        self.record(f.PauseCleared(GLOBAL, RECONCILIATION, now, "recovered"), actions)
        actions.append(PauseChanged(pause, active=False))
        detail = f"the gap was explained by fills whose quote_status was missed: {pause.reason}"
        actions.append(Alert(RECONCILIATION, detail, resolved=True))

    def _store_works(self, event: ev.StoreWorks, now: Micros) -> list[Action]:
        """The safe rule for a ``store_error`` pause to lift itself: the executor says every
        fact the store refused is committed now, so nothing unrecorded is left to lose."""
        actions: list[Action] = []
        pause = self.pauses.get(GLOBAL, STORE_ERROR)
        if pause is not None:
            self.record(f.PauseCleared(GLOBAL, STORE_ERROR, now, "recovered"), actions)
            actions.append(PauseChanged(pause, active=False))
            detail = f"the store works again ({event.detail}); it had failed: {pause.reason}"
            actions.append(Alert(STORE_ERROR, detail, resolved=True))
        return actions

    def _own_flow(self, event: ev.OwnFlowSettled, now: Micros) -> list[Action]:
        actions: list[Action] = []
        e = event
        fact = f.OwnFlow(e.key, e.asset_in, e.amount_in, e.asset_out, e.outflow, now)
        self.record(fact, actions)
        return actions

    def _breach(self, breach: Breach, now: Micros, actions: list[Action], *, halt: bool) -> None:
        if halt:
            self.pause(GLOBAL, breach.kind, breach.detail, now, actions)
        elif self.pauses.get(GLOBAL, breach.kind) is None:
            actions.append(Alert(breach.kind, breach.detail))

    def pause(self, scope: str, kind: str, reason: str, now: Micros, actions: list[Action]) -> None:
        if self.pauses.get(scope, kind) is not None:
            return
        self.record(f.PauseSet(scope, kind, reason, now), actions)
        pause = self.pauses.get(scope, kind)
        assert pause is not None
        actions.append(PauseChanged(pause, active=True))
        if kind != OPERATOR:
            actions.append(Alert(kind, reason))

    def _unpause(self, pause: Pause, now: Micros, actions: list[Action], by: str) -> None:
        self.record(f.PauseCleared(pause.scope, pause.kind, now, by), actions)
        actions.append(PauseChanged(pause, active=False))
        if pause.kind != OPERATOR:
            actions.append(Alert(pause.kind, f"{by}: {pause.reason}", resolved=True))

    def scopes(self, pair: str | None) -> list[str]:
        """Route keys of ``BASE/QUOTE`` (symbols or asset ids, both directions); ``*`` for None.
        Raises LookupError for a pair the bot does not trade."""
        if pair is None:
            return [GLOBAL]
        by_symbol = {symbol: asset for asset, symbol in self.symbols.items()}
        base_text, _, quote_text = pair.partition("/")
        base, quote = by_symbol.get(base_text, base_text), by_symbol.get(quote_text, quote_text)
        found = [
            r.key
            for r in self.pipeline.routes.values()
            if {r.asset_in, r.asset_out} == {base, quote}
        ]
        if not found:
            raise LookupError(f"the bot does not trade {pair}")
        return found

    def _operator_pause(self, event: ev.OperatorPause, now: Micros) -> list[Action]:
        try:
            scopes = self.scopes(event.pair)
        except LookupError as exc:
            return [OperatorReply(False, str(exc))]
        actions: list[Action] = []
        for scope in scopes:
            self.pause(scope, OPERATOR, event.reason or "paused by the operator", now, actions)
        actions.append(OperatorReply(True, f"paused {event.pair or 'everything'}"))
        return actions

    def _operator_resume(self, event: ev.OperatorResume, now: Micros) -> list[Action]:
        try:
            scopes = self.scopes(event.pair)
        except LookupError as exc:
            return [OperatorReply(False, str(exc))]
        actions: list[Action] = []
        notes: list[str] = []
        gap = self._gap_held()
        if gap is not None and not event.accept_balances:
            # A gap is money nobody explained: resuming without taking it as the new baseline
            # would book it as profit or loss silently (issue 24, finding 5).
            message = (
                f"reconciliation gap holds ({gap}): find who moved the funds; "
                "`solver resume --accept-balances` takes the balances as the new baseline"
            )
            held = tuple(p.describe() for p in self.pauses if p.kind == RECONCILIATION)
            return [OperatorReply(False, message, held)]
        if event.accept_balances:
            problem = self._accept_balances(now, actions, notes)
            if problem is not None:
                return [OperatorReply(False, problem)]
        for pause in list(self.pauses):
            if pause.scope in scopes and pause.kind != SHUTTING_DOWN:
                self._unpause(pause, now, actions, by="operator")
        if event.pair is None and self.pnl.pnl is not None:
            # The kill switch measures from here: the loss so far is acknowledged.
            self.pnl.peak_pnl = self.pnl.pnl
            self.pnl.day_start_pnl = self.pnl.pnl
            self.desk.pnl_marks.record(now, actions)
        self.mark(now, actions)  # a condition still in force pauses again at once
        still = [p.describe() for p in self.pauses if p.scope in scopes or p.scope == GLOBAL]
        if still:
            message = "still paused: " + "; ".join(still)
            actions.append(OperatorReply(False, message, tuple(still)))
        else:
            done = f"resumed {event.pair or 'everything'}"
            actions.append(OperatorReply(True, "; ".join([done, *notes])))
        return actions

    def _gap_held(self) -> str | None:
        """The gap a reconciliation pause holds for, for people; None without that pause (with
        ``halt_on_mismatch`` false a gap pauses nothing, and stays shown until accepted)."""
        if self.pauses.get(GLOBAL, RECONCILIATION) is None:
            return None
        unresolved = {a: g for a, g in self.balances.unresolved.items() if g}
        amount = self.readable.amount
        return ", ".join(f"{amount(a, g)}" for a, g in sorted(unresolved.items())) or "paused"

    def _accept_balances(self, now: Micros, actions: list[Action], notes: list[str]) -> str | None:
        balances = self.balances.last
        if balances is None:
            return "no balance snapshot yet: nothing to accept"
        # What moved unexplained: the gaps found since the last accept (the reconciler absorbed
        # them already) and whatever the expected balances still differ by.
        expected, unresolved = self.balances.expected_now(), self.balances.unresolved
        difference = {a: balances[a] - expected.get(a, 0) + unresolved.get(a, 0) for a in balances}
        shift = 0.0
        for asset, delta in difference.items():
            if not delta:
                continue
            price, scale = self.desk.price(asset), self.state.decimals.get(asset)
            if price is None or scale is None:
                return f"no price for {asset}: cannot value the move to accept it"
            shift += delta * price / 10.0**scale
        fact = f.BaselineAccepted(now, dict(balances), difference, shift)
        self.record(fact, actions)
        amount = self.readable.amount
        moved = ", ".join(
            f"{'+' if d > 0 else ''}{amount(a, d)}" for a, d in sorted(difference.items()) if d
        )
        notes.append(f"accepted balances: {moved or 'nothing moved'} ({shift:+,.2f} USD)")
        return None

    def _shutdown(self, event: ev.ShutdownStarted, now: Micros) -> list[Action]:
        # Not journaled: it ends with the process, and must not survive into the next one.
        self.pauses.add(Pause(GLOBAL, SHUTTING_DOWN, "the process is stopping", now))
        return []

    def _apply_balances(self, fact: f.BalancesReconciled) -> None:
        own = [Reservation(k, o, a, i, b, fact.observed) for k, o, a, i, b in fact.own_open]
        book = self.book
        totals = (book.open_outflow, book.open_inflow)
        self.balances.reconcile(
            fact.balances, fact.observed, own, fact.own_settling, totals, fact.held
        )
        self.inventory.set_confirmed(fact.balances, fact.observed)

    def _apply_own_flow(self, fact: f.OwnFlow) -> None:
        self.balances.settled(
            fact.key, fact.asset_in, fact.amount_in, fact.asset_out, fact.outflow, fact.at, None
        )

    def _apply_pause_set(self, fact: f.PauseSet) -> None:
        self.pauses.add(Pause(fact.scope, fact.kind, fact.reason, fact.at))
        if fact.scope == GLOBAL and fact.kind == "stale_data":
            self.stale_open = True

    def _apply_pause_cleared(self, fact: f.PauseCleared) -> None:
        self.pauses.remove(fact.scope, fact.kind)
        if fact.scope == GLOBAL and fact.kind == "stale_data":
            self.stale_open = False  # its recovery was told by the pause lifted
        if fact.scope == GLOBAL and fact.kind == "reconciliation":
            self.balances.unresolved.clear()  # acknowledged: the next snapshot reports afresh

    def _apply_baseline(self, fact: f.BaselineAccepted) -> None:
        self.balances.accept(fact.balances, fact.at)
        self.pnl.shift_baseline(fact.equity_shift_usd)
