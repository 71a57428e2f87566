"""The message bus's HTTP JSON-RPC at ``{relay}/rpc`` (spec 4.7, 3.2, 7; protocol-notes 6).

``quote``, ``publish_intent``, ``publish_intents`` and ``get_status``, typed with the models of
:mod:`solver.protocol.bus`. Errors are mapped here (STYLE 7):

- no answer (connect error, timeout, HTTP 5xx / 429) → :class:`TransportError`;
- HTTP 401 / 403 → ``RemoteError("unauthorized", code=401|403)`` (the HTTP status);
- a JSON-RPC ``error`` → ``RemoteError(message, code=<JSON-RPC code>)``;
- a result of the wrong shape → :class:`ProtocolError` naming the method.

A ``publish_intent`` answered ``FAILED`` is *not* raised: the :class:`PublishResult` carries
``status``, ``reason`` and (for ``already processed``) the ``intent_hash``, and the caller
decides (spec 7.1). The relay's asset-field prefix is one value (``asset_field_prefix``):
requests are renamed ``core_…`` → ``<prefix>_…`` and results back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from solver.errors import ProtocolError, RemoteError
from solver.io._http import JsonRpcHttp, same_id
from solver.protocol.amounts import WIRE
from solver.protocol.bus import (
    JSONRPC,
    PublishManyResult,
    PublishResult,
    QuoteParams,
    QuoteResultItem,
    StatusResult,
    rename_asset_fields,
)
from solver.protocol.signing import first_error

JsonObject = Mapping[str, Any] | BaseModel
M = TypeVar("M", bound=BaseModel)


class BusRpcClient:
    """Client of the bus JSON-RPC endpoint; one ``httpx.AsyncClient`` may be shared."""

    def __init__(
        self,
        rpc_url: str,
        api_key: str | None = None,
        asset_field_prefix: str = "core",
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self.prefix = asset_field_prefix
        self._rpc = JsonRpcHttp(
            rpc_url, client=client, timeout_s=timeout_s, headers=headers, name="bus"
        )

    @property
    def url(self) -> str:
        return self._rpc.url

    async def aclose(self) -> None:
        await self._rpc.aclose()

    async def __aenter__(self) -> BusRpcClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(self, method: str, params: Any) -> Any:
        """One JSON-RPC call with ``params = [params]`` (spec 4.7); returns ``result``."""
        request_id = self._rpc.next_id()
        payload = {"jsonrpc": JSONRPC, "id": request_id, "method": method, "params": [params]}
        status, body = await self._rpc.post(payload, method)
        if status in (401, 403):
            raise RemoteError("unauthorized", code=status)
        if not isinstance(body, dict):
            raise ProtocolError(f"bus {method}: answer is not a JSON object")
        error = body.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise RemoteError(str(error)[:500])
            message, code = error.get("message"), error.get("code")
            raise RemoteError(
                message if isinstance(message, str) else "error",
                code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            )
        if status != 200:
            raise RemoteError(f"HTTP {status}", code=status)
        if not same_id(body, request_id):
            raise ProtocolError(f"bus {method}: answer id does not match the request")
        if "result" not in body:
            raise ProtocolError(f"bus {method}: answer has neither result nor error")
        return body["result"]

    async def quote(self, params: QuoteParams | Mapping[str, Any]) -> list[QuoteResultItem]:
        """Ask every solver (spec 4.7 ``quote``); offers come back best first.

        A mapping is sent as given (core-prefixed keys renamed), so the relay judges it.
        """
        data = (
            params.model_dump(mode="json", exclude_none=True)
            if isinstance(params, BaseModel)
            else dict(params)
        )
        result = await self.call("quote", rename_asset_fields(data, "core", self.prefix))
        if not isinstance(result, list):
            raise ProtocolError("bus quote: result is not a list")
        items = []
        for index, raw in enumerate(result):
            if not isinstance(raw, dict):
                raise ProtocolError(f"bus quote: result[{index}] is not an object")
            try:
                items.append(
                    QuoteResultItem.model_validate(
                        rename_asset_fields(raw, self.prefix, "core"), context=WIRE
                    )
                )
            except ValidationError as exc:
                raise ProtocolError(f"bus quote: result[{index}]: {first_error(exc)}") from None
        return items

    async def publish_intent(
        self, quote_hashes: Sequence[str], signed_data: JsonObject
    ) -> PublishResult:
        result = await self.call(
            "publish_intent",
            {"quote_hashes": list(quote_hashes), "signed_data": _json_object(signed_data)},
        )
        return _validate(PublishResult, "publish_intent", result)

    async def publish_intents(
        self, quote_hashes: Sequence[str], signed_datas: Sequence[JsonObject]
    ) -> PublishManyResult:
        result = await self.call(
            "publish_intents",
            {
                "quote_hashes": list(quote_hashes),
                "signed_datas": [_json_object(item) for item in signed_datas],
            },
        )
        return _validate(PublishManyResult, "publish_intents", result)

    async def get_status(self, intent_hash: str) -> StatusResult:
        result = await self.call("get_status", {"intent_hash": intent_hash})
        return _validate(StatusResult, "get_status", result)


def _json_object(value: JsonObject) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return dict(value)


def _validate(model: type[M], method: str, result: Any) -> M:
    if not isinstance(result, dict):
        raise ProtocolError(f"bus {method}: result is not an object")
    try:
        return model.model_validate(result, context=WIRE)
    except ValidationError as exc:
        raise ProtocolError(f"bus {method}: {first_error(exc)}") from None
