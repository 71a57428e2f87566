"""Explaining a balance gap before pausing on it (DESIGN "Reconciliation explains before it
pauses"; issue 24).

A snapshot that lies outside what the expected balances and the open quotes allow is not
believed at once. Its gap first looks for an explanation, in this order:

1. **The accepted baseline's doubts** (:class:`~solver.core.reconciliation.Doubt`): settlements
   heard after the accepted snapshot was requested, of quotes that existed then. If taking a
   set of them out makes the snapshot fit, the baseline had counted them twice: a
   ``BaselineCorrected`` fact takes them out (no pause, no second accept).
2. **Missed statuses**: quotes closed LOST without asking the verifier (nobody named them while
   the bot was connected) in the last ``explain_window_s``, whose flows point the way of the
   gap. Their nonces are asked (``is_nonce_used``, the executor's nonce-oracle port, which asks
   32 at a time), at most ``explain_max_checks`` per gap. A used nonce means the quote executed
   and its ``quote_status`` never came: the fill is booked (a ``QuoteMoved`` to SETTLED, as
   every fill), with a fill log line and a ``missed_status`` alert. More candidates than the
   cap: the gap pauses at once, and the reason says so.
3. **A later snapshot**: a gap with nothing left to ask is held once more and confirmed only by
   a snapshot requested after it (a read that raced a settlement does not pause).

While it is held the gap pauses nothing and is not absorbed (``BalancesReconciled.held``). A
gap still there after ``hold_max_s`` pauses (scoped: reconciliation, everything) with the checks
still unanswered named; if they answer later and explain it, the pause lifts itself
(:meth:`solver.core.desk_risk.RiskDesk` states the rule).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations, islice
from typing import TYPE_CHECKING, Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, Alert, CheckNonce, RefreshBalances
from solver.core.clock import SECOND, Micros, span
from solver.core.inventory import Reservation
from solver.core.lifecycle import QuoteState, TrackedQuote
from solver.core.pnl import FillValue, usd_value
from solver.core.reconciliation import Totals, diff_of

if TYPE_CHECKING:
    from solver.core.desk import Desk

MISSED_STATUS = "missed_status"
MISSED_REASON = "nonce used: its quote_status was missed"


LostRow = tuple[
    str, str, str, str, int, int, int, Micros, bytes, Micros, "Micros | None", "str | None", Micros
]
"""A recently lost quote as atoms: id, hash, asset in, asset out, amount in, amount out, fee,
deadline, nonce, created, updated, reason, and when it was lost. A tuple of atoms is not
tracked by the cyclic collector: 20,000 ``TrackedQuote`` objects (and their entries) were over
half of what the bot's full collection walked every minute (12–16 ms of the loop, issue 29)."""


def lost_row(quote: TrackedQuote, lost_at: Micros) -> LostRow:
    q = quote
    return (q.quote_id, q.quote_hash, q.asset_in, q.asset_out, q.amount_in, q.amount_out,
            q.fee, q.deadline, q.nonce, q.created_at, q.updated_at, q.reason, lost_at)  # fmt: skip


def quote_of(row: LostRow) -> TrackedQuote:
    """The quote of a row: LOST, without a claim (only ``QuotesLost`` adds them)."""
    i, h, a_in, a_out, amount_in, amount_out, fee, deadline, nonce, created, updated, why, _ = row
    return TrackedQuote(i, h, a_in, a_out, amount_in, amount_out, fee, deadline, nonce, created,
                        QuoteState.LOST, updated, None, None, why)  # fmt: skip


