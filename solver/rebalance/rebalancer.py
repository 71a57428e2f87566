"""The rebalancer: swap inventory back into its configured bands through the swap API.

**Planning** is pure and lives in :mod:`solver.rebalance.plan`: ``plan_rebalance`` returns a
plan, a hold with its reason, or nothing to do; ``check_quote`` is the last look before money
moves.

**Executing.** :class:`Rebalancer` runs one rebalance as a state machine, one step per change,
each step a desk fact journaled before the next begins: the steps are its part
:class:`~solver.rebalance.steps.RebalanceSteps` (:mod:`solver.rebalance.steps` draws the
states). This module plans, starts, resumes after a restart and tells the reconciliation what
is in flight: while a transfer or swap is in flight its possible flows are reported to the
reconciliation (:meth:`Rebalancer.open_flows`), and the settled amounts are reported as they
become known (``on_flow``), so a rebalance is never taken for an unexplained balance change.

``dry_run`` only logs each plan (at most every ``min_interval_s``): nothing is quoted, signed
or journaled.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal

from solver.config import RebalanceSpec
from solver.core import events as ev
from solver.core.actions import Action, OperatorReply
from solver.core.clock import from_micros, micros
from solver.core.inventory import Reservation
from solver.core.rebalance_record import RebalanceRecord, RebalanceState
from solver.core.rebalancing import reservation_id
from solver.core.view import DeskView
from solver.io.bus_rpc import BusRpcClient
from solver.io.ledger_client import LedgerClient
from solver.io.store.sqlite_store import Store
from solver.io.swap_client import SwapApiClient
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceLayout
from solver.rebalance.plan import Hold, Inputs, Plan, plan_rebalance
from solver.rebalance.steps import FlowCallback, RebalanceSteps
from solver.runtime.ports import MessageSigner

log = logging.getLogger("solver.rebalance.rebalancer")

INFLOW_BOUND = 2
"""Reconciliation: a swap in flight may bring up to this many times its quoted output."""


class Rebalancer(RebalanceSteps):
    """Runs rebalances for one account; :meth:`tick` is its scheduled job."""

    def __init__(
        self,
        spec: RebalanceSpec,
        *,
        account: str,
        key: SecretKey | MessageSigner,
        swap: SwapApiClient,
        bus: BusRpcClient,
        ledger: LedgerClient,
        store: Store | None,
        desk: DeskView,
        feed: Callable[[ev.Event], list[Action]],
        durable: Callable[[], bool],
        clock: Callable[[], datetime],
        balance_max_age_s: float,
        nonce_layout: NonceLayout = "salted",
        dry_run: bool | None = None,
        on_flow: FlowCallback | None = None,
        on_balance_change: Callable[[], None] | None = None,
    ) -> None:
        self.spec = spec
        self.account = account
        self.key = key
        self.swap = swap
        self.bus = bus
        self.ledger = ledger
        self.store = store  # read only, but for the deposit nonces registered before signing
        self.desk = desk  # read only: balances, free inventory, prices, the open rebalances
        self.feed = feed  # the desk's events: every step, its reservation and pause are facts
        self.durable = durable  # whether every fact fed so far is committed to the journal
        self.clock = clock
        self.balance_max_age_s = balance_max_age_s
        self.nonce_layout: NonceLayout = nonce_layout
        self.dry_run = spec.dry_run if dry_run is None else dry_run
        self.on_flow = on_flow
        self.on_balance_change = on_balance_change
        self.last_started_at: datetime | None = None
        self.last_finished_at: datetime | None = None
        self.last_moved_at: datetime | None = None  # end of the last rebalance that moved funds
        self._bus_status: dict[str, str] = {}  # last status of each deposit published here
        self._last_hold: str | None = None

    # ------------------------------------------------------------------ the job

    async def tick(self) -> None:
        """Advance what is in flight; otherwise plan, and start (or, dry, log) a rebalance."""
        if self.in_flight:
            for record in list(self.in_flight.values()):
                await self._advance(record)
            return
        now = self.clock()
        decision = plan_rebalance(
            self.spec, self._inputs(now), balance_max_age_s=self.balance_max_age_s
        )
        if decision is None or isinstance(decision, Hold):
            reason = None if decision is None else decision.reason
            if reason != self._last_hold and reason is not None:
                log.info("rebalance on hold: %s", reason)
            self._last_hold = reason
            return
        self._last_hold = None
        self.last_started_at = now
        if self.dry_run:
            log.info("rebalance plan (dry run, nothing done): %s", self._describe(decision))
            return
        if self.store is None:
            log.warning("rebalance not started: no store to journal its steps in")
            return
        started = self.start(decision, now)
        if started is not None:
            await self._advance(started)

    def _inputs(self, now: datetime) -> Inputs:
        inventory = self.desk.inventory
        assets = set(self.spec.bands)
        if self.spec.counter_asset is not None:
            assets.add(self.spec.counter_asset)
        return Inputs(
            now=now,
            balances=dict(inventory.confirmed),
            balances_at=None
            if inventory.confirmed_at is None
            else from_micros(inventory.confirmed_at),
            free={asset: inventory.free(asset) for asset in assets},
            prices=self.desk.prices(),
            decimals=self.desk.decimals,
            last_started_at=self.last_started_at,
            last_finished_at=self.last_finished_at,
            in_flight=bool(self.in_flight),
        )

    def _describe(self, plan: Plan) -> str:
        decimals = self.desk.decimals
        amount = format(Decimal(plan.amount_in).scaleb(-decimals[plan.asset_in]).normalize(), "f")
        return (
            f"{plan.side} {plan.asset}: pay {amount} {plan.asset_in} "
            f"(~{plan.usd_in:.2f} USD) for {plan.asset_out}; {plan.reason}"
        )

    # ------------------------------------------------------------------ start and resume

    def start(self, plan: Plan, now: datetime) -> RebalanceRecord | None:
        """Start ``plan`` as PLANNED: the desk reserves its input, pauses its direction and
        records the step, or refuses (its input is no longer free)."""
        record = RebalanceRecord(
            id=uuid.uuid4().hex,
            created_at=now,
            updated_at=now,
            state=RebalanceState.PLANNED,
            asset=plan.asset,
            asset_in=plan.asset_in,
            asset_out=plan.asset_out,
            amount_in=plan.amount_in,
            plan=plan.to_json(),
            reason=plan.reason,
        )
        deadline = now + timedelta(seconds=self.spec.swap_deadline_s)
        starting = ev.RebalanceStarting(record, micros(deadline), self._describe(plan))
        reply = _reply(self.feed(starting))
        if not reply.ok:
            log.warning("rebalance not started: %s", reply.message)
            return None
        log.info("rebalance %s started: %s", record.id, self._describe(plan))
        return record

    async def resume(self) -> int:
        """After a restart: take up the unfinished rebalances the desk holds; how many.

        They came back with the desk from the journal, with their reservation and pause. A
        rebalance stopped before its deposit was signed paid nothing and is ``ABANDONED`` (the
        next tick plans afresh from fresh balances); a later one is followed from where it
        stopped, its signed deposit re-published if the bus never got it. A rebalance of a
        store written before the reservation was a desk fact (carried into the journal by
        migration 10) gets it asked for again: a deposit not executed yet holds its input.
        """
        if self.store is not None:
            latest = self.store.rebalances(limit=1)  # the query table: the interval's start
            if latest:
                self.last_started_at = latest[0].created_at
        resumed = 0
        for record in list(self.in_flight.values()):
            if record.state in (RebalanceState.PLANNED, RebalanceState.QUOTED):
                self._finish(
                    record,
                    RebalanceState.ABANDONED,
                    "restarted before the deposit was signed: nothing was paid",
                )
                continue
            held = reservation_id(record.id) in self.desk.inventory.reservations
            if record.state == RebalanceState.DEPOSIT_SENT and not held:
                outflow = self._outflow(record)
                reply = _reply(self.feed(ev.RebalanceStarting(record, outflow.deadline)))
                if not reply.ok:
                    log.warning("rebalance %s: its input is not held: %s", record.id, reply.message)
            resumed += 1
            hold = self.desk.inventory.reservations.get(reservation_id(record.id))
            held_now = f"holding {hold.amount_out} {hold.asset_out}" if hold else "input settled"
            log.info("rebalance %s resumed at %s, %s", record.id, record.state, held_now)
        return resumed

    # ------------------------------------------------------------------ the reconciliation

    def _outflow(self, record: RebalanceRecord) -> Reservation:
        deadline = record.deposit_deadline or record.created_at + timedelta(
            seconds=self.spec.swap_deadline_s
        )
        return Reservation(
            reservation_id(record.id),
            record.asset_in,
            record.amount_in,
            record.asset_out,
            0,
            micros(deadline),
        )

    def open_flows(self) -> list[Reservation]:
        """What rebalances in flight may still move on chain, as the reconciler reads open
        quotes: the deposit while it may execute, the output (and a refund) until the end."""
        flows: list[Reservation] = []
        for record in self.in_flight.values():
            state = RebalanceState(record.state)
            if state in (RebalanceState.PLANNED, RebalanceState.QUOTED):
                continue  # nothing signed: nothing can move
            deadline = record.deposit_deadline or record.updated_at
            if state is RebalanceState.DEPOSIT_SENT:
                flows.append(self._outflow(record))
            expected = max(record.amount_out or 0, record.min_amount_out or 0)
            flows.append(
                Reservation(
                    f"{reservation_id(record.id)}:out",
                    record.asset_out,
                    0,
                    record.asset_out,
                    expected * INFLOW_BOUND,
                    micros(deadline),
                )
            )
            flows.append(
                Reservation(
                    f"{reservation_id(record.id)}:refund",
                    record.asset_in,
                    0,
                    record.asset_in,
                    record.amount_in,
                    micros(deadline),
                )
            )
        return flows

    def settling(self) -> bool:
        """Whether balances may show a rebalance half done: from the signed deposit until a
        snapshot requested after the end (the value is in transit meanwhile, and PnL marks
        wait: the desk's ``BalancesSeen.own_settling``)."""
        signed = (RebalanceState.PLANNED, RebalanceState.QUOTED)
        if any(RebalanceState(r.state) not in signed for r in self.in_flight.values()):
            return True
        seen = self.desk.inventory.confirmed_at
        moved = self.last_moved_at
        return moved is not None and (seen is None or seen <= micros(moved))


def _reply(actions: list[Action]) -> OperatorReply:
    """The desk's answer among ``actions``."""
    for action in actions:
        if type(action) is OperatorReply:
            return action
    return OperatorReply(False, "no answer from the desk")
