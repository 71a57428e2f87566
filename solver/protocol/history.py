"""History API objects: transaction records, the paginated page and the query parameters of
both listing endpoints (spec 2.7, 2.9, 3.1, 4.3–4.5, 8, 9.2).

Records and pages are read from a server (``extra="ignore"``); the query models are what the
sandbox receives (``extra="forbid"``) and are lax about types because query-string values
arrive as text (``"50"``, ``"true"``). See :mod:`solver.protocol.swap` for the wire rules.

Required-but-nullable record fields (``depositMemo``, ``intentHashes``, ``referral``,
``refundFeeFormatted``, ``nextPage``, ``prevPage``) are written as ``null`` even when dumping
with ``exclude_none=True``, so every dump is a valid record.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
)

from solver.protocol.ids import AssetId, ChainId
from solver.protocol.swap import (
    REQUEST_CONFIG,
    RESPONSE_CONFIG,
    AppFee,
    DecimalStr,
    NonNegativeNumber,
    RefundReason,
    Timestamp,
    WireU128,
)

DEFAULT_NUMBER_OF_TRANSACTIONS = 50
DEFAULT_PER_PAGE = 50
MAX_HISTORY_LIMIT = 1000


class HistoryStatus(StrEnum):
    """Statuses of history records: the swap statuses without ``KNOWN_DEPOSIT_TX`` (3.1)."""

    PENDING_DEPOSIT = "PENDING_DEPOSIT"
    INCOMPLETE_DEPOSIT = "INCOMPLETE_DEPOSIT"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"
    REFUNDED = "REFUNDED"
    FAILED = "FAILED"


DEFAULT_HISTORY_STATUSES = (
    HistoryStatus.FAILED,
    HistoryStatus.PROCESSING,
    HistoryStatus.REFUNDED,
    HistoryStatus.SUCCESS,
)


class Direction(StrEnum):
    """Cursor direction (4.3): ``next`` gives older records, ``prev`` newer ones."""

    NEXT = "next"
    PREV = "prev"


def join_deposit_address_and_memo(address: str, memo: str | None) -> str:
    """The deprecated combined value (2.7, 9.2): ``address_memo``, or the address alone."""
    return address if memo is None else f"{address}_{memo}"


def split_deposit_address_and_memo(
    value: str, *, address: str | None = None
) -> tuple[str, str | None]:
    """Inverse of :func:`join_deposit_address_and_memo`.

    The spec joins with a bare underscore, which is ambiguous when the address itself has one
    (named ledger accounts, base64url addresses). Pass ``address`` when it is known; otherwise
    the value is split at its *last* underscore (memos are usually numeric tags).
    """
    if address is not None:
        if value == address:
            return address, None
        if not value.startswith(address + "_"):
            raise ValueError(f"{value[:80]!r} does not start with the address {address[:80]!r}")
        return address, value[len(address) + 1 :]
    head, sep, tail = value.rpartition("_")
    return (head, tail) if sep else (value, None)


class _KeepsNulls(BaseModel):
    """Writes the fields listed in ``nullable_required`` even when they are None."""

    nullable_required: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _keep_nulls(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not info.exclude_none or info.include is not None:
            return data
        for name in self.nullable_required:
            if getattr(self, name) is None and name not in (info.exclude or ()):
                alias = type(self).model_fields[name].alias
                data.setdefault(alias if info.by_alias and alias else name, None)
        return data


class RecordAppFee(AppFee):
    """An ``appFees`` entry of a record, read from a server (2.7)."""

    model_config = RESPONSE_CONFIG


class TransactionRecord(_KeepsNulls):
    """One history record (spec 2.7). ``intentHashes`` is a string (or null) here, unlike the
    list in ``swapDetails`` (2.6); ``createdAtTimestamp`` is Unix time in seconds."""

    model_config = RESPONSE_CONFIG
    nullable_required = ("deposit_memo", "intent_hashes", "referral", "refund_fee_formatted")

    origin_asset: AssetId
    destination_asset: AssetId
    deposit_address: str
    deposit_memo: str | None
    deposit_address_and_memo: str
    recipient: str
    status: HistoryStatus
    created_at: Timestamp
    created_at_timestamp: NonNegativeNumber
    intent_hashes: str | None
    referral: str | None
    amount_in_formatted: DecimalStr
    amount_out_formatted: DecimalStr
    app_fees: list[RecordAppFee]
    near_tx_hashes: list[str]
    origin_chain_tx_hashes: list[str]
    destination_chain_tx_hashes: list[str]
    amount_in: WireU128
    amount_in_usd: DecimalStr
    amount_out: WireU128
    amount_out_usd: DecimalStr
    refund_to: str
    senders: list[str]
    refund_fee_formatted: DecimalStr | None
    refund_reason: RefundReason | None = None
    refund_fee: WireU128 | None = None


PageNumber = Annotated[int, Field(strict=True, ge=0)]


class HistoryPage(_KeepsNulls):
    """Response of ``GET /api/v0/transactions-pages`` (spec 2.9, 4.4)."""

    model_config = RESPONSE_CONFIG
    nullable_required = ("next_page", "prev_page")

    data: list[TransactionRecord]
    total_pages: PageNumber
    page: PageNumber
    per_page: PageNumber
    total: PageNumber
    next_page: PageNumber | None
    prev_page: PageNumber | None


QueryNumber = Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, allow_inf_nan=False)]
Limit = Annotated[int, Field(ge=1, le=MAX_HISTORY_LIMIT)]


class HistoryFilters(BaseModel):
    """The shared history filters (spec 4.5). The name of the free-text search parameter is not
    shown in the spec; ``search`` is ours. ``statuses`` is comma-separated on the wire and a
    list here. ``showTestTxs`` is typed string in the spec and read as a boolean flag here.
    Empty or ``null`` values of the nullable filters mean "not set"."""

    model_config = REQUEST_CONFIG
    search: str | None = None
    from_chain_id: ChainId | None = None
    from_token_id: str | None = None
    to_chain_id: ChainId | None = None
    to_token_id: str | None = None
    deposit_memo: str | None = None
    referral: str | None = None
    affiliate: str | None = None
    statuses: Annotated[list[HistoryStatus], Field(min_length=1)] = Field(
        default_factory=lambda: list(DEFAULT_HISTORY_STATUSES)
    )
    show_test_txs: bool | None = None
    min_usd_price: QueryNumber | None = None
    max_usd_price: QueryNumber | None = None
    start_timestamp: Timestamp | None = None
    start_timestamp_unix: QueryNumber | None = None
    end_timestamp: Timestamp | None = None
    end_timestamp_unix: QueryNumber | None = None

    @field_validator(
        "min_usd_price",
        "max_usd_price",
        "start_timestamp",
        "start_timestamp_unix",
        "end_timestamp",
        "end_timestamp_unix",
        mode="before",
    )
    @classmethod
    def _unset(cls, value: Any) -> Any:
        return None if value in ("", "null") else value

    @field_validator("statuses", mode="before")
    @classmethod
    def _split_statuses(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        items = [item.strip() for item in value.split(",")]
        if not all(items):
            raise ValueError("statuses must be a comma-separated list without empty entries")
        return items

    @field_serializer("statuses", when_used="json")
    def _join_statuses(self, statuses: list[HistoryStatus]) -> str:
        return ",".join(status.value for status in statuses)

    def to_query_params(self) -> dict[str, str]:
        """Query parameters for the request: spec names, unset filters left out."""
        raw = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {
            key: ("true" if value else "false") if isinstance(value, bool) else str(value)
            for key, value in raw.items()
        }


class TransactionsQuery(HistoryFilters):
    """Query of ``GET /api/v0/transactions`` (cursor style, spec 4.3, 8).

    ``lastDepositAddressAndMemo`` is deprecated (9.2): :attr:`cursor` prefers the separate
    ``lastDepositAddress`` / ``lastDepositMemo`` and falls back to splitting the old one.
    """

    number_of_transactions: Limit = DEFAULT_NUMBER_OF_TRANSACTIONS
    last_deposit_address_and_memo: str | None = None
    last_deposit_address: str | None = None
    last_deposit_memo: str | None = None
    direction: Direction = Direction.NEXT

    @property
    def cursor(self) -> tuple[str, str | None] | None:
        """``(address, memo)`` of the last record of the previous page, or None."""
        if self.last_deposit_address is not None:
            return self.last_deposit_address, self.last_deposit_memo
        if self.last_deposit_address_and_memo is not None:
            return split_deposit_address_and_memo(self.last_deposit_address_and_memo)
        return None

    def after(self, record: TransactionRecord) -> TransactionsQuery:
        """The same query continued past ``record`` (the last record of a page)."""
        return self.model_copy(
            update={
                "last_deposit_address_and_memo": None,
                "last_deposit_address": record.deposit_address,
                "last_deposit_memo": record.deposit_memo,
            }
        )


class TransactionsPagesQuery(HistoryFilters):
    """Query of ``GET /api/v0/transactions-pages`` (page style, spec 4.4, 8)."""

    page: Annotated[int, Field(ge=1)] = 1
    per_page: Limit = DEFAULT_PER_PAGE
