"""The tables people query, derived from the desk's journal (DESIGN "Persistence is the desk's
journal"; ``solver history``, ``solver store export``, the status windows).

The quote path appends only the journal entry (:mod:`solver.io.store.journal`); this module turns
journal entries into the query tables — ``quotes`` (the signed answer and its state),
``transitions`` (every move but the expiry of an untouched quote, which its row records),
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

import logging
import time
from typing import Any

import orjson

from solver.core import facts as f
from solver.io.store.schema import (
    DB_ERRORS,
    INSERT_QUOTE,
    INSERT_REBALANCE_STEP,
    INSERT_TRANSITION,
    SAVE_REBALANCE,
    UPDATE_STATE,
    StoreError,
    rebalance_values,
    ts,
)

log = logging.getLogger("solver.projection")

SELECT_ENTRIES = "SELECT seq, kind, body FROM journal WHERE seq > ? ORDER BY seq LIMIT ?"
SELECT_STATE = "SELECT state FROM quotes WHERE quote_id = ?"
INSERT_FILL_FROM_QUOTE = (
    "INSERT OR REPLACE INTO fills (quote_id, quote_hash, at, asset_in, amount_in, asset_out, "
    "amount_out, fee, intent_hash, tx_hash, price_in_usd, price_out_usd, realized_pnl_usd, "
    "markouts) SELECT quote_id, quote_hash, ?, asset_in, amount_in, asset_out, amount_out, fee, "
    "intent_hash, tx_hash, ?, ?, ?, '{}' FROM quotes WHERE quote_id = ?"
)
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


def project(conn: Any, *, budget_s: float | None = None, savepoints: bool = False) -> int:
    """Project journal entries into the query tables; returns how many were projected.

    ``savepoints``: every entry in its own savepoint, quotes too (PostgreSQL: one failed
    statement aborts the whole transaction, where SQLite fails only the statement).

    ``budget_s``: stop after about this long (the ticker's share); None: until caught up. The
    connection must have no transaction open (the caller commits its group first)."""
    done = 0
    started = time.perf_counter()
    deadline = None if budget_s is None else started + budget_s
    cur = conn.cursor()
    while True:
        read = 0
        out_of_time = False
        try:
            cur.execute("BEGIN IMMEDIATE")
            position = cur.execute("SELECT seq FROM projection").fetchone()
            if position is None:  # PostgreSQL: another instance is projecting (SKIP LOCKED)
                cur.execute("ROLLBACK")
                return done
            (seq,) = position
            # Entries are read one by one, not fetched by the batch: a half-millisecond slice
            # projects a dozen of them, and fetching 256 bodies to use a dozen was the
            # projection's largest cost at saturation (12 % of the loop, profiled).
            entries = conn.execute(SELECT_ENTRIES, (seq, BATCH))
            for entry_seq, kind, body in entries:
                _project_entry(cur, entry_seq, kind, body, savepoints)
                seq = entry_seq
                read += 1
                if deadline is not None and time.perf_counter() > deadline:
                    out_of_time = True
                    break
            entries.close()
            done += read
            cur.execute("UPDATE projection SET seq = ?", (seq,))
            cur.execute("COMMIT")
        except DB_ERRORS as exc:
            if conn.in_transaction:
                cur.execute("ROLLBACK")
            raise StoreError(f"cannot project the journal: {exc}") from None
        if read < BATCH or out_of_time:
            return done


def _project_entry(cur: Any, seq: int, kind: str, body: str, savepoints: bool) -> None:
    try:
        doc = orjson.loads(body)
        fact = f.decode(kind, doc)
        if type(fact) is f.QuoteOpened and not savepoints:  # one INSERT: all or nothing
            _apply(cur, fact, doc)
        else:
            with_savepoint(cur, lambda: _apply(cur, fact, doc))
    except (f.FactError, orjson.JSONDecodeError, *DB_ERRORS) as exc:  # type: ignore[misc]
        log.error("journal entry %d (%s) not projected: %s", seq, kind, exc)


def with_savepoint(cur: Any, work: Any) -> None:
    """``work`` all or nothing inside the batch: a failing entry leaves no half rows."""
    cur.execute("SAVEPOINT entry")
    try:
        work()
    except BaseException:
        cur.execute("ROLLBACK TO entry")
        cur.execute("RELEASE entry")
        raise
    cur.execute("RELEASE entry")


def _apply(cur: Any, fact: f.Fact, doc: dict[str, Any]) -> None:
    if type(fact) is f.QuoteOpened:
        q = fact
        row = (q.quote_id, q.quote_hash, ts(q.created_at), ts(q.deadline), q.asset_in,
               q.asset_out, str(q.amount_in), str(q.amount_out), str(q.fee), q.nonce,
               orjson.dumps(doc.get("signed_data") or {}).decode(), "OPEN", None, q.exact_in,
               q.partner_id)  # fmt: skip
        cur.execute(INSERT_QUOTE, row)
    elif type(fact) is f.QuoteMoved:
        _moved(cur, fact)
    elif type(fact) is f.QuotesLost:
        # Quotes that expired untouched, the common case: their row says it all (state LOST,
        # updated_at, reason), so no transition row each. It was the same facts again under
        # a random-keyed index: ~7 µs and a B-tree page of WAL per lost quote (issue 11).
        at = ts(fact.at)
        cur.executemany(
            UPDATE_STATE, [("LOST", at, fact.reason, None, None, q) for q in fact.quote_ids]
        )
    elif type(fact) is f.Markout:
        path = f'$."{fact.horizon_s}"'
        cur.execute(UPDATE_MARKOUT, (path, fact.value_usd, fact.quote_id))  # a JSON number
    elif type(fact) is f.BalancesReconciled:
        at = ts(fact.observed)
        want = fact.expected or {}
        for asset, amount in fact.balances.items():
            expected = want.get(asset)
            cur.execute(
                INSERT_BALANCE,
                (at, asset, str(amount), None if expected is None else str(expected)),
            )
    elif type(fact) is f.PauseSet and fact.kind != "operator":
        cur.execute(INSERT_ALERT, (ts(fact.at), fact.kind, fact.reason))
    elif type(fact) is f.PauseCleared and fact.kind != "operator":
        cur.execute(RESOLVE_ALERTS, (ts(fact.at), fact.kind))
    elif type(fact) is f.RebalanceStepped:
        row = rebalance_values(doc["record"])  # the entry's own text: the row, column for column
        cur.execute(SAVE_REBALANCE, row)
        if not fact.carried:
            record = fact.record
            step = (record.id, ts(record.updated_at), record.state, fact.detail)
            cur.execute(INSERT_REBALANCE_STEP, step)


def _moved(cur: Any, fact: f.QuoteMoved) -> None:
    at = ts(fact.at)
    old = cur.execute(SELECT_STATE, (fact.quote_id,)).fetchone()
    cur.execute(
        UPDATE_STATE, (fact.new, at, fact.reason, fact.intent_hash, fact.tx_hash, fact.quote_id)
    )
    cur.execute(
        INSERT_TRANSITION,
        (fact.quote_id, old[0] if old else "?", fact.new, at, fact.reason, fact.intent_hash,
         fact.tx_hash),
    )  # fmt: skip
    if fact.new == "SETTLED":
        fill = fact.fill
        prices = (None, None, None) if fill is None else (
            repr(fill.price_in), repr(fill.price_out), repr(fill.realized_usd)
        )  # fmt: skip
        cur.execute(INSERT_FILL_FROM_QUOTE, (at, *prices, fact.quote_id))
