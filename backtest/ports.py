"""The executor's simulated ports: the backtest driver runs the live bot's
:class:`~solver.runtime.executor.Executor` (DESIGN "The shape"; :mod:`solver.runtime.ports`).

- **The relay** (:class:`SimulatedRelay`, the sender port): an answer later than ``bus.wait_ms``
  loses; otherwise the fill model decides at ``ts + settlement_delay_ms`` (a ``competitor`` event
  for the request counts if it came before that). A won quote is executed then on the sandbox
  ledger (:mod:`backtest.settle`) and the relay tells the desk as live: a ``quote_status`` (a
  claim), whose ``get_status`` the status port answers (SETTLED, or NOT_FOUND when the ledger
  refused the batch). A lost quote is not reported: as live, the desk ends it LOST after its
  deadline.
- **Statuses, nonces, balances**: answered at once, from what the relay settled and from the
  ledger (the verifier's own nonce record with signing on; with signing off nothing was signed,
  and every settlement is reported SETTLED at once, so a quote asked about never executed).
- **Signing and nonces**: with signing on, the live :class:`QuoteSigner` under the live nonce
  source (:class:`~solver.protocol.nonce.QuoteNonces`, its sequence derived from the seed); off,
  a stand-in signature whose hash is the nonce.
- **The loop**: a flush runs at once (one request at a time; nothing to group); **metrics**:
  none, the port is left out (the replay measures itself, :mod:`backtest.measure`).
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from backtest.fills import LOST_LATE, CompetitorBook, FillModel
from backtest.measure.fill_record import FillRecord
from backtest.measure.measurements import Measurements
from backtest.settle import LedgerSettler, SettlementFailed
from backtest.unobserved import Coverage
from solver.core import events as ev
from solver.core import facts as f
from solver.core.clock import from_micros
from solver.core.lifecycle import Quote
from solver.core.view import DeskView
from solver.protocol.nonce import PREFIX_LEN, NonceSequence
from solver.protocol.quote_signing import SignedQuote
from solver.runtime.ports import Reply

SETTLED, NOT_FOUND = "SETTLED", "NOT_FOUND_OR_NOT_VALID"
_UNCORKED = contextlib.nullcontext()
"""Answers leave one at a time: nothing to put together."""


def seeded_sequence(seed: int) -> NonceSequence:
    """The replay's nonce sequence: reproducible from the seed."""
    return NonceSequence(hashlib.sha256(f"backtest-nonces:{seed}".encode()).digest()[:PREFIX_LEN])


class StandInSigner:
    """Signing off: nothing is signed; the quote's hash is its (unique) nonce."""

    def sign(
        self,
        *,
        deadline: int,
        nonce: bytes,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        amount_out: int,
    ) -> SignedQuote:
        return SignedQuote({}, nonce.hex(), nonce, "")


class ImmediateLoop:
    """Deferred work runs at once: the replay hands the executor one request at a time.

    ``call_soon`` is :func:`operator.call` itself: the outbox's flush, once per answer, is
    called from C with no Python frame of this class between them (issue 29).
    :attr:`runs_at_once` tells the outbox so (it then sends an answer as it is queued)."""

    runs_at_once = True

    def __init__(self) -> None:
        self.call_soon: Callable[[Callable[[], None]], None] = operator.call

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> None:
        callback()


Due = tuple[int, Quote, SignedQuote, float, float, int, float]
"""An answer the relay holds until its outcome is due: its due time (µs), then a
:class:`Pending`'s fields (a tuple: one object per answer instead of two)."""


@dataclass(slots=True)
class Pending:
    """An answer whose outcome was decided a win (or a late one): what settles it."""

    quote: Quote
    signed: SignedQuote
    edge_bps: float
    notional_usd: float
    t_us: int
    """When the request was recorded (µs since the epoch; the replay's clock)."""
    latency_ms: float
    observed: bool = True
    """Whether the request's competitor was observed (set when decided)."""
    informed: bool = False
    """Whether the stream labelled the request informed (synth only; set when decided)."""


class LedgerNonceOracle:
    """``is_nonce_used`` from the sandbox ledger's own record (signing on), else unused."""

    def __init__(self, settler: LedgerSettler) -> None:
        self.settler = settler

    def is_nonce_used(self, quote_id: str, nonce: bytes, reply: Reply) -> None:
        settler = self.settler
        used = settler.signing and settler.ledger.is_nonce_used(settler.solver, nonce)
        reply(ev.NonceChecked(quote_id, used))


