"""Wire views of a stored swap: the status / deposit-submission body (spec 2.5, 2.6) and the
history transaction record (2.7). Pure functions of a :class:`SwapRecord` and token decimals.

Amounts of a record: the actual ones once the swap settled (input used with fees, output
delivered), the deposited amount and ``0`` out once refunded or failed, the quoted ones before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox.swap.rules import format_units
from sandbox.swap.store import SwapRecord
from solver.protocol.history import join_deposit_address_and_memo
from solver.protocol.swap import SwapStatus, format_timestamp


def record_amounts(record: SwapRecord) -> tuple[int, int]:
    """``(amountIn, amountOut)`` of the record as of now."""
    amount_in = record.amount_in_actual
    amount_out = record.amount_out_actual
    if amount_in is None:
        amount_in = record.terms.get("amount_in") or 0
    if amount_out is None:
        amount_out = record.terms.get("amount_out") or 0
    return amount_in, amount_out


def _hashes(hashes: list[str], explorer_url: str) -> list[dict[str, str]]:
    return [{"hash": h, "explorerUrl": explorer_url.replace("{hash}", h)} for h in hashes]


def swap_details(
    record: SwapRecord, decimals: Mapping[str, int], explorer_url: str
) -> dict[str, Any]:
    """``swapDetails`` (2.6): hash lists always; amounts once known; refund fields on refund."""
    dec_in = decimals.get(record.origin_asset, 0)
    dec_out = decimals.get(record.destination_asset, 0)
    details: dict[str, Any] = {
        "intentHashes": list(record.intent_hashes),
        "nearTxHashes": list(record.near_tx_hashes),
        "originChainTxHashes": _hashes(record.deposit_tx_hashes, explorer_url),
        "destinationChainTxHashes": _hashes(record.destination_tx_hashes, explorer_url),
    }
    if record.amount_in_actual is not None and record.amount_out_actual is not None:
        details.update(
            amountIn=str(record.amount_in_actual),
            amountInFormatted=format_units(record.amount_in_actual, dec_in),
            amountInUsd=record.usd_in,
            amountOut=str(record.amount_out_actual),
            amountOutFormatted=format_units(record.amount_out_actual, dec_out),
            amountOutUsd=record.usd_out,
        )
    if record.slippage_actual is not None:
        details["slippage"] = record.slippage_actual
    if record.refunded or record.refund_reason is not None:
        details.update(
            refundedAmount=str(record.refunded),
            refundedAmountFormatted=format_units(record.refunded, dec_in),
            refundedAmountUsd=record.usd_refunded,
        )
    if record.refund_reason is not None:
        details["refundReason"] = record.refund_reason.value
    if record.deposited:
        details.update(
            depositedAmount=str(record.deposited),
            depositedAmountFormatted=format_units(record.deposited, dec_in),
            depositedAmountUsd=record.usd_deposited,
        )
    if record.referral is not None:
        details["referral"] = record.referral
    return details


def status_body(
    record: SwapRecord,
    decimals: Mapping[str, int],
    explorer_url: str,
    *,
    submission: bool = False,
) -> dict[str, Any]:
    """The body of ``GET /v0/status`` and ``POST /v0/deposit/submit`` (2.5). In a submission
    answer a swap still waiting for its first deposit reads ``KNOWN_DEPOSIT_TX`` (the deposit
    transaction is known, its funds are not seen yet)."""
    status = record.status
    if submission and status is SwapStatus.PENDING_DEPOSIT:
        status = SwapStatus.KNOWN_DEPOSIT_TX
    return {
        "correlationId": record.correlation_id,
        "quoteResponse": record.quote_response,
        "status": status.value,
        "updatedAt": format_timestamp(record.updated_at),
        "swapDetails": swap_details(record, decimals, explorer_url),
    }


def history_record(record: SwapRecord, decimals: Mapping[str, int]) -> dict[str, Any]:
    """One transaction record (2.7), every required field present (nullable ones as null)."""
    amount_in, amount_out = record_amounts(record)
    dec_in = decimals.get(record.origin_asset, 0)
    refund_fee = record.refund_fee_charged
    body: dict[str, Any] = {
        "originAsset": record.origin_asset,
        "destinationAsset": record.destination_asset,
        "depositAddress": record.deposit_address,
        "depositMemo": record.deposit_memo,
        "depositAddressAndMemo": join_deposit_address_and_memo(
            record.deposit_address, record.deposit_memo
        ),
        "recipient": record.recipient,
        "status": record.status.value,
        "createdAt": format_timestamp(record.created_at),
        "createdAtTimestamp": int(record.created_at.timestamp()),
        "intentHashes": ",".join(record.intent_hashes) if record.intent_hashes else None,
        "referral": record.referral,
        "amountInFormatted": format_units(amount_in, dec_in),
        "amountOutFormatted": format_units(amount_out, decimals.get(record.destination_asset, 0)),
        "appFees": [{"fee": f["fee"], "recipient": f["recipient"]} for f in record.app_fees],
        "nearTxHashes": list(record.near_tx_hashes),
        "originChainTxHashes": list(record.deposit_tx_hashes),
        "destinationChainTxHashes": list(record.destination_tx_hashes),
        "amountIn": str(amount_in),
        "amountInUsd": record.usd_in,
        "amountOut": str(amount_out),
        "amountOutUsd": record.usd_out,
        "refundTo": record.refund_to,
        "senders": list(record.senders),
        "refundFeeFormatted": None if refund_fee is None else format_units(refund_fee, dec_in),
    }
    if record.refund_reason is not None:
        body["refundReason"] = record.refund_reason.value
    if refund_fee is not None:
        body["refundFee"] = str(refund_fee)
    return body
