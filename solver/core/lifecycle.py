"""The quote lifecycle as an explicit transition table (DESIGN "Settlement"; spec 3.2).

::

    OPEN ──a claim confirmed──▶ WON ──TX_BROADCASTED──▶ SETTLING ──SETTLED──▶ SETTLED
      │                          │  └────────────SETTLED, or a used nonce─────────▶ SETTLED
      │                          └── deadline passed, no claim pending, nonce unused ──▶ FAILED
      ├── explicit error reply from the relay, or never sent ──▶ REJECTED
      └── deadline passed, no claim pending, nonce unused ──▶ LOST

A quote can be named by several intents (``quote_status`` events): each is a **claim**, followed
on its own with ``get_status``. A claim never moves the quote by being heard of — a stray or
forged status would otherwise decide its fate — only what ``get_status`` says of it does:
any status but NOT_FOUND_OR_NOT_VALID confirms the claim and makes the quote WON (every
settled quote passes through WON, so "won" counts what users took); TX_BROADCASTED makes it
SETTLING, SETTLED settles it (the only status that moves balances). NOT_FOUND_OR_NOT_VALID
ends that claim alone; while another claim is pending or the deadline has not passed, the
quote stays as it is. Once the deadline is past
and no claim is pending, the verifier's nonce tells the truth: used means it executed.

A quote closed LOST without asking the verifier (nobody named it while the bot was connected)
can still turn out SETTLED: when a balance gap asks its nonce and it was used, its
``quote_status`` was lost (issue 24; :mod:`solver.core.desk_gaps` books that fill, LOST →
SETTLED, outside this table: the quote has left the book).

An answer the relay has not acknowledged stays OPEN through a disconnect: the relay holds the
signed quote and can still use it until its deadline.

Every quote ends in exactly one terminal state. An illegal move raises: it means the
bookkeeping is wrong, and that must never pass silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter

from solver.core.clock import Micros
from solver.core.deadlines import DeadlineBuckets

_KEY = itemgetter(1)
"""A deadline entry's quote id."""


class QuoteState(StrEnum):
    OPEN = "OPEN"
    WON = "WON"
    SETTLING = "SETTLING"
    SETTLED = "SETTLED"
    FAILED = "FAILED"
    LOST = "LOST"
    REJECTED = "REJECTED"


TERMINAL = frozenset({QuoteState.SETTLED, QuoteState.FAILED, QuoteState.LOST, QuoteState.REJECTED})
ALLOWED: dict[QuoteState, frozenset[QuoteState]] = {
    QuoteState.OPEN: frozenset({QuoteState.WON, QuoteState.REJECTED, QuoteState.LOST}),
    QuoteState.WON: frozenset({QuoteState.SETTLING, QuoteState.SETTLED, QuoteState.FAILED}),
    QuoteState.SETTLING: frozenset({QuoteState.SETTLED, QuoteState.FAILED}),
}
"""The transition table: from a state, the states it may move to. Terminal states have none."""


class IllegalTransition(Exception):
    pass


@dataclass(slots=True)
class Claim:
    """One intent that named the quote (a ``quote_status``), followed with ``get_status``."""

    intent_hash: str
    tx_hash: str | None
    heard_at: Micros
    status: str | None = None  # the last get_status answer (spec 3.2)
    next_poll_at: Micros | None = None
    delay_s: float = 0.1
    ended: bool = False  # NOT_FOUND_OR_NOT_VALID: this intent will not settle the quote
    asking: bool = False
    """A ``get_status`` is in flight: no other is asked until it answers (its port always
    answers, with no status when the question failed). Not kept in snapshots: a restart asks
    afresh."""


class _NoClaims(dict[str, Claim]):
    """The claims of a quote nobody named (nearly every quote): one shared empty dict that
    refuses to be written (:meth:`Quote.add_claim` gives a quote its own at its first
    claim). Reads are a dict's; hashable only so a dataclass takes it as a default."""

    __slots__ = ()
    __hash__ = object.__hash__  # type: ignore[assignment]

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a quote's claims are added with Quote.add_claim")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = _refuse  # type: ignore[assignment]


NO_CLAIMS: dict[str, Claim] = _NoClaims()
"""Every claimless quote's :attr:`Quote.claims`: no dict built per answer (issue 29)."""


