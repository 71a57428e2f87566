"""The quotes closed LOST recently, kept as rows of atoms for the gap checks
(:mod:`solver.core.desk_gaps`: a balance gap asks their nonces; a late status finds one by its
hash). Split out of that module (issue 29: its modules by role, under 400 lines); bounded by a
time window and a count, so memory stays flat however many quotes are lost.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from itertools import islice, repeat

from solver.core.clock import Micros, span
from solver.core.lifecycle import Quote, QuoteState

LostRow = tuple[
    str, str, str, str, int, int, int, Micros, bytes, Micros, "Micros | None", "str | None", Micros
]
"""A recently lost quote as atoms: id, hash, asset in, asset out, amount in, amount out, fee,
deadline, nonce, created, updated, reason, and when it was lost. A tuple of atoms is not
tracked by the cyclic collector: 20,000 ``Quote`` objects (and their entries) were over
half of what the bot's full collection walked every minute (12–16 ms of the loop, issue 29)."""


def lost_row(quote: Quote, lost_at: Micros) -> LostRow:
    q = quote
    return (q.quote_id, q.quote_hash, q.asset_in, q.asset_out, q.amount_in, q.amount_out,
            q.fee, q.deadline, q.nonce, q.created_at, q.updated_at, q.reason, lost_at)  # fmt: skip


def quote_of(row: LostRow) -> Quote:
    """The quote of a row: LOST, without a claim (only ``QuotesLost`` adds them)."""
    i, h, a_in, a_out, amount_in, amount_out, fee, deadline, nonce, created, updated, why, _ = row
    return Quote(i, a_in, a_out, amount_in, amount_out, fee, deadline, quote_hash=h, nonce=nonce,
                 created_at=created, state=QuoteState.LOST, updated_at=updated,
                 reason=why)  # fmt: skip


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

    def add(self, quote: Quote, at: Micros) -> None:
        self.add_row(lost_row(quote, at))

    def add_many(self, quotes: Iterable[Quote], at: Micros) -> None:
        """:meth:`add` of each quote (one ``QuotesLost`` fact), trimmed once at the end: all
        are lost at ``at``, so the oldest rows a trim after each add would drop are the ones a
        trim after the last drops (issue 29). A quote id kept already (a reused id) keeps its
        place in the order: the rows added before it are trimmed first, as one at a time.

        The common case, no id of the batch kept already, goes in bulk: the rows built
        (:func:`lost_row`), the dict and the order extended at once, the rows over the cap dropped
        together (:meth:`_drop_over_cap`)."""
        rows = self.rows
        # lost_row(q, at), inline: one call less a lost quote (issue 29).
        added = {
            q.quote_id: (q.quote_id, q.quote_hash, q.asset_in, q.asset_out, q.amount_in,
                         q.amount_out, q.fee, q.deadline, q.nonce, q.created_at, q.updated_at,
                         q.reason, at)
            for q in quotes
        }  # fmt: skip
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
        # pop(order.popleft()) ``excess`` times, run by map in C: no bytecode per row dropped
        # (issue 29: nearly every lost quote's row is dropped so once the cap is reached).
        # ``dict.pop`` is a fast call; ``__delitem__`` is a slot wrapper that builds an
        # argument tuple per call: 620 -> 407 instructions a row dropped (callgrind).
        deque(map(self.rows.pop, map(deque.popleft, repeat(self._order, excess))), 0)

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

    def pop(self, quote_id: str) -> Quote | None:
        row = self.rows.pop(quote_id, None)
        if row is None:
            return None
        self._popped[quote_id] = self._popped.get(quote_id, 0) + 1  # its entry: left to _trim
        return quote_of(row)

    def get(self, quote_id: str) -> Quote | None:
        row = self.rows.get(quote_id)
        return quote_of(row) if row is not None else None

    def find_hash(self, quote_hash: str) -> Quote | None:
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

    def candidates(self, gaps: Mapping[str, int], now: Micros) -> list[Quote]:
        """Those whose fill would move the balances the way of ``gaps`` (in up, out down)."""
        return [
            quote_of(row)
            for row in self.rows.values()
            if now - row[-1] <= self.window and (gaps.get(row[2], 0) > 0 or gaps.get(row[3], 0) < 0)
        ]
