"""The store's schema versions and how a store reaches the newest, on SQLite and PostgreSQL
(the tables themselves: :mod:`solver.io.store.tables`; their conventions:
:mod:`solver.io.store.schema`).

Migration ``n`` takes a database from version ``n - 1`` to ``n``, and ``schema_version`` holds
the version reached. Opening an older database applies the missing ones, each in its own
transaction, so a crash mid-migration leaves the last complete version. A shipped migration is
never edited; a change is a new entry at the end. A database newer than the code is refused
rather than guessed at.

Versions 1 to 10 are SQLite's history (:data:`~solver.io.store.migration_history.HISTORY`, SQL
as it was shipped): an SQLite store older than version 10 walks it. A new store, on either
backend, is created at version 10 from :data:`~solver.io.store.tables.TABLES` in one step, and
a test checks that the history and the tables give the same schema. Every migration after 10
(:data:`LATER`) is written once, as dialect-free steps, and applied to both backends: one
schema, two dialects.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from solver.io.store.migration_history import HISTORY
from solver.io.store.schema import StoreError
from solver.io.store.tables import (
    BASELINE_VERSION,
    AddColumn,
    Column,
    CreateTable,
    Dialect,
    Sql,
    Step,
    Table,
    baseline,
    render,
    tables,
)

log = logging.getLogger("solver.store")
_COUNTS_BACKFILL = (
    "INSERT INTO quote_counts (minute, asset_in, asset_out, size_bucket, state, n) "
    "SELECT substr(created_at, 1, 16) || ':00.000000+00:00', asset_in, asset_out, "
    "length(amount_in), state, COUNT(*) FROM quotes GROUP BY 1, 2, 3, 4, 5"
)
LATER: tuple[tuple[Step, ...], ...] = (
    # 11: lost quotes sampled (issue 29; solver.io.store.quote_rows).
    (
        # Every quote counted by the minute it was created in, its pair (a direction), the
        # decimal digits of its amount_in and its state now: the totals and rates, exact,
        # while a lost quote keeps a row only when it is sampled
        # (storage.lost_quote_sample_rate).
        CreateTable(
            Table(
                "quote_counts",
                (
                    Column("minute"),
                    Column("asset_in"),
                    Column("asset_out"),
                    Column("size_bucket", "int"),
                    Column("state"),
                    Column("n", "bigint"),
                ),
                primary_key=("minute", "asset_in", "asset_out", "size_bucket", "state"),
                without_rowid=True,
            )
        ),
        # The quotes an older store has rows for, counted as they are.
        Sql(_COUNTS_BACKFILL, _COUNTS_BACKFILL),
        # How many quotes of its state a row stands for: 1 / the rate for a sampled quote
        # while it is open or lost, 1 for every other (all of them keep their row).
        AddColumn("quotes", Column("weight", "real", default="1")),
        # The journal entry of the oldest quote still open, where the projection's memory of
        # the open quotes is rebuilt from; and the sample rate it used last (for the readers).
        AddColumn("projection", Column("open_from", "bigint", null=True)),
        AddColumn("projection", Column("lost_sample_rate", "real", null=True)),
        Sql("UPDATE projection SET open_from = seq", "UPDATE projection SET open_from = seq"),
    ),
)
"""Migrations 11, 12, ... for both backends (``LATER[0]`` is migration 11)."""
assert len(HISTORY) == BASELINE_VERSION
MIGRATIONS: tuple[tuple[str, ...], ...] = HISTORY + tuple(
    tuple(sql for step in steps for sql in render(step, "sqlite")) for steps in LATER
)
"""Every SQLite migration, in order (``MIGRATIONS[n - 1]`` is migration ``n``)."""
PG_MIGRATIONS: dict[int, tuple[str, ...]] = {
    BASELINE_VERSION + 1 + i: tuple(sql for step in steps for sql in render(step, "postgresql"))
    for i, steps in enumerate(LATER)
}
"""The PostgreSQL migrations after the baseline, by version."""
SCHEMA_VERSION = len(MIGRATIONS)


def current_tables(dialect: Dialect) -> tuple[Table, ...]:
    """The tables of a store at :data:`SCHEMA_VERSION` in ``dialect``: the baseline's and those
    a later migration created (columns added later are not listed)."""
    later = tuple(
        step.table
        for steps in LATER
        for step in steps
        if isinstance(step, CreateTable) and step.table.only in (None, dialect)
    )
    return tables(dialect) + later


def schema_version(conn: sqlite3.Connection) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _newer(version: int) -> StoreError:
    return StoreError(
        f"the store is at schema version {version}, newer than this program's "
        f"{SCHEMA_VERSION}: upgrade the program"
    )


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the database up to ``target``; return the version it was at.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each step runs under
    ``BEGIN IMMEDIATE`` and re-reads the version inside it, so two processes opening one old
    database at once migrate it once. A new database whose target is at least version 10 is
    created there in one step (:func:`~solver.io.store.tables.baseline`).
    """
    start = current = schema_version(conn)
    if start > SCHEMA_VERSION:
        raise _newer(start)
    while current < target:
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = schema_version(conn)
            if current < target:
                if current == 0 and target >= BASELINE_VERSION:
                    statements, reached = baseline("sqlite"), BASELINE_VERSION
                else:
                    statements, reached = MIGRATIONS[current], current + 1
                if current:  # an existing store, said before it runs: a rebuild (7) takes a while
                    log.info("migrating the store to schema version %d", reached)
                for statement in statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (reached,))
                current = reached
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return start


PG_LOCK = 27_0001
"""The advisory lock that serialises migrations of one PostgreSQL database."""


def migrate_pg(conn: Any) -> int:
    """Bring a PostgreSQL store (a psycopg connection, autocommit) to :data:`SCHEMA_VERSION`;
    return the version it was at. PostgreSQL support began at version 10: a new store is
    created there, then takes the later migrations. Instances starting together migrate once
    (an advisory lock held through the migration)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        start = int(row[0]) if row is not None and row[0] is not None else 0
        if start > SCHEMA_VERSION:
            raise _newer(start)
        current = start
        if current == 0:
            for statement in baseline("postgresql"):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (BASELINE_VERSION,))
            current = BASELINE_VERSION
        for version in range(current + 1, SCHEMA_VERSION + 1):
            log.info("migrating the store to schema version %d", version)
            for statement in PG_MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return start
