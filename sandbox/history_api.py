"""The sandbox history API at {api_url} (spec 2.7, 2.9, 4.3–4.5, 5.1.4, 8, 9.2).

- ``GET /api/v0/transactions``: cursor style, an array of records newest first. The cursor is
  the last record of the previous page, by ``lastDepositAddress`` + ``lastDepositMemo`` (or the
  deprecated ``lastDepositAddressAndMemo``, address and memo joined by ``_``); ``direction=next``
  gives older records, ``prev`` newer ones (still newest first within the page).
- ``GET /api/v0/transactions-pages``: page style (2.9).

Both need ``Authorization: Bearer <JWT>`` (401 without or with an invalid one) and take the
shared filters of 4.5 (the free-text search parameter is ``search``). A bad parameter, a limit
outside 1–1000, ``page`` below 1, an unknown parameter or an unknown cursor is a 400.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from sandbox.swap.http import (
    BEARER_SCHEME,
    ERROR_RESPONSES,
    ApiError,
    bad_parameter,
    bearer_token,
    install_error_handlers,
    install_openapi,
    query_items,
    query_parameters,
    validation_problem,
    verify_jwt,
)
from sandbox.swap.rules import asset_filter, page_info
from sandbox.swap.service import SwapService
from sandbox.swap.store import HistoryWhere
from sandbox.swap.views import history_record
from solver.protocol.history import (
    HistoryFilters,
    HistoryPage,
    HistoryStatus,
    TransactionRecord,
    TransactionsPagesQuery,
    TransactionsQuery,
)

Q = TypeVar("Q", bound=HistoryFilters)
MAX_FLOAT = 1e300
MAX_OFFSET = 1 << 62
_STATUS = "|".join(s.value for s in HistoryStatus)
STATUSES_SCHEMA = {
    "type": "string",
    "pattern": f"^({_STATUS})(,({_STATUS}))*$",
    "description": "Comma-separated statuses; default FAILED,PROCESSING,REFUNDED,SUCCESS.",
}
REQUIRED_AUTH: list[dict[str, list[str]]] = [{BEARER_SCHEME: []}]


def _number(value: float | None, scale: float = 1.0) -> float | None:
    """A finite float for SQLite (huge query numbers are clamped, never overflow)."""
    if value is None:
        return None
    try:
        result = float(value) * scale
    except OverflowError:
        return MAX_FLOAT
    return result if math.isfinite(result) else MAX_FLOAT


def build_where(filters: HistoryFilters) -> HistoryWhere:
    """The effective filters: precedence of 4.5 applied, time bounds in ms (exclusive)."""
    assets = asset_filter(
        filters.from_chain_id.value if filters.from_chain_id else None,
        filters.from_token_id,
        filters.to_chain_id.value if filters.to_chain_id else None,
        filters.to_token_id,
    )
    starts = [
        _number(filters.start_timestamp.timestamp(), 1000) if filters.start_timestamp else None,
        _number(filters.start_timestamp_unix, 1000),
    ]
    ends = [
        _number(filters.end_timestamp.timestamp(), 1000) if filters.end_timestamp else None,
        _number(filters.end_timestamp_unix, 1000),
    ]
    after = [s for s in starts if s is not None]
    before = [e for e in ends if e is not None]
    return HistoryWhere(
        statuses=tuple(dict.fromkeys(s.value for s in filters.statuses)),
        search=filters.search,
        deposit_memo=filters.deposit_memo,
        from_chain=assets.from_chain,
        from_token=assets.from_token,
        to_chain=assets.to_chain,
        to_token=assets.to_token,
        referral=filters.referral,
        affiliate=filters.affiliate,
        min_usd=_number(filters.min_usd_price),
        max_usd=_number(filters.max_usd_price),
        after_ms=max(after) if after else None,
        before_ms=min(before) if before else None,
        show_test=bool(filters.show_test_txs),
    )


def create_history_app(service: SwapService) -> FastAPI:
    app = FastAPI(title="sandbox history API", version="0", docs_url=None, redoc_url=None)
    install_error_handlers(app)
    store = service.store

    def parse(request: Request, model: type[Q]) -> Q:
        token = bearer_token(request)
        if token is None:
            raise ApiError(401, "UNAUTHORIZED", "the history API needs 'Bearer <JWT>'")
        verify_jwt(token, service.keys.jwt_secret)
        try:
            return model.model_validate(query_items(request))
        except ValidationError as exc:
            message, field = validation_problem(exc)
            raise bad_parameter(message, field.split(".")[0] if field else None) from None

    def records(found: list[Any]) -> list[dict[str, Any]]:
        return [history_record(r, service.decimals) for r in found]

    @app.get(
        "/api/v0/transactions",
        response_model=None,
        summary="Transactions, cursor style (4.3)",
        responses={
            200: {"model": list[TransactionRecord]},
            **{code: ERROR_RESPONSES[code] for code in (400, 401)},
        },
        openapi_extra={
            "parameters": query_parameters(TransactionsQuery, {"statuses": STATUSES_SCHEMA}),
            "security": REQUIRED_AUTH,
        },
    )
    async def transactions(request: Request) -> JSONResponse:
        query = parse(request, TransactionsQuery)
        where = build_where(query)
        cursor_key = None
        if query.last_deposit_address is not None:
            cursor_key = store.cursor_key(query.last_deposit_address, query.last_deposit_memo)
        elif query.last_deposit_memo is not None:
            raise bad_parameter("lastDepositMemo needs lastDepositAddress", "lastDepositMemo")
        elif query.last_deposit_address_and_memo is not None:
            joined = query.last_deposit_address_and_memo
            cursor_key = store.cursor_key(joined, None)
            head, sep, tail = joined.rpartition("_")
            if cursor_key is None and sep:
                cursor_key = store.cursor_key(head, tail)
        if query.cursor is not None and cursor_key is None:
            raise bad_parameter("the cursor names no transaction", "lastDepositAddress")
        found = store.walk(where, cursor_key, query.direction, query.number_of_transactions)
        return JSONResponse(records(found))

    @app.get(
        "/api/v0/transactions-pages",
        response_model=None,
        summary="Transactions, page style (4.4)",
        responses={
            200: {"model": HistoryPage},
            **{code: ERROR_RESPONSES[code] for code in (400, 401)},
        },
        openapi_extra={
            "parameters": query_parameters(TransactionsPagesQuery, {"statuses": STATUSES_SCHEMA}),
            "security": REQUIRED_AUTH,
        },
    )
    async def transactions_pages(request: Request) -> JSONResponse:
        query = parse(request, TransactionsPagesQuery)
        where = build_where(query)
        total = store.count(where)
        info = page_info(total, query.page, query.per_page)
        data = []
        if info.offset < min(total, MAX_OFFSET):
            data = records(store.page(where, query.per_page, info.offset))
        return JSONResponse(
            {
                "data": data,
                "totalPages": info.total_pages,
                "page": query.page,
                "perPage": query.per_page,
                "total": total,
                "nextPage": info.next_page,
                "prevPage": info.prev_page,
            }
        )

    install_openapi(
        app,
        (),
        lambda: (
            "Sandbox of the transaction history API (spec 4.3–4.5). Bearer JWT (HS256) "
            "required; see docs/swap-api.md for filters, masking transactions and errors."
        ),
    )
    return app
