"""The tables people query, derived from the desk's journal (DESIGN "Persistence is the desk's
journal"; ``solver history``, ``solver store export``, the status windows).

The quote path appends only the journal entry (:mod:`solver.io.store.journal`); this module turns
journal entries into the query tables — ``quotes`` (the signed answer and its state: every
quote but the lost ones not sampled) and ``quote_counts`` (every quote, by minute: the quote
facts are :mod:`solver.io.store.quote_rows`' part), ``transitions`` (every move of a quote with
a row but the expiry of an untouched quote, which its row records),
``fills`` (with the prices and edge at settlement) and their markouts, ``balance_snapshots``,
``alerts``, ``rebalances`` (each rebalance as its latest step left it) and ``rebalance_steps``
(one row per step) — in batches, in its own transaction, and records how far it got in
``projection.seq`` with them, so a crash never projects an entry twice or skips one.

The running bot calls :func:`project` from its ticker with a time budget (a few milliseconds
per tick, so the event loop never stalls on it) and once more at shutdown; a bot killed with
``kill -9`` projects the rest at its next start. While the bot runs, the query tables are
behind the journal by about a tick; under sustained saturation the lag grows and is caught up
when the flow eases. An entry that cannot be projected is logged and skipped: the journal
keeps it, and it is never lost.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import orjson

from solver.core import fact_codec
from solver.core import facts as f
from solver.io.store.quote_rows import INSERT_FILL_FROM_QUOTE, QuoteRows, skipped
from solver.io.store.schema import (
    INSERT_REBALANCE_STEP,
    SAVE_REBALANCE,
    StoreError,
    db_errors,
    rebalance_values,
    ts,
    ts_us,
    with_savepoint,
)

__all__ = [
    "INSERT_FILL_FROM_QUOTE",
    "SELECT_ENTRIES",
    "UPDATE_MARKOUT",
    "pending",
    "project",
    "with_savepoint",
]

log = logging.getLogger("solver.projection")

SELECT_ENTRIES = "SELECT seq, kind, body FROM journal WHERE seq > ? ORDER BY seq LIMIT ?"
SELECT_POSITION = "SELECT seq, open_from FROM projection"
UPDATE_POSITION = "UPDATE projection SET seq = ?, open_from = ?, lost_sample_rate = ?"
UPDATE_MARKOUT = "UPDATE fills SET markouts = json_set(markouts, ?, ?) WHERE quote_id = ?"
INSERT_BALANCE = "INSERT INTO balance_snapshots (at, asset, amount, expected) VALUES (?, ?, ?, ?)"
INSERT_ALERT = "INSERT INTO alerts (at, kind, detail) VALUES (?, ?, ?)"
RESOLVE_ALERTS = "UPDATE alerts SET resolved_at = ? WHERE kind = ? AND resolved_at IS NULL"
BATCH = 256


def pending(conn: Any) -> int:
    """Journal entries not projected yet."""
    row = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) - (SELECT seq FROM projection) FROM journal"
    ).fetchone()
    return int(row[0])


def project(
    conn: Any, quotes: QuoteRows, *, budget_s: float | None = None, savepoints: bool = False
) -> int:
    """Project journal entries into the query tables; returns how many were projected.
    ``quotes``: the store's projection of the quote facts, with its memory of the open quotes
    (one per store, held for each batch).

    ``savepoints``: every entry that writes in its own savepoint, quotes too (PostgreSQL: one
    failed statement aborts the whole transaction, where SQLite fails only the statement).

    ``budget_s``: stop after about this long (the ticker's share); None: until caught up. The
    connection must have no transaction open (the caller commits its group first)."""
    done = 0
    started = time.perf_counter()
    deadline = None if budget_s is None else started + budget_s
    cur = conn.cursor()
    while True:
        # PostgreSQL projects from its thread and from the loop: one at a time, and the loop
        # never waits for the thread (it skips its turn, as for another instance's lock).
        if not quotes.lock.acquire(blocking=False):
            return done
        try:
            batch = _batch(conn, cur, quotes, deadline, savepoints)
        finally:
            quotes.lock.release()
        if batch is None:
            return done
        read, out_of_time = batch
        done += read
        if read < BATCH or out_of_time:
            if not out_of_time:
                quotes.caught_up()
            return done


def _batch(
    conn: Any, cur: Any, quotes: QuoteRows, deadline: float | None, savepoints: bool
) -> tuple[int, bool] | None:
    """One batch in its transaction: ``(entries projected, out of time)``, or None when
    another instance holds the position."""
    try:
        cur.execute("BEGIN IMMEDIATE")
        position = cur.execute(SELECT_POSITION).fetchone()
        if position is None:  # PostgreSQL: another instance is projecting (SKIP LOCKED)
            cur.execute("ROLLBACK")
            return None
        seq, open_from = position
        quotes.begin(cur, seq, open_from)
        # Entries are read one by one, not fetched by the batch: a half-millisecond slice
        # projects a dozen of them, and fetching 256 bodies to use a dozen was the
        # projection's largest cost at saturation (12 % of the loop, profiled).
        entries = conn.execute(SELECT_ENTRIES, (seq, BATCH))
        seq, read, out_of_time = quotes.project_entries(
            cur,
            entries,
            seq,
            deadline,
            savepoints,
            lambda at, kind, body: _project_entry(cur, quotes, at, kind, body, savepoints),
        )
        entries.close()
        open_from = quotes.finish(cur, seq)
        cur.execute(UPDATE_POSITION, (seq, open_from, quotes.rate))
        cur.execute("COMMIT")
    except BaseException as exc:
        quotes.forget()  # what it holds may be ahead of the tables now
        if conn.in_transaction:
            with contextlib.suppress(*db_errors()):
                cur.execute("ROLLBACK")
        if isinstance(exc, db_errors()):
            raise StoreError(f"cannot project the journal: {exc}") from None
        raise
    quotes.committed(seq)
    return read, out_of_time


def _project_entry(
    cur: Any, quotes: QuoteRows, seq: int, kind: str, body: str, savepoints: bool
) -> None:
    try:
        doc = orjson.loads(body)
        fact = fact_codec.decode(kind, doc)
        with_savepoint(cur, lambda: _apply(cur, quotes, seq, fact, doc))
    except skipped() as exc:
        log.error("journal entry %d (%s) not projected: %s", seq, kind, exc)


def _apply(cur: Any, quotes: QuoteRows, seq: int, fact: f.Fact, doc: dict[str, Any]) -> None:
    if type(fact) is f.QuotesLost:
        quotes.lost(cur, seq, fact)
    elif type(fact) is f.QuoteMoved:
        quotes.moved(cur, seq, fact)
    elif type(fact) is f.Markout:
        path = f'$."{fact.horizon_s}"'
        cur.execute(UPDATE_MARKOUT, (path, fact.value_usd, fact.quote_id))  # a JSON number
    elif type(fact) is f.BalancesReconciled:
        at = ts_us(fact.observed)
        want = fact.expected or {}
        for asset, amount in fact.balances.items():
            expected = want.get(asset)
            cur.execute(
                INSERT_BALANCE,
                (at, asset, str(amount), None if expected is None else str(expected)),
            )
    elif type(fact) is f.PauseSet and fact.kind != "operator":
        cur.execute(INSERT_ALERT, (ts_us(fact.at), fact.kind, fact.reason))
    elif type(fact) is f.PauseCleared and fact.kind != "operator":
        cur.execute(RESOLVE_ALERTS, (ts_us(fact.at), fact.kind))
    elif type(fact) is f.RebalanceStepped:
        row = rebalance_values(doc["record"])  # the entry's own text: the row, column for column
        cur.execute(SAVE_REBALANCE, row)
        if not fact.carried:
            record = fact.record
            step = (record.id, ts(record.updated_at), record.state, fact.detail)
            cur.execute(INSERT_REBALANCE_STEP, step)
