"""Carries out the desk's actions in the live bot (DESIGN "The quote path", "Settlement").

The quote path: :class:`~solver.core.actions.SignAndSend` → nonce (salt + unique) → NEP-413
signature → ``QuoteSigned`` back to the desk → its ``QuoteOpened`` fact appended to the journal
→ the answer queued. Answers queued in one turn of the event loop are made durable by one
journal commit (:meth:`Executor._flush`), then sent: the record precedes the answer, and a
burst pays for one transaction instead of one each (group commit). A failed commit sends
nothing and pauses quoting (``QuoteNotSent`` with ``store_error``); the other facts it lost
(claims, settlements: the desk has applied them) are appended again at once, ahead of anything
decided later, and committed with the next flush (a second at the latest), as is a fact the
store refused at append time.

Everything else is off the hot path: ``get_status`` polls and ``is_nonce_used`` checks run as
tasks (bounded, de-duplicated) and report back as events; alerts and pause changes are logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from solver.core import events as ev
from solver.core.actions import (
    Action,
    Alert,
    CheckNonce,
    OperatorReply,
    PauseChanged,
    PollIntent,
    Record,
    RefreshBalances,
    RefreshSalt,
    ShadowQuote,
    SignAndSend,
)
from solver.core.desk import Desk
from solver.core.facts import Fact, QuoteMoved, QuoteOpened
from solver.core.quoting import Quote, Skip
from solver.errors import SolverError
from solver.io.bus_rpc import BusRpcClient
from solver.io.ledger_client import LedgerClient
from solver.io.metrics import OTHER, Metrics
from solver.io.notify import Notifier
from solver.io.store.journal import Journal
from solver.protocol.nonce import NonceLayout, NonceSequence, new_nonce
from solver.protocol.quote_signing import QuoteSigner

log = logging.getLogger("solver.executor")
CHECKS_AT_ONCE = 32
RETRY_COMMIT_S = 1.0
"""After a failed commit, the facts it lost are committed again this much later at the
latest (sooner when the next answer or fact comes)."""


class Sender(Protocol):
    def send_quote_response(self, params: dict[str, Any]) -> None:
        """Write the answer to the relay now, or raise a :class:`SolverError` (not sent)."""

    def corked(self) -> AbstractContextManager[None]:
        """Answers sent inside the block may leave together at its end (one write)."""


class Executor:
    def __init__(
        self,
        desk: Desk,
        *,
        signer: QuoteSigner,
        sender: Sender,
        clock: Callable[[], datetime],
        journal: Journal | None,
        metrics: Metrics,
        ledger: LedgerClient,
        bus_rpc: BusRpcClient,
        account: str,
        nonce_layout: NonceLayout = "salted",
        nonces: NonceSequence | None = None,
        on_refresh_balances: Callable[[], None] = lambda: None,
        on_refresh_salt: Callable[[], None] = lambda: None,
        on_shadow_quote: Callable[[Quote, datetime], None] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.desk = desk
        self.signer = signer
        self.sender = sender
        self.clock = clock
        self.journal = journal
        self.metrics = metrics
        self.ledger = ledger
        self.bus_rpc = bus_rpc
        self.account = account
        self.nonce_layout = nonce_layout
        # The unique part of every quote nonce (spec 5.3): the bot passes a sequence whose
        # prefix its store registered; without one, a random unregistered prefix.
        self.nonces = NonceSequence.unregistered() if nonces is None else nonces
        self.on_refresh_balances = on_refresh_balances
        self.on_refresh_salt = on_refresh_salt
        self.on_shadow_quote = on_shadow_quote  # shadow mode's paper book (runtime.paper)
        self.notifier = notifier
        self.readable = desk.readable
        self.sent = 0
        self.send_failed = 0
        self.response_us: deque[float] = deque(maxlen=20_000)
        self.alerts: deque[tuple[datetime, Alert]] = deque(maxlen=100)
        self.replies: list[OperatorReply] = []
        # Called with every fact the desk records (the demo's view, tests' audits).
        self.observers: list[Callable[[Fact], None]] = []
        self._outbox: list[tuple[str, dict[str, Any], float, str]] = []
        self._flush_scheduled = False
        # Facts (not answers) appended since the last commit, and facts the desk applied that
        # the journal does not hold yet: a failed commit or append must not lose them.
        self._uncommitted: list[Fact] = []
        self._unjournaled: list[Fact] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._polls_in_flight: set[str] = set()
        self._checks = asyncio.Semaphore(CHECKS_AT_ONCE)

    # ------------------------------------------------------------------ feeding the desk

    def feed(self, event: ev.Event, now: datetime | None = None) -> list[Action]:
        """Give the desk one event and carry out what it asks; the actions are returned."""
        when = self.clock() if now is None else now
        actions = self.desk.receive(event, when)
        if actions:
            self.run(actions, when, time.perf_counter())
        return actions

    def run(self, actions: list[Action], now: datetime, started: float, pair: str = OTHER) -> None:
        """``pair``: the metrics label of the request these actions answer (its skip and its
        quote are counted under it); outcomes are counted from the desk's per-pair stats."""
        for action in actions:
            kind = type(action)
            if kind is SignAndSend:
                assert isinstance(action, SignAndSend)
                self._sign_and_queue(action, now, started, pair)
            elif kind is Record:
                assert isinstance(action, Record)
                self._append(action)
                fact = action.fact
                if type(fact) is QuoteMoved and fact.new == "SETTLED":
                    self._log_fill(fact.quote_id)
                for observer in self.observers:
                    observer(action.fact)
            elif kind is Skip:
                assert isinstance(action, Skip)
                self.metrics.inc_skip(action.reason, pair)
            elif kind is PollIntent:
                assert isinstance(action, PollIntent)
                self._poll(action.intent_hash)
            elif kind is CheckNonce:
                assert isinstance(action, CheckNonce)
                self._spawn(self._check_nonce(action))
            elif kind is RefreshBalances:
                self.on_refresh_balances()
            elif kind is RefreshSalt:
                self.on_refresh_salt()
            elif kind is Alert:
                assert isinstance(action, Alert)
                self._alert(action, now)
            elif kind is PauseChanged:
                assert isinstance(action, PauseChanged)
                self._pause_changed(action)
            elif kind is OperatorReply:
                assert isinstance(action, OperatorReply)
                self.replies.append(action)
            elif kind is ShadowQuote and self.on_shadow_quote is not None:
                # Counted by the desk; nothing leaves in shadow mode, the paper book decides.
                assert isinstance(action, ShadowQuote)
                self.on_shadow_quote(action.quote, now)

    # ------------------------------------------------------------------ the quote path

    def _sign_and_queue(
        self, action: SignAndSend, now: datetime, started: float, pair: str
    ) -> None:
        quote = action.quote
        request = quote.request
        try:
            signed = self.signer.sign(
                deadline=quote.deadline,
                nonce=new_nonce(self.nonce_layout, action.salt, quote.deadline, self.nonces),
                asset_in=request.asset_in,
                amount_in=quote.amount_in,
                asset_out=request.asset_out,
                amount_out=quote.amount_out,
            )
        except SolverError as exc:
            self.feed(ev.QuoteNotSent(request.quote_id, f"not signed: {exc}"), now)
            return
        opened = self.desk.receive(
            ev.QuoteSigned(request.quote_id, signed.quote_hash, signed.nonce), now
        )
        for record in opened:
            if (
                type(record) is Record
                and type(record.fact) is QuoteOpened
                and not self._append(record, signed.signed_data)
            ):
                return  # not recorded: never sent (the desk released and paused)
            if type(record) is Record:
                for observer in self.observers:
                    observer(record.fact)
        output = (
            {"amount_out": str(quote.amount_out)}
            if request.exact_in
            else {"amount_in": str(quote.amount_in)}
        )
        params = {
            "quote_id": request.quote_id,
            "quote_output": output,
            "signed_data": signed.signed_data,
        }
        self._outbox.append((request.quote_id, params, started, pair))
        self._schedule_flush()

    def _append(self, record: Record, signed_data: dict[str, Any] | None = None) -> bool:
        journal = self.journal
        if journal is None:
            return True
        fact = record.fact
        try:
            journal.append(fact, signed_data)
        except SolverError as exc:
            log.error("cannot record %s: %s; quoting paused", type(fact).__name__, exc)
            # Only an answer not recorded is never sent (and released); any other fact failing
            # (a claim, a settlement) must not end the quote it names: the desk pauses, the
            # fact is kept and appended again at the next flush, and the operator looks at
            # the store.
            if type(fact) is QuoteOpened:
                self.feed(ev.QuoteNotSent(fact.quote_id, f"not recorded: {exc}", store_error=True))
            else:
                self._unjournaled.append(fact)
                self.feed(ev.QuoteNotSent("", f"not recorded: {exc}", store_error=True))
            return False
        if type(fact) is not QuoteOpened:
            self._uncommitted.append(fact)
        self._schedule_flush()
        return True

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._outbox = self._outbox, []
        journal = self.journal
        if journal is not None:
            self._append_again()
            try:
                journal.commit()  # the durable point: nothing below runs before it
            except SolverError as exc:
                log.error("cannot commit the journal: %s; %d answer(s) not sent", exc, len(batch))
                # The desk has applied every fact of the lost transaction: the ones that are
                # not answers go back to the journal first, before anything decided later.
                self._unjournaled[:0] = self._uncommitted
                self._uncommitted = []
                self._append_again()
                if self._uncommitted or self._unjournaled:  # not before the store is back
                    asyncio.get_running_loop().call_later(RETRY_COMMIT_S, self._schedule_flush)
                now = self.clock()
                for quote_id, _, _, _ in batch:
                    reason = f"not recorded: {exc}"
                    self.feed(ev.QuoteNotSent(quote_id, reason, store_error=True), now)
                return
            self._uncommitted = []
        if batch:
            self._send(batch)

    def _append_again(self) -> None:
        """Facts the desk applied but the journal lost (a failed append or commit), in their
        order; those the store still refuses wait for the next flush."""
        journal, waiting = self.journal, self._unjournaled
        if journal is None or not waiting:
            return
        self._unjournaled = []
        for index, fact in enumerate(waiting):
            try:
                journal.append(fact)
            except SolverError:
                self._unjournaled = waiting[index:]
                return
            self._uncommitted.append(fact)

    def _send(self, batch: list[tuple[str, dict[str, Any], float, str]]) -> None:
        sent: list[tuple[float, str]] = []
        with self.sender.corked():  # the batch leaves in one write, at the end of the block
            for quote_id, params, started, pair in batch:
                try:
                    self.sender.send_quote_response(params)
                except SolverError as exc:
                    # Never written to the socket: the relay never saw it, nobody can use it.
                    self.send_failed += 1
                    self.feed(ev.QuoteNotSent(quote_id, f"not sent: {exc}"))
                    continue
                sent.append((started, pair))
        written = time.perf_counter()
        metrics = self.metrics
        self.sent += len(sent)
        for started, pair in sent:
            elapsed = written - started
            self.response_us.append(elapsed * 1e6)
            metrics.inc_quote(pair)
            metrics.observe_response(elapsed)

    async def drain(self) -> None:
        """Wait until every queued answer has been committed and sent, and tasks are done."""
        while self._outbox or self._flush_scheduled or self._tasks:
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            else:
                await asyncio.sleep(0)

    # ------------------------------------------------------------------ settlement I/O

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _poll(self, intent_hash: str) -> None:
        if intent_hash in self._polls_in_flight:
            return
        self._polls_in_flight.add(intent_hash)
        self._spawn(self._get_status(intent_hash))

    async def _get_status(self, intent_hash: str) -> None:
        try:
            result = await self.bus_rpc.get_status(intent_hash)
            status = result.status.value
            tx_hash = result.data.hash if result.data else None
        except SolverError as exc:
            log.debug("get_status %s failed: %s", intent_hash, exc)
            status, tx_hash = None, None
        finally:
            self._polls_in_flight.discard(intent_hash)
        self.feed(ev.IntentStatusSeen(intent_hash, status, tx_hash))

    async def _check_nonce(self, action: CheckNonce) -> None:
        async with self._checks:
            try:
                used: bool | None = await self.ledger.is_nonce_used(self.account, action.nonce)
            except SolverError as exc:
                log.warning("is_nonce_used for quote %s failed: %s", action.quote_id, exc)
                used = None
        self.feed(ev.NonceChecked(action.quote_id, used))

    # ------------------------------------------------------------------ telling people

    def _log_fill(self, quote_id: str) -> None:
        for quote, prices in reversed(self.desk.recent_fills):
            if quote.quote_id == quote_id:
                pair = self.desk.pair_book.label(quote.asset_in, quote.asset_out)
                log.info("%s", self.readable.fill(quote, prices, pair))
                return

    def _alert(self, alert: Alert, now: datetime) -> None:
        self.alerts.append((now, alert))
        if self.notifier is not None:
            # One message per incident opened or resolved (repeats dropped, rate limited per
            # kind); the notifier logs each message it sends.
            self.notifier.alert(alert, now)
            return
        # A halt is logged at ERROR by its pause; the alert itself is a warning.
        if alert.resolved:
            log.warning("resolved: %s: %s", alert.kind, alert.detail)
        else:
            log.warning("alert: %s: %s", alert.kind, alert.detail)

    def _pause_changed(self, change: PauseChanged) -> None:
        pause = change.pause
        where = "everything" if pause.scope == "*" else pause.scope
        if change.active:
            # An operator's pause is a choice; any other is the kill switch or a fault.
            level = logging.WARNING if pause.kind == "operator" else logging.ERROR
            log.log(level, "PAUSED: %s: %s (%s)", pause.kind, pause.reason, where)
        else:
            log.warning("pause lifted: %s: %s (%s)", pause.kind, pause.reason, where)
