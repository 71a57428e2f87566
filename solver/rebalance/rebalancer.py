"""The rebalancer: swap inventory back into its configured bands through the swap API.

**Planning** is pure and lives in :mod:`solver.rebalance.plan`: ``plan_rebalance`` returns a
plan, a hold with its reason, or nothing to do; ``check_quote`` is the last look before money
moves.

**Executing.** :class:`Rebalancer` runs one rebalance as a state machine, one step per change,
each step a desk fact (``RebalanceStepped``, :mod:`solver.core.rebalancing`) carrying the whole
record, journaled before the next begins; the desk holds the open records and the store's
``rebalances`` / ``rebalance_steps`` tables are projected from the facts::

    PLANNED -> QUOTED -> DEPOSIT_SENT -> DEPOSITED -> SUBMITTED -> SUCCESS | REFUNDED | FAILED
       \\________\\____________\\___________________________________> ABANDONED (nothing paid)

1. ``PLANNED``: the plan; the desk reserves the outflow (the quote path cannot promise it away)
   and stops quoting the same direction (it would only buy back what it is selling): desk facts,
   journaled, so a ``kill -9`` keeps both, and the step itself.
2. ``QUOTED``: ``POST /v0/quote`` with ``INTENTS`` deposit, refund and recipient types (all to
   our own account), ``EXACT_INPUT``; the whole answer is kept, with the service's signature.
3. ``DEPOSIT_SENT``: a ``transfer`` of the input to the deposit address, its nonce registered in
   the store before it is signed (never signed twice), signed (:mod:`solver.io.ops_intents`) and
   journaled — item, nonce, deadline, intent hash — and committed *before* it is published, so
   a restart can follow or re-publish that very item and never signs a second.
4. ``DEPOSITED``: the ledger executed the transfer (the nonce is used).
5. ``SUBMITTED``: ``POST /v0/deposit/submit`` reported it; ``GET /v0/status`` is then polled
   every tick until ``SUCCESS``, ``REFUNDED`` or ``FAILED``.

A transfer the bus refuses or loses is never re-signed: the same signed item is published
again each tick (its nonce lets it execute at most once) until it executes or its deadline has
passed with the nonce unused (it can no longer execute); then the rebalance is ``ABANDONED``.
Transport errors leave a step as it is for the next tick. While a transfer or swap is in flight
its possible flows are reported to the reconciliation (:meth:`Rebalancer.open_flows`), and the
settled amounts are reported as they become known (``on_flow``), so a rebalance is never taken
for an unexplained balance change.

``dry_run`` only logs each plan (at most every ``min_interval_s``): nothing is quoted, signed
or journaled.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from solver.config import RebalanceSpec
from solver.core import events as ev
from solver.core.actions import Action, OperatorReply
from solver.core.clock import from_micros, micros
from solver.core.inventory import Reservation
from solver.core.rebalance_record import TERMINAL, RebalanceRecord, RebalanceState
from solver.core.rebalancing import reservation_id
from solver.core.view import DeskView
from solver.errors import ProtocolError, RemoteError, SolverError, TransportError
from solver.io import ops_build, ops_intents
from solver.io.bus_rpc import BusRpcClient
from solver.io.ledger_client import LedgerClient
from solver.io.store.sqlite_store import Store
from solver.io.swap_client import SwapApiClient
from solver.protocol.bus import IntentStatus
from solver.protocol.intents import Nep413Signed
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceLayout
from solver.protocol.swap import (
    DepositSubmitRequest,
    DepositSubmitResponse,
    QuoteResponse,
    SwapStatus,
    from_wire,
)
from solver.rebalance.plan import (
    QUOTE_MARGIN_S,
    Hold,
    Inputs,
    Plan,
    check_quote,
    plan_rebalance,
    swap_request,
)
from solver.runtime.ports import MessageSigner

log = logging.getLogger("solver.rebalance.rebalancer")

DEADLINE_GRACE_S = 5.0
"""After a transfer's deadline, this long before its unused nonce is taken as final (clocks)."""
INFLOW_BOUND = 2
"""Reconciliation: a swap in flight may bring up to this many times its quoted output."""


BUS_HAS_IT = frozenset({IntentStatus.PENDING.value, IntentStatus.TX_BROADCASTED.value})
SWAP_TERMINAL = {
    SwapStatus.SUCCESS: RebalanceState.SUCCESS,
    SwapStatus.REFUNDED: RebalanceState.REFUNDED,
    SwapStatus.FAILED: RebalanceState.FAILED,
}


# ---------------------------------------------------------------------------------- executing

FlowCallback = Callable[[str, str, int, str, int], None]
"""``(key, asset_in, amount_in, asset_out, outflow)``: a settled move of our own, as the
reconciliation takes it (the desk's ``OwnFlowSettled`` event)."""


