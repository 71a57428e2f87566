"""The executor's group commit and outbox: an answer leaves only after its facts are durable
(DESIGN "Persistence is the desk's journal", "The quote path").

The :class:`~solver.runtime.executor.Executor` appends an answer's ``QuoteOpened`` to the
journal and queues the answer here (:meth:`GroupCommitOutbox.queue`); every other fact the
desk records is appended here (:meth:`GroupCommitOutbox.append`). Answers queued in one loop
turn are made durable by one journal commit (:meth:`GroupCommitOutbox._flush`, run at the end
of the turn by the loop port), then sent: the record precedes the answer, and a burst pays for
one transaction instead of one each (group commit). A failed commit sends nothing and pauses
quoting (``QuoteNotSent`` with ``store_error``); the other facts it lost (claims, settlements:
the desk has applied them) are appended again at once, ahead of anything decided later, and
committed with the next flush (a second at the latest), as is a fact the journal refused at
append time.

Its own part so that the one guarantee the journal gives — nothing leaves that a restart would
not find — reads in one place, with the state it rests on (the queued answers, the facts not
yet committed or not yet journaled, whether a flush is due) and the one count of the answers
that left (docs/architecture.md "Counting sent answers"). What it learns the desk must hear
(an answer not recorded or not sent, the store working again) goes back through the
executor's ``feed``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from solver.core import events as ev
from solver.core.clock import Micros
from solver.core.facts import Fact, QuoteOpened
from solver.core.lifecycle import Quote
from solver.errors import SolverError
from solver.protocol.quote_signing import SignedQuote
from solver.runtime.ports import Ports
from solver.runtime.repeats import Repeats

log = logging.getLogger("solver.executor")  # the journal's lines keep the name they had
RETRY_COMMIT_S = 1.0
"""After a failed commit, the facts it lost are committed again this much later at the
latest (sooner when the next answer or fact comes)."""

Answer = tuple[Quote, SignedQuote, float, str]
"""A queued answer: the quote, its signature, when its request arrived (``perf_counter``) and
the request's metrics pair label."""
Feed = Callable[[ev.Event, Micros], object]
"""How what the outbox learns reaches the desk: the executor's ``feed``."""


