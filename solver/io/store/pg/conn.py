"""Connecting to PostgreSQL, and the adapter that lets the SQLite store's SQL run on it.

The password comes from an environment variable named in the config (``storage.password_env``),
never from YAML, and is never part of a URL this module logs or shows: :func:`redact` is what
every message uses.

:class:`PgConn` takes the statements of :mod:`solver.io.store.queries` and
:mod:`solver.io.store.projection` as written for SQLite — ``?`` and ``?N`` parameters, a few
SQLite spellings — and runs them on a psycopg connection, so the tables people query are derived
and read by one set of code on both backends. The few statements whose SQLite spelling has no
PostgreSQL equivalent are translated by exact text in :data:`TRANSLATED`, so each translation is
visible and tested, not guessed by a regex. It binds parameters client-side
(``psycopg.ClientCursor``): the SQLite statements compare untyped parameters (``?1 IS NULL``),
which server-side binding cannot type. The hot path (:mod:`solver.io.store.pg.journal`) does not
go through it: it sends its columns as :class:`BigintArray` and :class:`TextArray`, arrays
already in PostgreSQL's binary format, which every connection made here passes as they are.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types
from psycopg.pq import Format

from solver.io.store.projection import INSERT_FILL_FROM_QUOTE, SELECT_POSITION, UPDATE_MARKOUT
from solver.io.store.schema import INSERT_FILL, SAVE_REBALANCE, StoreError

CONNECT_TIMEOUT_S = 3
STATEMENT_TIMEOUT_MS = 2000
"""No statement may hold the event loop longer than this (the lease is a few seconds)."""
LOCK_TIMEOUT_MS = 500
"""Nor wait for a lock longer than this (a lock is held for a statement or a short batch)."""
IDLE_IN_TRANSACTION_MS = 1000
"""A session that stops in the middle of a transaction (a process stopped by SIGSTOP inside
its projection or a snapshot) is ended by the server after this long, so the locks it holds —
the lease row among them — cannot stop the next active. Every transaction of the store runs
its statements back to back on the event loop: milliseconds."""
TCP_USER_TIMEOUT_MS = 2000


class BigintArray(bytes):
    """A ``bigint[]`` in PostgreSQL's binary array format (:func:`bigint_array`), sent as is."""


class TextArray(bytes):
    """A ``text[]`` in PostgreSQL's binary array format (:func:`text_array`), sent as is."""


_HEADER = struct.Struct(">iiIii")
_INT8, _TEXT = pg_types["int8"], pg_types["text"]
BIGINT_ELEMENT = struct.Struct(">iq")
"""A ``bigint`` element of a binary array: its length (8), then its value."""
TEXT_LENGTH = struct.Struct(">i")
"""What comes before a ``text`` element of a binary array: its length in bytes (UTF-8)."""


@functools.cache
def text_element(text: str) -> bytes:
    """``text`` as an element of a binary ``text[]`` (its length, then its UTF-8), made once
    per text: for the few texts sent again and again (the journal's kinds)."""
    encoded = text.encode()
    return TEXT_LENGTH.pack(len(encoded)) + encoded


def bigint_array(n: int, elements: bytes | bytearray) -> BigintArray:
    """``n`` elements, each already a :data:`BIGINT_ELEMENT`, as one ``bigint[]`` (``n`` > 0)."""
    return BigintArray(_HEADER.pack(1, 0, _INT8.oid, n, 1) + elements)


def text_array(n: int, elements: bytes | bytearray) -> TextArray:
    """``n`` elements, each its :data:`TEXT_LENGTH` then its UTF-8 text, as one ``text[]``
    (``n`` > 0): a header (one dimension, no NULL, the element's type, ``n``, lower bound 1) and
    the elements as they are — what psycopg's list dumper builds by looking at every element
    (and, in text format, escaping every ``"`` of a JSON body), once per commit instead."""
    return TextArray(_HEADER.pack(1, 0, _TEXT.oid, n, 1) + elements)


class _BigintArrayDumper(Dumper):
    format = Format.BINARY
    oid = _INT8.array_oid

    def dump(self, obj: Any) -> bytes:
        return cast(bytes, obj)  # a BigintArray is its binary form


class _TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = _TEXT.array_oid

    def dump(self, obj: Any) -> bytes:
        return cast(bytes, obj)  # a TextArray is its binary form