class Rebalancer:
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

    @property
    def in_flight(self) -> Mapping[str, RebalanceRecord]:
        """The rebalances not finished yet: the desk's, as its latest step left each."""
        return self.desk.rebalances

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

    # ------------------------------------------------------------------ the state machine

    async def _advance(self, record: RebalanceRecord) -> None:
        """Take ``record`` as far as it goes now; a step that must wait leaves it for later."""
        steps = {
            RebalanceState.PLANNED: self._quote,
            RebalanceState.QUOTED: self._sign_deposit,
            RebalanceState.DEPOSIT_SENT: self._follow_deposit,
            RebalanceState.DEPOSITED: self._submit,
            RebalanceState.SUBMITTED: self._poll_status,
        }
        while record.id in self.in_flight:
            current = self.in_flight[record.id]
            step = steps.get(RebalanceState(current.state))
            if step is None:
                return
            await step(current)
            after = self.in_flight.get(record.id)
            if after is None or (after.state == current.state):
                return

    def _save(
        self,
        record: RebalanceRecord,
        state: RebalanceState | None = None,
        detail: str | None = None,
        **changes: Any,
    ) -> RebalanceRecord:
        """The next version of ``record``, told to the desk as a step (it records the fact, holds
        the record while it is open, and settles or releases its input on the way)."""
        now = self.clock()
        updated = dataclasses.replace(
            record, state=state or record.state, updated_at=now, **changes
        )
        if state is not None and state in TERMINAL:
            updated = dataclasses.replace(updated, finished_at=now)
        self.feed(ev.RebalanceStepping(updated, detail))
        return updated

    async def _quote(self, record: RebalanceRecord) -> None:
        request = swap_request(
            record.asset_in,
            record.asset_out,
            record.amount_in,
            self.account,
            self.spec,
            self.clock(),
        )
        sent = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            response, body = await self.swap.quote_with_body(request)
        except SolverError as exc:
            self._finish(record, RebalanceState.ABANDONED, f"no quote: {exc}", quote_request=sent)
            return
        quoted: dict[str, Any] = {
            "quote_request": sent,
            "quote_response": body,
            "quote_signature": response.signature,
            "deposit_address": response.quote.deposit_address,
            "deposit_memo": response.quote.deposit_memo,
            "amount_out": response.quote.amount_out,
            "min_amount_out": response.quote.min_amount_out,
        }
        problem = check_quote(
            request,
            response,
            prices=self.desk.prices(),
            decimals=self.desk.decimals,
            max_cost_bps=self.spec.max_cost_bps,
            now=self.clock(),
        )
        if problem is not None:
            self._finish(record, RebalanceState.ABANDONED, f"quote refused: {problem}", **quoted)
            return
        detail = f"amountOut {response.quote.amount_out} to {response.quote.deposit_address}"
        self._save(record, RebalanceState.QUOTED, detail, **quoted)

    async def _sign_deposit(self, record: RebalanceRecord) -> None:
        now = self.clock()
        assert record.quote_response is not None and record.deposit_address is not None
        response = from_wire(QuoteResponse, record.quote_response)
        for moment in (response.quote.time_when_inactive, response.quote.deadline):
            if moment is not None and moment <= now + timedelta(seconds=QUOTE_MARGIN_S):
                self._finish(record, RebalanceState.ABANDONED, "the quote expired unpaid")
                return
        try:
            intent = ops_build.transfer(
                self.account,
                record.asset_in,
                record.amount_in,
                record.deposit_address,
                memo=record.deposit_memo,
            )
        except ValueError as exc:
            self._finish(record, RebalanceState.ABANDONED, f"cannot pay the deposit: {exc}")
            return
        try:
            op = await ops_intents.sign_operation(
                self.ledger,
                self.key,
                signer_id=self.account,
                intents=[intent],
                deadline_s=self.spec.deposit_deadline_s,
                layout=self.nonce_layout,
                now=now,
                register=None if self.store is None else self.store.register_nonce,
            )
        except (TransportError, RemoteError, ProtocolError) as exc:
            log.warning("rebalance %s: cannot sign the deposit yet: %s", record.id, exc)
            return
        self._save(
            record,
            RebalanceState.DEPOSIT_SENT,
            f"transfer {op.intent_hash}",
            deposit_intent_hash=op.intent_hash,
            deposit_signed=op.wire(),
            deposit_nonce=op.nonce,
            deposit_deadline=op.deadline,
        )

    def _operation(self, record: RebalanceRecord) -> ops_intents.SignedOperation:
        assert record.deposit_signed is not None and record.deposit_nonce is not None
        assert record.deposit_intent_hash is not None and record.deposit_deadline is not None
        return ops_intents.SignedOperation(
            Nep413Signed.model_validate(record.deposit_signed),
            record.deposit_intent_hash,
            self.account,
            record.deposit_nonce,
            record.deposit_deadline,
        )

    async def _follow_deposit(self, record: RebalanceRecord) -> None:
        op = self._operation(record)
        try:
            used = await self.ledger.is_nonce_used(self.account, op.nonce)
        except SolverError as exc:
            log.warning("rebalance %s: is_nonce_used failed: %s", record.id, exc)
            return
        if used:
            await self._deposited(record, await self._tx_hash(op.intent_hash))
            return
        if self.clock() > op.deadline + timedelta(seconds=DEADLINE_GRACE_S):
            why = record.reason or "the transfer was not executed"
            self._finish(record, RebalanceState.ABANDONED, f"deposit expired unexecuted: {why}")
            return
        if self._bus_status.get(record.id) in BUS_HAS_IT:
            return  # the bus holds it: the ledger is asked again next tick
        if not self.durable():
            return  # the signed item is not in the journal yet: published once it is
        # Never published here, lost, or refused: (re-)publish the same signed item. Its nonce
        # lets it execute at most once, however often it is sent.
        result = await ops_intents.publish_operation(
            self.bus, self.ledger, op, wait_s=self.spec.deposit_wait_s
        )
        self._bus_status[record.id] = result.status
        if result.status == ops_intents.SETTLED:
            await self._deposited(record, result.tx_hash)
            return
        reason = f"deposit {result.status}: {result.reason or 'no final status yet'}"
        if reason != record.reason:
            log.warning("rebalance %s: %s", record.id, reason)
            self._save(record, reason=reason)

    async def _tx_hash(self, intent_hash: str) -> str | None:
        try:
            status = await self.bus.get_status(intent_hash)
        except SolverError:
            return None
        if status.status is IntentStatus.SETTLED and status.data is not None:
            return status.data.hash
        return None

    async def _deposited(self, record: RebalanceRecord, tx_hash: str | None) -> None:
        self._save(record, RebalanceState.DEPOSITED, tx_hash, deposit_tx_hash=tx_hash)
        rid = reservation_id(record.id)
        self._flow(f"{rid}:deposit", record.asset_out, 0, record.asset_in, record.amount_in)

    async def _submit(self, record: RebalanceRecord) -> None:
        assert record.deposit_address is not None and record.deposit_intent_hash is not None
        request = DepositSubmitRequest(
            tx_hash=record.deposit_tx_hash or record.deposit_intent_hash,
            deposit_address=record.deposit_address,
            near_sender_account=self.account,
            memo=record.deposit_memo,
        )
        try:
            response = await self.swap.submit_deposit(request)
        except TransportError as exc:
            log.warning("rebalance %s: deposit submit failed, retrying: %s", record.id, exc)
            return
        except (RemoteError, ProtocolError) as exc:
            # The status endpoint still tells how the swap goes; the submission only speeds it.
            self._save(record, RebalanceState.SUBMITTED, f"deposit submit refused: {exc}")
            return
        record = self._save(
            record,
            RebalanceState.SUBMITTED,
            response.status.value,
            swap_status=response.status.value,
            status_response=response.model_dump(mode="json", by_alias=True, exclude_none=True),
        )
        self._maybe_terminal(record, response)

    async def _poll_status(self, record: RebalanceRecord) -> None:
        assert record.deposit_address is not None
        try:
            response = await self.swap.status(record.deposit_address, record.deposit_memo)
        except SolverError as exc:
            log.debug("rebalance %s: status failed: %s", record.id, exc)
            return
        if response.status.value != record.swap_status:
            record = self._save(
                record,
                detail=response.status.value,
                swap_status=response.status.value,
                status_response=response.model_dump(mode="json", by_alias=True, exclude_none=True),
            )
        self._maybe_terminal(record, response)

    def _maybe_terminal(self, record: RebalanceRecord, response: DepositSubmitResponse) -> None:
        final = SWAP_TERMINAL.get(response.status)
        if final is None:
            return
        details = response.swap_details
        received = details.amount_out
        if received is None and final is RebalanceState.SUCCESS:
            received = record.amount_out
        refunded = details.refunded_amount
        if refunded is None and final is RebalanceState.REFUNDED:
            refunded = record.amount_in - (response.quote_response.quote.refund_fee or 0)
        rid = reservation_id(record.id)
        if received:
            self._flow(f"{rid}:out", record.asset_out, received, record.asset_in, 0)
        if refunded:
            self._flow(f"{rid}:refund", record.asset_in, refunded, record.asset_out, 0)
        reason = f"received {received or 0} {record.asset_out}"
        if refunded:
            reason += f", refunded {refunded} {record.asset_in}"
        if details.refund_reason is not None:
            reason += f" ({details.refund_reason.value})"
        self._finish(record, final, reason, amount_out=received or record.amount_out)

    def _finish(
        self, record: RebalanceRecord, state: RebalanceState, reason: str, **changes: Any
    ) -> None:
        self._save(record, state, reason, reason=reason, **changes)
        self._bus_status.pop(record.id, None)
        self.last_finished_at = self.clock()
        if state is not RebalanceState.ABANDONED:
            self.last_moved_at = self.last_finished_at
        level = logging.INFO if state is RebalanceState.SUCCESS else logging.WARNING
        log.log(level, "rebalance %s %s: %s", record.id, state.value, reason)
        if state is not RebalanceState.ABANDONED and self.on_balance_change is not None:
            self.on_balance_change()

    # ------------------------------------------------------------------ the rest of the bot

    def _flow(self, key: str, asset_in: str, amount_in: int, asset_out: str, outflow: int) -> None:
        if self.on_flow is not None:
            self.on_flow(key, asset_in, amount_in, asset_out, outflow)
        if self.on_balance_change is not None:
            self.on_balance_change()

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
