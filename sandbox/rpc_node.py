"""The ledger JSON-RPC node at ``{chain_rpc_url}`` (spec 4.6; protocol-notes 5).

Serves ``query`` with ``request_type`` ``call_function`` for every view of the verifier. Shapes:

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

MAX_BODY_BYTES = 1 << 20


def _transport_error(
    request_id: Any, name: str, cause: str, info: dict[str, Any], message: str
) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "name": name,
            "cause": {"name": cause, "info": info},
            "code": -32000
            if name == "HANDLER_ERROR"
            else -32700
            if cause == "PARSE_ERROR"
            else -32600,
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
    if req["method"] != "query":
        return _transport_error(
            request_id,
            "REQUEST_VALIDATION_ERROR",
            "METHOD_NOT_FOUND",
            {"method_name": req["method"]},
            f"method {req['method']!r} not found",
        )
    params = req.get("params")
    if not isinstance(params, dict) or params.get("request_type") != "call_function":
        return _transport_error(
            request_id,
            "REQUEST_VALIDATION_ERROR",
            "PARSE_ERROR",
            {},
            "only call_function queries are served",
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
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "result": list(encoded),
            "logs": [],
            "block_height": chain.block_height,
            "block_hash": chain.block_hash(),
        },
    }


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
