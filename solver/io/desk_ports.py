"""The executor's live ports (:mod:`solver.runtime.ports`) that are not a client already.

The signer (:class:`~solver.protocol.quote_signing.QuoteSigner`), the journal
(:class:`~solver.io.store.journal.SqliteJournal`), the sender
(:class:`~solver.io.bus_ws.BusWsClient`) and the metrics (:class:`~solver.io.metrics.Metrics`)
are ports as they are. Here: the RPC questions as tasks whose answers come back as desk events,
the alert sink, the event loop as the loop port, and the tasks they start, so a stop can wait for
them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from solver.core import events as ev
from solver.core.actions import Alert, PauseChanged
from solver.core.clock import Micros, from_micros
from solver.errors import SolverError
from solver.io.bus_rpc import BusRpcClient
from solver.io.ledger_client import LedgerClient
from solver.io.notify import Notifier
from solver.runtime.ports import Reply

log = logging.getLogger("solver.executor")
CHECKS_AT_ONCE = 32
"""``is_nonce_used`` questions in flight at once; more wait their turn."""


class Tasks:
    """The tasks the live ports start (RPC questions), so a stop can wait for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


class BusStatusSource:
    """``get_status`` on the bus's JSON-RPC (spec 3.3), answered as ``IntentStatusSeen``."""

    def __init__(self, bus: BusRpcClient, tasks: Tasks) -> None:
        self.bus = bus
        self.tasks = tasks

    def get_status(self, intent_hash: str, reply: Reply) -> None:
        self.tasks.spawn(self._ask(intent_hash, reply))

    async def _ask(self, intent_hash: str, reply: Reply) -> None:
        try:
            result = await self.bus.get_status(intent_hash)
            status: str | None = result.status.value
            tx_hash = result.data.hash if result.data else None
        except SolverError as exc:
            log.debug("get_status %s failed: %s", intent_hash, exc)
            status, tx_hash = None, None
        reply(ev.IntentStatusSeen(intent_hash, status, tx_hash))


class LedgerNonceOracle:
    """The verifier's ``is_nonce_used`` through the ledger RPC (spec 2.13), at most
    :data:`CHECKS_AT_ONCE` at a time, answered as ``NonceChecked``."""

    def __init__(self, ledger: LedgerClient, account: str, tasks: Tasks) -> None:
        self.ledger = ledger
        self.account = account
        self.tasks = tasks
        self._slots: asyncio.Semaphore | None = None

    def is_nonce_used(self, quote_id: str, nonce: bytes, reply: Reply) -> None:
        self.tasks.spawn(self._ask(quote_id, nonce, reply))

    async def _ask(self, quote_id: str, nonce: bytes, reply: Reply) -> None:
        if self._slots is None:  # made in the running loop
            self._slots = asyncio.Semaphore(CHECKS_AT_ONCE)
        async with self._slots:
            try:
                used: bool | None = await self.ledger.is_nonce_used(self.account, nonce)
            except SolverError as exc:
                log.warning("is_nonce_used for quote %s failed: %s", quote_id, exc)
                used = None
        reply(ev.NonceChecked(quote_id, used))


class LoggedAlerts:
    """Alerts to the notifier (one message per incident, rate limited; it logs each message
    it sends), or to the log without one; pause changes to the log (a halt at ERROR)."""

    def __init__(self, notifier: Notifier | None) -> None:
        self.notifier = notifier

    def alert(self, alert: Alert, now: Micros) -> None:
        if self.notifier is not None:
            self.notifier.alert(alert, from_micros(now))
        elif alert.resolved:
            log.warning("resolved: %s: %s", alert.kind, alert.detail)
        else:
            log.warning("alert: %s: %s", alert.kind, alert.detail)

    def pause_changed(self, change: PauseChanged) -> None:
        pause = change.pause
        where = "everything" if pause.scope == "*" else pause.scope
        if change.active:
            # An operator's pause is a choice; any other is the kill switch or a fault.
            level = logging.WARNING if pause.kind == "operator" else logging.ERROR
            log.log(level, "PAUSED: %s: %s (%s)", pause.kind, pause.reason, where)
        else:
            log.warning("pause lifted: %s: %s (%s)", pause.kind, pause.reason, where)


class RunningLoop:
    """The loop port: the running asyncio loop (the group commit at the end of the turn)."""

    def call_soon(self, callback: Callable[[], None]) -> None:
        asyncio.get_running_loop().call_soon(callback)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> None:
        asyncio.get_running_loop().call_later(delay_s, callback)
