"""History API models (spec 2.7, 2.9, 4.3–4.5, 8, 9.2)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from solver.protocol.history import (
    DEFAULT_HISTORY_STATUSES,
    Direction,
    HistoryFilters,
    HistoryPage,
    HistoryStatus,
    TransactionRecord,
    TransactionsPagesQuery,
    TransactionsQuery,
    join_deposit_address_and_memo,
    split_deposit_address_and_memo,
)
from solver.protocol.ids import ChainId
from solver.protocol.swap import RefundReason, SwapStatus


def wire_aliases(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def error_locs(exc: pytest.ExceptionInfo[ValidationError]) -> list[tuple[int | str, ...]]:
    return [tuple(err["loc"]) for err in exc.value.errors()]


def record_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "originAsset": "nep141:wrap.near",
        "destinationAsset": "nep141:usdc.near",
        "depositAddress": "rDepositAddr",
        "depositMemo": None,
        "depositAddressAndMemo": "rDepositAddr",
        "recipient": "bob.near",
        "status": "SUCCESS",
        "createdAt": "2026-03-01T12:34:56.789Z",
        "createdAtTimestamp": 1772368496,
        "intentHashes": None,
        "referral": None,
        "amountInFormatted": "1.5",
        "amountOutFormatted": "4.8",
        "appFees": [],
        "nearTxHashes": [],
        "originChainTxHashes": [],
        "destinationChainTxHashes": [],
        "amountIn": "1500000000000000000000000",
        "amountInUsd": "4.85",
        "amountOut": "4800000",
        "amountOutUsd": "4.80",
        "refundTo": "alice.near",
        "senders": ["alice.near"],
        "refundFeeFormatted": None,
    }
    body.update(changes)
    return body


REFUNDED_RECORD = record_body(
    depositMemo="42",
    depositAddressAndMemo="rDepositAddr_42",
    status="REFUNDED",
    intentHashes="hashA,hashB",
    referral="my-app",
    appFees=[{"fee": 10, "recipient": "fees.near"}],
    nearTxHashes=["n1"],
    originChainTxHashes=["o1", "o2"],
    destinationChainTxHashes=["d1"],
    refundFeeFormatted="0.001",
    refundReason="PARTIAL_DEPOSIT",
    refundFee="1000000000000000000000",
)

REQUIRED_RECORD_FIELDS = sorted(record_body())


def page_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "data": [record_body(), REFUNDED_RECORD],
        "totalPages": 3,
        "page": 1,
        "perPage": 2,
        "total": 5,
        "nextPage": 2,
        "prevPage": None,
    }
    body.update(changes)
    return body


# --- records ----------------------------------------------------------------------------------


def test_record_wire_names_match_spec_2_7() -> None:
    assert wire_aliases(TransactionRecord) == set(REQUIRED_RECORD_FIELDS) | {
        "refundReason",
        "refundFee",
    }
    assert wire_aliases(HistoryPage) == set(page_body())


def test_history_status_is_swap_status_without_known_deposit_tx() -> None:
    assert {s.value for s in HistoryStatus} == {s.value for s in SwapStatus} - {"KNOWN_DEPOSIT_TX"}


@pytest.mark.parametrize("body", [record_body(), REFUNDED_RECORD])
def test_record_round_trip_keeps_required_nulls(body: dict[str, Any]) -> None:
    record = TransactionRecord.model_validate_json(json.dumps(body))
    assert dump(record) == body
    assert TransactionRecord.model_validate_json(record.model_dump_json(by_alias=True)) == record


def test_record_values() -> None:
    record = TransactionRecord.model_validate_json(json.dumps(REFUNDED_RECORD))
    assert record.status is HistoryStatus.REFUNDED
    assert record.refund_reason is RefundReason.PARTIAL_DEPOSIT
    assert record.refund_fee == 10**21
    assert record.amount_in == 15 * 10**23
    assert record.created_at == datetime(2026, 3, 1, 12, 34, 56, 789_000, tzinfo=UTC)
    assert record.app_fees[0].fee == 10
    assert record.deposit_address_and_memo == join_deposit_address_and_memo(
        record.deposit_address, record.deposit_memo
    )


def test_record_snake_case_dump_keeps_nulls_under_python_names() -> None:
    record = TransactionRecord.model_validate_json(json.dumps(record_body()))
    data = record.model_dump(exclude_none=True)
    assert data["deposit_memo"] is None
    assert data["refund_fee_formatted"] is None
    assert "refund_reason" not in data
    assert "depositMemo" not in data
    assert "deposit_memo" not in record.model_dump(exclude_none=True, exclude={"deposit_memo"})


@pytest.mark.parametrize("field", REQUIRED_RECORD_FIELDS)
def test_record_each_required_field_missing(field: str) -> None:
    body = record_body()
    del body[field]
    with pytest.raises(ValidationError) as exc:
        TransactionRecord.model_validate_json(json.dumps(body))
    assert error_locs(exc) == [(field,)]
    assert exc.value.errors()[0]["type"] == "missing"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("status", "KNOWN_DEPOSIT_TX"),
        ("status", "success"),
        ("refundReason", "SOMETHING_ELSE"),
        ("amountIn", 1500),
        ("refundFee", str(2**128)),
        ("amountOutUsd", 4.8),
        ("createdAt", "2026-03-01T12:34:56.789"),
        ("originAsset", "wrap.near"),
        ("intentHashes", ["h"]),
        ("appFees", [{"fee": 1}]),
    ],
)
def test_record_bad_values(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        TransactionRecord.model_validate_json(json.dumps(record_body(**{field: value})))
    assert {loc[0] for loc in error_locs(exc)} == {field}


def test_record_tolerates_unknown_fields() -> None:
    body = record_body(newField=1, appFees=[{"fee": 1, "recipient": "a.near", "extra": True}])
    record = TransactionRecord.model_validate_json(json.dumps(body))
    assert "newField" not in dump(record)
    assert dump(record)["appFees"] == [{"recipient": "a.near", "fee": 1}]


# --- page ---------------------------------------------------------------------------------------


def test_page_round_trip() -> None:
    body = page_body()
    page = HistoryPage.model_validate_json(json.dumps(body))
    assert page.next_page == 2
    assert page.prev_page is None
    assert len(page.data) == 2
    assert page.data[1].deposit_memo == "42"
    assert dump(page) == body


@pytest.mark.parametrize("field", sorted(page_body()))
def test_page_required_fields(field: str) -> None:
    body = page_body()
    del body[field]
    with pytest.raises(ValidationError) as exc:
        HistoryPage.model_validate_json(json.dumps(body))
    assert error_locs(exc) == [(field,)]


def test_page_rejects_negative_or_text_numbers() -> None:
    for changes in ({"total": -1}, {"page": "1"}, {"nextPage": 1.5}):
        with pytest.raises(ValidationError):
            HistoryPage.model_validate_json(json.dumps(page_body(**changes)))


# --- queries ------------------------------------------------------------------------------------


def test_query_defaults() -> None:
    cursor = TransactionsQuery()
    assert cursor.number_of_transactions == 50
    assert cursor.direction is Direction.NEXT
    assert cursor.statuses == list(DEFAULT_HISTORY_STATUSES)
    assert cursor.to_query_params() == {
        "statuses": "FAILED,PROCESSING,REFUNDED,SUCCESS",
        "numberOfTransactions": "50",
        "direction": "next",
    }
    pages = TransactionsPagesQuery()
    assert (pages.page, pages.per_page) == (1, 50)


@pytest.mark.parametrize(
    ("value", "ok"), [("0", False), ("1", True), ("1000", True), ("1001", False)]
)
def test_number_of_transactions_limits(value: str, ok: bool) -> None:
    if ok:
        query = TransactionsQuery.model_validate({"numberOfTransactions": value})
        assert query.number_of_transactions == int(value)
    else:
        with pytest.raises(ValidationError) as exc:
            TransactionsQuery.model_validate({"numberOfTransactions": value})
        assert error_locs(exc) == [("numberOfTransactions",)]


@pytest.mark.parametrize(("value", "ok"), [(0, False), (1, True), (1000, True), (1001, False)])
def test_per_page_limits(value: int, ok: bool) -> None:
    if ok:
        assert TransactionsPagesQuery.model_validate({"perPage": value}).per_page == value
    else:
        with pytest.raises(ValidationError) as exc:
            TransactionsPagesQuery.model_validate({"perPage": value})
        assert error_locs(exc) == [("perPage",)]


def test_page_minimum() -> None:
    assert TransactionsPagesQuery.model_validate({"page": "1"}).page == 1
    assert TransactionsPagesQuery.model_validate({"page": "7"}).page == 7
    with pytest.raises(ValidationError) as exc:
        TransactionsPagesQuery.model_validate({"page": "0"})
    assert error_locs(exc) == [("page",)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SUCCESS", [HistoryStatus.SUCCESS]),
        ("SUCCESS,FAILED", [HistoryStatus.SUCCESS, HistoryStatus.FAILED]),
        (" PENDING_DEPOSIT , INCOMPLETE_DEPOSIT", [
            HistoryStatus.PENDING_DEPOSIT, HistoryStatus.INCOMPLETE_DEPOSIT,
        ]),
        (["REFUNDED", "PROCESSING"], [HistoryStatus.REFUNDED, HistoryStatus.PROCESSING]),
    ],
)  # fmt: skip
def test_statuses_parsing(text: str | list[str], expected: list[HistoryStatus]) -> None:
    query = HistoryFilters.model_validate({"statuses": text})
    assert query.statuses == expected
    assert query.to_query_params()["statuses"] == ",".join(s.value for s in expected)


@pytest.mark.parametrize(
    "text", ["", "SUCCESS,,FAILED", "KNOWN_DEPOSIT_TX", "success", "SUCCESS;FAILED", []]
)
def test_statuses_rejected(text: str | list[str]) -> None:
    with pytest.raises(ValidationError) as exc:
        HistoryFilters.model_validate({"statuses": text})
    assert {loc[0] for loc in error_locs(exc)} == {"statuses"}


def test_filters_parse_query_strings() -> None:
    query = TransactionsPagesQuery.model_validate(
        {
            "search": "0xabc",
            "fromChainId": "eth",
            "toChainId": "near",
            "fromTokenId": "nep141:wrap.near",
            "toTokenId": "nep141:usdc.near",
            "depositMemo": "42",
            "referral": "my-app",
            "affiliate": "aff.near",
            "showTestTxs": "true",
            "minUsdPrice": "0",
            "maxUsdPrice": "12.5",
            "startTimestamp": "2026-01-01T00:00:00Z",
            "endTimestamp": "2026-02-01T00:00:00.000+00:00",
            "startTimestampUnix": "1767225600",
            "endTimestampUnix": "",
            "page": "2",
            "perPage": "10",
        }
    )
    assert query.from_chain_id is ChainId.ETH
    assert query.show_test_txs is True
    assert query.min_usd_price == 0
    assert query.max_usd_price == 12.5
    assert query.start_timestamp == datetime(2026, 1, 1, tzinfo=UTC)
    assert query.start_timestamp_unix == 1767225600
    assert query.end_timestamp_unix is None
    assert query.to_query_params() == {
        "search": "0xabc",
        "fromChainId": "eth",
        "fromTokenId": "nep141:wrap.near",
        "toChainId": "near",
        "toTokenId": "nep141:usdc.near",
        "depositMemo": "42",
        "referral": "my-app",
        "affiliate": "aff.near",
        "statuses": "FAILED,PROCESSING,REFUNDED,SUCCESS",
        "showTestTxs": "true",
        "minUsdPrice": "0",
        "maxUsdPrice": "12.5",
        "startTimestamp": "2026-01-01T00:00:00.000Z",
        "startTimestampUnix": "1767225600",
        "endTimestamp": "2026-02-01T00:00:00.000Z",
        "page": "2",
        "perPage": "10",
    }
    again = TransactionsPagesQuery.model_validate(query.to_query_params())
    assert again == query


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("minUsdPrice", "-1"),
        ("maxUsdPrice", "-0.01"),
        ("startTimestamp", "2026-01-01T00:00:00"),
        ("endTimestamp", "yesterday"),
        ("fromChainId", "ethereum"),
        ("toChainId", "NEAR"),
        ("direction", "NEXT"),
        ("direction", "older"),
        ("lastCursor", "x"),
    ],
)
def test_query_bad_values(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as exc:
        TransactionsQuery.model_validate({field: value})
    assert {loc[0] for loc in error_locs(exc)} == {field}


def test_query_zero_usd_prices_and_prev_direction() -> None:
    query = TransactionsQuery.model_validate(
        {"minUsdPrice": 0, "maxUsdPrice": 0, "direction": "prev"}
    )
    assert (query.min_usd_price, query.max_usd_price) == (0, 0)
    assert query.direction is Direction.PREV


def test_cursor_prefers_new_fields_and_splits_deprecated_one() -> None:
    assert TransactionsQuery().cursor is None
    old = TransactionsQuery.model_validate({"lastDepositAddressAndMemo": "rAddr_99"})
    assert old.cursor == ("rAddr", "99")
    both = TransactionsQuery.model_validate(
        {"lastDepositAddressAndMemo": "x_1", "lastDepositAddress": "rAddr"}
    )
    assert both.cursor == ("rAddr", None)
    record = TransactionRecord.model_validate_json(json.dumps(REFUNDED_RECORD))
    following = old.after(record)
    assert following.cursor == ("rDepositAddr", "42")
    assert following.to_query_params()["lastDepositAddress"] == "rDepositAddr"
    assert "lastDepositAddressAndMemo" not in following.to_query_params()


# --- address and memo ---------------------------------------------------------------------------


def test_join_and_split_examples() -> None:
    assert join_deposit_address_and_memo("rAddr", "123") == "rAddr_123"
    assert join_deposit_address_and_memo("rAddr", None) == "rAddr"
    assert split_deposit_address_and_memo("rAddr_123") == ("rAddr", "123")
    assert split_deposit_address_and_memo("rAddr") == ("rAddr", None)
    assert split_deposit_address_and_memo("my_account.near_7") == ("my_account.near", "7")
    assert split_deposit_address_and_memo("my_acc.near", address="my_acc.near") == (
        "my_acc.near",
        None,
    )
    assert split_deposit_address_and_memo("a_b_c_d", address="a_b") == ("a_b", "c_d")
    with pytest.raises(ValueError, match="does not start"):
        split_deposit_address_and_memo("other_1", address="rAddr")


addresses = st.text(st.characters(codec="ascii", exclude_characters="_"), min_size=1, max_size=40)
memos = st.none() | st.text(st.characters(codec="ascii", exclude_characters="_"), max_size=20)


@given(addresses, memos)
def test_split_inverts_join(address: str, memo: str | None) -> None:
    joined = join_deposit_address_and_memo(address, memo)
    assert split_deposit_address_and_memo(joined) == (address, memo)


@given(st.text(min_size=1, max_size=40), st.none() | st.text(max_size=20))
def test_split_with_known_address_inverts_join(address: str, memo: str | None) -> None:
    joined = join_deposit_address_and_memo(address, memo)
    assert split_deposit_address_and_memo(joined, address=address) == (address, memo)