@dataclass(slots=True)
class Quote:
    """One answer, from the decision to its end. The record
    :meth:`~solver.core.quoting.QuotePipeline.decide` builds is the action the executor signs,
    under its ``salt`` (the one the decision checked, whatever salt came meanwhile), and the
    one the book files once signed (:meth:`QuoteLifecycle.signed
    <solver.core.desk_quotes.QuoteLifecycle.signed>` fills in the hash, the nonce and the
    time). Issue 29: one object an answer where there were three (the pipeline's quote, the
    ``SignAndSend`` around it, the book's copy of ten fields), ~2,900 instructions each.

    ``exact_in``, ``partner_id`` and ``salt`` serve the answer and its ``QuoteOpened``; a quote
    restored from a snapshot (which keeps none of them) or the journal (no salt) has the
    defaults where it lacks them: its answer has left, so they are not compared."""

    quote_id: str
    asset_in: str
    asset_out: str
    amount_in: int
    amount_out: int
    fee: int  # protocol fee the solver pays on amount_out (reserved with it)
    deadline: Micros
    exact_in: bool = field(default=True, compare=False)
    partner_id: str | None = field(default=None, compare=False)
    salt: bytes = field(default=b"", compare=False)
    quote_hash: str = ""  # the signature fills in these three
    nonce: bytes = b""
    created_at: Micros = 0
    state: QuoteState = QuoteState.OPEN
    updated_at: Micros | None = None
    intent_hash: str | None = None
    tx_hash: str | None = None
    reason: str | None = None
    claims: dict[str, Claim] = field(default=NO_CLAIMS)
    """intent_hash -> claim; :data:`NO_CLAIMS` until the first (:meth:`add_claim`)."""
    nonce_check_at: Micros | None = None  # when the last is_nonce_used check was asked

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def outflow(self) -> int:
        """What executing it takes from us: amount_out plus the protocol fee on it."""
        return self.amount_out + self.fee

    def add_claim(self, claim: Claim) -> None:
        """Add (or replace) the claim of ``claim.intent_hash``: the quote's own dict at its
        first claim."""
        claims = self.claims
        if claims is NO_CLAIMS:
            claims = self.claims = {}
        claims[claim.intent_hash] = claim

    def pending_claims(self) -> list[Claim]:
        return [c for c in self.claims.values() if not c.ended]