class RecentLost:
    """Quotes closed LOST without a nonce check, for ``window_s`` (at most ``max_kept``): the
    quotes a gap may come from. Rebuilt from the ``QuotesLost`` facts on restart. Kept as
    rows (:data:`LostRow`); a quote is built again only when a gap or a late status asks."""

    def __init__(self, window_s: float, max_kept: int = 20_000) -> None:
        self.window = span(window_s)
        self.max_kept = max_kept
        # Ordered by adding (a reused id keeps its place, as a dict keeps a key assigned
        # again). The order is also kept in ``_order``, ids oldest first: a plain dict whose
        # oldest entries were deleted walks their empty slots to find its first one (10 µs an
        # add here), and an OrderedDict costs its linked list at every add and trim (~0.6 µs a
        # lost quote, issue 29). The deque holds the keys of ``rows`` in their order, and the
        # ids popped since (``_popped``: how many of an id's first entries are such).
        self.rows: dict[str, LostRow] = {}
        self._order: deque[str] = deque()
        self._popped: dict[str, int] = {}
        # The hash index is built when a late status asks (:meth:`find_hash`), not kept at
        # every add and drop: a hash of 66 characters put in a dict of 20,000 and taken out
        # again was ~0.2 µs of every lost quote, for a lookup that comes once in thousands
        # (issue 29). ``_unindexed``: how many ids were appended to the order since the index
        # was brought up to date (the last ones), or None when it must be rebuilt whole (a
        # kept id added again, which may come with another hash).
        self._hashes: dict[str, str] = {}
        self._unindexed: int | None = 0

    @property
    def by_hash(self) -> dict[str, str]:
        """Quote hash -> id of the rows kept (built: for checks, not the hot path)."""
        return {row[1]: quote_id for quote_id, row in self.rows.items()}

    def add(self, quote: TrackedQuote, at: Micros) -> None:
        self.add_row(lost_row(quote, at))

    def add_many(self, quotes: Iterable[TrackedQuote], at: Micros) -> None:
        """:meth:`add` of each quote (one ``QuotesLost`` fact), trimmed once at the end: all
        are lost at ``at``, so the oldest rows a trim after each add would drop are the ones a
        trim after the last drops (issue 29). A quote id kept already (a reused id) keeps its
        place in the order: the rows added before it are trimmed first, as one at a time.

        The common case, no id of the batch kept already, goes in bulk: the rows built by one
        comprehension, the dict and the order extended at once, the rows over the cap dropped
        together (:meth:`_drop_over_cap`)."""
        rows = self.rows
        added = {q.quote_id: (q.quote_id, q.quote_hash, q.asset_in, q.asset_out, q.amount_in,
                              q.amount_out, q.fee, q.deadline, q.nonce, q.created_at,
                              q.updated_at, q.reason, at) for q in quotes}  # fmt: skip
        if not added:  # an empty batch trims nothing, as adding none one at a time would not
            return
        if not rows.keys().isdisjoint(added):
            self._unindexed = None
            self._add_each(added.values(), at)
            return
        if self._unindexed is not None:
            self._unindexed += len(added)
        self._order.extend(added)
        rows.update(added)
        self._drop_over_cap()
        self._trim(at)

    def _add_each(self, added: Iterable[LostRow], at: Micros) -> None:
        """:meth:`add_many` one row at a time, for a batch naming an id kept already: the trim
        before such an id is what adding each would have done before it."""
        rows, order = self.rows, self._order
        added_one = False
        for row in added:
            quote_id = row[0]
            if quote_id in rows:
                if added_one:
                    self._trim(at)
                if quote_id not in rows:  # the trim dropped it: it is added anew, last
                    order.append(quote_id)
            else:
                order.append(quote_id)
            added_one = True
            rows[quote_id] = row
        self._trim(at)

    def add_row(self, row: LostRow) -> None:
        """Keeps the row; drops the oldest ones that left the window or the cap.

        Only the oldest entries are looked at: the first cut copied every entry at each add,
        150 µs a lost quote with 20,000 kept, over half of the replay's CPU (issue 29)."""
        quote_id = row[0]
        if quote_id not in self.rows:
            self._order.append(quote_id)
            if self._unindexed is not None:
                self._unindexed += 1
        else:
            self._unindexed = None
        self.rows[quote_id] = row
        self._trim(row[-1])

    def _drop_over_cap(self) -> None:
        """Drop the oldest rows over ``max_kept`` at once, when the order holds only rows (no
        popped one's entry): they are then its first entries, and :meth:`_trim` would drop
        them one by one whatever their age."""
        excess = len(self.rows) - self.max_kept
        if excess <= 0 or self._popped:
            return
        popleft, pop = self._order.popleft, self.rows.pop
        for _ in range(excess):
            pop(popleft())

    def _trim(self, at: Micros) -> None:
        """Drop the oldest rows while the oldest left the window at ``at`` or there are more
        than ``max_kept``; only the oldest row is looked at (no quote is built for a row
        dropped)."""
        rows, order = self.rows, self._order
        window, cap = self.window, self.max_kept
        popped = self._popped
        while order:
            quote_id = order[0]
            if popped and quote_id in popped:  # an entry of a row popped: not a row
                order.popleft()
                if popped[quote_id] > 1:
                    popped[quote_id] -= 1
                else:
                    del popped[quote_id]
                continue
            if len(rows) > cap:  # over the cap: dropped whatever its age (one lookup, not two)
                order.popleft()
                del rows[quote_id]
                continue
            if at - rows[quote_id][-1] <= window:
                return
            order.popleft()
            del rows[quote_id]

    def pop(self, quote_id: str) -> TrackedQuote | None:
        row = self.rows.pop(quote_id, None)
        if row is None:
            return None
        self._popped[quote_id] = self._popped.get(quote_id, 0) + 1  # its entry: left to _trim
        return quote_of(row)

    def get(self, quote_id: str) -> TrackedQuote | None:
        row = self.rows.get(quote_id)
        return quote_of(row) if row is not None else None

    def find_hash(self, quote_hash: str) -> TrackedQuote | None:
        """The kept row of this hash. The index may name a row dropped since, or an id kept
        again with another hash: what it names is believed only if its row has this hash."""
        quote_id = self._hash_index().get(quote_hash)
        row = self.rows.get(quote_id) if quote_id is not None else None
        return quote_of(row) if row is not None and row[1] == quote_hash else None

    def _hash_index(self) -> dict[str, str]:
        """Hash -> id of every row kept, and of rows dropped since (checked by the caller):
        brought up to date with the ids appended to the order since (its last ones, in
        order: a later row of a hash wins, as when each was indexed at its add), or rebuilt
        from the rows when those are more than the order holds, an id was added again, or the
        dropped outnumber the kept. Each row is indexed a bounded number of times (amortized)."""
        unindexed, index, rows, order = self._unindexed, self._hashes, self.rows, self._order
        if unindexed is None or unindexed >= len(order) or len(index) > 2 * len(rows) + 64:
            index = self._hashes = {row[1]: quote_id for quote_id, row in rows.items()}
        elif unindexed:
            last = list(islice(reversed(order), unindexed))
            last.reverse()
            for quote_id in last:
                row = rows.get(quote_id)
                if row is not None:
                    index[row[1]] = quote_id
        self._unindexed = 0
        return index

    def candidates(self, gaps: Mapping[str, int], now: Micros) -> list[TrackedQuote]:
        """Those whose fill would move the balances the way of ``gaps`` (in up, out down)."""
        return [
            quote_of(row)
            for row in self.rows.values()
            if now - row[-1] <= self.window and (gaps.get(row[2], 0) > 0 or gaps.get(row[3], 0) < 0)
        ]