def redact(url: str) -> str:
    """``url`` without any password in it (for logs, errors and reprs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def connect(
    url: str, password_env: str | None, *, autocommit: bool = True, application_name: str = "solver"
) -> psycopg.Connection:
    """A connection to ``url``, its password from the variable ``password_env`` (if any).
    Raises :class:`StoreError` naming the redacted URL."""
    password = os.environ.get(password_env) if password_env else None
    if password_env and not password:
        raise StoreError(f"the store's password variable {password_env} is not set")
    kwargs: dict[str, Any] = {
        "autocommit": autocommit,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "options": (
            f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={LOCK_TIMEOUT_MS} "
            f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS} -c TimeZone=UTC"
        ),
        "application_name": application_name,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 1,
        "keepalives_count": 3,
        # A server gone silent (a partition, no RST) must not hold the event loop for minutes:
        # unacknowledged data fails the connection after this long (Linux).
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
    }
    if password:
        kwargs["password"] = password
    try:
        conn = psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to the store {redact(url)}: {exc}") from None
    conn.adapters.register_dumper(BigintArray, _BigintArrayDumper)
    conn.adapters.register_dumper(TextArray, _TextArrayDumper)
    return conn


def _fill(sqlite_sql: str) -> str:
    """``INSERT OR REPLACE INTO fills`` as an upsert of every column."""
    sql = sqlite_sql.replace("INSERT OR REPLACE INTO", "INSERT INTO")
    columns = sql[sql.index("(") + 1 : sql.index(")")].split(", ")
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c != "quote_id")
    return f"{sql} ON CONFLICT (quote_id) DO UPDATE SET {updates}"


def _rebalance(sqlite_sql: str) -> str:
    sql = sqlite_sql.replace("INSERT OR REPLACE INTO", "INSERT INTO")
    columns = sql[sql.index("(") + 1 : sql.index(")")].split(", ")
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c != "id")
    return f"{sql} ON CONFLICT (id) DO UPDATE SET {updates}"


TRANSLATED: dict[str, str] = {
    INSERT_FILL_FROM_QUOTE: _fill(INSERT_FILL_FROM_QUOTE),
    INSERT_FILL: _fill(INSERT_FILL),
    SAVE_REBALANCE: _rebalance(SAVE_REBALANCE),
    # json_set with a JSON path '$."60"' and a number: jsonb_set with the path's key.
    UPDATE_MARKOUT: (
        "UPDATE fills SET markouts = jsonb_set(markouts::jsonb, "
        "ARRAY[trim(both '\"' from substr(?, 3))], to_jsonb(?::double precision))::text "
        "WHERE quote_id = ?"
    ),
    "BEGIN IMMEDIATE": "BEGIN",
    # Two instances may both project (a fenced-out one finishing its turn): the position is
    # locked for the batch; the second, finding it locked, projects nothing this time rather
    # than wait on the event loop (the projection reads no row and stops).
    SELECT_POSITION: SELECT_POSITION + " FOR UPDATE SKIP LOCKED",
}
"""SQLite statements with no PostgreSQL twin, by their exact text."""
_NUMBERED = re.compile(r"\?(\d+)")
_SQLITE_ONLY = (
    ("TOTAL(CAST(realized_pnl_usd AS REAL))", "COALESCE(SUM(CAST(realized_pnl_usd AS REAL)), 0)"),
    ("ORDER BY rowid", "ORDER BY 1"),
    ("INSERT OR IGNORE INTO nonce_prefixes", "INSERT INTO nonce_prefixes"),
)


def translate(sql: str, params: Sequence[Any] | None) -> tuple[str, Sequence[Any] | None]:
    """The PostgreSQL statement and parameters for SQLite's ``sql``."""
    sql = TRANSLATED.get(sql, sql)
    for sqlite, pg in _SQLITE_ONLY:
        if sqlite in sql:
            sql = sql.replace(sqlite, pg)
            if pg.startswith("INSERT INTO nonce_prefixes"):
                sql += " ON CONFLICT DO NOTHING"
    sql = sql.replace("%", "%%")
    if params is not None:  # SQLite stores a bool as 0 or 1; the columns are INTEGER on both
        params = [int(v) if type(v) is bool else v for v in params]
    if params is not None and _NUMBERED.search(sql):
        values = list(params)
        sql = _NUMBERED.sub(lambda m: f"%(p{m.group(1)})s", sql)
        return sql, {f"p{i + 1}": v for i, v in enumerate(values)}  # type: ignore[return-value]
    return sql.replace("?", "%s"), params


class PgConn:
    """A psycopg connection that takes the SQLite store's SQL (``execute``, ``cursor``,
    ``executemany``, ``in_transaction``: what the shared queries, the projection and the
    retention use)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.raw = conn

    @property
    def in_transaction(self) -> bool:
        """In a transaction that a ROLLBACK can end (not on a lost connection: UNKNOWN)."""
        status = self.raw.info.transaction_status
        return status in (
            psycopg.pq.TransactionStatus.INTRANS,
            psycopg.pq.TransactionStatus.INERROR,
        )

    def cursor(self) -> PgCursor:
        return PgCursor(psycopg.ClientCursor(self.raw))

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> PgCursor:
        return self.cursor().execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> PgCursor:
        return self.cursor().executemany(sql, rows)


class PgCursor:
    """A client-side cursor that translates each statement (:func:`translate`)."""

    def __init__(self, cur: psycopg.ClientCursor[Any]) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> PgCursor:
        query, args = translate(sql, params)
        self._cur.execute(query, args)
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> PgCursor:
        query, _ = translate(sql, None)
        self._cur.executemany(query, rows)
        return self

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    @property
    def description(self) -> Any:
        return self._cur.description

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchmany(self, size: int) -> list[Any]:
        return self._cur.fetchmany(size)

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall()

    def close(self) -> None:
        self._cur.close()

    def __iter__(self) -> Any:
        return iter(self._cur)
