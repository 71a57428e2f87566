"""Clients of the swap API and the history API (spec 2.1–2.9, 4.1–4.5, 5.1, 7, 8).

:class:`SwapApiClient`: ``POST {base_url}/v0/quote``, ``POST {base_url}/v0/deposit/submit`` and
``GET {base_url}/v0/status?depositAddress=…`` (the status read-back of spec 1.1; it answers
the shape of a deposit submission, 2.5). :class:`HistoryApiClient`: ``GET
{api_url}/api/v0/transactions`` (cursor pages, :meth:`HistoryApiClient.iter_transactions`
walks them) and ``GET {api_url}/api/v0/transactions-pages``. Typed with the models of
:mod:`solver.protocol.swap` and :mod:`solver.protocol.history`.

Authentication (5.1): ``Authorization: Bearer <JWT>``. The token is never configured as a value:
:meth:`SwapApiClient.from_env` / :meth:`HistoryApiClient.from_env` read it from the environment
variable a configuration *names* (5.1.5). It is optional for the swap API (without it the 0.2 %
platform fee applies, 5.1.3) and required for the history API (5.1.4). No error text repeats it.

Errors, mapped here (STYLE 7). Spec 7.7 leaves the HTTP statuses and error body open; the
official API answers bad input 400 with ``{"message": …}`` (protocol-notes 7), as the sandbox:

- no answer (connect error, timeout, HTTP 5xx / 408 / 425 / 429) → :class:`TransportError`;
- HTTP 401 / 403 → ``RemoteError("unauthorized …", code=401|403)``;
- any other non-2xx → ``RemoteError(<the body's message>, code=<HTTP status>)``, the message
  taken from a ``message`` / ``error`` / ``detail`` field when the body has one;
- a 2xx body that is not JSON or not of the documented shape → :class:`ProtocolError`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx
import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from solver.errors import ConfigError, ProtocolError, RemoteError
from solver.io._http import JSON_HEADERS, send
from solver.protocol.history import (
    HistoryPage,
    TransactionRecord,
    TransactionsPagesQuery,
    TransactionsQuery,
)
from solver.protocol.signing import first_error
from solver.protocol.swap import (
    WIRE_CONTEXT,
    DepositSubmitRequest,
    DepositSubmitResponse,
    QuoteRequest,
    QuoteResponse,
)

QUOTE_PATH = "/v0/quote"
DEPOSIT_SUBMIT_PATH = "/v0/deposit/submit"
STATUS_PATH = "/v0/status"
TRANSACTIONS_PATH = "/api/v0/transactions"
TRANSACTIONS_PAGES_PATH = "/api/v0/transactions-pages"
DEFAULT_TIMEOUT_S = 10.0
MAX_ERROR_CHARS = 300

M = TypeVar("M", bound=BaseModel)
_RECORDS: TypeAdapter[list[TransactionRecord]] = TypeAdapter(list[TransactionRecord])

StatusResponse = DepositSubmitResponse
"""``GET /v0/status`` answers what a deposit submission answers (2.5): status, swapDetails, the
original quote response."""


def token_from_env(token_env: str | None, *, what: str, required: bool) -> str | None:
    """The bearer token held in the environment variable ``token_env`` (never logged).

    ``None`` when no variable is named and the token is optional. A named variable that is unset
    or empty is a :class:`ConfigError` (the operator meant to authenticate: for the swap API a
    silent fallback would pay the 0.2 % fee), as is a missing name when ``required``.
    """
    if token_env is None:
        if required:
            raise ConfigError(f"{what}: a token is required: name its environment variable")
        return None
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise ConfigError(
            f"{what}: the environment variable {token_env} holding the token is unset"
        )
    if any(c.isspace() for c in token):
        raise ConfigError(f"{what}: the token in {token_env} contains whitespace")
    return token


class _RestClient:
    """JSON over HTTP at ``base_url`` with an optional bearer token; one shared httpx client."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None,
        client: httpx.AsyncClient | None,
        timeout_s: float,
        name: str,
    ) -> None:
        if timeout_s <= 0:
            raise ConfigError(f"{name}: timeout_s must be positive")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.name = name
        self.authenticated = token is not None
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient()
        self._headers = dict(JSON_HEADERS)
        if token is not None:
            self._headers["authorization"] = f"Bearer {token}"

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open)."""
        if self._owns_client:
            await self._client.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """One request; the decoded JSON of a 2xx answer, errors mapped (module docstring)."""
        what = f"{method} {path}"
        content = (
            None
            if body is None
            else orjson.dumps(body.model_dump(mode="json", by_alias=True, exclude_none=True))
        )
        response = await send(
            self._client,
            method,
            self.base_url + path,
            name=self.name,
            what=what,
            timeout_s=self.timeout_s,
            headers=self._headers,
            content=content,
            params=params,
        )
        status = response.status_code
        if status in (401, 403):
            hint = "" if self.authenticated else " (no token was sent)"
            raise RemoteError(f"unauthorized{hint}: {_error_text(response)}", code=status)
        if not 200 <= status < 300:
            raise RemoteError(_error_text(response), code=status)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"{self.name} {what}: HTTP {status} answer is not JSON") from None

    def _model(self, model: type[M], data: Any, what: str) -> M:
        if not isinstance(data, dict):
            raise ProtocolError(f"{self.name} {what}: the answer is not a JSON object")
        try:
            return model.model_validate(data, context=WIRE_CONTEXT)
        except ValidationError as exc:
            raise ProtocolError(f"{self.name} {what}: {first_error(exc)}") from None


def _error_text(response: httpx.Response) -> str:
    """The remote's own words from an error answer, short and on one line."""
    status = response.status_code
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    text: Any = None
    if isinstance(body, dict):
        for name in ("message", "error", "detail", "reason"):
            if body.get(name) is not None:
                text = body[name]
                break
    elif isinstance(body, str):
        text = body
    if text is None:
        text = response.text
    if not isinstance(text, str):
        text = orjson.dumps(text).decode()
    line = " ".join(text.split())[:MAX_ERROR_CHARS]
    return f"HTTP {status}: {line}" if line else f"HTTP {status}"


