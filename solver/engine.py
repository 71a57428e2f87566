"""The running bot's reactions: quote requests, relay replies, quote statuses, balance snapshots.

The quote path (DESIGN): event → ``QuotePipeline.decide`` → nonce + NEP-413 signature →
``journal.record_quote`` (before anything leaves the process: the exposure is never forgotten)
→ ``quote_response``. No network I/O happens before the send; salt, balances and prices come
from the cached state. Settlement follows the :mod:`solver.core.settlement` state machine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from solver.core.inventory import Inventory
from solver.core.market import QuoteRequest
from solver.core.quoting import Quote, QuotePipeline, Skip
from solver.core.settlement import TERMINAL, QuoteBook, QuoteState, TrackedQuote, Transition
from solver.core.state import MarketState
from solver.errors import SolverError
from solver.io.metrics import Metrics
from solver.protocol.bus import QuoteRequestEvent, QuoteStatusEvent
from solver.protocol.nonce import NonceLayout, new_nonce
from solver.protocol.quote_signing import QuoteSigner, SignedQuote

log = logging.getLogger("solver.engine")


class Journal(Protocol):
    """Where quotes and transitions are persisted (the SQLite store, or nothing)."""

    def record_quote(
        self, quote: TrackedQuote, signed: SignedQuote, request: QuoteRequest
    ) -> None: ...

    def record_transition(self, transition: Transition) -> None: ...

    def record_request(
        self, request: QuoteRequest, outcome: str, at: datetime, reason: str | None = None
    ) -> bool: ...

    def commit(self) -> None:
        """Make every quote recorded so far durable (group commit)."""
        ...


class NullJournal:
    def record_quote(self, quote: TrackedQuote, signed: SignedQuote, request: QuoteRequest) -> None:
        return None

    def record_transition(self, transition: Transition) -> None:
        return None

    def record_request(
        self, request: QuoteRequest, outcome: str, at: datetime, reason: str | None = None
    ) -> bool:
        return False

    def commit(self) -> None:
        return None


class Sender(Protocol):
    async def send_quote_response(self, params: dict[str, Any]) -> None: ...


@dataclass
class EngineStats:
    requests: int = 0
    quoted: int = 0
    shadow_quotes: int = 0
    send_failed: int = 0
    rejected: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    decision_us: deque[float] = field(default_factory=lambda: deque(maxlen=20_000))

    def percentile_us(self, q: float) -> float | None:
        if not self.decision_us:
            return None
        ordered = sorted(self.decision_us)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Engine:
    def __init__(
        self,
        *,
        pipeline: QuotePipeline,
        signer: QuoteSigner,
        sender: Sender,
        clock: Callable[[], datetime],
        nonce_layout: NonceLayout = "salted",
        journal: Journal | None = None,
        shadow: bool = False,
        on_transition: Callable[[Transition], None] | None = None,
        metrics: Metrics | None = None,
        sample_requests: bool = False,
    ) -> None:
        self.sample_requests = sample_requests
        self.pipeline = pipeline
        self.signer = signer
        self.sender = sender
        self.clock = clock
        self.nonce_layout = nonce_layout
        self.journal: Journal = journal or NullJournal()
        self.shadow = shadow
        self.book = QuoteBook()
        self.stats = EngineStats()
        self.metrics = metrics
        self.last_terminal: OrderedDict[str, TrackedQuote] = OrderedDict()  # recent, for fills
        self._on_transition = on_transition
        self._outbox: list[tuple[str, dict[str, Any], float]] = []
        self._flush_scheduled = False
        self._sending: set[asyncio.Task[None]] = set()

    @property
    def inventory(self) -> Inventory:
        return self.pipeline.inventory

    @property
    def state(self) -> MarketState:
        return self.pipeline.state

    # ------------------------------------------------------------------ the quote path

    def handle_quote(self, event: QuoteRequestEvent, metadata: dict[str, Any]) -> None:
        """The hot path, synchronous: decide, sign, journal, and queue the answer.

        Answers queued in one turn of the event loop are made durable by one commit
        (:meth:`_flush`), then sent: the record still precedes the answer, but a burst of
        requests pays for one transaction instead of one each (group commit).
        """
        started = time.perf_counter()
        now = self.clock()
        self.stats.requests += 1
        partner = metadata.get("partner_id")
        request = QuoteRequest(
            event.quote_id,
            event.core_asset_identifier_in,
            event.core_asset_identifier_out,
            event.is_exact_in,
            event.exact_amount,
            event.min_deadline_ms,
            partner if isinstance(partner, str) else None,
        )
        outcome = self.pipeline.decide(request, now)
        metrics = self.metrics
        if metrics is not None:
            metrics.inc_request()
            metrics.observe_decision(time.perf_counter() - started)
        if isinstance(outcome, Skip):
            self.stats.skipped[outcome.reason] += 1
            if metrics is not None:
                metrics.inc_skip(outcome.reason)
            if self.sample_requests:
                self.journal.record_request(request, "skipped", now, outcome.reason)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "skip %s: %s %s",
                    request.quote_id,
                    outcome.reason,
                    outcome.detail,
                    extra={"quote_id": request.quote_id, "reason": outcome.reason},
                )
            return
        if self.shadow:
            # Shadow mode: the whole pipeline ran, nothing is signed or sent.
            self.inventory.release(request.quote_id)
            self.stats.shadow_quotes += 1
            self.stats.decision_us.append((time.perf_counter() - started) * 1e6)
            return
        self._sign_and_queue(outcome, now, started)

    async def on_quote(self, event: QuoteRequestEvent, metadata: dict[str, Any]) -> None:
        """:meth:`handle_quote`, then wait until its answer has been sent (tests, tools)."""
        self.handle_quote(event, metadata)
        await self.drain()

    def _sign_and_queue(self, quote: Quote, now: datetime, started: float) -> None:
        request = quote.request
        salt = self.state.salt
        assert salt is not None  # decide() skips without a salt
        signed = self.signer.sign(
            deadline=quote.deadline,
            nonce=new_nonce(self.nonce_layout, salt, quote.deadline),
            asset_in=request.asset_in,
            amount_in=quote.amount_in,
            asset_out=request.asset_out,
            amount_out=quote.amount_out,
        )
        tracked = TrackedQuote(
            request.quote_id,
            signed.quote_hash,
            request.asset_in,
            request.asset_out,
            quote.amount_in,
            quote.amount_out,
            quote.fee,
            quote.deadline,
            signed.nonce,
            now,
        )
        try:
            self.journal.record_quote(tracked, signed, request)  # made durable by _flush
        except SolverError as exc:
            self._store_failed([request.quote_id], exc)
            return
        self.book.add(tracked)
        if self.sample_requests:
            self.journal.record_request(request, "quoted", now)
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
        self._outbox.append((tracked.quote_id, params, started))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _store_failed(self, quote_ids: list[str], exc: Exception) -> None:
        """Without a durable record the exposure could be forgotten: never send, and stop
        quoting until an operator looks (disk full, nonce reuse, a corrupt store)."""
        for quote_id in quote_ids:
            self.stats.skipped["store_error"] += 1
            if self.book.get(quote_id) is not None:
                self._move(quote_id, QuoteState.REJECTED, reason=f"not recorded: {exc}")
            else:
                self.inventory.release(quote_id)
        self.state.paused.setdefault("*", f"store error: {exc}")
        log.error("cannot record %d quote(s): %s; quoting paused", len(quote_ids), exc)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._outbox = self._outbox, []
        if not batch:
            return
        try:
            self.journal.commit()  # the durable point: nothing below runs before it
        except SolverError as exc:
            self._store_failed([quote_id for quote_id, _, _ in batch], exc)
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[str, dict[str, Any], float]]) -> None:
        for quote_id, params, started in batch:
            try:
                await self.sender.send_quote_response(params)
            except SolverError as exc:
                # Not sent: the relay never saw it, so nobody can use it. Release and mark.
                self.stats.send_failed += 1
                if self.book.get(quote_id) is not None:
                    self._move(quote_id, QuoteState.REJECTED, reason=f"send failed: {exc}")
                continue
            self.stats.quoted += 1
            elapsed = time.perf_counter() - started
            self.stats.decision_us.append(elapsed * 1e6)
            if self.metrics is not None:
                self.metrics.inc_quote()
                self.metrics.observe_response(elapsed)

    async def drain(self) -> None:
        """Wait until every queued answer has been committed and sent."""
        while self._outbox or self._flush_scheduled or self._sending:
            if self._sending:
                await asyncio.gather(*list(self._sending), return_exceptions=True)
            else:
                await asyncio.sleep(0)

    # ------------------------------------------------------------------ relay replies, statuses

    def on_response(self, quote_id: str, ok: bool, reason: str | None) -> None:
        """The relay's reply to our ``quote_response``: an error means the answer is dead."""
        if ok:
            return
        self.stats.rejected += 1
        quote = self.book.get(quote_id)
        if quote is not None and quote.state is QuoteState.OPEN:
            self._move(quote_id, QuoteState.REJECTED, reason=reason or "rejected")
        if reason and "salt" in reason:
            self.state.salt_at = None  # forces a skip until the salt job re-fetches it

    def on_quote_status(self, event: QuoteStatusEvent) -> TrackedQuote | None:
        """Our quote was used in ``intent_hash``: WON; the settlement poller takes it from here."""
        quote = self.book.find_hash(event.quote_hash)
        if quote is None:
            log.info("quote_status for an unknown quote_hash %s", event.quote_hash)
            return None
        if quote.state is QuoteState.OPEN:
            self._move(
                quote.quote_id, QuoteState.WON, intent_hash=event.intent_hash, tx_hash=event.tx_hash
            )
        return quote

    def mark_settling(self, quote_id: str, tx_hash: str | None) -> None:
        quote = self.book.get(quote_id)
        if quote is not None and quote.state is QuoteState.WON:
            self._move(quote_id, QuoteState.SETTLING, tx_hash=tx_hash)

    def mark_settled(self, quote_id: str, tx_hash: str | None) -> None:
        quote = self.book.get(quote_id)
        if quote is None:
            return
        if quote.state is QuoteState.OPEN:
            self._move(quote_id, QuoteState.WON, reason="settled without a quote_status")
        self.inventory.settle(quote_id, self.clock())
        self._move(quote_id, QuoteState.SETTLED, tx_hash=tx_hash)

    def mark_failed(self, quote_id: str, reason: str) -> None:
        quote = self.book.get(quote_id)
        if quote is not None and quote.state in (QuoteState.WON, QuoteState.SETTLING):
            self._move(quote_id, QuoteState.FAILED, reason=reason)

    def mark_lost(self, quote_id: str) -> None:
        quote = self.book.get(quote_id)
        if quote is not None and quote.state is QuoteState.OPEN:
            self._move(quote_id, QuoteState.LOST, reason="deadline passed, nonce unused")

    def _move(self, quote_id: str, new: QuoteState, **kwargs: Any) -> None:
        quote = self.book.get(quote_id)
        transition = self.book.move(quote_id, new, self.clock(), **kwargs)
        if quote is not None and new in TERMINAL:
            self.last_terminal[quote_id] = quote
            while len(self.last_terminal) > 10_000:
                self.last_terminal.popitem(last=False)
        if new in (QuoteState.REJECTED, QuoteState.LOST, QuoteState.FAILED):
            self.inventory.release(quote_id)
        self.stats.outcomes[new.value] += 1
        self.journal.record_transition(transition)
        if self._on_transition is not None:
            self._on_transition(transition)
        log.debug(
            "quote %s %s -> %s",
            quote_id,
            transition.old,
            new,
            extra={
                "quote_id": quote_id,
                "quote_hash": transition.quote_hash,
                "intent_hash": transition.intent_hash,
            },
        )
