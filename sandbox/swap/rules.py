"""Pure rules of the sandbox swap API (spec 1.3, 2.1–2.3, 3.1, 4.1, 4.5, 5.1; docs/swap-api.md).

No I/O and no clock: fee math, the slippage bounds of a quote per swap type, the settlement
decision for a deposit, deposit-key and memo derivation, the bytes a quote signature covers,
and the small history rules (masking, test transactions, filter precedence, page numbers).

Basis points may be fractional on the wire (``slippageTolerance`` and ``appFees[].fee`` are
JSON numbers), so they are exact :class:`~fractions.Fraction` here; every amount is an int in
the smallest unit and every division rounds in the service's favour only where stated.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from enum import StrEnum
from fractions import Fraction
from typing import Any

from solver.protocol.swap import RefundReason, SwapStatus, SwapType

BPS = 10_000
FLEX_EXTRA_BPS = 100  # FLEX_INPUT: "slippage plus 1 percent" (spec 3.1)
SIGNATURE_DOMAIN = "sandbox-swap-quote-v1"
OPEN_STATUSES = (SwapStatus.PENDING_DEPOSIT, SwapStatus.INCOMPLETE_DEPOSIT)


def bps(value: int | float | str | Fraction) -> Fraction:
    """Exact basis points from a wire number (a float goes through its shortest repr)."""
    if isinstance(value, Fraction):
        return value
    result = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if result < 0:
        raise ValueError("basis points must be non-negative")
    return result


def floor_bps(amount: int, rate_bps: Fraction) -> int:
    """``floor(amount × rate / 10 000)``."""
    return math.floor(amount * rate_bps / BPS)


def ceil_bps(amount: int, rate_bps: Fraction) -> int:
    return math.ceil(amount * rate_bps / BPS)


# ---------------------------------------------------------------------------------- fees


@dataclass(frozen=True, slots=True)
class FeeShare:
    """One fee taken from the input: the platform fee or an app fee, in basis points."""

    recipient: str
    bps: Fraction
    platform: bool = False


def fee_shares(
    *,
    authorized: bool,
    platform_fee_bps: int,
    fee_account: str,
    app_fees: Iterable[tuple[str, int | float]] = (),
) -> list[FeeShare]:
    """The platform fee (only without a valid token, spec 5.1.3) then the app fees, in order."""
    shares = []
    if not authorized and platform_fee_bps > 0:
        shares.append(FeeShare(fee_account, bps(platform_fee_bps), platform=True))
    shares.extend(FeeShare(recipient, bps(fee)) for recipient, fee in app_fees)
    return shares


def total_bps(shares: Sequence[FeeShare]) -> Fraction:
    return sum((s.bps for s in shares), Fraction(0))


def fee_amounts(gross: int, shares: Sequence[FeeShare]) -> list[int]:
    """Each share's fee on ``gross`` input, rounded down (the user never pays a rounding)."""
    return [floor_bps(gross, s.bps) for s in shares]


def net_of_fees(gross: int, shares: Sequence[FeeShare]) -> int:
    """What reaches the solver from ``gross`` input."""
    return gross - sum(fee_amounts(gross, shares))


def gross_up(net: int, shares: Sequence[FeeShare]) -> int:
    """The smallest input whose :func:`net_of_fees` is at least ``net`` (EXACT_OUTPUT)."""
    total = total_bps(shares)
    if total >= BPS:
        raise ValueError("fees of 100 % or more leave nothing to swap")
    gross = math.ceil(Fraction(net * BPS) / (BPS - total))
    while gross > 0 and net_of_fees(gross - 1, shares) >= net:
        gross -= 1
    return gross


