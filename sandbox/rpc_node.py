"""The ledger JSON-RPC node at ``{chain_rpc_url}`` (spec 4.6; protocol-notes 5).

Serves ``query`` with ``request_type`` ``call_function`` for every view of the verifier, and
the read methods RPC clients call at start-up (``status``, ``block``, ``gas_price``,
``EXPERIMENTAL_protocol_config``, ``validators``, ``query`` for ``view_account`` /
``view_access_key`` / ``view_access_key_list``: :mod:`sandbox.rpc_reads`). Shapes:

- success: ``{"result": {"result": [bytes of the JSON return], "logs": [], "block_height": N,
  "block_hash": "<b58>"}}``
- contract panic: HTTP 200 with ``result.error`` (the panic text)
- transport-level errors: a JSON-RPC ``error`` object ``{name, cause: {name, info}, code,
  message, data}``

A ``fault`` switch lets tests stall the node or make it refuse service, to exercise the bot's
stale-balance handling without mocking any network code.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from sandbox.chain import SandboxChain, ViewError
from sandbox.rpc_reads import QUERY_KINDS, READ_METHODS, RpcReadError, query

MAX_BODY_BYTES = 1 << 20
_ERROR_CODES = {"PARSE_ERROR": -32700, "METHOD_NOT_FOUND": -32601}


def _transport_error(
    request_id: Any, name: str, cause: str, info: dict[str, Any], message: str
) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "name": name,
            "cause": {"name": cause, "info": info},
            "code": _ERROR_CODES.get(cause, -32000 if name == "HANDLER_ERROR" else -32600),
            "message": "Server error" if name == "HANDLER_ERROR" else message,
            "data": message,
        },
    }


class RpcNodeFaults:
    """Injected faults: ``stall_s`` delays every answer; ``down`` answers 503."""

    def __init__(self) -> None:
        self.stall_s = 0.0
        self.down = False


def create_rpc_node_app(chain: SandboxChain, faults: RpcNodeFaults | None = None) -> FastAPI:
    app = FastAPI(title="sandbox ledger RPC node", docs_url=None, redoc_url=None)
    fault = faults or RpcNodeFaults()
    app.state.faults = fault

    @app.post("/")
    async def rpc(request: Request) -> JSONResponse:
        if fault.stall_s:
            await asyncio.sleep(fault.stall_s)
        if fault.down:
            return JSONResponse({"error": "service unavailable"}, status_code=503)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return JSONResponse(
                _transport_error(
                    None, "REQUEST_VALIDATION_ERROR", "PARSE_ERROR", {}, "request too large"
                ),
                status_code=413,
            )
        try:
            req = json.loads(body)
        except ValueError:
            return JSONResponse(
                _transport_error(
                    None, "REQUEST_VALIDATION_ERROR", "PARSE_ERROR", {}, "invalid JSON"
                ),
                status_code=400,
            )
        return JSONResponse(handle_request(chain, req))

    return app


def handle_request(chain: SandboxChain, req: Any) -> dict[str, Any]:
    """One JSON-RPC request → its response object (pure apart from the chain's state)."""
    request_id = req.get("id") if isinstance(req, dict) else None
    if (
        not isinstance(req, dict)
        or req.get("jsonrpc") != "2.0"
        or not isinstance(req.get("method"), str)
    ):
        return _transport_error(
            request_id, "REQUEST_VALIDATION_ERROR", "PARSE_ERROR", {}, "invalid JSON-RPC envelope"
        )
    method, params = req["method"], req.get("params")
    try:
        if method in READ_METHODS:
            return _ok(request_id, READ_METHODS[method](chain, params))
        if (
            method == "query"
            and isinstance(params, dict)
            and params.get("request_type") in QUERY_KINDS
        ):
            return _ok(request_id, query(chain, params))
    except RpcReadError as exc:
        return _transport_error(request_id, exc.name, exc.cause, exc.info, exc.message)
    if method != "query":
        return _transport_error(
            request_id,
            "REQUEST_VALIDATION_ERROR",
            "METHOD_NOT_FOUND",
            {"method_name": method},
            f"method {method!r} not found: the sandbox node serves query, "
            + ", ".join(READ_METHODS),
        )
    if not isinstance(params, dict) or params.get("request_type") != "call_function":
        kind = params.get("request_type") if isinstance(params, dict) else None
        return _transport_error(
            request_id,
            "REQUEST_VALIDATION_ERROR",
            "PARSE_ERROR",
            {},
            f"query request_type {kind!r} is not served: call_function, "
            + ", ".join(QUERY_KINDS)
            + " are (params must be an object)",
        )
    account_id = params.get("account_id")
    if account_id != chain.ledger.contract_id:
        return _transport_error(
            request_id,
            "HANDLER_ERROR",
            "UNKNOWN_ACCOUNT",
            {"requested_account_id": account_id, "block_height": chain.block_height},
            f"account {account_id!r} does not exist while viewing",
        )
    method_name = params.get("method_name")
    try:
        args = json.loads(
            base64.b64decode(params.get("args_base64") or "e30=", validate=True) or b"{}"
        )
    except (binascii.Error, ValueError, TypeError):
        return _panic(
            chain, request_id, "failed to deserialize args: args_base64 is not base64 JSON"
        )
    if not isinstance(method_name, str) or not isinstance(args, dict):
        return _panic(chain, request_id, "failed to deserialize args: expected an object")
    try:
        value = chain.view(method_name, args)
    except ViewError as exc:
        return _panic(chain, request_id, str(exc))
    encoded = json.dumps(value, separators=(",", ":")).encode()
    return _ok(
        request_id,
        {
            "result": list(encoded),
            "logs": [],
            "block_height": chain.block_height,
            "block_hash": chain.block_hash(),
        },
    )


def _ok(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _panic(chain: SandboxChain, request_id: Any, text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "error": text,
            "logs": [],
            "block_height": chain.block_height,
            "block_hash": chain.block_hash(),
        },
    }
