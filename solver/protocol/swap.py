"""Swap API objects: quote request and response, deposit submission, swap details
(spec 2.1–2.6, 2.8, 3.1, 4.1–4.2).

Attributes are snake_case in Python and camelCase on the wire (``alias_generator=to_camel``,
``populate_by_name=True``); ``model.model_dump(mode="json", by_alias=True, exclude_none=True)``
gives the spec's JSON. Amounts in the smallest unit are ints in Python and decimal strings on
the wire; fields named ``…Formatted`` / ``…Usd`` stay decimal *strings* (spec 2).

Two configurations:

* request bodies that the sandbox receives (:class:`QuoteRequest`, :class:`DepositSubmitRequest`)
  use ``extra="forbid"``: a misspelt field is a client error that must surface, not be dropped;
* response objects that the bot reads from a server use ``extra="ignore"``: a field the spec
  does not list must not break a client.

Numbers are rejected where the spec has amount strings. Pydantic hands a JSON number to the
validator as an int, just as our own code does when constructing a model, so the strict check
applies in JSON mode (``model_validate_json``) and whenever :func:`from_wire` is used on a
decoded dict (context ``{"wire": True}``); Python construction may pass ints.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StrictBool,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic.alias_generators import to_camel

from solver.protocol.amounts import check_u128, parse_u128
from solver.protocol.ids import AccountId, AssetId

DEFAULT_QUOTE_WAITING_TIME_MS = 3_000
UNAUTHENTICATED_FEE_BPS = 20
WIRE_CONTEXT: dict[str, Any] = {"wire": True}

REQUEST_CONFIG = ConfigDict(
    alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
)
RESPONSE_CONFIG = ConfigDict(
    alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
)

M = TypeVar("M", bound=BaseModel)


def from_wire(model: type[M], data: Any) -> M:
    """Validate an already decoded JSON value with the wire rules (numbers ≠ amount strings)."""
    return model.model_validate(data, context=WIRE_CONTEXT)


def _is_wire(info: ValidationInfo) -> bool:
    return info.mode == "json" or bool(info.context and info.context.get("wire"))


def _validate_amount(value: Any, info: ValidationInfo) -> int:
    if not _is_wire(info) and isinstance(value, int) and not isinstance(value, bool):
        return check_u128(value)
    return parse_u128(value)


WireU128 = Annotated[
    int,
    PlainValidator(_validate_amount),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^(0|[1-9][0-9]*)$"}),
]
"""An amount in the smallest unit: int in Python, u128 decimal string on the wire (spec 2)."""

_DECIMAL_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def _validate_decimal(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a decimal string, got {type(value).__name__}")
    if len(value) > 100 or not _DECIMAL_RE.fullmatch(value):
        raise ValueError(f"{value[:50]!r} is not a decimal string")
    return value


DecimalStr = Annotated[
    str,
    PlainValidator(_validate_decimal),
    WithJsonSchema({"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"}),
]
"""A ``…Formatted`` (whole units) or ``…Usd`` (US dollars) value, kept as text (spec 2)."""


def parse_timestamp(value: Any) -> datetime:
    """An aware datetime from ISO 8601 text (``Z`` accepted); naive times are refused."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 date-time") from None
    else:
        raise ValueError("must be an ISO 8601 date-time string")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("date-time must carry a time zone")
    return moment


def format_timestamp(moment: datetime) -> str:
    """UTC ISO 8601 with ``Z``: milliseconds, or microseconds when they are not whole ms."""
    utc = moment.astimezone(UTC)
    spec = "milliseconds" if utc.microsecond % 1000 == 0 else "microseconds"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