def with_protocol_fee(amount: int, fee_pips: int) -> int:
    """What the verifier debits for a ``token_diff`` delta of ``-amount`` (its fee rounds up)."""
    return amount + -(-amount * fee_pips // 1_000_000)


def without_protocol_fee(budget: int, fee_pips: int) -> int:
    """The largest delta whose debit, protocol fee included, fits in ``budget``."""
    amount = budget * 1_000_000 // (1_000_000 + fee_pips)
    while with_protocol_fee(amount + 1, fee_pips) <= budget:
        amount += 1
    while amount > 0 and with_protocol_fee(amount, fee_pips) > budget:
        amount -= 1
    return amount


# ---------------------------------------------------------------------------------- quote terms


@dataclass(frozen=True, slots=True)
class Terms:
    """The amounts of a quote (2.3) and the bounds the settlement rules use (3.1).

    ``accept_in`` is the lowest total deposit that is processed (below it the swap waits for
    more until the deadline, then refunds); ``accept_out`` is the output floor that applies to a
    deposit between ``accept_in`` and ``min_amount_in`` (FLEX_INPUT only, else ``min_amount_out``).
    """

    amount_in: int
    min_amount_in: int
    max_amount_in: int | None
    amount_out: int
    min_amount_out: int
    accept_in: int
    accept_out: int


def solver_side(
    swap_type: SwapType, amount: int, shares: Sequence[FeeShare], fee_pips: int = 0
) -> tuple[str, int]:
    """What the service asks the bus: ``("in", net input)`` or ``("out", exact output)``."""
    if swap_type is SwapType.EXACT_OUTPUT:
        return "out", amount
    return "in", without_protocol_fee(net_of_fees(amount, shares), fee_pips)


def quote_terms(
    swap_type: SwapType,
    amount: int,
    slippage_bps: Fraction,
    shares: Sequence[FeeShare],
    *,
    solver_amount_in: int,
    solver_amount_out: int,
    fee_pips: int = 0,
) -> Terms:
    """Terms of a quote from the best solver offer (fees included on the input side).

    - EXACT_INPUT: ``amountIn = minAmountIn = amount``; ``minAmountOut`` = out × (1 − s).
    - EXACT_OUTPUT: ``minAmountIn`` = what the offer needs grossed up for fees; ``amountIn =
      maxAmountIn`` = that × (1 + s), rounded up; ``amountOut = minAmountOut = amount``.
    - FLEX_INPUT: slippage on both sides, ``minAmountIn`` = in × (1 − s), ``minAmountOut`` =
      out × (1 − s); deposits down to in × (1 − s − 1 %) are accepted with the output floor
      out × (1 − s − 1 %).
    - ANY_INPUT: as EXACT_INPUT, but any deposit is accepted (no lower bound; rate-protected).
    """
    keep = max(Fraction(0), BPS - slippage_bps)
    if swap_type is SwapType.EXACT_OUTPUT:
        needed = gross_up(with_protocol_fee(solver_amount_in, fee_pips), shares)
        top = ceil_bps(needed, BPS + slippage_bps)
        return Terms(top, needed, top, amount, amount, needed, amount)
    out = solver_amount_out
    min_out = floor_bps(out, keep)
    if swap_type is SwapType.FLEX_INPUT:
        wide = max(Fraction(0), keep - FLEX_EXTRA_BPS)
        min_in = floor_bps(amount, keep)
        return Terms(
            amount, min_in, None, out, min_out, floor_bps(amount, wide), floor_bps(out, wide)
        )
    if swap_type is SwapType.ANY_INPUT:
        return Terms(amount, amount, None, out, min_out, 1, min_out)
    return Terms(amount, amount, None, out, min_out, amount, min_out)


# ---------------------------------------------------------------------------------- settlement


class Action(StrEnum):
    WAIT = "WAIT"
    SWAP = "SWAP"
    REFUND = "REFUND"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with the deposit seen so far.

    SWAP: ``swap_in`` is the input to convert, fees included (for EXACT_OUTPUT the most that may
    be used; the actual use comes from the execution price), ``min_out`` the output floor.
    Whatever of the deposit is not used is refunded after the swap (the excess of 3.1).
    """

    action: Action
    status: SwapStatus
    swap_in: int = 0
    min_out: int = 0
    reason: RefundReason | None = None


def decide(swap_type: SwapType, terms: Terms, deposited: int, deadline_passed: bool) -> Decision:
    """The settlement rule of spec 3.1 for a total deposit, before or after the deadline."""
    if deposited <= 0:
        return Decision(Action.WAIT, SwapStatus.PENDING_DEPOSIT)
    if deposited < terms.accept_in:
        if deadline_passed:
            return Decision(Action.REFUND, SwapStatus.REFUNDED, reason=RefundReason.PARTIAL_DEPOSIT)
        return Decision(Action.WAIT, SwapStatus.INCOMPLETE_DEPOSIT)
    if deadline_passed:
        # A complete deposit seen only after the deadline: refund begins (2.1 ``deadline``).
        return Decision(Action.REFUND, SwapStatus.REFUNDED, reason=RefundReason.UNKNOWN)
    if swap_type is SwapType.EXACT_INPUT:
        return Decision(Action.SWAP, SwapStatus.PROCESSING, terms.amount_in, terms.min_amount_out)
    if swap_type is SwapType.EXACT_OUTPUT:
        cap = min(deposited, terms.max_amount_in or deposited)
        return Decision(Action.SWAP, SwapStatus.PROCESSING, cap, terms.amount_out)
    if swap_type is SwapType.FLEX_INPUT:
        floor = terms.min_amount_out if deposited >= terms.min_amount_in else terms.accept_out
        return Decision(Action.SWAP, SwapStatus.PROCESSING, deposited, floor)
    # ANY_INPUT: the whole deposit at no worse than the quoted minimum rate.
    floor = terms.min_amount_out * deposited // max(terms.amount_in, 1)
    return Decision(Action.SWAP, SwapStatus.PROCESSING, deposited, floor)


def actual_slippage_bps(swap_type: SwapType, terms: Terms, used_in: int, out: int) -> float:
    """How much worse than quoted the execution was, in basis points (negative: better).

    Input types compare rates (output per unit of input, fees included); EXACT_OUTPUT compares
    the input used with ``minAmountIn`` (the input the quote needed).
    """
    if swap_type is SwapType.EXACT_OUTPUT:
        if terms.min_amount_in <= 0:
            return 0.0
        value = Fraction(used_in - terms.min_amount_in, terms.min_amount_in) * BPS
    else:
        if used_in <= 0 or terms.amount_out <= 0:
            return 0.0
        quoted = Fraction(terms.amount_out, terms.amount_in)
        value = (1 - Fraction(out, used_in) / quoted) * BPS
    return round(float(value), 2)


# ---------------------------------------------------------------------------------- addresses


def deposit_seed(root: bytes, correlation_id: str, timestamp: str) -> bytes:
    """The 32-byte ed25519 seed of a quote's deposit account (an implicit account owned by the
    service): HMAC-SHA256 of ``correlationId|timestamp`` under the service's derivation root."""
    return hmac.new(root, f"{correlation_id}|{timestamp}".encode(), hashlib.sha256).digest()


