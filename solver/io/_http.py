"""HTTP for the clients: JSON-RPC 2.0 over POST (ledger, bus) and :func:`send` (also used by
the REST clients of the swap and history APIs) (STYLE 2, 7).

The one place httpx errors enter the project: connect failures, timeouts and HTTP 5xx become
:class:`~solver.errors.TransportError`, a body that is not JSON a
:class:`~solver.errors.ProtocolError`. What the remote *said* (JSON-RPC ``error`` objects,
contract panics, HTTP 4xx) is left to the caller, which knows the method's shapes.
"""

from __future__ import annotations

import itertools
from types import TracebackType
from typing import Any, Self

import httpx
import orjson

from solver.errors import ConfigError, ProtocolError, TransportError
from solver.io.conn_notes import display_url

JSON_HEADERS = {"content-type": "application/json", "accept": "application/json"}
# Statuses (besides every 5xx) that mean "not answering right now" rather than "no".
TRANSIENT_STATUS = frozenset({408, 425, 429})


class JsonRpcHttp:
    """Base of the HTTP JSON-RPC clients: owns the ``httpx.AsyncClient`` only if it made it."""

    def __init__(
        self,
        url: str,
        *,
        client: httpx.AsyncClient | None,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        name: str,
    ) -> None:
        if timeout_s <= 0:
            raise ConfigError(f"{name}: timeout_s must be positive")
        self.url = url
        self.timeout_s = timeout_s
        self._name = name
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient()
        self._headers = {**JSON_HEADERS, **(headers or {})}
        self._ids = itertools.count(1)

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (an injected one stays open)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def next_id(self) -> int:
        return next(self._ids)

    async def post(self, payload: Any, what: str) -> tuple[int, Any]:
        """POST one JSON-RPC request; return (HTTP status, decoded JSON body).

        Raises :class:`TransportError` when no usable answer arrived (connect error, timeout,
        HTTP 408/429/5xx) and :class:`ProtocolError` when the body is not JSON.
        """
        try:
            content = orjson.dumps(payload)
        except TypeError as exc:
            raise ProtocolError(f"{self._name} {what}: arguments are not JSON: {exc}") from None
        response = await send(
            self._client,
            "POST",
            self.url,
            name=self._name,
            what=what,
            timeout_s=self.timeout_s,
            headers=self._headers,
            content=content,
        )
        status = response.status_code
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"{self._name} {what}: HTTP {status} answer is not JSON") from None
        return status, body


async def send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    name: str,
    what: str,
    timeout_s: float,
    headers: dict[str, str],
    content: bytes | None = None,
    params: dict[str, str] | None = None,
) -> httpx.Response:
    """One HTTP request whose answer is usable: any status but 5xx and 408/425/429.

    Raises :class:`TransportError` when no usable answer arrived (connect error, timeout, a
    transient status) and :class:`ConfigError` for a URL httpx cannot use. Error texts name
    ``name`` and ``what`` and the URL (without query or credentials: :func:`display_url`),
    never the headers (they may carry a bearer token).
    """
    where = f"{name} {what} at {display_url(url)}"
    try:
        response = await client.request(
            method, url, content=content, params=params, headers=headers, timeout=timeout_s
        )
    except httpx.TimeoutException as exc:
        raise TransportError(f"{where}: timed out after {timeout_s:g} s") from exc
    except httpx.UnsupportedProtocol as exc:
        raise ConfigError(f"{name}: unsupported URL {url!r}") from exc
    except httpx.TransportError as exc:
        raise TransportError(f"{where}: {type(exc).__name__}: {exc}") from exc
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{name}: invalid URL {url!r}") from exc
    status = response.status_code
    if status >= 500 or status in TRANSIENT_STATUS:
        raise TransportError(f"{where}: HTTP {status}")
    return response


def same_id(body: dict[str, Any], request_id: int) -> bool:
    value = body.get("id")
    return isinstance(value, int) and not isinstance(value, bool) and value == request_id
