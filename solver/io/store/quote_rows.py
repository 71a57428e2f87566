"""Which quotes keep a row in ``quotes``, and the counts that stand for the others (issue 29).

At saturation most answers end LOST, and giving each its row (the signed answer written again,
then the row rewritten when the quote expired) was the projection's largest cost: ~30 µs of CPU
an answer (docs/operations.md, "Lost quotes are sampled"). The journal still holds every fact
for its retention; the query tables keep:

- ``quote_counts``: every quote, counted by the minute it was created in, its direction, its
  size bucket and its state now (:mod:`solver.io.store.quote_counts`). Totals, win rates and
  the status windows read them: exact, however few lost quotes keep a row.
- a row for every quote that moves to anything but LOST (won, rejected: built from its
  ``quote_opened`` entry then, the row it always had), and for a sample of the others, picked
  by a hash of the id against ``storage.lost_quote_sample_rate`` (the same on every run and
  backend). A sampled row's ``weight`` (1 / the rate) is how many open or lost quotes it
  stands for; any other row stands for itself.

To count a quote when it ends, the projection remembers the open quotes — memory, not a table:
a row each would cost what the sampling saves. Those without a row (the journal alone knows
them) are rebuilt from the journal whenever memory may not match the tables — a new process, a
failed batch, another instance projecting meanwhile (the position is not where memory left it)
— from ``projection.open_from``, the entry of the oldest of them, written with every batch
(retention keeps the journal from there). A quote with a row that memory does not know is read
from its row; a quote closed LOST without one that moves again (a settlement heard late,
``desk_gaps``) is looked for in the journal, newest first: rare, and it costs a scan (both
scans: :mod:`solver.io.store.quote_journal`).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from solver.core import fact_codec
from solver.core import facts as f
from solver.io.store.quote_counts import (
    LOST,
    MINUTE_US,
    OPEN,
    SETTLED,
    BatchCounts,
    Counted,
    CountKeys,
    row_key,
)
from solver.io.store.quote_journal import MALFORMED, Open, find_opened, open_quotes, opened_body
from solver.io.store.schema import (
    INSERT_QUOTE,
    INSERT_TRANSITION,
    UPDATE_STATE,
    db_errors,
    ts_us,
    with_savepoint,
)

log = logging.getLogger("solver.projection")

_BAD_ENTRY: tuple[type[BaseException], ...] = (
    fact_codec.FactError,
    orjson.JSONDecodeError,
    KeyError,
    TypeError,
)


def skipped() -> tuple[type[BaseException], ...]:
    """What makes an entry be logged and skipped rather than fail its batch: a bad entry, or
    what the database said of it (:func:`~solver.io.store.schema.db_errors`; called in
    ``except`` clauses, so only when something was raised)."""
    return _BAD_ENTRY + db_errors()


_MASK = 2**32 - 1
_SPREAD = 0x9E3779B1
HANDOFF_CAP = 4096
"""At most this many quotes in :attr:`QuoteRows.handoff`. When full, what is appended is not
handed over (the projection parses it), and what is held stays: the projection reads the
journal in order, so the oldest are those it meets first. Emptying it when full (as before
issue 29's round on the projection) dropped the very entries a projection behind was about to
read, and a saturated burst fell back to parsing nearly all of them."""

SELECT_ROW = (
    "SELECT state, created_at, asset_in, asset_out, amount_in FROM quotes WHERE quote_id = ?"
)
UPDATE_MOVED = UPDATE_STATE.replace(" WHERE", ", weight = 1 WHERE")
"""A move to any state but LOST: every such quote has its row, which stands for itself."""
INSERT_FILL_FROM_QUOTE = (
    "INSERT OR REPLACE INTO fills (quote_id, quote_hash, at, asset_in, amount_in, asset_out, "
    "amount_out, fee, intent_hash, tx_hash, price_in_usd, price_out_usd, realized_pnl_usd, "
    "markouts) SELECT quote_id, quote_hash, ?, asset_in, amount_in, asset_out, amount_out, fee, "
    "intent_hash, tx_hash, ?, ?, ?, '{}' FROM quotes WHERE quote_id = ?"
)

Handed = tuple[str, int, str, str, int]
"""What the journal hands over for a ``QuoteOpened`` it appended (keyed by its quote id): the
body written, and its count's key as :attr:`CountKeys.built` has it (``created_at``'s minute
number, ``asset_in``, ``asset_out``, the digits of ``amount_in``, read off the encoded fact:
the projection formats no amount, issue 29). One flat tuple of atoms: the collector untracks
it (a tuple in a tuple, or a fact, held until projected is traversed by every older
collection: +3.7k instructions an append, callgrind)."""
_ID_AT = len('{"quote_id":"')
"""Where a ``quote_opened`` body's quote id starts (``fact_codec.encode`` writes it first; a body
that does not start so finds nothing handed, and is parsed)."""


def quote_row(doc: dict[str, Any], state: str, weight: float) -> tuple[Any, ...]:
    """The ``quotes`` row of a ``quote_opened`` entry (:data:`INSERT_QUOTE`)."""
    q = fact_codec.decode("quote_opened", doc)
    if type(q) is not f.QuoteOpened:  # pragma: no cover - decode returns the kind it was given
        raise fact_codec.FactError("quote_opened: not an opened quote")
    return (q.quote_id, q.quote_hash, ts_us(q.created_at), ts_us(q.deadline), q.asset_in,
            q.asset_out, str(q.amount_in), str(q.amount_out), str(q.fee), q.nonce,
            orjson.dumps(doc.get("signed_data") or {}).decode(), state, None, q.exact_in,
            q.partner_id, weight)  # fmt: skip


class QuoteRows:
    """The projection of the quote facts (``quote_opened``, ``quote_moved``, ``quotes_lost``)
    into ``quotes``, ``transitions``, ``fills`` and ``quote_counts``, with its memory of the open
    quotes. One per store; :attr:`lock` is held for each batch (PostgreSQL projects from a
    thread and from the loop)."""

    def __init__(self, lost_sample_rate: float = 1.0) -> None:
        if not 0.0 < lost_sample_rate <= 1.0:
            raise ValueError("lost_quote_sample_rate must be above 0 and at most 1")
        self.rate = lost_sample_rate
        self.weight = 1.0 / lost_sample_rate
        self._below = int(lost_sample_rate * 2**32)
        self.lock = threading.Lock()
        self._open: OrderedDict[str, Open] = OrderedDict()
        """The open quotes without a row, oldest first (``open_from`` in O(1)): what only the
        journal can tell, and the rebuild recovers."""
        self._rowed: dict[str, Counted] = {}
        """The open quotes with a row, by id: their keys without a query. A rebuild leaves out
        those opened before ``open_from``; their row tells then."""
        self._batch = BatchCounts()
        self._keys = CountKeys()
        self._valid_at: int | None = None
        self.handoff: dict[str, Handed] = {}
        """The ``quote_opened`` entries this process appended and has not projected yet, by
        quote id, with the body it wrote and its count's key (the SQLite journal fills it):
        an entry read back with that very body needs no parsing (1.5 µs an answer, the
        projection's largest cost after reading the row). A body that differs, or none, is
        parsed as before: the comparison is what makes the handover safe (another writer's
        entry, a rolled-back fact appended again otherwise, memory rebuilt), so the key is
        only taken with the body it came with."""

    def sampled(self, quote_id: str) -> bool:
        """Whether ``quote_id`` keeps its row however it ends: a hash, so the same on every
        run and backend. CRC-32, its bits spread by a multiplication (Fibonacci hashing):
        0.2 µs where blake2b took 1–3 µs, and quote ids are the relay's, so they say nothing
        of the quote the sample must not depend on."""
        if self._below > _MASK:
            return True
        return (zlib.crc32(quote_id.encode()) * _SPREAD) & _MASK < self._below

    # ------------------------------------------------------------------ the batch

    def begin(self, cur: Any, seq: int, open_from: int | None) -> None:
        """At the start of a batch whose position is ``seq``: the memory is rebuilt unless it
        is the one this object left at ``seq``."""
        if self._valid_at != seq:
            self._rebuild(cur, seq if open_from is None else open_from, seq)

    def finish(self, cur: Any, seq: int) -> int:
        """Write the batch's counts; return the position's ``open_from``: the entry of the
        oldest open quote without a row (retention keeps the journal from there)."""
        self._batch.write(cur)
        if not self._open:
            return seq
        return next(iter(self._open.values()))[0]

    def committed(self, seq: int) -> None:
        self._valid_at = seq

    def caught_up(self) -> None:
        """The projection read the journal's committed entries to their end: what
        :attr:`handoff` still holds is either not committed yet (a group commit still to
        come: those are parsed when read, a few at most) or never will be (a failed commit's
        facts), and the latter would hold their places for good now that a full handoff keeps
        what it has (:data:`HANDOFF_CAP`)."""
        self.handoff.clear()

    @property
    def position(self) -> int | None:
        """The journal position the query tables are projected to, as this memory knows it
        (None: unknown until the next batch begins)."""
        return self._valid_at

    def forget(self) -> None:
        """A batch failed: what memory holds may be ahead of the tables."""
        self._valid_at = None
        self._batch.clear()

    # ------------------------------------------------------------------ the facts

    def project_entries(
        self,
        cur: Any,
        entries: Iterable[tuple[int, str, str]],
        after: int,
        deadline: float | None,
        savepoints: bool,
        other: Callable[[int, str, str], None],
    ) -> tuple[int, int, bool]:
        """A batch's journal entries, in order, after the position ``after``: ``(the
        position then, how many, out of time)``. ``other`` projects any kind but
        ``quote_opened``; ``deadline`` (a ``perf_counter`` time, or None) stops after the
        entry that passes it (the clock is read after the first entry and every 8th: an
        entry costs ~5 µs, a read a few tenths).

        A ``quote_opened`` this process handed over (:attr:`handoff`), read back with the very
        body it wrote and keeping no row, is counted and remembered right here: no call, no
        parsing, its key as the journal built it (issue 29: this loop runs once per answer,
        and a call per entry with the state looked up again each time was a third of its
        cost). Anything else (a body that differs, a quote open already) is
        :meth:`opened`'s, logged and skipped if it is not the fact it says."""
        handoff, unrowed, rowed = self.handoff, self._open, self._rowed
        keys, opens = self._keys, self._batch.opens
        built = keys.built
        below = self._below
        handing = below <= _MASK  # at rate 1 every quote keeps its row: parsed for it
        crc32 = zlib.crc32
        seq, read = after, 0
        for seq, kind, body in entries:
            read += 1
            if kind != "quote_opened":
                other(seq, kind, body)
            else:
                hit = None
                if handoff and handing:
                    quote_id = body[_ID_AT : body.find('"', _ID_AT)]
                    hit = handoff.pop(quote_id, None)
                if (
                    hit is not None
                    and hit[0] == body
                    and (crc32(quote_id.encode()) * _SPREAD) & _MASK >= below  # no row
                    and quote_id not in unrowed
                    and quote_id not in rowed
                ):
                    raw = hit[1:]  # the key's parts, as the journal built them
                    key = built.get(raw) or keys.new(raw)
                    unrowed[quote_id] = (seq, key)
                    opens[key] = opens.get(key, 0) + 1
                else:
                    try:
                        self.opened(cur, seq, body, savepoints)
                    except skipped() as exc:
                        log.error("journal entry %d (%s) not projected: %s", seq, kind, exc)
            if deadline is not None and read & 7 == 1 and time.perf_counter() > deadline:
                return seq, read, True
        return seq, read, False

    def opened(self, cur: Any, seq: int, body: str, savepoints: bool) -> None:
        """A ``quote_opened`` entry not handed over (:meth:`project_entries` counts those):
        parsed, counted and remembered, and its row written if it is sampled. Parsed without
        its signed answer unless it gets a row (the answer is the entry's last field and most
        of its text: parsing only what comes before it halves the cost)."""
        below = self._below
        try:
            if below > _MASK:  # every quote keeps its row: all of it, parsed once
                doc, sampled = orjson.loads(body), True
            else:
                cut = body.find(',"signed_data":')
                doc = orjson.loads(body[:cut] + "}" if cut > 0 else body)
                sampled = (zlib.crc32(doc["quote_id"].encode()) * _SPREAD) & _MASK < below
                if sampled and cut > 0:
                    doc = orjson.loads(body)
            quote_id = doc["quote_id"]
            if quote_id in self._open or quote_id in self._rowed:
                raise fact_codec.FactError(f"quote_opened: {quote_id} is open already")
            amount = doc["amount_in"]  # CountKeys.of_doc, spelled out
            keys = self._keys
            raw = (
                int(doc["created_at"]) // MINUTE_US,
                doc["asset_in"],
                doc["asset_out"],
                len(amount if type(amount) is str else str(int(amount))),
            )
            key = keys.built.get(raw) or keys.new(raw)
        except MALFORMED as exc:
            raise fact_codec.FactError(f"quote_opened: {type(exc).__name__}: {exc}") from None
        if sampled:
            row = quote_row(doc, OPEN, self.weight)
            if savepoints:
                with_savepoint(cur, lambda: cur.execute(INSERT_QUOTE, row))
            else:  # one INSERT: all or nothing
                cur.execute(INSERT_QUOTE, row)
            self._rowed[quote_id] = key
        else:
            self._open[quote_id] = (seq, key)
        opens = self._batch.opens
        opens[key] = opens.get(key, 0) + 1

    def lost(self, cur: Any, seq: int, fact: f.QuotesLost) -> None:
        """Quotes that expired untouched: their row (if they have one) says it all (state LOST,
        updated_at, reason), so no transition row each (issue 11)."""
        unrowed, rowed = self._open, self._rowed
        ids = fact.quote_ids
        get = unrowed.get
        entries = [get(quote_id) for quote_id in ids]
        if None not in entries:  # all open without a row (most batches): no SQL
            self._lost_unrowed(ids, entries)  # type: ignore[arg-type]
            return
        at = ts_us(fact.at)
        known: list[tuple[str, Counted]] = []
        updates = []
        misses = []
        for quote_id in fact.quote_ids:
            entry = unrowed.get(quote_id)
            if entry is not None:
                known.append((quote_id, entry[1]))
                continue
            key = rowed.get(quote_id)
            if key is None:
                misses.append(quote_id)
                continue
            known.append((quote_id, key))
            updates.append(("LOST", at, fact.reason, None, None, quote_id))
        ended: list[tuple[Counted, str]] = []
        unseen = set()
        for quote_id in misses:  # rows from before memory (another process, an older store)
            row = cur.execute(SELECT_ROW, (quote_id,)).fetchone()
            if row is None:
                unseen.add(quote_id)
                continue
            ended.append((row_key(row), row[0]))
            updates.append(("LOST", at, fact.reason, None, None, quote_id))
        if unseen:
            found = find_opened(cur, unseen, seq)
            for quote_id in sorted(unseen - found.keys()):
                log.warning("quotes_lost %d: quote %s was never opened: not counted", seq, quote_id)
            for body in found.values():  # its quote_opened was not projected: it was logged
                ended.append((self._keys.of_doc(orjson.loads(body)), ""))
        if updates:
            cur.executemany(UPDATE_STATE, updates)
        batch = self._batch
        opens, losts = batch.opens, batch.losts
        for quote_id, key in known:
            if unrowed.pop(quote_id, None) is None:
                del rowed[quote_id]
            opens[key] = opens.get(key, 0) - 1
            losts[key] = losts.get(key, 0) + 1
        for key, old in ended:
            if old:
                batch.add(key.of(old), -1)
            batch.add(key.lost, 1)

    def _lost_unrowed(self, ids: Sequence[str], entries: list[Open]) -> None:
        """:meth:`lost` for quotes all open without a row (``entries``: theirs in memory):
        forgotten and counted, a run of quotes with the same key counted once (expiries come
        in the order quotes were opened: most neighbours share their minute, pair and size)."""
        unrowed, rowed = self._open, self._rowed
        batch = self._batch
        opens, losts = batch.opens, batch.losts
        pop = unrowed.pop
        last: Counted | None = None
        run = 0
        for quote_id, entry in zip(ids, entries, strict=True):
            if pop(quote_id, None) is None:  # named twice: as the general case fails
                if last is not None:
                    opens[last] = opens.get(last, 0) - run
                    losts[last] = losts.get(last, 0) + run
                last, run = None, 0
                del rowed[quote_id]
            key = entry[1]
            if key is not last:
                if last is not None:
                    opens[last] = opens.get(last, 0) - run
                    losts[last] = losts.get(last, 0) + run
                last, run = key, 0
            run += 1
        if last is not None:
            opens[last] = opens.get(last, 0) - run
            losts[last] = losts.get(last, 0) + run

    def moved(self, cur: Any, seq: int, fact: f.QuoteMoved) -> None:
        quote_id, new, at = fact.quote_id, fact.new, ts_us(fact.at)
        entry = self._open.get(quote_id)
        key = self._rowed.get(quote_id)
        old = OPEN
        if entry is not None:  # open, no row
            opened_at, key = entry
            if new == LOST:  # not sampled: counted, no row
                del self._open[quote_id]
                self._batch.add(key.open, -1)
                self._batch.add(key.lost, 1)
                return
            self._insert_from(cur, opened_at, OPEN)
        elif key is None:
            row = cur.execute(SELECT_ROW, (quote_id,)).fetchone()
            if row is not None:
                old, key = row[0], row_key(row)
            else:
                body = find_opened(cur, {quote_id}, seq).get(quote_id)
                if body is None:
                    log.warning("quote_moved %d: quote %s was never opened", seq, quote_id)
                    old = "?"  # the transition says so, as it always has
                else:  # it left memory LOST, not sampled: a settlement heard late (desk_gaps)
                    old = LOST
                    doc = orjson.loads(body)
                    cur.execute(INSERT_QUOTE, quote_row(doc, LOST, 1.0))
                    key = self._keys.of_doc(doc)
        statement = UPDATE_STATE if new == LOST else UPDATE_MOVED
        cur.execute(statement, (new, at, fact.reason, fact.intent_hash, fact.tx_hash, quote_id))
        cur.execute(
            INSERT_TRANSITION,
            (quote_id, old, new, at, fact.reason, fact.intent_hash, fact.tx_hash),
        )
        if new == SETTLED:
            fill = fact.fill
            prices = (None, None, None) if fill is None else (
                repr(fill.price_in), repr(fill.price_out), repr(fill.realized_usd)
            )  # fmt: skip
            cur.execute(INSERT_FILL_FROM_QUOTE, (at, *prices, quote_id))
        if self._open.pop(quote_id, None) is None:
            self._rowed.pop(quote_id, None)
        if key is not None:
            self._batch.add(key.of(old), -1)
            self._batch.add(key.of(new), 1)

    # ------------------------------------------------------------------ helpers

    def _insert_from(self, cur: Any, seq: int, state: str) -> None:
        """The row of the quote opened at ``seq``, from its journal entry."""
        cur.execute(INSERT_QUOTE, quote_row(orjson.loads(opened_body(cur, seq)), state, 1.0))

    def _not_open(self, quote_id: str) -> None:
        if quote_id in self._open or quote_id in self._rowed:
            raise fact_codec.FactError(f"quote_opened: {quote_id} is open already")

    def _rebuild(self, cur: Any, open_from: int, seq: int) -> None:
        """The open quotes as the journal has them at ``seq``, from ``open_from`` on."""
        self._batch.clear()
        self._open, self._rowed = open_quotes(cur, open_from, seq, self._keys)
        self._valid_at = seq