class SwapApiClient(_RestClient):
    """Client of the swap API at ``{base_url}`` (spec 4.1, 4.2); the token is optional."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(base_url, token=token, client=client, timeout_s=timeout_s, name="swap api")

    @classmethod
    def from_env(
        cls,
        base_url: str,
        token_env: str | None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> SwapApiClient:
        token = token_from_env(token_env, what="swap api", required=False)
        return cls(base_url, token, client=client, timeout_s=timeout_s)

    async def __aenter__(self) -> SwapApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def quote_with_body(self, request: QuoteRequest) -> tuple[QuoteResponse, dict[str, Any]]:
        """``POST /v0/quote``: the typed answer and the JSON object exactly as received.

        Keep the second for disputes: the service's ``signature`` covers a quote whose signed
        form the spec does not show (2.2), so the whole answer is what must be stored.
        """
        data = await self._call("POST", QUOTE_PATH, body=request)
        response = self._model(QuoteResponse, data, "quote")
        problem = response.dry_rule_problem()
        if problem is not None:
            raise ProtocolError(f"swap api quote: {problem} (spec 4.1 rule 1)")
        return response, data

    async def quote(self, request: QuoteRequest) -> QuoteResponse:
        """``POST /v0/quote`` (spec 4.1)."""
        response, _ = await self.quote_with_body(request)
        return response

    async def submit_deposit(self, request: DepositSubmitRequest) -> DepositSubmitResponse:
        """``POST /v0/deposit/submit`` (spec 4.2): report the deposit's transaction hash."""
        data = await self._call("POST", DEPOSIT_SUBMIT_PATH, body=request)
        return self._model(DepositSubmitResponse, data, "deposit/submit")

    async def status(self, deposit_address: str, deposit_memo: str | None = None) -> StatusResponse:
        """``GET /v0/status?depositAddress=…[&depositMemo=…]``: the swap's status and details."""
        if not deposit_address:
            raise ValueError("deposit_address must not be empty")
        params = {"depositAddress": deposit_address}
        if deposit_memo is not None:
            params["depositMemo"] = deposit_memo
        data = await self._call("GET", STATUS_PATH, params=params)
        return self._model(StatusResponse, data, "status")


class HistoryApiClient(_RestClient):
    """Client of the history API at ``{api_url}`` (spec 4.3–4.5); the token is required."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not token:
            raise ConfigError("history api: a token is required (spec 5.1.4)")
        super().__init__(
            api_url, token=token, client=client, timeout_s=timeout_s, name="history api"
        )

    @classmethod
    def from_env(
        cls,
        api_url: str,
        token_env: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> HistoryApiClient:
        token = token_from_env(token_env, what="history api", required=True)
        assert token is not None
        return cls(api_url, token, client=client, timeout_s=timeout_s)

    async def __aenter__(self) -> HistoryApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def transactions(self, query: TransactionsQuery | None = None) -> list[TransactionRecord]:
        """One cursor page of ``GET /api/v0/transactions`` (spec 4.3), in the server's order."""
        params = (query or TransactionsQuery()).to_query_params()
        data = await self._call("GET", TRANSACTIONS_PATH, params=params)
        if not isinstance(data, list):
            raise ProtocolError(f"{self.name} transactions: the answer is not a JSON array")
        try:
            return _RECORDS.validate_python(data, context=WIRE_CONTEXT)
        except ValidationError as exc:
            raise ProtocolError(f"{self.name} transactions: {first_error(exc)}") from None

    async def transactions_pages(self, query: TransactionsPagesQuery | None = None) -> HistoryPage:
        """One numbered page of ``GET /api/v0/transactions-pages`` (spec 4.4, 2.9)."""
        params = (query or TransactionsPagesQuery()).to_query_params()
        data = await self._call("GET", TRANSACTIONS_PAGES_PATH, params=params)
        return self._model(HistoryPage, data, "transactions-pages")

    async def iter_transactions(
        self, query: TransactionsQuery | None = None, *, max_pages: int | None = None
    ) -> AsyncIterator[TransactionRecord]:
        """Every record matching ``query``, page after page with the cursor (spec 4.3).

        Each next page continues after the last record of the previous one
        (``lastDepositAddress`` / ``lastDepositMemo``, 9.2). It stops at a short page, an empty
        one, or after ``max_pages``; a server that hands the same cursor back (a page ending on
        the record the previous one ended on) is a :class:`ProtocolError` instead of a loop.
        """
        current = query or TransactionsQuery()
        seen: set[tuple[str, str | None]] = set()
        pages = 0
        while max_pages is None or pages < max_pages:
            records = await self.transactions(current)
            pages += 1
            for record in records:
                yield record
            if len(records) < current.number_of_transactions:
                return
            last = records[-1]
            cursor = (last.deposit_address, last.deposit_memo)
            if cursor in seen:
                raise ProtocolError(
                    f"{self.name} transactions: the page after {cursor[0]} ends on it again "
                    "(the cursor does not advance)"
                )
            seen.add(cursor)
            current = current.after(last)
