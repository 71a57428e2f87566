"""Rules a quote request must meet beyond its field types (spec 2.1, 4.1; docs/swap-api.md),
and the body of the sandbox-only deposit endpoint. A broken rule is a 400 naming the field
(the official ``BadRequestResponse``, protocol-notes 7)."""

from __future__ import annotations

import re
from collections.abc import Container
from datetime import datetime, timedelta

from pydantic import BaseModel

from sandbox.swap.http import invalid_body
from sandbox.swap.rules import BPS, bps
from solver.protocol.ids import validate_account_id
from solver.protocol.swap import (
    REQUEST_CONFIG,
    DepositMode,
    DepositType,
    NonEmptyStr,
    QuoteRequest,
    RecipientType,
    RefundType,
    WireU128,
)

MAX_APP_FEES = 16
_EVM_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


class SandboxDepositRequest(BaseModel):
    """Body of the sandbox-only ``POST /sandbox/deposit``: simulate ``amount`` arriving."""

    model_config = REQUEST_CONFIG
    deposit_address: NonEmptyStr
    deposit_memo: str | None = None
    amount: WireU128
    tx_hash: str | None = None


def check_quote_request(
    req: QuoteRequest, now: datetime, tokens: Container[str], min_deadline_ms: int
) -> None:
    """Raise a 400 for the first rule ``req`` breaks."""
    for field, asset in (
        ("originAsset", req.origin_asset),
        ("destinationAsset", req.destination_asset),
    ):
        if asset not in tokens:
            raise invalid_body(f"{field}: unknown asset {asset[:80]}", field)
    if req.origin_asset == req.destination_asset:
        raise invalid_body("destinationAsset must differ from originAsset", "destinationAsset")
    if req.amount == 0:
        raise invalid_body("amount must be positive", "amount")
    if bps(req.slippage_tolerance) > BPS:
        raise invalid_body(
            "slippageTolerance is in basis points, at most 10000", "slippageTolerance"
        )
    if req.deadline <= now + timedelta(milliseconds=min_deadline_ms):
        raise invalid_body(f"deadline must be more than {min_deadline_ms} ms ahead", "deadline")
    fees = req.app_fees or []
    if len(fees) > MAX_APP_FEES:
        raise invalid_body(f"appFees: at most {MAX_APP_FEES} entries", "appFees")
    accounts = [("recipient", req.recipient), ("refundTo", req.refund_to)]
    accounts += [(f"appFees.{i}.recipient", fee.recipient) for i, fee in enumerate(fees)]
    for field, account in accounts:
        try:
            validate_account_id(account)
        except ValueError as exc:
            raise invalid_body(f"{field}: {exc}", field) from None
    if req.deposit_mode is DepositMode.MEMO and req.deposit_type is DepositType.INTENTS:
        raise invalid_body("depositMode MEMO needs depositType ORIGIN_CHAIN", "depositMode")
    if req.custom_recipient_msg is not None and req.recipient_type is RecipientType.INTENTS:
        raise invalid_body(
            "customRecipientMsg needs recipientType DESTINATION_CHAIN", "customRecipientMsg"
        )
    withdraws = req.recipient_type is RecipientType.DESTINATION_CHAIN
    if withdraws and not req.destination_asset.startswith("nep141:"):
        raise invalid_body(
            "recipientType: DESTINATION_CHAIN needs a nep141 destinationAsset", "recipientType"
        )
    if req.refund_type is RefundType.ORIGIN_CHAIN and not req.origin_asset.startswith("nep141:"):
        raise invalid_body(
            "refundType: ORIGIN_CHAIN refunds need a nep141 originAsset", "refundType"
        )
    for field, value in (
        ("virtualChainRecipient", req.virtual_chain_recipient),
        ("virtualChainRefundRecipient", req.virtual_chain_refund_recipient),
    ):
        if value is not None and not _EVM_ADDRESS.fullmatch(value):
            raise invalid_body(f"{field} must be an EVM address (0x + 40 hex)", field)