def deposit_memo(seed: bytes, attempt: int = 0) -> str:
    """A 10-digit numeric memo for MEMO mode, derived from the deposit seed."""
    digest = hashlib.sha256(b"memo:" + seed + attempt.to_bytes(4, "big")).digest()
    return str(1_000_000_000 + int.from_bytes(digest[:8], "big") % 9_000_000_000)


# ---------------------------------------------------------------------------------- signature

SIGNED_QUOTE_FIELDS = (
    "amountIn",
    "minAmountIn",
    "maxAmountIn",
    "amountOut",
    "minAmountOut",
    "depositAddress",
    "depositMemo",
    "deadline",
    "timeWhenInactive",
    "refundFee",
)
SIGNED_REQUEST_FIELDS = (
    "swapType",
    "originAsset",
    "destinationAsset",
    "amount",
    "depositType",
    "recipient",
    "recipientType",
    "refundTo",
    "refundType",
)


def quote_signature_message(response: Mapping[str, Any]) -> bytes:
    """The exact bytes the service signs for a quote response (2.2), from its wire JSON.

    A one-line JSON object with sorted keys, ``","`` / ``":"`` separators and non-ASCII escaped
    (``\\uXXXX``), holding only strings: ``domain`` (:data:`SIGNATURE_DOMAIN`),
    ``correlationId``, ``timestamp``, ``dry`` (``"true"``/``"false"``), ``quote.<f>`` for each
    :data:`SIGNED_QUOTE_FIELDS` present and ``quoteRequest.<f>`` for each
    :data:`SIGNED_REQUEST_FIELDS`, every value copied verbatim from the response.
    """
    quote = response.get("quote") or {}
    request = response.get("quoteRequest") or {}
    fields: dict[str, str] = {
        "domain": SIGNATURE_DOMAIN,
        "correlationId": str(response["correlationId"]),
        "timestamp": str(response["timestamp"]),
        "dry": "true" if request.get("dry") is True else "false",
    }
    for name in SIGNED_QUOTE_FIELDS:
        if isinstance(quote.get(name), str):
            fields[f"quote.{name}"] = quote[name]
    for name in SIGNED_REQUEST_FIELDS:
        if isinstance(request.get(name), str):
            fields[f"quoteRequest.{name}"] = request[name]
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