Timestamp = Annotated[
    datetime,
    PlainValidator(parse_timestamp),
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A timezone-aware date-time, ISO 8601 on the wire (spec 2.1 ``deadline``, 2.2, 2.5, 2.7)."""

Number = (
    Annotated[int, Field(strict=True)] | Annotated[float, Field(strict=True, allow_inf_nan=False)]
)
NonNegativeNumber = (
    Annotated[int, Field(strict=True, ge=0)]
    | Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
)
NonEmptyStr = Annotated[str, Field(strict=True, min_length=1)]


def _check_referral(value: str) -> str:
    if value != value.lower():
        raise ValueError("referral must be lowercase")
    return value


Referral = Annotated[NonEmptyStr, AfterValidator(_check_referral)]


class SwapType(StrEnum):
    """Spec 2.1, 4.1. The behaviour of ``ANY_INPUT`` is not shown in the spec."""

    EXACT_INPUT = "EXACT_INPUT"
    EXACT_OUTPUT = "EXACT_OUTPUT"
    FLEX_INPUT = "FLEX_INPUT"
    ANY_INPUT = "ANY_INPUT"


class DepositType(StrEnum):
    ORIGIN_CHAIN = "ORIGIN_CHAIN"
    INTENTS = "INTENTS"


class RefundType(StrEnum):
    ORIGIN_CHAIN = "ORIGIN_CHAIN"
    INTENTS = "INTENTS"


class RecipientType(StrEnum):
    DESTINATION_CHAIN = "DESTINATION_CHAIN"
    INTENTS = "INTENTS"


class DepositMode(StrEnum):
    SIMPLE = "SIMPLE"
    MEMO = "MEMO"


class SwapStatus(StrEnum):
    """Swap status values (spec 3.1); ``KNOWN_DEPOSIT_TX`` only in deposit submissions."""

    KNOWN_DEPOSIT_TX = "KNOWN_DEPOSIT_TX"
    PENDING_DEPOSIT = "PENDING_DEPOSIT"
    INCOMPLETE_DEPOSIT = "INCOMPLETE_DEPOSIT"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"
    REFUNDED = "REFUNDED"
    FAILED = "FAILED"


class RefundReason(StrEnum):
    """Known refund reasons (spec 2.8)."""

    AMOUNT_LESS_THAN_MIN_AMOUNT_OUT = "AMOUNT_LESS_THAN_MIN_AMOUNT_OUT"
    AMOUNT_MORE_THAN_BALANCE = "AMOUNT_MORE_THAN_BALANCE"
    INTENT_SUBMIT_FAILED = "INTENT_SUBMIT_FAILED"
    PARTIAL_DEPOSIT = "PARTIAL_DEPOSIT"
    CIRCUIT_BREAKER_BLOCKED = "CIRCUIT_BREAKER_BLOCKED"
    FEE_ESTIMATION_FAILED = "FEE_ESTIMATION_FAILED"
    NO_LIQUIDITY = "NO_LIQUIDITY"
    AMOUNT_LESS_THAN_MIN_WITHDRAWABLE = "AMOUNT_LESS_THAN_MIN_WITHDRAWABLE"
    INSUFFICIENT_BALANCE = "INSUFFICIENT_BALANCE"
    REFUND_ADD_FAILED = "REFUND_ADD_FAILED"
    UNKNOWN = "UNKNOWN"


class AppFee(BaseModel):
    """One ``appFees`` entry (spec 2.1, 2.7). The unit of ``fee`` is not shown in the spec;
    a negative fee is refused."""

    model_config = REQUEST_CONFIG
    recipient: NonEmptyStr
    fee: NonNegativeNumber


class QuoteRequest(BaseModel):
    """Body of ``POST /v0/quote`` (spec 2.1, 4.1). ``slippage_tolerance`` is in basis points."""

    model_config = REQUEST_CONFIG
    dry: StrictBool
    swap_type: SwapType
    slippage_tolerance: NonNegativeNumber
    origin_asset: AssetId
    deposit_type: DepositType
    destination_asset: AssetId
    amount: WireU128
    refund_to: NonEmptyStr
    refund_type: RefundType
    recipient: NonEmptyStr
    recipient_type: RecipientType
    deadline: Timestamp
    deposit_mode: DepositMode = DepositMode.SIMPLE
    connected_wallets: list[NonEmptyStr] | None = None
    session_id: str | None = None
    virtual_chain_recipient: str | None = None
    virtual_chain_refund_recipient: str | None = None
    custom_recipient_msg: str | None = None
    referral: Referral | None = None
    quote_waiting_time_ms: Annotated[int, Field(strict=True, ge=0)] = DEFAULT_QUOTE_WAITING_TIME_MS
    app_fees: list[AppFee] | None = None


def _known_keys(model: type[BaseModel], value: Any) -> Any:
    """Drop keys ``model`` does not know, so an echoed request tolerates extras (2.2)."""
    if not isinstance(value, dict):
        return value
    known = set(model.model_fields)
    known.update(f.alias for f in model.model_fields.values() if f.alias)
    return {k: v for k, v in value.items() if k in known}


class Quote(BaseModel):
    """The quote object (spec 2.3). Which fields are always present is not shown, so all are
    optional; a dry quote has no ``depositAddress``, ``deadline`` nor ``timeWhenInactive``."""

    model_config = RESPONSE_CONFIG
    amount_in: WireU128 | None = None
    amount_in_formatted: DecimalStr | None = None
    amount_in_usd: DecimalStr | None = None
    min_amount_in: WireU128 | None = None
    max_amount_in: WireU128 | None = None
    amount_out: WireU128 | None = None
    amount_out_formatted: DecimalStr | None = None
    amount_out_usd: DecimalStr | None = None
    min_amount_out: WireU128 | None = None
    time_estimate: Number | None = None
    deposit_address: str | None = None
    deposit_memo: str | None = None
    deadline: Timestamp | None = None
    time_when_inactive: Timestamp | None = None
    virtual_chain_recipient: str | None = None
    virtual_chain_refund_recipient: str | None = None
    custom_recipient_msg: str | None = None
    refund_fee: WireU128 | None = None


class QuoteResponse(BaseModel):
    """Response of ``POST /v0/quote`` (spec 2.2). ``quoteRequest`` is the request echoed back;
    keys it does not know are dropped rather than refused."""

    model_config = RESPONSE_CONFIG
    correlation_id: str
    timestamp: Timestamp
    signature: str
    quote_request: QuoteRequest
    quote: Quote

    @field_validator("quote_request", mode="before")
    @classmethod
    def _tolerate_echo(cls, value: Any) -> Any:
        return _known_keys(QuoteRequest, value)

    def dry_rule_problem(self) -> str | None:
        """Why the quote breaks rule 4.1 (1) (a dry quote has no deposit fields), or None."""
        if not self.quote_request.dry:
            return None
        present = [
            name
            for name in ("deposit_address", "deadline", "time_when_inactive")
            if getattr(self.quote, name) is not None
        ]
        return f"dry quote carries {', '.join(present)}" if present else None


class DepositSubmitRequest(BaseModel):
    """Body of ``POST /v0/deposit/submit`` (spec 2.4)."""

    model_config = REQUEST_CONFIG
    tx_hash: NonEmptyStr
    deposit_address: NonEmptyStr
    near_sender_account: AccountId | None = None
    memo: str | None = None


class ChainTxHash(BaseModel):
    """One entry of ``originChainTxHashes`` / ``destinationChainTxHashes`` in 2.6."""

    model_config = RESPONSE_CONFIG
    hash: str
    explorer_url: str


class SwapDetails(BaseModel):
    """``swapDetails`` (spec 2.6). Which fields are always present is not shown."""

    model_config = RESPONSE_CONFIG
    intent_hashes: list[str] | None = None
    near_tx_hashes: list[str] | None = None
    origin_chain_tx_hashes: list[ChainTxHash] | None = None
    destination_chain_tx_hashes: list[ChainTxHash] | None = None
    amount_in: WireU128 | None = None
    amount_in_formatted: DecimalStr | None = None
    amount_in_usd: DecimalStr | None = None
    amount_out: WireU128 | None = None
    amount_out_formatted: DecimalStr | None = None
    amount_out_usd: DecimalStr | None = None
    slippage: Number | None = None
    refunded_amount: WireU128 | None = None
    refunded_amount_formatted: DecimalStr | None = None
    refunded_amount_usd: DecimalStr | None = None
    refund_reason: RefundReason | None = None
    deposited_amount: WireU128 | None = None
    deposited_amount_formatted: DecimalStr | None = None
    deposited_amount_usd: DecimalStr | None = None
    referral: str | None = None


class DepositSubmitResponse(BaseModel):
    """Response of ``POST /v0/deposit/submit`` (spec 2.5)."""

    model_config = RESPONSE_CONFIG
    correlation_id: str
    quote_response: QuoteResponse
    status: SwapStatus
    updated_at: Timestamp
    swap_details: SwapDetails