@dataclass
class QuoteBook:
    """Open quotes by id and by hash; terminal quotes leave the book (the journal keeps them).

    Deadlines are kept by bucket (:mod:`solver.core.deadlines`), so finding the quotes whose
    deadline passed costs what is due, not a walk of the whole book (tens of thousands of open
    quotes at peak).
    """

    quotes: dict[str, Quote] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)
    terminal_counts: dict[QuoteState, int] = field(default_factory=dict)
    # What the open quotes could still move, per asset, kept as quotes enter and leave: the
    # reconciliation needs these totals at every snapshot, without walking the whole book.
    open_outflow: dict[str, int] = field(default_factory=dict)
    open_inflow: dict[str, int] = field(default_factory=dict)
    _deadlines: DeadlineBuckets = field(default_factory=DeadlineBuckets)
    _due: list[tuple[Micros, str]] = field(default_factory=list)
    """Entries taken from ``_deadlines`` by :meth:`past_deadline` whose quote was still in the
    book, in deadline order: kept aside instead of filed again, so a quote closed at its
    deadline is filed and taken once (issue 29)."""
    _due_later: list[tuple[Micros, str]] = field(default_factory=list)
    """The part of ``_due`` after the last call's cut (a call that looked less far than one
    before it): what :meth:`due_closed` leaves."""

    def _account(self, quote: Quote, sign: int) -> None:
        out, into = quote.asset_out, quote.asset_in
        self.open_outflow[out] = self.open_outflow.get(out, 0) + sign * quote.outflow
        self.open_inflow[into] = self.open_inflow.get(into, 0) + sign * quote.amount_in
        if not self.open_outflow[out]:
            del self.open_outflow[out]
        if not self.open_inflow[into]:
            del self.open_inflow[into]

    def add(self, quote: Quote) -> None:
        quote_id = quote.quote_id
        if quote_id in self.quotes:
            raise IllegalTransition(f"quote {quote_id} is already tracked")
        self.quotes[quote_id] = quote
        self.by_hash[quote.quote_hash] = quote_id
        # _account(quote, +1) inlined: one call less an answer; adding never makes a total 0
        # unless it was the opposite of what is added, which _account deletes too.
        outflow, inflow = self.open_outflow, self.open_inflow
        out, into = quote.asset_out, quote.asset_in
        total = outflow.get(out, 0) + quote.amount_out + quote.fee
        if total:
            outflow[out] = total
        else:
            outflow.pop(out, None)
        total = inflow.get(into, 0) + quote.amount_in
        if total:
            inflow[into] = total
        else:
            inflow.pop(into, None)
        self._deadlines.file(quote.deadline, quote_id)

    def get(self, quote_id: str) -> Quote | None:
        return self.quotes.get(quote_id)

    def find_hash(self, quote_hash: str) -> Quote | None:
        quote_id = self.by_hash.get(quote_hash)
        return self.quotes.get(quote_id) if quote_id else None

    def move(
        self,
        quote_id: str,
        new: QuoteState,
        at: Micros,
        *,
        reason: str | None = None,
        intent_hash: str | None = None,
        tx_hash: str | None = None,
    ) -> None:
        """Move the quote to ``new`` (refused when the table does not allow it); a terminal
        state takes it out of the book. Nothing is returned: the fact that caused the move is
        the record of it (one object less a move, issue 29)."""
        quote = self.quotes.get(quote_id)
        if quote is None:
            raise IllegalTransition(f"unknown quote {quote_id}")
        if new not in ALLOWED.get(quote.state, frozenset()):
            raise IllegalTransition(f"{quote_id}: {quote.state} -> {new} is not allowed")
        quote.state, quote.updated_at = new, at
        quote.reason = reason or quote.reason
        quote.intent_hash = intent_hash or quote.intent_hash
        quote.tx_hash = tx_hash or quote.tx_hash
        if new in TERMINAL:
            del self.quotes[quote_id]
            self.by_hash.pop(quote.quote_hash, None)
            self._account(quote, -1)
            self.terminal_counts[new] = self.terminal_counts.get(new, 0) + 1

    def lose(
        self,
        quote_ids: Iterable[str],
        at: Micros,
        reason: str,
        lost: list[Quote],
        routes: dict[str, dict[str, list[int]]],
    ) -> None:
        """Move the OPEN quotes named to LOST at once (``QuotesLost``), appending to ``lost``
        those that were in the book; ids no longer in it are passed over.

        What :meth:`move` does a quote, for a batch: the open totals and the terminal count
        change once per asset, not per quote (issue 29: ~99.7 % of answers end here). The
        batch is summed by route into ``routes`` (asset in -> asset out -> [quotes, outflow,
        inflow]): the open totals are taken from those sums, and the desk counts each pair's
        lost quotes from them, with no pass of its own over the batch (issue 29). An illegal
        move raises as :meth:`move` does, after the quotes before it have left (and are
        summed)."""
        quotes = self.quotes
        get, pop_hash, append = quotes.get, self.by_hash.pop, lost.append
        # The members read once: ``QuoteState.OPEN`` costs ~170 ns a read on Python 3.11 (the
        # enum's class attribute lookup), twice a lost quote before (issue 29).
        open_, lost_ = QuoteState.OPEN, QuoteState.LOST
        try:
            for quote_id in quote_ids:
                quote = get(quote_id)
                if quote is None:
                    continue
                if quote.state is not open_:
                    raise IllegalTransition(f"{quote_id}: {quote.state} -> {lost_} is not allowed")
                quote.state = lost_
                quote.updated_at = at
                if reason:  # none: the quote keeps its own
                    quote.reason = reason
                del quotes[quote_id]
                pop_hash(quote.quote_hash, None)
                outs = routes.get(quote.asset_in)
                if outs is None:
                    outs = routes[quote.asset_in] = {}
                sums = outs.get(quote.asset_out)
                if sums is None:
                    outs[quote.asset_out] = [1, quote.amount_out + quote.fee, quote.amount_in]
                else:
                    sums[0] += 1
                    sums[1] += quote.amount_out + quote.fee
                    sums[2] += quote.amount_in
                append(quote)
        finally:
            self._take_open(routes)
            if lost:
                counts = self.terminal_counts
                counts[lost_] = counts.get(lost_, 0) + len(lost)

    def _take_open(self, routes: dict[str, dict[str, list[int]]]) -> None:
        """Take a batch's sums by route (:meth:`lose`) off the open totals. Totals only fall
        here: one that reaches 0 part way stays 0, as :meth:`_account` leaves it."""
        outflow, inflow = self.open_outflow, self.open_inflow
        for asset_in, outs in routes.items():
            for asset_out, (_, out_amount, in_amount) in outs.items():
                for totals, asset, amount in (
                    (outflow, asset_out, out_amount),
                    (inflow, asset_in, in_amount),
                ):
                    total = totals.get(asset, 0) - amount
                    if total:
                        totals[asset] = total
                    else:
                        totals.pop(asset, None)

    def open_quotes(self) -> Iterator[Quote]:
        return iter(list(self.quotes.values()))

    def past_deadline(self, before: Micros) -> list[Quote]:
        """Open quotes whose deadline is earlier than ``before``, oldest deadline first.

        They stay in the due part (``_due``) until they leave the book, so a quote waiting for
        a nonce check or a claim is returned again at the next call."""
        deadlines, quotes = self._deadlines, self.quotes
        deadlines.drop_head_unless_in(quotes)  # left the book
        entries: list[tuple[Micros, str]] = []
        later: list[tuple[Micros, str]] = []
        if self._due:
            for entry in self._due:
                if entry[1] in quotes:
                    (entries if entry[0] < before else later).append(entry)
        taken = deadlines.take_before(before)
        # The quotes of the entries taken, those that left the book passed over: run by map
        # and filter in C, no bytecode per entry (issue 29; a quote is never false).
        due: list[Quote] = list(filter(None, map(quotes.get, map(_KEY, taken))))
        # The entries of those quotes: all of them, unless some left the book (then a pass).
        new = taken if len(due) == len(taken) else [entry for entry in taken if entry[1] in quotes]
        if entries:  # quotes listed before and still in the book
            if new:
                entries = sorted(entries + new)  # two sorted runs: the heap's order
            due = [quotes[entry[1]] for entry in entries]
        else:
            entries = new
        self._due = entries + later if later else entries
        self._due_later = later
        return due

    def due_closed(self) -> None:
        """The caller of :meth:`past_deadline` closed every quote the last call returned (each
        has left the book): the due part keeps only what was after that call's cut. The
        next call does not look each closed quote's entry up again, cold, a tick later
        (issue 29: nearly every quote is lost at its deadline, in the batch it was due in).
        A caller that left one open does not call it: the next call looks them all up."""
        self._due = self._due_later
