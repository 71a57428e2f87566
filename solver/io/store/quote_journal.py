"""What the projection of the quote facts reads back from the journal when its memory cannot
say (issue 29; :mod:`solver.io.store.quote_rows`): the quotes open at a position without a row
(the rebuild, after a new process, a failed batch or another instance projecting), and the
``quote_opened`` entries of given quotes (a quote closed LOST without a row that moves again).

Apart from the projection's per-fact work because these are scans, rare and long: what they
read, and how far, is said here.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import orjson

from solver.core import fact_codec
from solver.io.store.quote_counts import Counted, CountKeys

log = logging.getLogger("solver.projection")

SCAN = 8192
"""Journal entries read in one step of a rebuild or a search."""
SELECT_BODY = "SELECT body FROM journal WHERE seq = ?"
SELECT_QUOTE_FACTS = (
    "SELECT seq, kind, body FROM journal WHERE seq >= ? AND seq <= ? "
    "AND kind IN ('quote_opened', 'quote_moved', 'quotes_lost') ORDER BY seq LIMIT ?"
)
SELECT_OPENED = "SELECT seq, body FROM journal WHERE seq >= ? AND seq < ? AND kind = 'quote_opened'"
MALFORMED = (KeyError, TypeError, ValueError, orjson.JSONDecodeError)
"""What a journal body that is not the fact it says raises when read."""

Open = tuple[int, Counted]
"""An open quote without a row: the ``seq`` of its ``quote_opened`` entry, and its key."""


def open_quotes(
    cur: Any, open_from: int, seq: int, keys: CountKeys
) -> tuple[OrderedDict[str, Open], dict[str, Counted]]:
    """The quotes open at ``seq`` as the journal has them from ``open_from`` on: those without
    a row, oldest first, and those with one (told apart by the table: the rate may have
    changed since)."""
    unrowed: OrderedDict[str, Open] = OrderedDict()
    rowed: dict[str, Counted] = {}
    start, read = open_from, 0
    while True:
        rows = cur.execute(SELECT_QUOTE_FACTS, (start, seq, SCAN)).fetchall()
        for entry_seq, kind, body in rows:
            try:
                doc = orjson.loads(body)
                if kind == "quote_opened":
                    unrowed[doc["quote_id"]] = (entry_seq, keys.of_doc(doc))
                elif kind == "quotes_lost":
                    for quote_id in doc["quote_ids"]:
                        unrowed.pop(quote_id, None)
                else:
                    unrowed.pop(doc["quote_id"], None)
            except MALFORMED:
                continue  # the projection logged it when it met it
        read += len(rows)
        if len(rows) < SCAN:
            break
        start = rows[-1][0] + 1
    ids = list(unrowed)
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        marks = ", ".join("?" * len(chunk))
        sql = f"SELECT quote_id FROM quotes WHERE quote_id IN ({marks})"  # noqa: S608
        for (quote_id,) in cur.execute(sql, chunk).fetchall():
            rowed[quote_id] = unrowed.pop(quote_id)[1]
    if read > SCAN:
        log.info("projection: %d open quotes from %d journal entries", len(ids), read)
    return unrowed, rowed


def opened_body(cur: Any, seq: int) -> str:
    """The body of the ``quote_opened`` entry ``seq`` of a quote still open."""
    found = cur.execute(SELECT_BODY, (seq,)).fetchone()
    if found is None:
        raise fact_codec.FactError(f"the journal entry {seq} of an open quote is gone")
    body: str = found[0]
    return body


def find_opened(cur: Any, quote_ids: set[str], before: int | None = None) -> dict[str, str]:
    """The ``quote_opened`` bodies of ``quote_ids`` (those found), looking back from the entry
    ``before`` (None: the last) to the journal's first: a scan, for what memory cannot say."""
    wanted = {orjson.dumps(q).decode(): q for q in quote_ids}
    found: dict[str, str] = {}
    first, last = cur.execute("SELECT MIN(seq), MAX(seq) FROM journal").fetchone()
    if first is None:
        return found
    high = last + 1 if before is None else before
    while wanted and high > first:
        low = max(first, high - SCAN)
        for _, body in cur.execute(SELECT_OPENED, (low, high)).fetchall():
            quote_id = wanted.pop(_id_text(body), None)
            if quote_id is not None:
                found[quote_id] = body
        high = low
    return found


def _id_text(body: str) -> str:
    """A ``quote_opened`` body's quote id as JSON text: the encoder writes it first, and any
    ``"`` inside it is escaped, so it ends at the first ``,"`` (an older body is parsed)."""
    if body.startswith('{"quote_id":'):
        end = body.find(',"', 12)
        if end > 0:
            return body[12:end]
    try:
        return orjson.dumps(orjson.loads(body)["quote_id"]).decode()
    except MALFORMED:
        return ""
