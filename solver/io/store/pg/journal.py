"""The desk's journal on PostgreSQL, fenced by the lease (DESIGN "Persistence is the desk's
journal"; the SQLite twin: :mod:`solver.io.store.journal`).

:meth:`PgJournal.append` only encodes the fact and keeps it in memory: no round trip per fact.
:meth:`PgJournal.commit` — the group commit, once per loop turn, before any answer of the turn
leaves — writes the turn's facts in ONE statement, which is also ONE transaction::

    WITH fence AS (SELECT 1 FROM lease WHERE account = .. AND holder = .. AND epoch = ..
                   AND expires_at > now() FOR UPDATE)
    INSERT INTO journal (at, kind, body) SELECT .. FROM fence, unnest(..) ..

If this instance does not hold the lease with its epoch, unexpired, the fence has no row and
nothing is inserted: the commit raises :class:`~solver.io.store.schema.FencedError` and the
executor sends none of the turn's answers. ``FOR UPDATE`` makes a successor's taking wait until
the commit is over, so what the old active sent is always in the journal the successor replays.
It is also one round trip on the event loop (~0.2 ms on loopback: docs/operations.md), which is
why the connection is synchronous: the executor commits synchronously at the end of its turn and
nothing of the turn may run before the commit returns anyway.

The three columns go as three parameters, each one array in PostgreSQL's binary format, built
as the facts are appended (each element its length, then its bytes: the body is orjson's UTF-8
as it is), on a cursor kept with its connection; the statement is prepared after its first
executions. Sent as text arrays, psycopg quoted each body and escaped each of its ``"`` with a
regular expression: ~90 µs of the bot's CPU an answer, most of the PostgreSQL bot's extra cost
at saturation (issue 29, docs/performance.md).

Before the statement, the lease's own clock is asked (:meth:`Lease.check`): an instance past
its deadline commits nothing, whatever the database would say.

A connection that breaks (the server restarted, ``pg_terminate_backend``) is made again inside
the commit, which then learns from the journal's last entry whether its batch landed before the
break (under the lease nobody else writes it) and writes it only if not: no entry twice, none
lost, and no ``store_error`` pause for a cut connection. A commit that cannot connect again
fails as a SQLite commit does (nothing of it is written; the executor pauses quoting and
appends the desk's facts again).

The store commits too, before its own writes and reads (a projection slice, a nonce, a
snapshot: :meth:`PgJournal.commit_aside`), carrying whatever the executor appended. When such a
commit fails, its rows are gone, but the executor did not see it fail: its next commit fails
too (:attr:`PgJournal.lost`, as on SQLite), so it sends none of the answers it holds and
appends its other facts again. Without that, its next commit found nothing to write, succeeded,
and sent answers whose facts were never written (a server restart, seen in
``tests/pg/test_pg_restart.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import psycopg

from solver.core import fact_codec
from solver.core import facts as f
from solver.core.clock import Micros
from solver.io.store.journal import DROP_OLD_SNAPSHOTS, _at
from solver.io.store.pg.conn import (
    BIGINT_ELEMENT,
    TEXT_LENGTH,
    BigintArray,
    TextArray,
    bigint_array,
    text_array,
    text_element,
)
from solver.io.store.pg.lease import Lease
from solver.io.store.schema import FencedError, StoreError

log = logging.getLogger("solver.store")

FENCED_INSERT = """
WITH fence AS (
    SELECT 1 FROM lease
    WHERE account = %s AND holder = %s AND epoch = %s AND expires_at > now() FOR UPDATE
)
INSERT INTO journal (at, kind, body)
SELECT v.at, v.kind, v.body
FROM fence, unnest(%b::bigint[], %b::text[], %b::text[]) WITH ORDINALITY AS v(at, kind, body, n)
ORDER BY v.n
RETURNING seq
"""
_OPENED = text_element(f.KIND_OF[f.QuoteOpened])
Rows = tuple[BigintArray, TextArray, TextArray]
"""A group commit's ``at``, ``kind`` and ``body`` columns, each one binary array."""
FENCE = (
    "SELECT 1 FROM lease WHERE account = %s AND holder = %s AND epoch = %s "
    "AND expires_at > now() FOR UPDATE"
)


