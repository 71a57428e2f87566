"""The desk's balance side and its guards: snapshots, own moves, market inputs, PnL marking,
the kill switch, pauses and operator commands (DESIGN "Settlement"; docs/architecture.md).

Decisions only: every change goes through a fact applied by
:class:`~solver.core.desk_state.DeskState`.
"""

from __future__ import annotations

from datetime import datetime

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, Alert, OperatorReply, PauseChanged
from solver.core.desk_state import DeskState
from solver.core.pauses import GLOBAL, OPERATOR, SHUTTING_DOWN, Pause
from solver.core.risk import Breach, check_mismatch, check_pnl, check_stale

RECONCILIATION, STALE_DATA = "reconciliation", "stale_data"


class DeskRisk(DeskState):
    def _mark(self, now: datetime, actions: list[Action]) -> None:
        # Value in transit would mark a loss or gain that is not one: an own move half seen,
        # or a settlement whose outflow the inventory has debited (on purpose, to never
        # overstate what can be paid) while its inflow waits for the next snapshot. A
        # rebalance's deposit of 5,000 wNEAR marked -15,000 USD and tripped the kill switch.
        if not (self.balances.own_settling or self.inventory.unconfirmed_settlements):
            pnl = self.pnl
            changed = pnl.mark(now, self.inventory.confirmed, self.price)
            last = self._pnl_recorded_at
            if changed and (
                last is None
                or pnl.day != self._recorded_day
                or (now - last).total_seconds() >= self.settings.pnl_record_every_s
            ):
                self._record_pnl(now, actions)
            if pnl.pnl is not None and self.settings.kill_switch:
                loss, drawdown = pnl.daily_loss_usd(), pnl.drawdown_usd()
                for breach in check_pnl(self.limits, loss, drawdown, pnl.start_equity):
                    self._breach(breach, now, actions, halt=True)
        if self.settings.kill_switch:
            ages = [p.age_s(now) for p in self.state.prices.values()]
            balance_age = self.inventory.balance_age_s(now)
            stale = check_stale(self.limits, balance_age, max(ages, default=None))
            self._staleness(stale, now, actions)

    def _staleness(self, breaches: list[Breach], now: datetime, actions: list[Action]) -> None:
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

    def _record_pnl(self, now: datetime, actions: list[Action]) -> None:
        pnl = self.pnl
        if pnl.start_equity is None or pnl.day is None:
            return
        fact = f.PnlMarked(now, pnl.start_equity, pnl.peak_pnl, pnl.day, pnl.day_start_pnl)
        self._fact(fact, actions)

    # ------------------------------------------------------------------ balances

    def _balances(self, event: ev.BalancesSeen, now: datetime) -> list[Action]:
        if self.balances.snapshot_at is not None and event.observed < self.balances.snapshot_at:
            return []  # older than the last one taken in: tells nothing new
        own = tuple(
            (r.quote_id, r.asset_out, r.amount_out, r.asset_in, r.amount_in) for r in event.own_open
        )
        actions: list[Action] = []
        expected = self.balances.reconciler.expected or event.balances
        fact = f.BalancesReconciled(
            event.observed, dict(event.balances), own, event.own_settling, dict(expected)
        )
        self._fact(fact, actions)
        breaches = check_mismatch(self.limits, self.balances.found, self.readable.amount)
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

    def _own_flow(self, event: ev.OwnFlowSettled, now: datetime) -> list[Action]:
        actions: list[Action] = []
        e = event
        fact = f.OwnFlow(e.key, e.asset_in, e.amount_in, e.asset_out, e.outflow, now)
        self._fact(fact, actions)
        return actions

    # ------------------------------------------------------------------ market inputs

    def _price_seen(self, event: ev.PriceSeen, now: datetime) -> list[Action]:
        self.state.set_price(event.asset, event.usd, event.observed, event.source)
        return []

    def _salt_seen(self, event: ev.SaltSeen, now: datetime) -> list[Action]:
        self.state.set_salt(event.salt, event.observed)
        return []

    def _fee_seen(self, event: ev.FeeSeen, now: datetime) -> list[Action]:
        self.state.fee_pips = event.fee_pips
        return []

    # ------------------------------------------------------------------ pauses and operators

    def _breach(self, breach: Breach, now: datetime, actions: list[Action], *, halt: bool) -> None:
        if halt:
            self._pause(GLOBAL, breach.kind, breach.detail, now, actions)
        elif self.pauses.get(GLOBAL, breach.kind) is None:
            actions.append(Alert(breach.kind, breach.detail))

    def _pause(
        self, scope: str, kind: str, reason: str, now: datetime, actions: list[Action]
    ) -> None:
        if self.pauses.get(scope, kind) is not None:
            return
        self._fact(f.PauseSet(scope, kind, reason, now), actions)
        pause = self.pauses.get(scope, kind)
        assert pause is not None
        actions.append(PauseChanged(pause, active=True))
        if kind != OPERATOR:
            actions.append(Alert(kind, reason))

    def _unpause(self, pause: Pause, now: datetime, actions: list[Action], by: str) -> None:
        self._fact(f.PauseCleared(pause.scope, pause.kind, now, by), actions)
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

    def _operator_pause(self, event: ev.OperatorPause, now: datetime) -> list[Action]:
        try:
            scopes = self.scopes(event.pair)
        except LookupError as exc:
            return [OperatorReply(False, str(exc))]
        actions: list[Action] = []
        for scope in scopes:
            self._pause(scope, OPERATOR, event.reason or "paused by the operator", now, actions)
        actions.append(OperatorReply(True, f"paused {event.pair or 'everything'}"))
        return actions

    def _operator_resume(self, event: ev.OperatorResume, now: datetime) -> list[Action]:
        try:
            scopes = self.scopes(event.pair)
        except LookupError as exc:
            return [OperatorReply(False, str(exc))]
        actions: list[Action] = []
        notes: list[str] = []
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
            self._record_pnl(now, actions)
        self._mark(now, actions)  # a condition still in force pauses again at once
        still = [p.describe() for p in self.pauses if p.scope in scopes or p.scope == GLOBAL]
        if still:
            message = "still paused: " + "; ".join(still)
            actions.append(OperatorReply(False, message, tuple(still)))
        else:
            done = f"resumed {event.pair or 'everything'}"
            actions.append(OperatorReply(True, "; ".join([done, *notes])))
        return actions

    def _accept_balances(
        self, now: datetime, actions: list[Action], notes: list[str]
    ) -> str | None:
        balances = self.balances.last
        if balances is None:
            return "no balance snapshot yet: nothing to accept"
        # What moved unexplained: the gaps found since the last resume (the reconciler absorbed
        # them already) and whatever the expected balances still differ by.
        expected, unresolved = self.balances.expected_now(), self.balances.unresolved
        difference = {a: balances[a] - expected.get(a, 0) + unresolved.get(a, 0) for a in balances}
        shift = 0.0
        for asset, delta in difference.items():
            if not delta:
                continue
            price, scale = self.price(asset), self.state.decimals.get(asset)
            if price is None or scale is None:
                return f"no price for {asset}: cannot value the move to accept it"
            shift += delta * price / 10.0**scale
        fact = f.BaselineAccepted(now, dict(balances), difference, shift)
        self._fact(fact, actions)
        moved = {a: d for a, d in difference.items() if d}
        notes.append(f"accepted balances (moved: {moved or 'nothing'}, {shift:+.2f} USD)")
        return None

    def _shutdown(self, event: ev.ShutdownStarted, now: datetime) -> list[Action]:
        # Not journaled: it ends with the process, and must not survive into the next one.
        self.pauses.add(Pause(GLOBAL, SHUTTING_DOWN, "the process is stopping", now))
        return []
