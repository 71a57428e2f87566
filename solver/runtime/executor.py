"""The executor: the one caller of the desk, carrying out its actions through ports (DESIGN "The
shape", "The quote path", "Settlement").

Both drivers run this same object: the live bot with real ports (``solver/io/``), the backtest
with simulated ones (``backtest/ports.py``); see :mod:`solver.runtime.ports`. Events reach the
desk only through :meth:`Executor.feed`, :meth:`Executor.request` and :meth:`Executor.tick`, and
what the desk returns is carried out by a handler table keyed by the action's type (but on the
quote path: a quote goes straight to signing, the ``QuoteOpened`` of its signature straight to
the journal).

The quote path: the decision's :class:`~solver.core.lifecycle.Quote` (the action itself) → a
nonce under the salt the decision checked (the nonce source) → the signature (the signer) → back
to the desk (:attr:`~solver.core.desk.Desk.signed`), which opens the quote → its ``QuoteOpened``
fact appended to the journal → the answer queued. A deferred signer (the signer process,
:class:`~solver.runtime.ports.DeferredSigner`) answers in a later loop turn, in the order of the
requests; a request it does not sign skips with its reason (``signer_busy``, ``signer_down``,
``signer_refused:<rule>``) and is released. The answer waits in the executor's
:class:`~solver.runtime.outbox.GroupCommitOutbox`, which commits what the desk recorded once a
loop turn and only then sends it, and counts what left.

Everything else is off the quote path: ``get_status`` polls and ``is_nonce_used`` checks are
started on their ports, which answer later with events; alerts and pause changes go to the
alert sink.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from solver.core import events as ev
from solver.core.actions import (
    Action,
    Alert,
    CheckNonce,
    Decision,
    OperatorReply,
    PauseChanged,
    PollIntent,
    Record,
    RefreshBalances,
    RefreshSalt,
    ShadowQuote,
)
from solver.core.clock import SECOND, Micros
from solver.core.desk import Desk
from solver.core.facts import KINDS, QuoteMoved, QuoteOpened, opened_fact
from solver.core.lifecycle import Quote
from solver.core.market import QuoteRequest
from solver.core.quoting import Skip
from solver.errors import SolverError
from solver.protocol.quote_signing import SignedQuote
from solver.runtime.outbox import GroupCommitOutbox
from solver.runtime.ports import DeferredSigner, Ports, Signer

log = logging.getLogger("solver.executor")
OTHER = "other"
"""The metrics label of actions that answer no request."""
REFUSAL_ALERT_EVERY_S = 60.0
"""A refusal by the signer's policy is alerted at most this often per rule (each is counted)."""

Handler = Callable[[Any, Micros, float, str], None]