class SimulatedRelay:
    """The sender and status ports: decides each answer's outcome with the fill model and
    settles the won ones on the ledger, telling the desk through ``feed`` as the relay would."""

    def __init__(
        self,
        *,
        settler: LedgerSettler,
        fill_model: FillModel,
        measures: Measurements,
        desk: DeskView,
        wait_ms: float,
        settlement_delay_ms: int,
        observe: Callable[[float, str | None, bool], None] | None = None,
        coverage: Coverage | None = None,
    ) -> None:
        self.settler = settler
        self.fill_model = fill_model
        self.measures = measures
        self.desk = desk
        self._prices = desk.reference_prices  # the desk's live mapping (read only)
        self._scale = measures.scale
        self.unit_usd: dict[str, float] = {}
        """USD per smallest unit of each priced asset: the desk's price over the decimals,
        taken when the replay feeds the desk a price (:meth:`repriced`), read per answer."""
        self.wait_ms = wait_ms
        self.delay_us = settlement_delay_ms * 1000
        self.observe = observe
        self.coverage = coverage if coverage is not None else Coverage("-")
        self.competitors = CompetitorBook((int(wait_ms) + settlement_delay_ms + 60_000) * 1000)
        self.informed = CompetitorBook(self.competitors.ttl_us)
        """Requests the stream labelled informed (a generator's ``informed`` events)."""
        # Outcomes are due a constant delay after their request, so they come due in the order
        # they were scheduled: a FIFO, merged with the ticks by time (outcomes first on a tie).
        self.resolves: deque[Due] = deque()
        self.feed: Reply = _unwired
        self.won: Callable[[Pending, int], None] = _no_winner
        """Where a quote a taker took goes, with its time (the driver's: it settles it)."""
        self._statuses: dict[str, str] = {}
        self._settled: f.FillPrices | None = None
        # The request being answered (set by the replay before each): its time on the
        # replay's clock (µs) and the latency it reached the desk with.
        self.arrive_us = 0
        self.latency_ms = 0.0
        # What deciding a batch of due answers uses, bound once (all fixed at construction):
        # a batch is one or two answers, so binding them per batch cost as much as the work.
        self._deciding = (
            fill_model.decide,
            observe,
            self.competitors.best,
            self.coverage.judged.append,
            self.coverage.observed.append,
            measures.outcome_reasons.append,
            measures.outcome_edges.append,
            measures.outcome_sizes.append,
        )

    # ------------------------------------------------------------------ the sender port

    def send_answer(self, quote: Quote, signed: SignedQuote) -> None:
        unit = self.unit_usd  # the desk quoted: it had both prices
        paid = quote.amount_in * unit[quote.asset_in]
        # edge_bps(amount_in, v_in, amount_out, v_out), inline: the same operations
        edge = 0.0 if paid <= 0 else (quote.amount_out * unit[quote.asset_out] / paid - 1.0) * 1e4
        t_us, latency = self.arrive_us, self.latency_ms
        if latency > self.wait_ms:
            self._lose(Pending(quote, signed, edge, paid, t_us, latency), LOST_LATE)
        else:
            # A plain tuple (a :class:`Due`); a Pending is made only for a quote that won.
            self.resolves.append((t_us + self.delay_us, quote, signed, edge, paid, t_us, latency))

    def repriced(self, asset: str) -> None:
        """The replay fed the desk a price of ``asset``: take its value per smallest unit, as
        :meth:`send_answer` reads it (issue 29: two lookups, an attribute and a division an
        asset an answer, where prices change at price records and ticks only)."""
        ref = self._prices.get(asset)
        scale = self._scale.get(asset)
        if ref is not None and scale is not None:
            self.unit_usd[asset] = ref.usd / scale

    def corked(self) -> contextlib.AbstractContextManager[None]:
        return _UNCORKED

    # ------------------------------------------------------------------ the status port

    def get_status(self, intent_hash: str, reply: Reply) -> None:
        reply(ev.IntentStatusSeen(intent_hash, self._statuses.pop(intent_hash, None)))

    def moved(self, fact: f.QuoteMoved) -> None:
        """A quote moved (the driver's fact observer): a settlement's fill prices."""
        if fact.new == SETTLED:
            self._settled = fact.fill

    # ------------------------------------------------------------------ outcomes

    def resolve_due(self, until_us: int) -> None:
        """Decide every answer due at or before ``until_us``, in order: the fill model's
        verdict; a loss is counted here, a quote a taker took goes to :attr:`won` with its
        time (the driver sets its clock then and calls :meth:`settle`; a loss reaches nobody,
        so it needs no time).

        One pass over the due answers with everything bound once: the competitor books are
        read as :meth:`CompetitorBook.pop` does (nothing is added to them meanwhile, so their
        horizon holds); the answer is queued for the coverage (:class:`Coverage`) and a loss
        for the measurements (:meth:`Measurements.on_resolved`, its reason with it), each
        counted later in C. No queue is checked for its size here: the answers decided
        between two folds of the measurements are those of the requests in between (at most
        :data:`~backtest.measure.measurements.QUEUE_MAX`) and those pending at the first."""
        resolves = self.resolves
        if not resolves or resolves[0][0] > until_us:
            return
        competitors = self.competitors
        horizon = competitors.newest_us - competitors.ttl_us
        decide, observe, best_of, judged, observed, add_reason, add_edge, add_size = self._deciding
        popleft = resolves.popleft
        while True:  # the first is due (checked above); each next one is checked at the end
            at_us, quote, signed, edge, paid, t_us, latency = popleft()
            entry = best_of.pop(quote.quote_id, None)
            judged(quote)
            if entry is None or entry[1] < horizon:
                best = None
            else:
                best = entry[0]
                observed(quote)
            lost = decide(quote, best, edge, paid, t_us, latency)
            if observe is not None:
                observe(edge, lost, best is not None)
            if lost is None:
                self._win(at_us, quote, signed, edge, paid, t_us, latency, best is not None)
            else:
                # Nothing to tell the desk: nobody names the quote; LOST after its deadline.
                add_reason(lost)
                add_edge(edge)
                add_size(paid)
            if not resolves or resolves[0][0] > until_us:
                return

    def _win(
        self,
        at_us: int,
        quote: Quote,
        signed: SignedQuote,
        edge: float,
        paid: float,
        t_us: int,
        latency: float,
        observed: bool,
    ) -> None:
        """A quote a taker took (few: a call of its own keeps the loop short), with whether the
        stream labelled its request informed (a label nobody asks for, a lost or skipped
        request's, goes at a sweep once expired)."""
        pending = Pending(quote, signed, edge, paid, t_us, latency, observed)
        pending.informed = self.informed.pop(quote.quote_id) is not None
        self.won(pending, at_us)

    def _lose(self, pending: Pending, reason: str) -> None:
        # Nothing to tell the desk: nobody names the quote, so it ends LOST after its deadline.
        m = self.measures
        m.lost[reason] = m.lost.get(reason, 0) + 1
        m.on_resolved(pending.edge_bps, pending.notional_usd, False)

    def settle(self, pending: Pending, at_us: int) -> None:
        """A won quote, due at ``at_us``, executed on the ledger and told to the desk."""
        quote = pending.quote
        quote_id = quote.quote_id
        m = self.measures
        intent_hash = "intent:" + quote_id
        signed = pending.signed if self.settler.signing else None
        try:
            at = from_micros(at_us)  # the ledger's and the fill record's time (edges)
            fee = self.settler.settle(quote, signed, at)
        except SettlementFailed as exc:
            # A taker's intent that failed on chain: the claim ends (NOT_FOUND), the quote stays
            # open with its reservation until its deadline, then its nonce says unused: LOST.
            m.settle_failed[exc.reason] += 1
            m.on_resolved(pending.edge_bps, pending.notional_usd, won=False)
            self._statuses[intent_hash] = NOT_FOUND
            self.feed(ev.QuoteStatusSeen(pending.signed.quote_hash, intent_hash))
            return
        m.on_resolved(pending.edge_bps, pending.notional_usd, won=True)
        self.coverage.filled(pending.observed)
        self._statuses[intent_hash] = SETTLED
        self._settled = None
        # OPEN → WON → SETTLED (the SETTLED fact carries the fill's prices), then the balances.
        self.feed(ev.QuoteStatusSeen(pending.signed.quote_hash, intent_hash))
        prices = self._settled
        if prices is None:  # cannot happen: the quote is open until after its deadline
            raise AssertionError(f"{quote_id}: the desk did not take a settlement the ledger made")
        record = FillRecord(
            quote_id,
            from_micros(pending.t_us),
            at,
            quote.asset_in,
            quote.asset_out,
            quote.exact_in,
            quote.amount_in,
            quote.amount_out,
            fee,
            prices.price_in,
            prices.price_out,
            pending.edge_bps,
            prices.realized_usd,
            observed=pending.observed,
            informed=pending.informed,
        )
        m.on_fill(record, at_us)
        m.on_balances(self.desk.inventory.confirmed, at_us / 1e6)


def _unwired(event: ev.Event) -> object:
    raise RuntimeError("the simulated relay is not wired to an executor")


def _no_winner(pending: Pending, at_us: int) -> None:
    raise RuntimeError("the simulated relay is not wired to a driver")