class GapDesk:
    """The desk's part that explains gaps: the baseline's doubts, nonce checks of recently
    closed quotes, fills found late; held gaps are confirmed by a later snapshot."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self.settings = desk.settings
        self.balances = desk.balances
        self.stats = desk.stats
        self.pair_book = desk.pair_book
        self.record = desk.record
        self.recent_lost = RecentLost(desk.settings.explain_window_s)
        # Not journaled: a restart asks afresh. quote_id -> when asked / when to ask again.
        self.asking: dict[str, Micros] = {}
        self.retry: dict[str, Micros] = {}
        self.missed_open = False  # a missed_status alert waits for balances that reconcile
        self._retry_after = span(desk.settings.nonce_retry_s)

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {f.BaselineCorrected: self._apply_corrected}

    # ------------------------------------------------------------------ deciding

    def on_gap(
        self,
        gaps: Mapping[str, int],
        event: ev.BalancesSeen,
        own: Sequence[Reservation],
        totals: Totals,
        now: Micros,
        actions: list[Action],
    ) -> tuple[bool, str]:
        """A snapshot shows ``gaps`` (beyond tolerance). ``(True, "")``: hold it; ``(False,
        note)``: confirm it (``note`` is added to the pause's reason); after a correction of
        the baseline the snapshot may fit, and confirming it then finds nothing."""
        if self._correct_baseline(gaps, event, own, totals, now, actions):
            gaps = self.balances.compare(event.balances, event.observed, own, totals)
            if not gaps:
                return False, ""
        cap = self.settings.explain_max_checks
        fresh = [
            q
            for q in self.recent_lost.candidates(gaps, now)
            if q.quote_id not in self.asking and q.quote_id not in self.retry
        ]
        waiting = len(self.asking) + len(self.retry)
        if len(fresh) + waiting > cap:
            return False, (
                f"; {len(fresh) + waiting} quotes closed in the last "
                f"{self.settings.explain_window_s:g} s could explain it, more than the "
                f"{cap} nonce checks a gap may ask: not checked"
            )
        for quote in fresh:
            self._ask(quote, now, actions)
        held_at = self.balances.held_at
        if self.asking or self.retry:
            if held_at is not None and now - held_at >= self.settings.hold_max_s * SECOND:
                return False, (
                    f"; {len(self.asking) + len(self.retry)} nonce check(s) of recently closed "
                    f"quotes still unanswered after {self.settings.hold_max_s:g} s (the pause "
                    f"lifts itself if they explain the gap)"
                )
            return True, ""
        if held_at is None:
            actions.append(RefreshBalances())  # confirmed (or not) by a later snapshot
            return True, ""
        return False, ""

    def _correct_baseline(
        self,
        gaps: Mapping[str, int],
        event: ev.BalancesSeen,
        own: Sequence[Reservation],
        totals: Totals,
        now: Micros,
        actions: list[Action],
    ) -> bool:
        """Find the smallest set of doubts whose removal makes the snapshot fit; record it."""
        doubts = list(self.balances.doubts.values())
        balances = self.balances
        for size in range(1, len(doubts) + 1):
            for chosen in combinations(doubts, size):
                adjustment: dict[str, int] = {}
                for doubt in chosen:
                    for asset, delta in doubt.diff.items():
                        adjustment[asset] = adjustment.get(asset, 0) - delta
                if balances.compare(event.balances, event.observed, own, totals, adjustment):
                    continue
                shift = self._value(adjustment)
                keys = tuple(d.key for d in chosen)
                self.record(f.BaselineCorrected(now, adjustment, keys, shift), actions)
                return True
        return False

    def _value(self, amounts: Mapping[str, int]) -> float:
        total = 0.0
        for asset, amount in amounts.items():
            price, decimals = self.desk.price(asset), self.desk.state.decimals.get(asset)
            if price is not None and decimals is not None:
                total += usd_value(amount, decimals, price)
        return total

    def _ask(self, quote: TrackedQuote, now: Micros, actions: list[Action]) -> None:
        self.asking[quote.quote_id] = now
        self.retry.pop(quote.quote_id, None)
        actions.append(CheckNonce(quote.quote_id, quote.nonce))

    def stray_status(self, quote_hash: str, now: Micros) -> list[Action]:
        """A ``quote_status`` naming a quote closed LOST without a check: it came late (or it
        is forged): the verifier says which."""
        quote = self.recent_lost.find_hash(quote_hash)
        if quote is None or quote.quote_id in self.asking:
            return []
        actions: list[Action] = []
        self._ask(quote, now, actions)
        return actions

    def due(self, now: Micros, actions: list[Action]) -> None:
        """The clock's part: failed checks asked again after ``nonce_retry_s``."""
        for quote_id, at in list(self.retry.items()):
            quote = self.recent_lost.get(quote_id)
            if quote is None:
                del self.retry[quote_id]
            elif at <= now:
                self._ask(quote, now, actions)

    def nonce_checked(self, event: ev.NonceChecked, now: Micros) -> list[Action]:
        """The answer for a quote no longer in the book (closed LOST without a check)."""
        if self.asking.pop(event.quote_id, None) is None:
            return []
        quote = self.recent_lost.get(event.quote_id)
        if quote is None:
            return []
        if event.used is None:
            self.retry[event.quote_id] = now + self._retry_after
            return []
        if not event.used:
            self.recent_lost.pop(event.quote_id)  # LOST it was: it explains nothing
            if self.balances.held and not (self.asking or self.retry):
                return [RefreshBalances()]  # nothing left to ask: a snapshot decides now
            return []
        actions: list[Action] = []
        p_in, p_out = self.desk.price(quote.asset_in), self.desk.price(quote.asset_out)
        prices = None
        if p_in is not None and p_out is not None:
            value = self.desk.pnl.value(self._fill_value(quote), p_in, p_out)
            prices = f.FillPrices(p_in, p_out, value)
        fact = f.QuoteMoved(quote.quote_id, QuoteState.SETTLED, now, MISSED_REASON, fill=prices)
        self.record(fact, actions)
        readable = self.desk.readable
        detail = (
            f"quote {quote.quote_id} executed on chain but its quote_status never came: "
            f"booked as a fill from its used nonce (got "
            f"{readable.amount(quote.asset_in, quote.amount_in)}, paid "
            f"{readable.amount(quote.asset_out, quote.outflow)})"
        )
        actions.append(Alert(MISSED_STATUS, detail))
        self.missed_open = True
        actions.append(RefreshBalances())
        return actions

    def reconciled(self, actions: list[Action]) -> None:
        """A snapshot reconciled: a missed-status incident is over."""
        if self.missed_open:
            self.missed_open = False
            actions.append(
                Alert(MISSED_STATUS, "balances reconcile with the fills found", resolved=True)
            )

    # ------------------------------------------------------------------ applying

    @staticmethod
    def _fill_value(quote: TrackedQuote) -> FillValue:
        return FillValue(
            quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow
        )

    def apply_late_fill(self, fact: f.QuoteMoved) -> None:
        """A ``QuoteMoved`` to SETTLED of a quote closed LOST without a check (LOST → SETTLED:
        a used nonce found later, :mod:`solver.core.lifecycle`)."""
        quote = self.recent_lost.pop(fact.quote_id)
        if quote is None or fact.new != QuoteState.SETTLED:
            return
        quote.state, quote.updated_at, quote.reason = QuoteState.SETTLED, fact.at, fact.reason
        outcomes = self.stats.outcomes
        outcomes["WON"] += 1  # every settled quote counts as won: a user took it
        outcomes["SETTLED"] += 1
        pair = self.pair_book.of(quote.asset_in, quote.asset_out)
        if pair is not None:
            pair.won += 1
            pair.settled += 1
            pair.outcomes["WON"] += 1
            pair.outcomes["SETTLED"] += 1
            if fact.fill is not None:
                pair.realized_usd += fact.fill.realized_usd
                decimals = self.desk.state.decimals.get(quote.asset_in)
                if decimals is not None:
                    pair.volume_usd += usd_value(quote.amount_in, decimals, fact.fill.price_in)
        self.desk.recent_fills.append((quote, fact.fill))
        diff = diff_of(quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow)
        self.balances.late_fill(quote.quote_id, diff, fact.at, quote.created_at)
        if fact.fill is not None:
            self.desk.pnl.record_fill(self._fill_value(quote), fact.at, fact.fill.realized_usd)

    def _apply_corrected(self, fact: f.BaselineCorrected) -> None:
        self.balances.correct(fact.adjustment, fact.quote_ids)
        self.desk.pnl.shift_baseline(fact.equity_shift_usd)