class Executor:
    def __init__(self, desk: Desk, ports: Ports) -> None:
        self.desk = desk
        self.ports = ports
        self.clock = ports.clock
        self.outbox = GroupCommitOutbox(ports, self.feed)
        """The answers' way out: the journal's group commit, then the send and its counts."""
        self.alerts: deque[tuple[Micros, Alert]] = deque(maxlen=100)
        self.replies: list[OperatorReply] = []
        # Who hears the facts the desk records, by fact type (:meth:`observe`).
        self._observers: dict[type, list[Callable[[Any], None]]] = {
            kind: [] for kind in KINDS.values()
        }
        self._opened_observers = self._observers[QuoteOpened]  # the same list, read per answer
        # The quote path's ports, looked up once per answer instead of twice (Ports is frozen).
        self._journal, self._metrics = ports.journal, ports.metrics
        self._next_nonce = ports.nonces.next  # bound once, not at every answer
        self._decide = desk.decide  # a request's one action (Desk.decide)
        self._signed = desk.signed  # the signature back to the desk: the quote opens
        # The outbox's two doors, bound once, not at every answer or fact.
        self._queue_answer, self._append = self.outbox.queue, self.outbox.append
        self._signing = 0  # quotes a deferred signer has not answered yet
        self._refusals_told: dict[str, Micros] = {}  # rule -> when it was last alerted
        self._deferred = (
            cast(DeferredSigner, ports.signer) if getattr(ports.signer, "deferred", False) else None
        )
        # The inline signer's method, or None when the signer answers later.
        self._sign = None if self._deferred is not None else cast(Signer, ports.signer).sign
        self._handlers: dict[type, Handler] = {
            Quote: self._sign_and_queue,
            Record: self._record,
            Skip: self._skip,
            PollIntent: self._poll,
            CheckNonce: self._check_nonce,
            RefreshBalances: self._refresh_balances,
            RefreshSalt: self._refresh_salt,
            Alert: self._alert,
            PauseChanged: self._pause_changed,
            OperatorReply: self._operator_reply,
            ShadowQuote: self._shadow_quote,
        }

    def observe(self, observer: Callable[[Any], None], *kinds: type) -> None:
        """Call ``observer`` with each fact of ``kinds`` (every fact when none is named) the
        desk records, in order: the backtest's measurements, the demo's view, tests' audits.
        A replay names the few kinds it measures, so the others cost it no call."""
        for kind in kinds or tuple(self._observers):
            self._observers[kind].append(observer)

    @property
    def idle(self) -> bool:
        """No answer waits to be signed, committed or sent."""
        return not self._signing and self.outbox.idle

    # ------------------------------------------------------------------ feeding the desk

    def feed(self, event: ev.Event, now: Micros | None = None) -> list[Action]:
        """Give the desk one event and carry out what it asks; the actions are returned."""
        when = self.clock() if now is None else now
        actions = self.desk.receive(event, when)
        if actions:
            self.carry_out(actions, when)
        return actions

    def request(self, request: QuoteRequest, now: Micros) -> Decision:
        """The quote path: one desk decision (:attr:`Desk.decide`), then sign, journal and
        queue the answer (its skip or its quote counted under the request's pair); the
        decision's one action is returned. The request is its own event and the action comes
        alone (no wrapper, no list), and an answer goes straight to signing (no handler
        table)."""
        if self._metrics is None:  # _decided's first line, inline: a replay's every request
            action, started, pair = self._decide(request, now), 0.0, OTHER
        else:
            action, started, pair = self._decided(request, now)
        if type(action) is Quote and self._sign is not None:
            # _sign_and_queue's inline signing, without its frame: one call a request less
            signed = self._signature(action, now)
            if signed is not None:
                self._queue_signed(action, signed, now, started, pair)
        else:
            self._handlers[type(action)](action, now, started, pair)
        return action

    def _decided(self, request: QuoteRequest, now: Micros) -> tuple[Decision, float, str]:
        """One desk decision, counted and timed under the request's pair: its action, when
        it began (``perf_counter``) and the pair's label (nothing counted or timed without
        metrics: a replay measures itself)."""
        metrics = self._metrics
        if metrics is None:
            return self._decide(request, now), 0.0, OTHER
        started = time.perf_counter()
        action = self._decide(request, now)
        pair = metrics.pair_label(request.asset_in, request.asset_out)
        metrics.inc_request(pair)
        metrics.observe_decision(time.perf_counter() - started)
        return action, started, pair

    def request_many(self, requests: list[QuoteRequest], now: Micros) -> list[Decision | None]:
        """The quote path for the requests of one read of the socket, stage by stage: every
        decision, then every signature, then every record and queueing. The same decisions
        in the same order as :meth:`request` one by one (a decision reads nothing a
        signature or a record changes; a repeated id is refused by its reservation), and the
        same answers; but each stage's code and data stay in the caches for the whole batch
        (the Ed25519 tables, the desk's, the journal's): ~14 % less CPU an answer at 8 a read
        in-process (issue 29). Each request's action, or None where its path failed
        unexpectedly (logged; the others go on)."""
        if len(requests) == 1 or self._sign is None:  # nothing to gain, or signed later
            return [self._request_guarded(request, now) for request in requests]
        results: list[Decision | None] = []
        answers: list[tuple[int, Quote, float, str]] = []
        for index, request in enumerate(requests):
            try:
                action, started, pair = self._decided(request, now)
                if type(action) is Quote:
                    answers.append((index, action, started, pair))
                else:
                    self._handlers[type(action)](action, now, started, pair)
            except Exception:
                log.exception("request %s: the quote path failed", request.quote_id)
                results.append(None)
                continue
            results.append(action)
        signed: list[tuple[int, Quote, SignedQuote, float, str]] = []
        for index, quote, started, pair in answers:
            try:
                signature = self._signature(quote, now)
            except Exception:
                log.exception("request %s: signing failed", quote.quote_id)
                results[index] = None
                continue
            if signature is not None:  # None: refused, and the desk heard it
                signed.append((index, quote, signature, started, pair))
        for index, quote, signature, started, pair in signed:
            try:
                self._queue_signed(quote, signature, now, started, pair)
            except Exception:
                log.exception("request %s: recording failed", quote.quote_id)
                results[index] = None
        return results

    def _request_guarded(self, request: QuoteRequest, now: Micros) -> Decision | None:
        try:
            return self.request(request, now)
        except Exception:
            log.exception("request %s: the quote path failed", request.quote_id)
            return None

    def tick(self, now: Micros) -> list[Action]:
        """What is due at ``now`` (:meth:`Desk.tick`), carried out."""
        actions = self.desk.tick(now)
        if actions:
            self.carry_out(actions, now)
        return actions

    def carry_out(
        self, actions: list[Action], now: Micros, started: float = 0.0, pair: str = OTHER
    ) -> None:
        """Carry out ``actions`` in order. ``started``: when the request they answer arrived
        (``perf_counter``), ``pair`` its metrics label."""
        handlers = self._handlers
        for action in actions:
            handlers[type(action)](action, now, started, pair)

    # ------------------------------------------------------------------ the quote path

    def _skip(self, action: Skip, now: Micros, started: float, pair: str) -> None:
        metrics = self._metrics
        if metrics is not None:
            metrics.inc_skip(action.reason, pair)

    def _shadow_quote(self, action: ShadowQuote, now: Micros, started: float, pair: str) -> None:
        # Counted by the desk; nothing leaves in shadow mode, the paper book decides.
        shadow = self.ports.shadow
        if shadow is not None:
            shadow(action.quote, now)

    def _sign_and_queue(self, quote: Quote, now: Micros, started: float, pair: str) -> None:
        if self._sign is not None:
            signed = self._signature(quote, now)
            if signed is not None:
                self._queue_signed(quote, signed, now, started, pair)
            return
        assert self._deferred is not None
        deadline = quote.deadline
        self._signing += 1
        self._deferred.sign_later(
            quote_id=quote.quote_id,
            deadline=deadline,
            nonce=self._next_nonce(quote.salt, deadline),
            asset_in=quote.asset_in,
            amount_in=quote.amount_in,
            asset_out=quote.asset_out,
            amount_out=quote.amount_out,
            reply=lambda result: self._signed_later(quote, result, started, pair),
        )

    def _signature(self, quote: Quote, now: Micros) -> SignedQuote | None:
        """The in-process signer's signature of ``quote`` under a nonce of the salt its
        decision checked; None when it refused (the desk hears ``QuoteNotSent``)."""
        deadline = quote.deadline
        nonce = self._next_nonce(quote.salt, deadline)  # its failure is no refusal
        sign = self._sign
        assert sign is not None  # inline signing only
        try:
            return sign(
                deadline=deadline,
                nonce=nonce,
                asset_in=quote.asset_in,
                amount_in=quote.amount_in,
                asset_out=quote.asset_out,
                amount_out=quote.amount_out,
            )
        except SolverError as exc:
            self.feed(ev.QuoteNotSent(quote.quote_id, f"not signed: {exc}"), now)
            return None

    def _signed_later(
        self, quote: Quote, result: SignedQuote | str, started: float, pair: str
    ) -> None:
        """A deferred signer's answer (a later loop turn, or at once when it is down or
        busy): queued like an inline signature, or the request skips with the signer's
        reason (``signer_busy``, ``signer_down``, ``signer_refused:<rule>``)."""
        self._signing -= 1
        now = self.clock()
        if isinstance(result, SignedQuote):
            self._queue_signed(quote, result, now, started, pair)
            return
        reason = result.split(":", 1)[0]
        if reason == "signer_refused":
            rule = result.split(":", 2)[1]
            last = self._refusals_told.get(rule)
            if last is None or now - last >= REFUSAL_ALERT_EVERY_S * SECOND:
                self._refusals_told[rule] = now  # a cap reached refuses every quote: tell once
                self._alert(Alert("signer_refused", result), now, started, pair)
        metrics = self._metrics
        if metrics is not None:
            metrics.inc_skip(reason, pair)
        self.feed(ev.QuoteNotSent(quote.quote_id, result), now)

    def _queue_signed(
        self, quote: Quote, signed: SignedQuote, now: Micros, started: float, pair: str
    ) -> None:
        """The signature back to the desk (:attr:`Desk.signed`), the quote's ``QuoteOpened``
        appended (and observed), the answer queued for the flush that commits it before it
        leaves. The fact is built only for a journal or an observer to read (a replay has
        neither: one object of 13 fields less an answer, issue 29)."""
        self._signed(quote, signed.quote_hash, signed.nonce, now)
        if self._journal is not None or self._opened_observers:  # read here: a replay's case
            journal, observers = self._journal, self._opened_observers
            fact = opened_fact(quote, signed.signed_data)
            if journal is not None:
                try:
                    journal.append(fact)
                except SolverError as exc:
                    self.outbox.refused(fact, exc)
                    return  # not recorded: never sent (the desk released and paused)
            for observer in observers:
                observer(fact)
        self._queue_answer(quote, signed, started, pair)

    def _record(self, action: Record, now: Micros, started: float, pair: str) -> None:
        fact = action.fact
        if self._journal is not None:
            self._append(fact)
        if type(fact) is QuoteMoved and fact.new == "SETTLED":
            self._log_fill(fact.quote_id)
        for observer in self._observers[type(fact)]:
            observer(fact)

    # ------------------------------------------------------------------ settlement I/O

    def _poll(self, action: PollIntent, now: Micros, started: float, pair: str) -> None:
        self.ports.statuses.get_status(action.intent_hash, self.feed)

    def _check_nonce(self, action: CheckNonce, now: Micros, started: float, pair: str) -> None:
        self.ports.nonce_oracle.is_nonce_used(action.quote_id, action.nonce, self.feed)

    def _refresh_balances(self, action: Any, now: Micros, started: float, pair: str) -> None:
        self.ports.balances.refresh_now()

    def _refresh_salt(self, action: Any, now: Micros, started: float, pair: str) -> None:
        self.ports.salt.refresh_now()

    # ------------------------------------------------------------------ telling people

    def _log_fill(self, quote_id: str) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        desk = self.desk
        for quote, prices in reversed(desk.recent_fills):
            if quote.quote_id == quote_id:
                label = desk.pair_book.label(quote.asset_in, quote.asset_out)
                log.info("%s", desk.readable.fill(quote, prices, label))
                return

    def _alert(self, alert: Alert, now: Micros, started: float, pair: str) -> None:
        self.alerts.append((now, alert))
        self.ports.alerts.alert(alert, now)

    def _pause_changed(self, change: PauseChanged, now: Micros, started: float, pair: str) -> None:
        self.ports.alerts.pause_changed(change)

    def _operator_reply(self, reply: OperatorReply, now: Micros, started: float, pair: str) -> None:
        self.replies.append(reply)
