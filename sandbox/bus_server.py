"""HTTP and WebSocket front of the message bus (spec 4.7, 5.2; protocol-notes 6).

- ``/ws``: the solver side (subscribe, unsubscribe, quote_response; events out).
- ``/rpc``: JSON-RPC 2.0 over HTTP POST (quote, publish_intent, publish_intents, get_status).

An optional bearer key (``bus.api_key_env``) guards both. Oversized frames and bodies are
refused (the websocket is closed with 1009 by the server's ``ws_max_size``; an HTTP body over
the limit gets 413 with a JSON-RPC error), malformed input gets a JSON-RPC error, and none of
it stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from sandbox.bus import MessageBus, SolverConnection, first_param
from sandbox.bus_records import BusRpcError
from solver.protocol import bus as wire
from solver.protocol.signing import first_error

log = logging.getLogger("sandbox.bus")


def _authorized(header: str | None, api_key: str | None) -> bool:
    if not api_key:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), api_key.encode())


def create_bus_app(
    bus: MessageBus, *, api_key: str | None = None, max_frame_bytes: int = 1 << 20
) -> FastAPI:
    app = FastAPI(title="sandbox message bus", docs_url=None, redoc_url=None)

    @app.websocket("/ws")
    async def solver_socket(websocket: WebSocket) -> None:
        if not _authorized(websocket.headers.get("authorization"), api_key):
            await websocket.close(code=1008, reason="unauthorized")
            return
        await websocket.accept()
        conn = bus.connect()
        writer = asyncio.create_task(_drain(conn, websocket))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None and message.get("bytes") is not None:
                    text = message["bytes"].decode("utf-8", errors="replace")
                if text is None:
                    continue
                if len(text) > max_frame_bytes:
                    conn.push(
                        orjson.dumps(
                            wire.rpc_error(None, wire.INVALID_REQUEST, "frame too large")
                        ).decode()
                    )
                    continue
                reply = await bus.handle_solver_frame(conn, text)
                if reply is not None:
                    conn.push(reply)
        except WebSocketDisconnect:
            pass
        finally:
            bus.disconnect(conn)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    @app.post("/rpc")
    async def rpc(request: Request) -> JSONResponse:
        if not _authorized(request.headers.get("authorization"), api_key):
            return JSONResponse(wire.rpc_error(None, -32001, "unauthorized"), status_code=401)
        body = await request.body()
        if len(body) > max_frame_bytes:
            return JSONResponse(
                wire.rpc_error(None, wire.INVALID_REQUEST, "request too large"), status_code=413
            )
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError:
            return JSONResponse(wire.rpc_error(None, wire.PARSE_ERROR, "parse error: invalid JSON"))
        return JSONResponse(await _dispatch(bus, raw))

    return app


async def _dispatch(bus: MessageBus, raw: Any) -> dict[str, Any]:
    request_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str, type(None))):
        request_id = None
    try:
        request = wire.JsonRpcRequest.model_validate(raw)
    except ValidationError as exc:
        return wire.rpc_error(
            request_id, wire.INVALID_REQUEST, f"invalid request: {first_error(exc)}"
        )
    try:
        result = await bus.rpc(request.method, first_param(request))
    except BusRpcError as exc:
        return wire.rpc_error(request.id, exc.code, exc.message)
    except Exception:  # a bug must not stop the server; it is logged with its traceback
        log.exception("internal error in %s", request.method)
        return wire.rpc_error(request.id, wire.INTERNAL_ERROR, "internal")
    return wire.rpc_result(request.id, result)


async def _drain(conn: SolverConnection, websocket: WebSocket) -> None:
    """Send the connection's outbox in order; stop quietly when the socket goes away."""
    try:
        while True:
            frame = await conn.outbox.get()
            await websocket.send_text(frame)
    except (WebSocketDisconnect, RuntimeError, OSError):
        return