class GroupCommitOutbox:
    """Facts appended, answers queued, one commit per loop turn, then the answers sent and
    counted. Owned by the executor, which feeds it; it talks to the journal, the sender, the
    metrics and the loop ports, and to the desk only through ``feed``."""

    def __init__(self, ports: Ports, feed: Feed) -> None:
        self._feed = feed
        self._clock = ports.clock
        self._journal, self._sender = ports.journal, ports.sender
        self._metrics, self._loop = ports.metrics, ports.loop
        self.sent_by_pair: dict[str, int] = {}
        """Answers the sender port took, by the request's metrics pair label (``other`` when
        nothing is counted): the one count of "the answer left" (docs/architecture.md
        "Counting sent answers"), which the status, the metrics and the replay read."""
        self.send_failed = 0
        self.response_us: deque[float] = deque(maxlen=20_000)
        if ports.metrics is not None:  # it shows this count of answers sent, keeps none
            ports.metrics.count_quotes_from(self.sent_by_pair)
        self._answers: list[Answer] = []
        self._flush_scheduled = False
        self._flush_soon = self._flush  # bound once, not at every answer
        self.queue: Callable[[Quote, SignedQuote, float, str], object] = self._queue
        """An answer whose ``QuoteOpened`` the journal took: it leaves after the next commit.
        With no journal to wait on, a loop that runs deferred work at once (one that says so
        by ``runs_at_once``: the replay's, one request at a time) and nothing to
        time, the flush would be one answer's send: the answer is sent as it is queued, by
        the flush's own send (:meth:`_send_one`; issue 29: two calls an answer less)."""
        if (
            ports.journal is None
            and getattr(ports.loop, "runs_at_once", False)
            and ports.metrics is None
        ):
            self.queue = self._send_one
        # Facts (not answers) appended since the last commit, and facts the desk applied that
        # the journal does not hold yet: a failed commit or append must not lose them.
        self._uncommitted: list[Fact] = []
        self._unjournaled: list[Fact] = []
        # A journal that fails, fails for every fact of every tick: said once, then counted.
        self.journal_failing = Repeats(log, "the journal", logging.ERROR)

    @property
    def sent(self) -> int:
        """Answers that left, every pair (:attr:`sent_by_pair`)."""
        return sum(self.sent_by_pair.values())

    @property
    def journal_clean(self) -> bool:
        """Nothing the journal refused is waiting, and its last commit worked."""
        return not self._unjournaled and not self.journal_failing.failures

    @property
    def durable(self) -> bool:
        """Every fact recorded so far is committed to the journal (the rebalancer publishes a
        signed deposit only then: a restart must find the item it may have sent)."""
        return not (self._flush_scheduled or self._uncommitted or self._unjournaled)

    @property
    def idle(self) -> bool:
        """No answer waits to be committed and sent."""
        return not (self._answers or self._flush_scheduled)

    def _queue(self, quote: Quote, signed: SignedQuote, started: float, pair: str) -> None:
        self._answers.append((quote, signed, started, pair))
        if not self._flush_scheduled:  # _schedule_flush, inline: once per answer
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_soon)

    def append(self, fact: Fact) -> None:
        """``fact`` into the journal's open transaction, committed at the next flush."""
        journal = self._journal
        if journal is None:
            return
        try:
            journal.append(fact)
        except SolverError as exc:
            self.refused(fact, exc)
            return
        if type(fact) is not QuoteOpened:
            self._uncommitted.append(fact)
        self._schedule_flush()

    def refused(self, fact: Fact, exc: SolverError) -> None:
        """The journal refused ``fact``: quoting pauses (``store_error``)."""
        why = f"cannot record {type(fact).__name__}: {exc}; quoting paused"
        self.journal_failing.failed(why, time.monotonic())
        # Only an answer not recorded is never sent (and released); any other fact failing
        # (a claim, a settlement) must not end the quote it names: the desk pauses, the
        # fact is kept and appended again at the next flush, and the operator looks at
        # the store.
        if type(fact) is QuoteOpened:
            event = ev.QuoteNotSent(fact.quote_id, f"not recorded: {exc}", store_error=True)
        else:
            self._unjournaled.append(fact)
            event = ev.QuoteNotSent("", f"not recorded: {exc}", store_error=True)
        self._feed(event, self._clock())

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_soon)

    def _flush(self) -> None:
        journal = self._journal
        self._flush_scheduled = False
        batch = self._answers
        if batch:
            self._answers = []
        if journal is not None:
            if self._unjournaled:
                self._append_again()
            written = bool(batch or self._uncommitted)
            try:
                journal.commit()  # the durable point: nothing below runs before it
            except SolverError as exc:
                why = f"{exc}; {len(batch)} answer(s) not sent"
                self.journal_failing.failed(why, time.monotonic())
                # The desk has applied every fact of the lost transaction: the ones that are
                # not answers go back to the journal first, before anything decided later.
                self._unjournaled[:0] = self._uncommitted
                self._uncommitted = []
                self._append_again()
                if self._uncommitted or self._unjournaled:  # not before the store is back
                    self._loop.call_later(RETRY_COMMIT_S, self._schedule_flush)
                now = self._clock()
                for quote, _, _, _ in batch:
                    reason = f"not recorded: {exc}"
                    self._feed(ev.QuoteNotSent(quote.quote_id, reason, True), now)
                return
            if self._uncommitted:  # no new list at every flush
                self._uncommitted = []
            failing = self.journal_failing
            if written and failing.failures and failing.worked() and not self._unjournaled:
                # Every fact it refused is in it now: a store_error pause lost its cause.
                self._feed(ev.StoreWorks("the journal commits again"), self._clock())
        if not batch:
            return
        if len(batch) == 1:  # one answer is one write anyway: nothing to cork
            timed = self._send(batch)
        else:
            with self._sender.corked():  # the batch leaves in one write, at the end
                timed = self._send(batch)
        if timed:
            self._time_responses(timed)

    def _append_again(self) -> None:
        """Facts the desk applied but the journal lost (a failed append or commit), in their
        order; those the journal still refuses wait for the next flush."""
        journal, waiting = self._journal, self._unjournaled
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

    def _send(self, batch: list[Answer]) -> list[float] | None:
        """Hand each answer to the sender; when the ones that left arrived (None: no metrics,
        nothing timed)."""
        send = self._send_one
        if self._metrics is None:
            for quote, signed, started, pair in batch:
                send(quote, signed, started, pair)
            return None
        return [
            started for quote, signed, started, pair in batch if send(quote, signed, started, pair)
        ]

    def _send_one(self, quote: Quote, signed: SignedQuote, started: float, pair: str) -> bool:
        """Hand one answer to the sender: whether it left (counted here, and only here)."""
        try:
            self._sender.send_answer(quote, signed)
        except SolverError as exc:
            # Never written to the socket: the relay never saw it, nobody can use it.
            self.send_failed += 1
            event = ev.QuoteNotSent(quote.quote_id, f"not sent: {exc}")
            self._feed(event, self._clock())
            return False
        sent = self.sent_by_pair
        sent[pair] = sent.get(pair, 0) + 1
        return True

    def _time_responses(self, timed: list[float]) -> None:
        """Request to answer written, for the answers of one flush (live: after the write)."""
        metrics = self._metrics
        assert metrics is not None  # timed only when there are metrics
        written = time.perf_counter()
        for started in timed:
            elapsed = written - started
            self.response_us.append(elapsed * 1e6)
            metrics.observe_response(elapsed)
