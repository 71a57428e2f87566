"""The sandbox swap service behind {base_url} and {api_url} (spec 1, 2.1–2.7, 4.1–4.2, 5.1).

A quote asks the message bus for solver offers (``quoteWaitingTimeMs`` bounds the wait, 0 takes
the first answer), applies the platform fee (none with a valid token) and the app fees, derives
the slippage bounds per swap type (:mod:`sandbox.swap.rules`), gives a non-dry quote its own
deposit account and signs the response with the service key. Deposits, execution through the
bus, payouts and refunds are :class:`~sandbox.swap.executor.SwapExecutor`'s.

Deposit accounts are implicit ledger accounts whose keys the service derives from its own key
(HMAC of the quote's ``correlationId|timestamp``), so the service signs as the depositor
without holding user funds anywhere else. In MEMO mode the public address is the shared
``memo_deposit_account`` and the memo names the quote; the funds still land in the quote's own
account (a simulated origin-chain deposit).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sandbox.bus import MessageBus
from sandbox.chain import SandboxChain
from sandbox.config import SwapSpec, TokenSpec
from sandbox.prices import PriceProcess, amount_to_usd, usd_to_amount
from sandbox.swap.checks import SandboxDepositRequest, check_quote_request
from sandbox.swap.executor import SwapExecutor
from sandbox.swap.http import ApiError, invalid_body, not_found
from sandbox.swap.keys import SwapKeys
from sandbox.swap.rules import (
    BPS,
    FeeShare,
    bps,
    deposit_memo,
    deposit_seed,
    fee_shares,
    format_units,
    format_usd,
    quote_signature_message,
    quote_terms,
    solver_side,
    total_bps,
)
from sandbox.swap.store import FeeEntry, SwapRecord, SwapStore
from sandbox.swap.views import status_body
from solver.protocol.encoding import b58encode
from solver.protocol.intents import parse_deadline
from solver.protocol.keys import SecretKey
from solver.protocol.swap import (
    DepositMode,
    DepositSubmitRequest,
    DepositType,
    QuoteRequest,
    RefundType,
    SwapStatus,
    format_timestamp,
)

log = logging.getLogger("sandbox.swap")


@dataclass(frozen=True, slots=True)
class Offer:
    """One solver offer from the bus (2.13)."""

    quote_hash: str
    amount_in: int
    amount_out: int
    expiration: datetime


def _millis(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


class SwapService:
    def __init__(
        self,
        spec: SwapSpec,
        *,
        chain: SandboxChain,
        bus: MessageBus,
        prices: PriceProcess,
        tokens: Mapping[str, TokenSpec],
        state_dir: Path,
    ) -> None:
        self.spec = spec
        self.chain = chain
        self.bus = bus
        self.prices = prices
        self.tokens = dict(tokens)
        self.decimals = {asset: token.decimals for asset, token in tokens.items()}
        self.state_dir = Path(state_dir)
        self.store = SwapStore(
            spec.database,
            chains={asset: chain_id.value for asset, chain_id in spec.chains.items()},
            test_referral_prefix=spec.test_referral_prefix,
            test_accounts=spec.test_accounts,
        )
        self.executor = SwapExecutor(self)
        self.keys = SwapKeys(
            self.state_dir,
            chain.clock,
            service_key_env=spec.service_key_env,
            jwt_secret_env=spec.jwt_secret_env,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Load (or generate) the service key and the JWT secret; resume open swaps."""
        self.keys.load()
        self.executor.load()

    async def run(self, stop: asyncio.Event) -> None:
        await self.executor.run(stop)

    def close(self) -> None:
        self.store.close()

    @property
    def public_key(self) -> str:
        return self.keys.public_key

    @property
    def token_file(self) -> Path | None:
        return self.keys.token_file

    def authorized(self, token: str | None) -> bool:
        return self.keys.authorized(token)

    # ------------------------------------------------------------------ helpers

    def usd(self, asset: str, amount: int) -> str:
        return format_usd(amount_to_usd(amount, self.decimals[asset], self.prices.usd(asset)))

    def deposit_key(self, record: SwapRecord) -> SecretKey:
        return self.keys.deposit_key(record.correlation_id, record.timestamp_text)

    @staticmethod
    def shares_of(record: SwapRecord) -> list[FeeShare]:
        return [FeeShare(f.recipient, bps(f.bps), f.platform) for f in record.fees]

    async def bus_quote(
        self, asset_in: str, asset_out: str, side: str, exact: int, wait_ms: int
    ) -> list[Offer]:
        """Offers best first. ``wait_ms`` 0 returns as soon as the first solver answered."""
        prefix = self.bus.prefix
        params: dict[str, Any] = {
            f"{prefix}_asset_identifier_in": asset_in,
            f"{prefix}_asset_identifier_out": asset_out,
            f"exact_amount_{side}": str(exact),
            "min_deadline_ms": self.spec.quote_validity_ms,
            "wait_ms": min(wait_ms, self.bus.solver_wait_ms) or self.bus.solver_wait_ms,
        }
        if wait_ms > 0:
            raw = await self.bus.quote(params)
        else:
            raw = await self._first_answer(params)
        return [
            Offer(
                str(item["quote_hash"]),
                int(item["amount_in"]),
                int(item["amount_out"]),
                parse_deadline(item["expiration_time"]),
            )
            for item in raw
        ]

    async def _first_answer(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        before = set(self.bus.open_quotes)
        task = asyncio.create_task(self.bus.quote(params))
        await asyncio.sleep(0)  # the bus fans out and registers the open quote synchronously
        mine = [p for qid, p in self.bus.open_quotes.items() if qid not in before]
        while mine and not task.done():
            if any(p.answers for p in mine):
                for pending in mine:
                    pending.done.set()
                break
            await asyncio.sleep(0.002)
        return await task

    # ------------------------------------------------------------------ POST /v0/quote

    async def quote(
        self, req: QuoteRequest, raw: dict[str, Any], authorized: bool
    ) -> dict[str, Any]:
        now = _millis(self.chain.clock())
        check_quote_request(req, now, self.tokens, self.spec.min_deadline_ms)
        shares = fee_shares(
            authorized=authorized,
            platform_fee_bps=self.spec.platform_fee_bps,
            fee_account=self.spec.fee_account,
            app_fees=[(f.recipient, f.fee) for f in req.app_fees or []],
        )
        if total_bps(shares) >= BPS:
            raise invalid_body("appFees: the fees add up to 100 % or more", "appFees")
        pips = self.chain.ledger.fee_pips
        side, exact = solver_side(req.swap_type, req.amount, shares, pips)
        if exact <= 0:
            raise invalid_body("amount is too small to pay the fees", "amount")
        offers = await self.bus_quote(
            req.origin_asset, req.destination_asset, side, exact, req.quote_waiting_time_ms
        )
        if not offers:
            raise ApiError(400, "NO_QUOTE", "no solver quoted this request")
        best = offers[0]
        terms = quote_terms(
            req.swap_type,
            req.amount,
            bps(req.slippage_tolerance),
            shares,
            solver_amount_in=best.amount_in,
            solver_amount_out=best.amount_out,
            fee_pips=pips,
        )
        origin, dest = req.origin_asset, req.destination_asset
        refund_fee = 0
        if req.refund_type is RefundType.ORIGIN_CHAIN:
            refund_fee = usd_to_amount(
                self.spec.refund_fee_usd, self.prices.usd(origin), self.decimals[origin]
            )
        quote: dict[str, Any] = {
            "amountIn": str(terms.amount_in),
            "amountInFormatted": format_units(terms.amount_in, self.decimals[origin]),
            "amountInUsd": self.usd(origin, terms.amount_in),
            "minAmountIn": str(terms.min_amount_in),
            "amountOut": str(terms.amount_out),
            "amountOutFormatted": format_units(terms.amount_out, self.decimals[dest]),
            "amountOutUsd": self.usd(dest, terms.amount_out),
            "minAmountOut": str(terms.min_amount_out),
            "timeEstimate": self.spec.time_estimate_s,
        }
        if terms.max_amount_in is not None:
            quote["maxAmountIn"] = str(terms.max_amount_in)
        correlation_id = str(uuid.uuid4())
        timestamp = format_timestamp(now)
        record_key: SecretKey | None = None
        memo: str | None = None
        inactive = min(req.deadline, now + timedelta(milliseconds=self.spec.quote_validity_ms))
        if not req.dry:
            record_key = self.keys.deposit_key(correlation_id, timestamp)
            seed = deposit_seed(self.keys.root, correlation_id, timestamp)
            address = record_key.public_key.implicit_account_id()
            if req.deposit_mode is DepositMode.MEMO:
                address = self.spec.memo_deposit_account
                memo = next(
                    m
                    for m in (deposit_memo(seed, i) for i in range(1000))
                    if not self.store.memo_taken(address, m)
                )
                quote["depositMemo"] = memo
            quote["depositAddress"] = address
            quote["deadline"] = format_timestamp(req.deadline)
            quote["timeWhenInactive"] = format_timestamp(inactive)
        for key, value in (
            ("virtualChainRecipient", req.virtual_chain_recipient),
            ("virtualChainRefundRecipient", req.virtual_chain_refund_recipient),
            ("customRecipientMsg", req.custom_recipient_msg),
        ):
            if value is not None:
                quote[key] = value
        quote["refundFee"] = str(refund_fee)
        response: dict[str, Any] = {
            "correlationId": correlation_id,
            "timestamp": timestamp,
            "signature": "",
            "quoteRequest": raw,
            "quote": quote,
        }
        signature = self.keys.sign(quote_signature_message(response))
        response["signature"] = "ed25519:" + b58encode(signature)
        if record_key is not None:
            record = SwapRecord(
                correlation_id=correlation_id,
                created_at=now,
                updated_at=now,
                status=SwapStatus.PENDING_DEPOSIT,
                deposit_address=quote["depositAddress"],
                deposit_memo=memo,
                deposit_account=record_key.public_key.implicit_account_id(),
                timestamp_text=timestamp,
                quote_response=response,
                swap_type=req.swap_type,
                origin_asset=origin,
                destination_asset=dest,
                deposit_type=req.deposit_type.value,
                recipient=req.recipient,
                recipient_type=req.recipient_type.value,
                refund_to=req.refund_to,
                refund_type=req.refund_type.value,
                deadline=req.deadline,
                time_when_inactive=inactive,
                referral=req.referral,
                custom_recipient_msg=req.custom_recipient_msg,
                app_fees=[f.model_dump(mode="json") for f in req.app_fees or []],
                fees=[
                    FeeEntry(recipient=s.recipient, bps=str(s.bps), platform=s.platform)
                    for s in shares
                ],
                terms=dataclasses.asdict(terms),
                refund_fee=refund_fee,
                solver_quote_hash=best.quote_hash,
                solver_quote_expires=best.expiration,
                solver_amount_in=best.amount_in,
                solver_amount_out=best.amount_out,
                usd_in=quote["amountInUsd"],
                usd_out=quote["amountOutUsd"],
            )
            self.store.save(record)
            self.executor.watch(record)
        return response

    # ------------------------------------------------------------------ deposits and status

    def _find(self, address: str, memo: str | None) -> SwapRecord:
        record = self.executor.lookup(address, memo)
        if record is None:
            what = address[:80] + (f" with memo {memo[:40]}" if memo else "")
            raise not_found(f"no swap for deposit address {what}")
        return record

    def _view(self, record: SwapRecord, *, submission: bool = False) -> dict[str, Any]:
        return status_body(record, self.decimals, self.spec.explorer_tx_url, submission=submission)

    def _credit(self, record: SwapRecord, amount: int) -> None:
        """A simulated deposit arrives at the quote's deposit account."""
        try:
            self.chain.ledger.deposit(record.deposit_account, record.origin_asset, amount)
        except ValueError:
            raise invalid_body(
                "amount: the deposit would overflow the deposit account", "amount"
            ) from None

    def status(self, address: str, memo: str | None) -> dict[str, Any]:
        return self._view(self._find(address, memo))

    def submit(self, req: DepositSubmitRequest) -> dict[str, Any]:
        """2.4 → 2.5. The first submission of an ORIGIN_CHAIN quote without a deposit yet
        simulates the arrival of ``amountIn``; an INTENTS quote is checked for the transfer."""
        record = self._find(req.deposit_address, req.memo)
        new_tx = req.tx_hash not in record.deposit_tx_hashes
        if new_tx:
            record.deposit_tx_hashes.append(req.tx_hash)
        if req.near_sender_account and req.near_sender_account not in record.senders:
            record.senders.append(req.near_sender_account)
        simulate = (
            new_tx
            and record.is_open
            and record.deposit_type == DepositType.ORIGIN_CHAIN.value
            and record.deposited == 0
            and self.chain.ledger.mt_balance_of(record.deposit_account, record.origin_asset) == 0
        )
        if simulate:
            self._credit(record, record.terms.get("amount_in") or 0)
        record.updated_at = _millis(self.chain.clock())
        self.store.save(record)
        self.executor.watch(record)
        return self._view(record, submission=True)

    def sandbox_deposit(self, req: SandboxDepositRequest) -> dict[str, Any]:
        """Sandbox only: ``amount`` of the origin asset arrives at the quote's deposit account."""
        if req.amount == 0:
            raise invalid_body("amount must be positive", "amount")
        record = self._find(req.deposit_address, req.deposit_memo)
        self._credit(record, req.amount)
        tx_hash = req.tx_hash or self.chain.next_tx_hash()
        if tx_hash not in record.deposit_tx_hashes:
            record.deposit_tx_hashes.append(tx_hash)
        record.updated_at = _millis(self.chain.clock())
        self.store.save(record)
        self.executor.watch(record)
        return self._view(record, submission=True)
