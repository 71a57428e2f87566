"""Deposits, execution, payouts and refunds of the sandbox swap service (spec 2.5–2.8, 3.1, 7.4).

Every ``poll_interval_ms`` (or at once after a submission) the executor reads the origin-asset
balance of each open swap's deposit account — a simulated origin-chain deposit and an INTENTS
``transfer`` land there alike — and applies :func:`sandbox.swap.rules.decide`:

- WAIT: ``PENDING_DEPOSIT`` (nothing yet) or ``INCOMPLETE_DEPOSIT`` (below the lower bound);
- SWAP: ``PROCESSING``; the service, signing as the deposit account, publishes the mirror of a
  solver quote on the bus (the quote chosen at quote time while it is unused, unexpired and for
  the same amount, else a fresh one), waits for SETTLED, then in one ledger batch pays the fees,
  pays the recipient (``transfer`` for INTENTS, ``ft_withdraw`` for DESTINATION_CHAIN) and
  refunds whatever of the deposit was not used → ``SUCCESS``;
- REFUND: the whole balance goes back to ``refundTo`` (``transfer`` or ``ft_withdraw``, the
  latter minus ``refundFee``) → ``REFUNDED`` with a reason of 2.8; a refund that cannot be made
  → ``FAILED``.

Senders of INTENTS deposits come from the ledger's ``transfer`` events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sandbox.ledger_errors import LedgerError
from sandbox.swap.rules import (
    Action,
    Decision,
    actual_slippage_bps,
    decide,
    fee_amounts,
    gross_up,
    with_protocol_fee,
    without_protocol_fee,
)
from sandbox.swap.store import SwapRecord
from solver.protocol.bus import IntentStatus
from solver.protocol.ids import asset_contract
from solver.protocol.intents import FtWithdraw, TokenDiff, Transfer
from solver.protocol.nonce import parse_salt, salted_nonce
from solver.protocol.signing import sign_nep413
from solver.protocol.swap import RecipientType, RefundReason, RefundType, SwapStatus, SwapType

if TYPE_CHECKING:
    from sandbox.swap.service import Offer, SwapService

log = logging.getLogger("sandbox.swap")

INTENT_LIFETIME = timedelta(seconds=60)
SETTLE_POLL_S = 0.02
SETTLE_TIMEOUT_S = 10.0


class _Refund(Exception):
    """Abort a swap and refund the whole deposit with ``reason``."""

    def __init__(self, reason: RefundReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class SwapExecutor:
    def __init__(self, service: SwapService) -> None:
        self.svc = service
        self.open: dict[str, SwapRecord] = {}  # deposit account -> live record (open or busy)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._event_pos = 0

    # ------------------------------------------------------------------ registry

    def load(self) -> None:
        for record in self.svc.store.open_records():
            self.open[record.deposit_account] = record

    def watch(self, record: SwapRecord) -> None:
        if record.is_open:
            self.open.setdefault(record.deposit_account, record)
        self._wake.set()

    def lookup(self, address: str, memo: str | None) -> SwapRecord | None:
        """The live record when the swap is watched, else the stored one."""
        stored = self.svc.store.get(address, memo)
        if stored is None:
            return None
        return self.open.get(stored.deposit_account, stored)

    # ------------------------------------------------------------------ loop

    async def run(self, stop: asyncio.Event) -> None:
        stopper = asyncio.create_task(stop.wait())
        stopper.add_done_callback(lambda _: self._wake.set())
        poll_s = self.svc.spec.poll_interval_ms / 1000
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    self.tick()
                except Exception:  # a bug must not stop deposit processing
                    log.exception("swap tick failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), poll_s)
        finally:
            stopper.cancel()
            for task in list(self._tasks.values()):
                task.cancel()
            await asyncio.gather(stopper, *self._tasks.values(), return_exceptions=True)

    def tick(self) -> None:
        now = self.svc.chain.clock()
        self._scan_events()
        for account, record in list(self.open.items()):
            if account not in self._tasks:
                self.observe(record, now)

    def _scan_events(self) -> None:
        events = self.svc.chain.ledger.events
        start, self._event_pos = self._event_pos, len(events)
        for line in events[start:]:
            if '"event":"transfer"' not in line:
                continue
            for item in json.loads(line.partition(":")[2]).get("data", []):
                record = self.open.get(item.get("receiver_id"))
                if record is None or record.origin_asset not in item.get("tokens", {}):
                    continue
                if item["account_id"] not in record.senders:
                    record.senders.append(item["account_id"])
                if item["intent_hash"] not in record.deposit_tx_hashes:
                    record.deposit_tx_hashes.append(item["intent_hash"])
                self.svc.store.save(record)

    def observe(self, record: SwapRecord, now: datetime) -> None:
        """Apply the settlement rule to the balance seen now; start a settle task if due."""
        svc = self.svc
        balance = svc.chain.ledger.mt_balance_of(record.deposit_account, record.origin_asset)
        changed = balance != record.deposited
        if changed:
            record.deposited = balance
            record.usd_deposited = svc.usd(record.origin_asset, balance)
        decision = decide(record.swap_type, record.quote_terms, balance, now >= record.deadline)
        if decision.action is Action.WAIT:
            if decision.status is not record.status:
                record.status, changed = decision.status, True
            if changed:
                record.updated_at = now
                svc.store.save(record)
            idle = timedelta(milliseconds=svc.spec.stop_watching_after_ms)
            if balance == 0 and now > record.deadline + idle:
                self.open.pop(record.deposit_account, None)
            return
        record.status, record.updated_at = SwapStatus.PROCESSING, now
        svc.store.save(record)
        task = asyncio.get_running_loop().create_task(self._settle(record, decision))
        self._tasks[record.deposit_account] = task

    async def _settle(self, record: SwapRecord, decision: Decision) -> None:
        try:
            if decision.action is Action.REFUND:
                self._refund_all(record, decision.reason or RefundReason.UNKNOWN)
            else:
                try:
                    await self._swap(record, decision)
                except _Refund as refund:
                    self._refund_all(record, refund.reason)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("swap %s failed", record.correlation_id)
            record.status, record.updated_at = SwapStatus.FAILED, self.svc.chain.clock()
            self.svc.store.save(record)
        finally:
            self._tasks.pop(record.deposit_account, None)
            self.open.pop(record.deposit_account, None)

    # ------------------------------------------------------------------ the swap

    def _original(self, record: SwapRecord, net: int | None) -> Offer | None:
        """The solver quote chosen at quote time, if it can still be published as is."""
        from sandbox.swap.service import Offer

        bus = self.svc.bus
        found = bus.quotes.get(record.solver_quote_hash or "")
        margin = timedelta(seconds=bus.settlement_delay_s + 1)
        if found is None or found.used or found.expiration <= self.svc.chain.clock() + margin:
            return None
        if net is not None and found.amount_in != net:
            return None
        return Offer(found.quote_hash, found.amount_in, found.amount_out, found.expiration)

    async def _offer(self, record: SwapRecord, side: str, exact: int) -> Offer:
        offer = self._original(record, exact if side == "in" else None)
        if offer is None:
            offers = await self.svc.bus_quote(
                record.origin_asset,
                record.destination_asset,
                side,
                exact,
                self.svc.bus.solver_wait_ms,
            )
            if not offers:
                raise _Refund(RefundReason.NO_LIQUIDITY)
            offer = offers[0]
        return offer

    async def _swap(self, record: SwapRecord, decision: Decision) -> None:
        svc = self.svc
        ledger = svc.chain.ledger
        pips = ledger.fee_pips
        shares = svc.shares_of(record)
        terms = record.quote_terms
        if record.swap_type is SwapType.EXACT_OUTPUT:
            offer = await self._offer(record, "out", terms.amount_out)
            needed = gross_up(with_protocol_fee(offer.amount_in, pips), shares)
            if needed > decision.swap_in:
                raise _Refund(RefundReason.AMOUNT_LESS_THAN_MIN_AMOUNT_OUT)
            fees = fee_amounts(needed, shares)
        else:
            fees = fee_amounts(decision.swap_in, shares)
            net = without_protocol_fee(decision.swap_in - sum(fees), pips)
            if net <= 0:
                raise _Refund(RefundReason.AMOUNT_LESS_THAN_MIN_AMOUNT_OUT)
            offer = await self._offer(record, "in", net)
            if offer.amount_out < decision.min_out:
                raise _Refund(RefundReason.AMOUNT_LESS_THAN_MIN_AMOUNT_OUT)
        origin, dest = record.origin_asset, record.destination_asset
        diff = TokenDiff(diff={origin: -offer.amount_in, dest: offer.amount_out})
        result = await svc.bus.publisher.publish_intent(
            {"quote_hashes": [offer.quote_hash], "signed_data": self._sign(record, [diff])}
        )
        if result.get("status") != "OK":
            log.info("swap %s: publish failed: %s", record.correlation_id, result.get("reason"))
            raise _Refund(RefundReason.INTENT_SUBMIT_FAILED)
        intent_hash = str(result["intent_hash"])
        record.intent_hashes.append(intent_hash)
        svc.store.save(record)
        tx_hash = await self._settled(intent_hash)
        if tx_hash is None:
            raise _Refund(RefundReason.INTENT_SUBMIT_FAILED)
        record.near_tx_hashes.append(tx_hash)
        # Pay fees and the recipient, refund the rest of the deposit, in one batch.
        intents: list[BaseModel] = []
        per_recipient: dict[str, int] = {}
        for share, fee in zip(shares, fees, strict=True):
            per_recipient[share.recipient] = per_recipient.get(share.recipient, 0) + fee
        intents += [
            Transfer(receiver_id=r, tokens={origin: a}) for r, a in per_recipient.items() if a
        ]
        if record.recipient_type == RecipientType.DESTINATION_CHAIN.value:
            intents.append(
                FtWithdraw(
                    token=asset_contract(dest),
                    receiver_id=record.recipient,
                    amount=offer.amount_out,
                    msg=record.custom_recipient_msg,
                )
            )
        else:
            intents.append(Transfer(receiver_id=record.recipient, tokens={dest: offer.amount_out}))
        rest = ledger.mt_balance_of(record.deposit_account, origin) - sum(fees)
        refund, given, refund_fee = self._refund_intents(record, rest)
        used = sum(fees) + with_protocol_fee(offer.amount_in, pips)
        record.amount_in_actual, record.amount_out_actual = used, offer.amount_out
        record.usd_in, record.usd_out = svc.usd(origin, used), svc.usd(dest, offer.amount_out)
        record.slippage_actual = actual_slippage_bps(
            record.swap_type, terms, used, offer.amount_out
        )
        try:
            tx = self._execute(record, intents + refund)
        except LedgerError as exc:  # converted but not paid out: the funds stay, FAILED
            log.warning("swap %s: payout failed: %s", record.correlation_id, exc.text)
            record.status, record.updated_at = SwapStatus.FAILED, svc.chain.clock()
            svc.store.save(record)
            return
        if record.recipient_type == RecipientType.DESTINATION_CHAIN.value:
            record.destination_tx_hashes.append(tx)
        record.fees_paid = sum(fees)
        if given:
            record.refunded, record.refund_fee_charged = given, refund_fee
            record.usd_refunded = svc.usd(origin, given)
        record.status, record.updated_at = SwapStatus.SUCCESS, svc.chain.clock()
        svc.store.save(record)

    async def _settled(self, intent_hash: str) -> str | None:
        """The ledger transaction hash once the bus reports SETTLED; None if it fails."""
        bus = self.svc.bus
        loop = asyncio.get_running_loop()
        until = loop.time() + bus.settlement_delay_s + SETTLE_TIMEOUT_S
        while loop.time() < until:
            status = bus.publisher.get_status({"intent_hash": intent_hash})
            if status["status"] == IntentStatus.SETTLED.value:
                return str(status.get("data", {}).get("hash") or "")
            if status["status"] == IntentStatus.NOT_FOUND_OR_NOT_VALID.value:
                return None
            await asyncio.sleep(SETTLE_POLL_S)
        return None

    # ------------------------------------------------------------------ refunds and signing

    def _refund_intents(self, record: SwapRecord, amount: int) -> tuple[list[BaseModel], int, int]:
        """Intents returning ``amount`` to ``refundTo``: ``(intents, given, fee charged)``.
        ORIGIN_CHAIN refunds pay ``refundFee`` to the fee account; an amount not above the fee
        is not refunded (it stays at the deposit address)."""
        origin = record.origin_asset
        fee = record.refund_fee if record.refund_type == RefundType.ORIGIN_CHAIN.value else 0
        if amount <= fee:
            return [], 0, 0
        given = amount - fee
        intents: list[BaseModel]
        if record.refund_type == RefundType.ORIGIN_CHAIN.value:
            intents = [
                FtWithdraw(token=asset_contract(origin), receiver_id=record.refund_to, amount=given)
            ]
        else:
            intents = [Transfer(receiver_id=record.refund_to, tokens={origin: given})]
        if fee:
            intents.append(Transfer(receiver_id=self.svc.spec.fee_account, tokens={origin: fee}))
        return intents, given, fee

    def _refund_all(self, record: SwapRecord, reason: RefundReason) -> None:
        svc = self.svc
        balance = svc.chain.ledger.mt_balance_of(record.deposit_account, record.origin_asset)
        record.amount_in_actual, record.amount_out_actual = record.deposited, 0
        record.usd_in, record.usd_out = svc.usd(record.origin_asset, record.deposited), "0"
        intents, given, fee = self._refund_intents(record, balance)
        record.refund_fee_charged = 0
        if not intents:
            record.status = SwapStatus.FAILED
            record.refund_reason = RefundReason.AMOUNT_LESS_THAN_MIN_WITHDRAWABLE
        else:
            try:
                self._execute(record, intents)
            except LedgerError as exc:
                log.warning("swap %s: refund failed: %s", record.correlation_id, exc.text)
                record.status, record.refund_reason = (
                    SwapStatus.FAILED,
                    RefundReason.REFUND_ADD_FAILED,
                )
            else:
                record.status, record.refund_reason = SwapStatus.REFUNDED, reason
                record.refunded, record.refund_fee_charged = given, fee
                record.usd_refunded = svc.usd(record.origin_asset, given)
        record.updated_at = svc.chain.clock()
        svc.store.save(record)

    def _sign(self, record: SwapRecord, intents: list[BaseModel]) -> dict[str, Any]:
        ledger = self.svc.chain.ledger
        signed = sign_nep413(
            self.svc.deposit_key(record),
            signer_id=record.deposit_account,
            verifying_contract=ledger.contract_id,
            deadline=self.svc.chain.clock() + INTENT_LIFETIME,
            nonce=salted_nonce(parse_salt(ledger.current_salt())),
            intents=intents,
        )
        return signed.model_dump(mode="json", exclude_none=True)

    def _execute(self, record: SwapRecord, intents: list[BaseModel]) -> str:
        """Run one signed batch of the deposit account on the ledger; its tx hash."""
        chain = self.svc.chain
        result = chain.execute([self._sign(record, intents)])
        tx_hash = chain.next_tx_hash()
        record.near_tx_hashes.append(tx_hash)
        record.intent_hashes.extend(result.intent_hashes)
        return tx_hash
