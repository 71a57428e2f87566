"""The rebalancer's state machine: one rebalance taken step by step through the swap API.

A module of its own since issue 29: the rebalancer's file was over the project's size (604
lines), and these methods are one role, executing a started rebalance; planning, starting,
resuming and what the reconciliation reads stay with
:class:`~solver.rebalance.rebalancer.Rebalancer`, which is a :class:`RebalanceSteps` (a mixin,
as the store's parts are).

Each step is a desk fact (``RebalanceStepped``, :mod:`solver.core.rebalancing`) carrying the
whole record, journaled before the next begins; the desk holds the open records and the store's
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
Transport errors leave a step as it is for the next tick.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from solver.config import RebalanceSpec
from solver.core import events as ev
from solver.core.actions import Action
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
from solver.rebalance.plan import QUOTE_MARGIN_S, check_quote, swap_request
from solver.runtime.ports import MessageSigner

log = logging.getLogger("solver.rebalance.steps")

DEADLINE_GRACE_S = 5.0
"""After a transfer's deadline, this long before its unused nonce is taken as final (clocks)."""

BUS_HAS_IT = frozenset({IntentStatus.PENDING.value, IntentStatus.TX_BROADCASTED.value})
SWAP_TERMINAL = {
    SwapStatus.SUCCESS: RebalanceState.SUCCESS,
    SwapStatus.REFUNDED: RebalanceState.REFUNDED,
    SwapStatus.FAILED: RebalanceState.FAILED,
}

FlowCallback = Callable[[str, str, int, str, int], None]
"""``(key, asset_in, amount_in, asset_out, outflow)``: a settled move of our own, as the
reconciliation takes it (the desk's ``OwnFlowSettled`` event)."""


class RebalanceSteps:
    """The steps of a started rebalance, each told to the desk (a part of the rebalancer)."""

    # What the rebalancer gives this part (:class:`~solver.rebalance.rebalancer.Rebalancer`).
    spec: RebalanceSpec
    account: str
    key: SecretKey | MessageSigner
    swap: SwapApiClient
    bus: BusRpcClient
    ledger: LedgerClient
    store: Store | None
    desk: DeskView
    feed: Callable[[ev.Event], list[Action]]
    durable: Callable[[], bool]
    clock: Callable[[], datetime]
    nonce_layout: NonceLayout
    on_flow: FlowCallback | None
    on_balance_change: Callable[[], None] | None
    last_finished_at: datetime | None
    last_moved_at: datetime | None
    _bus_status: dict[str, str]

    @property
    def in_flight(self) -> Mapping[str, RebalanceRecord]:
        """The rebalances not finished yet: the desk's, as its latest step left each."""
        return self.desk.rebalances

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

    def _flow(self, key: str, asset_in: str, amount_in: int, asset_out: str, outflow: int) -> None:
        if self.on_flow is not None:
            self.on_flow(key, asset_in, amount_in, asset_out, outflow)
        if self.on_balance_change is not None:
            self.on_balance_change()
