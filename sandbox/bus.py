"""The message bus (spec 4.7, 3.2, 7.1; protocol-notes 6), transport-free.

:class:`MessageBus` holds connected solvers, open quote requests, the registry of valid solver
quotes by ``quote_hash`` and intent statuses. The FastAPI app in :mod:`sandbox.bus_server` only
feeds it frames and requests; the logic is testable without sockets.

Quote flow: ``quote`` fans a request out to every solver subscribed to ``quote`` with a fresh
``quote_id``, waits up to ``min(solver_wait_ms, caller's wait_ms / max_wait_ms)`` or until every
solver it asked has answered (after the caller's ``min_wait_ms``, one valid answer is enough),
and returns the valid answers best price first. Each answer is checked on arrival — signature in
any standard the verifier accepts, recipient, deadline at least ``min_deadline_ms`` ahead, the
diff mirrors the request with the fixed side exact, ``quote_output`` agrees
(:mod:`sandbox.quote_answers`), and the solver can afford it (``simulate_intents``) — and refused
with a JSON-RPC error carrying the reason otherwise.

Publish flow and statuses: :class:`~sandbox.bus_publish.IntentPublisher`
(``MessageBus.publisher``), over the bus's tables; the records in those tables are
:mod:`sandbox.bus_records`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from sandbox.bus_publish import IntentPublisher
from sandbox.bus_records import (
    MAX_RECORDS,
    AnswerArrival,
    BusRpcError,
    BusStats,
    IntentRecord,
    QuoteRecord,
)
from sandbox.chain import SandboxChain
from sandbox.ledger_errors import LedgerError
from sandbox.notify_faults import NotifyFaults
from sandbox.quote_answers import (
    Leniency,
    QuoteRefused,
    check_answer,
    quote_wait,
    wait_for_answers,
)
from sandbox.settlement import Settlement
from solver.protocol import bus as wire
from solver.protocol.amounts import WIRE
from solver.protocol.intents import format_deadline
from solver.protocol.signing import first_error

log = logging.getLogger("sandbox.bus")

OUTBOX_LIMIT = 10_000


@dataclass(eq=False)
class SolverConnection:
    """One connected solver websocket; frames leave through a bounded outbox queue so one slow
    solver never delays the fan-out to the others."""

    conn_id: str
    outbox: asyncio.Queue[str] = field(default_factory=lambda: asyncio.Queue(OUTBOX_LIMIT))
    subscriptions: dict[str, str] = field(default_factory=dict)  # sub id -> kind
    dropped_frames: int = 0

    def subscription_for(self, kind: str) -> str | None:
        for sub_id, sub_kind in self.subscriptions.items():
            if sub_kind == kind:
                return sub_id
        return None

    def push(self, frame: str) -> None:
        try:
            self.outbox.put_nowait(frame)
        except asyncio.QueueFull:
            self.dropped_frames += 1


@dataclass
class _OpenQuote:
    quote_id: str
    params: wire.QuoteParams
    asked: set[str]
    answers: dict[str, tuple[str, dict[str, Any], int, int, datetime]] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)  # every solver asked answered
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # one valid answer is in


class MessageBus:
    def __init__(
        self,
        chain: SandboxChain,
        *,
        asset_field_prefix: str = "core",
        solver_wait_ms: int = wire.MAX_SOLVER_WAIT_MS,
        settlement_delay_ms: int = 300,
    ) -> None:
        self.chain = chain
        self.prefix = asset_field_prefix
        self.solver_wait_ms = min(solver_wait_ms, wire.MAX_SOLVER_WAIT_MS)
        self.settlement_delay_s = settlement_delay_ms / 1000
        self.connections: dict[str, SolverConnection] = {}
        self.open_quotes: dict[str, _OpenQuote] = {}
        self.closed_quote_ids: OrderedDict[str, None] = OrderedDict()
        self.quotes: OrderedDict[str, QuoteRecord] = OrderedDict()
        self.intents: OrderedDict[str, IntentRecord] = OrderedDict()
        self.arrivals: deque[AnswerArrival] = deque(maxlen=MAX_RECORDS)
        self.stats = BusStats()
        self._sub_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self.notify_faults = NotifyFaults()
        self.settlement = Settlement(
            chain,
            self.stats,
            self.connections.get,
            self._spawn,
            settlement_delay_ms / 1000,
            self.notify_faults,
        )
        self.lenient = Leniency()
        self.publisher = IntentPublisher(
            chain,
            self.stats,
            self.quotes,
            self.intents,
            self.settlement,
            self._spawn,
            self.lenient,
        )

    # ------------------------------------------------------------------ connections

    def connect(self) -> SolverConnection:
        conn = SolverConnection(uuid.uuid4().hex)
        self.connections[conn.conn_id] = conn
        return conn

    def disconnect(self, conn: SolverConnection) -> None:
        self.connections.pop(conn.conn_id, None)
        for pending in self.open_quotes.values():
            if conn.conn_id in pending.asked:
                pending.asked.discard(conn.conn_id)
                if pending.asked <= set(pending.answers):
                    pending.done.set()

    async def handle_solver_frame(self, conn: SolverConnection, text: str) -> str | None:
        """One text frame from a solver → the response frame (JSON-RPC 2.0)."""
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError:
            return _dump(wire.rpc_error(None, wire.PARSE_ERROR, "parse error: invalid JSON"))
        request_id = raw.get("id") if isinstance(raw, dict) else None
        try:
            request = wire.JsonRpcRequest.model_validate(raw, context=WIRE)
        except ValidationError as exc:
            return _dump(
                wire.rpc_error(
                    _safe_id(request_id),
                    wire.INVALID_REQUEST,
                    f"invalid request: {first_error(exc)}",
                )
            )
        try:
            result = self._solver_method(conn, request)
        except BusRpcError as exc:
            return _dump(wire.rpc_error(request.id, exc.code, exc.message))
        return _dump(wire.rpc_result(request.id, result))

    def _solver_method(self, conn: SolverConnection, request: wire.JsonRpcRequest) -> Any:
        param = first_param(request)
        if request.method == "subscribe":
            if param not in ("quote", "quote_status"):
                raise BusRpcError(
                    wire.INVALID_PARAMS, 'subscribe takes ["quote"] or ["quote_status"]'
                )
            existing = conn.subscription_for(param)
            if existing:
                return existing
            sub_id = f"{param}-{next(self._sub_ids)}"
            conn.subscriptions[sub_id] = param
            return sub_id
        if request.method == "unsubscribe":
            if not isinstance(param, str) or param not in conn.subscriptions:
                raise BusRpcError(wire.INVALID_PARAMS, "unknown subscription id")
            del conn.subscriptions[param]
            return "OK"
        if request.method == "quote_response":
            self._accept_answer(conn, param)
            return "OK"
        raise BusRpcError(wire.METHOD_NOT_FOUND, f"method {request.method!r} not found")

    # ------------------------------------------------------------------ quotes

    async def quote(self, raw_params: Any) -> list[dict[str, Any]]:
        """The ``quote`` method: fan out, wait, return valid answers best first (spec 4.7)."""
        if not isinstance(raw_params, dict):
            raise BusRpcError(wire.INVALID_PARAMS, "params[0] must be an object")
        data = wire.rename_asset_fields(raw_params, self.prefix, "core")
        try:
            params = wire.QuoteParams.model_validate(data, context=WIRE)
        except ValidationError as exc:
            raise BusRpcError(wire.INVALID_PARAMS, f"invalid params: {first_error(exc)}") from None
        try:
            wait = quote_wait(raw_params, self.solver_wait_ms, self.lenient)
        except QuoteRefused as exc:
            raise BusRpcError(wire.INVALID_PARAMS, str(exc)) from None
        self.stats.quote_requests += 1
        pending = _OpenQuote(uuid.uuid4().hex, params, set())
        event_data = wire.rename_asset_fields(
            {"quote_id": pending.quote_id, **params.model_dump(mode="json", exclude_none=True)},
            "core",
            self.prefix,
        )
        for conn in list(self.connections.values()):
            sub_id = conn.subscription_for("quote")
            if sub_id is None:
                continue
            pending.asked.add(conn.conn_id)
            frame = {
                "jsonrpc": "2.0",
                "method": "event",
                "params": {
                    "subscription": sub_id,
                    "data": event_data,
                    "metadata": {"partner_id": "sandbox"},
                },
            }
            conn.push(_dump(frame))
        if pending.asked:
            self.open_quotes[pending.quote_id] = pending
            await wait_for_answers(pending.done, pending.answered, wait)
            self.open_quotes.pop(pending.quote_id, None)
        self._remember_closed(pending.quote_id)
        results = [
            QuoteRecord(
                answer[0],
                conn_id,
                answer[1],
                params.core_asset_identifier_in,
                params.core_asset_identifier_out,
                answer[2],
                answer[3],
                answer[4],
            )
            for conn_id, answer in pending.answers.items()
        ]
        for record in results:
            self._store_quote(record)
        if params.is_exact_in:
            results.sort(key=lambda r: -r.amount_out)
        else:
            results.sort(key=lambda r: r.amount_in)
        return [
            wire.rename_asset_fields(
                {
                    "quote_hash": r.quote_hash,
                    "core_asset_identifier_in": r.asset_in,
                    "core_asset_identifier_out": r.asset_out,
                    "amount_in": str(r.amount_in),
                    "amount_out": str(r.amount_out),
                    "expiration_time": format_deadline(r.expiration),
                },
                "core",
                self.prefix,
            )
            for r in results
        ]

    def _accept_answer(self, conn: SolverConnection, param: Any) -> None:
        if isinstance(param, dict):
            signed = param.get("signed_data")
            quote_id = param.get("quote_id")
            self.arrivals.append(
                AnswerArrival(
                    conn.conn_id,
                    time.monotonic(),
                    quote_id if isinstance(quote_id, str) else None,
                    signed.get("signature") if isinstance(signed, dict) else None,
                )
            )
        try:
            self._check_answer(conn, param)
        except BusRpcError as exc:
            self.stats.count(self.stats.quote_answers_rejected, exc.message)
            raise

    def _check_answer(self, conn: SolverConnection, param: Any) -> None:
        if not isinstance(param, dict):
            raise BusRpcError(wire.INVALID_PARAMS, "params[0] must be an object")
        quote_id = param.get("quote_id")
        pending = self.open_quotes.get(quote_id) if isinstance(quote_id, str) else None
        if pending is None or conn.conn_id not in pending.asked:
            if isinstance(quote_id, str) and quote_id in self.closed_quote_ids:
                raise BusRpcError(
                    wire.INVALID_PARAMS, "late answer: the bus stopped waiting for this quote_id"
                )
            raise BusRpcError(wire.INVALID_PARAMS, "unknown quote_id")
        if conn.conn_id in pending.answers:
            raise BusRpcError(wire.INVALID_PARAMS, "quote_id already answered by this solver")
        now = self.chain.clock()
        try:
            checked = check_answer(
                param,
                pending.params,
                contract_id=self.chain.ledger.contract_id,
                now=now,
                lenient=self.lenient,
            )
        except QuoteRefused as exc:
            raise BusRpcError(wire.INVALID_PARAMS, str(exc)) from None
        try:
            self.chain.ledger.simulate_intents([checked.verified], now)  # verified: not again
        except LedgerError as exc:
            raise BusRpcError(wire.INVALID_PARAMS, f"simulation failed: {exc.text}") from None
        pending.answers[conn.conn_id] = (
            checked.quote_hash,
            checked.signed_data,
            checked.amount_in,
            checked.amount_out,
            checked.verified.message.deadline,
        )
        pending.answered.set()
        self.stats.quote_answers_ok += 1
        if pending.asked <= set(pending.answers):
            pending.done.set()

    def _remember_closed(self, quote_id: str) -> None:
        self.closed_quote_ids[quote_id] = None
        while len(self.closed_quote_ids) > MAX_RECORDS:
            self.closed_quote_ids.popitem(last=False)

    def _store_quote(self, record: QuoteRecord) -> None:
        self.quotes[record.quote_hash] = record
        while len(self.quotes) > MAX_RECORDS:
            self.quotes.popitem(last=False)

    async def rpc(self, method: str, param: Any) -> Any:
        """Dispatch one ``/rpc`` method (spec 4.7)."""
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "quote": self.quote,
            "publish_intent": self.publisher.publish_intent,
            "publish_intents": self.publisher.publish_intents,
        }
        if method == "get_status":
            return self.publisher.get_status(param)
        handler = handlers.get(method)
        if handler is None:
            raise BusRpcError(wire.METHOD_NOT_FOUND, f"method {method!r} not found")
        return await handler(param)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def first_param(request: wire.JsonRpcRequest) -> Any:
    """``params[0]`` of a request whose ``params`` is the array of spec 4.7.

    JSON-RPC 2.0 also allows ``params`` as a by-name object, but the bus's methods take an array
    holding one object; a bare object is refused by name rather than read as if it were that
    array (a client that sends one would otherwise work here and fail against a real relay).
    """
    if isinstance(request.params, dict):
        raise BusRpcError(
            wire.INVALID_PARAMS,
            "params must be an array holding one object (spec 4.7), not a bare object: "
            'send "params": [{...}]',
        )
    return request.params[0] if request.params else None


def _safe_id(value: Any) -> int | str | None:
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _dump(obj: Any) -> str:
    return orjson.dumps(obj).decode("utf-8")
