"""The desk's journal in the SQLite store (DESIGN "Persistence is the desk's journal").

Every fact the desk decides (:mod:`solver.core.facts`) is appended to the ``journal`` table in
the store's open transaction; :meth:`SqliteJournal.commit` makes the batch durable, and the
driver commits before any answer decided in the batch leaves the process (group commit: one
commit per turn of the event loop, not one per quote). On start, :meth:`SqliteJournal.load`
gives the latest desk snapshot and every fact after it, and the desk applies them in order.

The same transaction keeps the tables people query (``solver history``, exports, status windows)
in step: a projection of each fact — the quote row and its nonce, state changes and
transitions, fills and markouts, balance snapshots, alerts. Nonces are unique per account, so
a nonce signed before (in this run or any earlier one) is refused (:class:`NonceReusedError`).

The interface is small (append, commit, rollback, load, snapshot) so that a shared PostgreSQL
journal for several instances can stand beside this one later.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import orjson

from solver.core import facts as f
from solver.io.store_schema import (
    INSERT_NONCE,
    INSERT_QUOTE,
    INSERT_TRANSITION,
    UPDATE_STATE,
    NonceReusedError,
    StoreError,
    ts,
)

INSERT_ENTRY = "INSERT INTO journal (at, kind, body) VALUES (?, ?, ?)"
DELETE_NONCE = "DELETE FROM nonces WHERE account = ? AND nonce = ?"
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


class Journal(Protocol):
    """What the live driver needs of a journal."""

    def append(self, fact: f.Fact, signed_data: Mapping[str, Any] | None = None) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class SqliteJournal:
    def __init__(self, conn: sqlite3.Connection, account: str) -> None:
        self._conn = conn
        self._cur = conn.cursor()
        self.account = account
        self.appended = 0  # since this journal was opened (the driver snapshots on a count)

    # ------------------------------------------------------------------ writing

    def append(self, fact: f.Fact, signed_data: Mapping[str, Any] | None = None) -> None:
        """Append ``fact`` (and its projection) to the open transaction; ``commit`` makes it
        durable. ``signed_data``: the signed answer of a ``QuoteOpened`` (kept for disputes).

        A fact whose projection fails writes nothing (its earlier rows are taken back)."""
        kind = f.kind_of(fact)
        body = orjson.dumps(f.encode(fact)).decode()
        cur = self._cur
        try:
            if not self._conn.in_transaction:
                cur.execute("BEGIN")
            if type(fact) is f.QuoteOpened:
                self._quote_opened(fact, signed_data)
            else:
                cur.execute(INSERT_ENTRY, (f.micros(_at(fact)), kind, body))
                self._project(fact)
                self.appended += 1
                return
            try:
                cur.execute(INSERT_ENTRY, (f.micros(fact.created_at), kind, body))
            except sqlite3.Error:
                self._undo_opened(fact)
                raise
        except sqlite3.Error as exc:
            raise _error(exc, fact, self.account) from None
        self.appended += 1

    def _quote_opened(self, q: f.QuoteOpened, signed_data: Mapping[str, Any] | None) -> None:
        # The nonce goes first: a reused nonce writes nothing. A failing quote row takes its
        # nonce row back (a failing INSERT undoes only itself in SQLite: no savepoint needed).
        cur = self._cur
        created = ts(q.created_at)
        cur.execute(INSERT_NONCE, (self.account, q.nonce.hex(), q.quote_id, created))
        row = (q.quote_id, q.quote_hash, created, ts(q.deadline), q.asset_in, q.asset_out,
               str(q.amount_in), str(q.amount_out), str(q.fee), q.nonce,
               orjson.dumps(signed_data or {}).decode(), "OPEN", None, q.exact_in,
               q.partner_id)  # fmt: skip
        try:
            cur.execute(INSERT_QUOTE, row)
        except sqlite3.Error:
            cur.execute(DELETE_NONCE, (self.account, q.nonce.hex()))
            raise

    def _undo_opened(self, q: f.QuoteOpened) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._cur.execute("DELETE FROM quotes WHERE quote_id = ?", (q.quote_id,))
            self._cur.execute(DELETE_NONCE, (self.account, q.nonce.hex()))

    def _project(self, fact: f.Fact) -> None:
        cur = self._cur
        if type(fact) is f.QuoteMoved:
            at = ts(fact.at)
            old = cur.execute(SELECT_STATE, (fact.quote_id,)).fetchone()
            cur.execute(
                UPDATE_STATE,
                (fact.new, at, fact.reason, fact.intent_hash, fact.tx_hash, fact.quote_id),
            )
            cur.execute(
                INSERT_TRANSITION,
                (fact.quote_id, old[0] if old else "?", fact.new, at, fact.reason,
                 fact.intent_hash, fact.tx_hash),
            )  # fmt: skip
            if fact.new == "SETTLED":
                fill = fact.fill
                prices = (None, None, None) if fill is None else (
                    repr(fill.price_in), repr(fill.price_out), repr(fill.realized_usd)
                )  # fmt: skip
                cur.execute(INSERT_FILL_FROM_QUOTE, (at, *prices, fact.quote_id))
        elif type(fact) is f.Markout:
            path = f'$."{fact.horizon_s}"'
            cur.execute(UPDATE_MARKOUT, (path, fact.value_usd, fact.quote_id))  # a JSON number
        elif type(fact) is f.BalancesReconciled:
            at = ts(fact.observed)
            want = fact.expected or {}
            for asset, amount in fact.balances.items():
                expected = want.get(asset)
                row = (at, asset, str(amount), None if expected is None else str(expected))
                cur.execute(INSERT_BALANCE, row)
        elif type(fact) is f.PauseSet and fact.kind != "operator":
            cur.execute(INSERT_ALERT, (ts(fact.at), fact.kind, fact.reason))
        elif type(fact) is f.PauseCleared and fact.kind != "operator":
            cur.execute(RESOLVE_ALERTS, (ts(fact.at), fact.kind))

    def commit(self) -> None:
        """Make everything appended so far durable (the group commit)."""
        if self._conn.in_transaction:
            try:
                self._cur.execute("COMMIT")
            except sqlite3.Error as exc:
                self.rollback()
                raise StoreError(f"cannot commit the journal: {exc}") from None

    def rollback(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._cur.execute("ROLLBACK")

    # ------------------------------------------------------------------ reading

    def load(self) -> tuple[dict[str, Any] | None, list[f.Fact]]:
        """The latest desk snapshot (or None) and every fact appended after it, in order.

        An entry that cannot be read back stops the start with its sequence number: applying
        the rest without it would rebuild a desk that is silently wrong."""
        row = self._conn.execute(
            "SELECT seq, body FROM desk_snapshots ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        snapshot: dict[str, Any] | None = None
        after = 0
        if row is not None:
            after = int(row[0])
            try:
                snapshot = orjson.loads(row[1])
            except orjson.JSONDecodeError as exc:
                raise StoreError(
                    f"the desk snapshot at journal entry {after} is damaged: {exc}"
                ) from None
        facts: list[f.Fact] = []
        sql = "SELECT seq, kind, body FROM journal WHERE seq > ? ORDER BY seq"
        for seq, kind, body in self._conn.execute(sql, (after,)):
            try:
                facts.append(f.decode(kind, orjson.loads(body)))
            except (f.FactError, orjson.JSONDecodeError) as exc:
                raise StoreError(f"journal entry {seq} ({kind}) cannot be read: {exc}") from None
        return snapshot, facts

    def write_snapshot(self, body: Mapping[str, Any], at: datetime) -> int:
        """Store a desk snapshot covering every fact appended so far (committed with them).
        Returns the journal position it covers. Older snapshots but the previous are dropped."""
        self.commit()
        row = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
        seq = int(row[0])
        try:
            cur = self._cur
            cur.execute("BEGIN")
            cur.execute(
                "INSERT OR REPLACE INTO desk_snapshots (seq, at, body) VALUES (?, ?, ?)",
                (seq, f.micros(at), orjson.dumps(dict(body)).decode()),
            )
            cur.execute(
                "DELETE FROM desk_snapshots WHERE seq < (SELECT seq FROM desk_snapshots "
                "ORDER BY seq DESC LIMIT 1 OFFSET 1)"
            )
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            self.rollback()
            raise StoreError(f"cannot write the desk snapshot: {exc}") from None
        return seq


def _at(fact: f.Fact) -> datetime:
    if type(fact) is f.BalancesReconciled:
        return fact.observed
    if type(fact) is f.QuoteOpened:
        return fact.created_at
    at: datetime = getattr(fact, "at")  # noqa: B009 (every other fact has ``at``)
    return at


def _error(exc: sqlite3.Error, fact: f.Fact, account: str) -> StoreError:
    if (
        type(fact) is f.QuoteOpened
        and isinstance(exc, sqlite3.IntegrityError)
        and "nonces." in str(exc)
    ):
        return NonceReusedError(
            f"nonce {fact.nonce.hex()} of {account} was signed before; quote {fact.quote_id} "
            "not recorded"
        )
    return StoreError(f"cannot record {f.kind_of(fact)}: {exc}")