# ---------------------------------------------------------------------------------- formatting


def format_units(amount: int, decimals: int) -> str:
    """``amount`` smallest units as whole units: a plain decimal, no exponent, no trailing 0."""
    whole, frac = divmod(amount, 10**decimals)
    if not decimals or not frac:
        return str(whole)
    return f"{whole}.{str(frac).zfill(decimals).rstrip('0')}"


def format_usd(value: Decimal) -> str:
    """US dollars rounded to 6 decimals, plain decimal without trailing zeros."""
    rounded = value.quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN)
    text = format(rounded, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# ---------------------------------------------------------------------------------- history


def is_masking(status: SwapStatus, amount_out: int) -> bool:
    """A masking transaction: a record with no conversion behind it (REFUNDED or FAILED with
    nothing delivered). Its assets, amounts, fees and referral describe a trade that did not
    happen, so the asset, chain, referral, affiliate and USD filters leave it out (4.5)."""
    return status in (SwapStatus.REFUNDED, SwapStatus.FAILED) and amount_out == 0


def is_test_transaction(
    referral: str | None, accounts: Iterable[str], prefix: str, test_accounts: Iterable[str]
) -> bool:
    """A test transaction: its referral starts with ``prefix``, or one of its accounts
    (recipient, refundTo, senders) is a configured test account (hidden unless showTestTxs)."""
    if referral is not None and referral.startswith(prefix):
        return True
    return not set(accounts).isdisjoint(test_accounts)


@dataclass(frozen=True, slots=True)
class AssetFilter:
    from_chain: str | None
    from_token: str | None
    to_chain: str | None
    to_token: str | None


def asset_filter(
    from_chain: str | None, from_token: str | None, to_chain: str | None, to_token: str | None
) -> AssetFilter:
    """Precedence of 4.5: ``fromTokenId`` overrides ``fromChainId``; ``toTokenId`` overrides
    ``toChainId`` and ``fromTokenId`` (a ``fromChainId`` overridden by ``fromTokenId`` stays
    dropped)."""
    return AssetFilter(
        from_chain=None if from_token is not None else from_chain,
        from_token=None if to_token is not None else from_token,
        to_chain=None if to_token is not None else to_chain,
        to_token=to_token,
    )


@dataclass(frozen=True, slots=True)
class PageInfo:
    total_pages: int
    next_page: int | None
    prev_page: int | None
    offset: int


def page_info(total: int, page: int, per_page: int) -> PageInfo:
    """Page numbers of 2.9: 1-based, ``prevPage`` null on the first page, ``nextPage`` null
    on the last page and beyond it (a page past the end is empty)."""
    total_pages = -(-total // per_page)
    return PageInfo(
        total_pages=total_pages,
        next_page=page + 1 if page < total_pages else None,
        prev_page=page - 1 if page > 1 else None,
        offset=(page - 1) * per_page,
    )
