"""The bot's HTTP side door: Prometheus metrics, a health probe, and the operator control API.

One FastAPI app, served by uvicorn inside the bot's own event loop on ``metrics.listen``:

``GET /metrics``
    Prometheus text format from :class:`~solver.io.metrics.Metrics` (open).
``GET /healthz``
    ``200 {"ready": true, "reasons": []}`` only when :meth:`ControlTarget.health` says ready
    (connected, salted, reconciled); ``503 {"ready": false, "reasons": [...]}`` otherwise (open).
``GET /`` (also ``/status``)
    The status page (open): one self-contained HTML file (``solver/io/static/status.html``,
    inline CSS and JavaScript, nothing fetched from elsewhere) that reads ``/control/status``
    with the token every few seconds and shows mode, state, PnL, inventory, pairs and fills.
    The page holds no data itself; it asks for the token once (or takes it from a
    ``#token=...`` fragment, which browsers never send to the server) and keeps it in the
    tab's ``sessionStorage``. Served with a strict Content-Security-Policy: its one script by
    hash, connections to this origin only.
``GET /control/status``
    :meth:`ControlTarget.status` as JSON (token; shape in :class:`StatusDoc`).
``POST /control/pause`` ``{"pair": "BASE/QUOTE" | null, "reason": "..."}``
    :meth:`ControlTarget.pause`; no pair pauses everything (token).
``POST /control/resume`` ``{"pair": "BASE/QUOTE" | null, "accept_balances": false}``
    :meth:`ControlTarget.resume` (token): ``200`` with ``ok: true`` once nothing holds the
    scope any more; ``409`` with ``ok: false``, the ``message`` and ``still_paused`` when a
    pause still holds (a kill-switch condition still in force, another pause).

Access: the control endpoints need ``Authorization: Bearer <token>`` where the token is read,
when the app is built, from an environment variable (``SOLVER_CONTROL_TOKEN`` unless told
otherwise). A missing or wrong token is ``401``; with no token in the environment the control
API is off and answers ``403 control disabled`` — metrics and health stay open. The server binds
loopback only unless the caller explicitly allows another address (:func:`serve_control`).

The handlers are ``async def`` on purpose: they run on the event loop thread, between quote
handlers, so the target's state is never touched from a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
import re
import socket
from collections.abc import Generator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any, Protocol, TypedDict

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from solver.config.fields import is_loopback
from solver.errors import ConfigError
from solver.io.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("solver.control")

DEFAULT_TOKEN_ENV = "SOLVER_CONTROL_TOKEN"
PAIR_PATTERN = r"^[^/\s]+/[^/\s]+$"
"""``BASE/QUOTE``: two non-empty names (symbols or asset ids) around one slash."""
_PAIR_RE = re.compile(PAIR_PATTERN)


class ControlTarget(Protocol):
    """What the control API drives: the running bot (the app implements it; tests fake it).

    ``pause`` / ``resume`` take ``pair`` as ``"BASE/QUOTE"`` (``None``: the whole bot) and
    raise :class:`LookupError` for a pair the bot does not trade (answered ``404``) or
    :class:`ValueError` for one it cannot act on (``400``).
    """

    def status(self) -> dict[str, Any]: ...

    def pause(self, pair: str | None, reason: str) -> dict[str, Any]: ...

    async def resume(self, pair: str | None, accept_balances: bool = False) -> dict[str, Any]:
        """``{"ok", "message", "still_paused"}``: ``ok`` only when nothing holds any more."""
        ...

    def health(self) -> tuple[bool, list[str]]: ...


class WindowDoc(TypedDict, total=False):
    """Activity over one window (``"1h"``, ``"24h"``)."""

    requests: int
    quotes: int
    won: int
    win_rate: float | None  # won / quotes
    volume_usd: float | None


class ReconciliationDoc(TypedDict, total=False):
    at: str  # ISO 8601, UTC
    ok: bool
    mismatches: dict[str, str]  # asset -> on-chain minus expected, smallest units


class StatusDoc(TypedDict, total=False):
    """The shape ``solver status`` renders; every key optional, extra keys are shown raw.

    Amounts are strings of smallest units; USD values are floats.
    """

    account: str
    connected: bool
    state: str  # "RUNNING" | "PAUSED"
    paused: dict[str, str]  # scope ("*" or "asset_in->asset_out") -> reason
    open_quotes: int
    open_exposure_usd: float | None
    reserved: dict[str, str]  # asset -> reserved outflow
    free: dict[str, str]  # asset -> free inventory
    windows: dict[str, WindowDoc]
    pnl_usd: float | None
    last_reconciliation: ReconciliationDoc | None
    uptime_s: float
    # For the status page (solver/runtime/status_extra.py): token decimals and symbols, one row
    # per configured pair, the store's last fills, and shadow mode's paper book.
    decimals: dict[str, int]
    symbols: dict[str, str]
    pairs: list[dict[str, Any]]
    recent_fills: list[dict[str, Any]]
    paper: dict[str, Any]


# ---------------------------------------------------------------------------------- the app


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pair: Annotated[str, Field(pattern=PAIR_PATTERN, max_length=200)] | None = None
    reason: Annotated[str, Field(min_length=1, max_length=500)]


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pair: Annotated[str, Field(pattern=PAIR_PATTERN, max_length=200)] | None = None
    accept_balances: bool = False


def check_pair(pair: str | None) -> str | None:
    """``pair`` if it is ``None`` or ``BASE/QUOTE``; a :class:`ConfigError` otherwise."""
    if pair is not None and not _PAIR_RE.fullmatch(pair):
        raise ConfigError(f"pair must be BASE/QUOTE (for example wNEAR/USDC), got {pair!r}")
    return pair


def create_control_app(
    target: ControlTarget,
    metrics: Metrics,
    *,
    token_env: str = DEFAULT_TOKEN_ENV,
) -> FastAPI:
    """The metrics / health / control app. The token is read from ``token_env`` now, once."""
    token = os.environ.get(token_env) or None
    expected = token.encode("utf-8") if token is not None else None
    if expected is None:
        log.info("control API disabled: %s is not set", token_env)

    app = FastAPI(title="solver control", docs_url=None, redoc_url=None, openapi_url=None)

    def authorize(request: Request) -> None:
        if expected is None:
            raise HTTPException(403, "control disabled")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8"), expected
        ):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    guarded = [Depends(authorize)]

    @app.get("/metrics")
    async def get_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        try:
            ready, reasons = target.health()
        except Exception as exc:
            log.exception("health check failed")
            ready, reasons = False, [f"health check failed: {type(exc).__name__}"]
        return JSONResponse(
            {"ready": bool(ready), "reasons": list(reasons)}, status_code=200 if ready else 503
        )

    @app.get("/", include_in_schema=False)
    @app.get("/status", include_in_schema=False)
    async def status_page() -> HTMLResponse:
        html, headers = status_page_html()
        return HTMLResponse(html, headers=headers)

    @app.get("/control/status", dependencies=guarded)
    async def status() -> JSONResponse:
        return JSONResponse(target.status())

    @app.post("/control/pause", dependencies=guarded)
    async def pause(body: PauseBody) -> dict[str, Any]:
        _call(target.pause, body.pair, body.reason)
        log.warning("paused %s via the control API: %s", body.pair or "all pairs", body.reason)
        return {"ok": True, "action": "pause", "pair": body.pair, "reason": body.reason}

    @app.post("/control/resume", dependencies=guarded)
    async def resume(body: ResumeBody) -> JSONResponse:
        try:
            reply = await target.resume(body.pair, body.accept_balances)
        except LookupError as exc:
            raise HTTPException(404, _message(exc)) from None
        except ValueError as exc:
            raise HTTPException(400, _message(exc)) from None
        doc = {"action": "resume", "pair": body.pair, **reply}
        if reply.get("ok"):
            log.warning("resumed %s via the control API", body.pair or "all pairs")
            return JSONResponse(doc)
        log.warning("resume of %s via the control API: %s", body.pair or "all", reply["message"])
        return JSONResponse(doc, status_code=409)

    return app


@cache
def status_page_html() -> tuple[str, dict[str, str]]:
    """The status page and its response headers: the CSP allows its inline script by hash."""
    html = resources.files("solver.io").joinpath("static/status.html").read_text("utf-8")
    script = _SCRIPT_RE.search(html)
    if script is None:  # pragma: no cover - the packaged file has its script
        raise ConfigError("the packaged status page has no script")
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode("utf-8")).digest()).decode()
    csp = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Security-Policy": csp,
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    return html, headers


_SCRIPT_RE = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _call(action: Any, *args: Any) -> None:
    try:
        action(*args)
    except LookupError as exc:
        raise HTTPException(404, _message(exc)) from None
    except ValueError as exc:
        raise HTTPException(400, _message(exc)) from None


def _message(exc: Exception) -> str:
    # KeyError's str() is the repr of the key: take the argument itself.
    return str(exc.args[0]) if len(exc.args) == 1 else str(exc)


# ---------------------------------------------------------------------------------- serving


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f'listen address must be "host:port", got {listen!r}')
    return host, int(port)


def url_host(host: str) -> str:
    """The host as a client should write it: a wildcard becomes loopback, IPv6 gets brackets."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside the bot's loop: the bot owns SIGINT / SIGTERM, not the metrics server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass
class ControlServer:
    """A running control server; :meth:`stop` shuts it down."""

    host: str
    port: int
    server: uvicorn.Server
    task: asyncio.Task[None]

    @property
    def url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}"

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def serve_control(app: FastAPI, listen: str, *, allow_remote: bool = False) -> ControlServer:
    """Serve ``app`` on ``listen`` (``host:port``, port 0 picks a free one) in this loop.

    A host that is not loopback is refused (:class:`ConfigError`) unless ``allow_remote``:
    the control API can pause the bot, and metrics show inventory.
    """
    host, port = parse_listen(listen)
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the control API on {host}: not a loopback address "
            "(use 127.0.0.1, or allow remote access explicitly)"
        )
    try:
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve listen host {host}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says so (``sock.proto``); with 0, responses stall ~40 ms (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
    bound_port: int = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        timeout_graceful_shutdown=2,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=f"control-server:{bound_port}")
    while not server.started:
        if task.done():
            sock.close()
            task.result()  # raises what stopped it
            raise ConfigError(f"the control server on {listen} stopped while starting")
        await asyncio.sleep(0.01)
    return ControlServer(host, bound_port, server, task)