class PgJournal:
    """The journal of a :class:`~solver.io.store.pg.store.PgStore` (same interface as
    :class:`~solver.io.store.journal.SqliteJournal`)."""

    def __init__(self, conn: Callable[[], psycopg.Connection], lease: Lease) -> None:
        self._conn = conn
        self.lease = lease
        self.appended = 0
        """Facts appended since this journal was opened (only grows; read by pacings)."""
        self.committed_seq = 0
        """The journal position of the last entry this instance committed."""
        self.held = False
        """Never: the server checkpoints, no pass of this process has the connection (the
        interface of :attr:`SqliteJournal.held`, read by the upkeep's projection pacing)."""
        self.lost: str | None = None
        """Why a commit made aside lost appended facts, until the executor's next commit."""
        self._n = 0
        self._at = bytearray()
        self._kind = bytearray()
        self._body = bytearray()
        """The appended facts' columns, each element already in its binary form (the commit
        sends each column as one binary array: :func:`~solver.io.store.pg.conn.text_array`)."""
        self._cur: psycopg.Cursor[Any] | None = None
        self.on_fenced: Callable[[FencedError], None] | None = None
        """Told once, when a commit finds the lease lost (the bot stops and exits)."""
        self._fenced: FencedError | None = None

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    def append(self, fact: f.Fact) -> None:
        if self._fenced is not None:
            raise self._fenced
        body = orjson.dumps(fact_codec.encode(fact))  # UTF-8 without NUL: a text element as it is
        if type(fact) is f.QuoteOpened:  # the quote path's fact (as SqliteJournal.append)
            self._at += BIGINT_ELEMENT.pack(8, fact.created_at)
            self._kind += _OPENED
        else:
            self._at += BIGINT_ELEMENT.pack(8, _at(fact))
            self._kind += text_element(f.kind_of(fact))
        self._body += TEXT_LENGTH.pack(len(body))
        self._body += body
        self._n += 1
        self.appended += 1

    def pending(self) -> int:
        return self._n

    def commit(self) -> None:
        """The executor's group commit: write every appended fact, fenced;
        :class:`FencedError` (a :class:`~solver.io.store.schema.StoreError`) if the lease is
        lost, :class:`StoreError` if the database failed — or if a commit the store made
        aside lost appended facts since the last call (:attr:`lost`): none of them is written."""
        lost, self.lost = self.lost, None
        if lost is not None and self._fenced is None:
            self.rollback()  # what was appended since goes again with what was lost
            raise StoreError(f"{lost} (a commit made aside, before a write of the store)")
        self._write()
        self._still_held()

    def _still_held(self) -> None:
        """The lease, by this instance's own clock, as the answers of this commit are about to
        leave. Their facts may have been written a while ago: by a commit the store made aside
        (a projection slice, a read) before a call that then hung on the database, or by an
        insert whose reply came late. Sent once the lease may have run out, an answer could
        reach the relay after a successor's first (a partition, issue 27: one answers at a
        time). The facts stay written; the answers are not sent, and the bot stops fenced."""
        if self._fenced is None and self.lease.epoch is not None:
            try:
                self.lease.check()
            except FencedError as exc:
                self._fence(exc)
                raise

    def commit_aside(self) -> None:
        """The commit the store makes before one of its own writes or reads: it writes what
        the executor appended. If it fails, those rows are gone and the executor's next
        :meth:`commit` fails too (:attr:`lost`). While a loss waits for the executor, nothing
        is written aside: the executor's commit drops it and appends its facts again, so no
        fact is written twice."""
        if self.lost is not None:
            return
        carried = self._n > 0
        try:
            self._write()
        except FencedError:
            raise
        except StoreError as exc:
            if carried:
                self.lost = str(exc)
            raise

    def _write(self) -> None:
        if self._fenced is not None:
            self.rollback()
            raise self._fenced
        n = self._n
        if not n:
            return
        rows = (
            bigint_array(n, self._at),
            text_array(n, self._kind),
            text_array(n, self._body),
        )
        self.rollback()
        try:
            fence = self.lease.fence_params()
        except FencedError as exc:
            self._fence(exc)
            raise
        try:
            seqs = self._cursor().execute(FENCED_INSERT, (*fence, *rows)).fetchall()
        except psycopg.OperationalError as exc:  # the connection broke: did the batch land?
            seqs = self._again(fence, rows, exc)
        except psycopg.Error as exc:
            raise StoreError(f"cannot commit the journal: {exc}") from None
        if not seqs:
            try:
                self.lease.lose("the database refused the commit's fence")
            except FencedError as exc:
                self._fence(exc)
                raise
        self.committed_seq = int(seqs[-1][0])

    def _cursor(self) -> psycopg.Cursor[Any]:
        """The commit's cursor, kept while its connection lasts (a cursor per commit cost
        ~5 µs of its own)."""
        conn = self._conn()
        cur = self._cur
        if cur is None or cur.connection is not conn:
            cur = self._cur = conn.cursor()
        return cur

    def _again(
        self,
        fence: tuple[str, str, int],
        rows: Rows,
        exc: Exception,
    ) -> list[tuple[Any, ...]]:
        """The commit's connection broke (``pg_terminate_backend``, a server restart): connect
        again and find out whether the batch landed before it broke. Under the lease this
        instance is the journal's only writer, so the journal's last entry says it: still the
        last one this instance committed, the batch did not land and is written now (fenced, as
        ever); further on, it did. Raises :class:`StoreError` when that cannot be known."""
        try:
            conn = self._conn()  # a new connection (the store replaces a broken one)
            row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()
            last = int(row[0]) if row is not None else 0
            if last > self.committed_seq:
                log.warning("the journal's connection broke after its commit: it landed")
                return [(seq,) for seq in range(self.committed_seq + 1, last + 1)]
            log.warning("the journal's connection broke (%s): committing on a new one", exc)
            seqs: list[tuple[Any, ...]] = conn.execute(FENCED_INSERT, (*fence, *rows)).fetchall()
        except (psycopg.Error, StoreError) as again:
            raise StoreError(f"cannot commit the journal: {exc}; then: {again}") from None
        return seqs

    def _fence(self, exc: FencedError) -> None:
        first = self._fenced is None
        self._fenced = exc
        if first:
            log.critical("%s: nothing more is committed, sent or signed", exc)
            if self.on_fenced is not None:
                self.on_fenced(exc)

    def rollback(self) -> None:
        self._n = 0
        self._at, self._kind, self._body = bytearray(), bytearray(), bytearray()

    # ------------------------------------------------------------------ reading

    def load(self) -> tuple[dict[str, Any] | None, list[f.Fact]]:
        """The latest desk snapshot (or None) and every fact committed after it, in order
        (the successor calls this after taking the lease: nothing is committed after it)."""
        conn = self._conn()
        try:
            row = conn.execute(
                "SELECT seq, body FROM desk_snapshots ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            snapshot: dict[str, Any] | None = None
            after = 0
            if row is not None:
                after = int(row[0])
                snapshot = orjson.loads(row[1])
            facts: list[f.Fact] = []
            sql = "SELECT seq, kind, body FROM journal WHERE seq > %s ORDER BY seq"
            last = after
            for seq, kind, body in conn.execute(sql, (after,)):
                try:
                    facts.append(fact_codec.decode(kind, orjson.loads(body)))
                except (fact_codec.FactError, orjson.JSONDecodeError) as exc:
                    raise StoreError(
                        f"journal entry {seq} ({kind}) cannot be read: {exc}"
                    ) from None
                last = int(seq)
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the journal: {exc}") from None
        except orjson.JSONDecodeError as exc:
            raise StoreError(
                f"the desk snapshot at journal entry {after} is damaged: {exc}"
            ) from None
        self.committed_seq = last
        return snapshot, facts

    def tail(self, limit: int = 5000) -> list[f.Fact]:
        """Facts committed since the last one :meth:`load` or this returned, in order, at most
        ``limit`` (a standby follows the active's journal with this, so its desk is current
        when it takes over). Raises :class:`StoreError`."""
        sql = "SELECT seq, kind, body FROM journal WHERE seq > %s ORDER BY seq LIMIT %s"
        facts: list[f.Fact] = []
        try:
            rows = self._conn().execute(sql, (self.committed_seq, limit)).fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"cannot read the journal: {exc}") from None
        for seq, kind, body in rows:
            try:
                facts.append(fact_codec.decode(kind, orjson.loads(body)))
            except (fact_codec.FactError, orjson.JSONDecodeError) as exc:
                raise StoreError(f"journal entry {seq} ({kind}) cannot be read: {exc}") from None
            self.committed_seq = int(seq)
        return facts

    def write_snapshot(self, body: Mapping[str, Any], at: Micros) -> int:
        """A desk snapshot covering every fact committed so far (:meth:`snapshot_position`,
        then :meth:`store_snapshot`)."""
        seq = self.store_snapshot(orjson.dumps(dict(body)), at, self.snapshot_position())
        self.drop_old_snapshots()
        return seq

    def snapshot_position(self) -> int:
        """Commit what is appended and return the journal position a desk snapshot taken now
        covers. Refused while a loss waits for the executor (:attr:`lost`): the desk holds
        facts the journal does not."""
        self._refuse_snapshot_while_lost()
        self.commit_aside()
        return self.committed_seq

    def _refuse_snapshot_while_lost(self) -> None:
        if self.lost is not None:
            raise StoreError(f"cannot write the desk snapshot: the journal lost facts: {self.lost}")

    def store_snapshot(self, text: bytes, at: Micros, seq: int) -> int:
        """Store a desk snapshot's JSON ``text`` covering the journal up to ``seq``, fenced
        like a commit (a fenced-out instance's desk is not the journal's any more); returns
        ``seq``. The older ones are dropped by :meth:`drop_old_snapshots`."""
        self._refuse_snapshot_while_lost()
        conn = self._conn()
        try:
            fence = self.lease.fence_params()
        except FencedError as exc:
            self._fence(exc)
            raise
        try:
            with conn.transaction():
                if conn.execute(FENCE, fence).fetchone() is None:
                    raise FencedError("the database refused the snapshot's fence")
                conn.execute(
                    "INSERT INTO desk_snapshots (seq, at, body) VALUES (%s, %s, %s) "
                    "ON CONFLICT (seq) DO UPDATE SET at = EXCLUDED.at, body = EXCLUDED.body",
                    (seq, at, text.decode()),
                )
        except FencedError as exc:
            try:
                self.lease.lose(str(exc))
            except FencedError as lost:
                self._fence(lost)
                raise
        except psycopg.Error as exc:
            raise StoreError(f"cannot write the desk snapshot: {exc}") from None
        return seq

    def drop_old_snapshots(self) -> None:
        """Every desk snapshot but the latest two (a restart reads the latest; the one before
        is kept in case the latest cannot be read). Not fenced: it removes only what a
        newer snapshot covers."""
        conn = self._conn()
        try:
            with conn.transaction():
                conn.execute(DROP_OLD_SNAPSHOTS)
        except psycopg.Error as exc:
            raise StoreError(f"cannot drop the old desk snapshots: {exc}") from None
