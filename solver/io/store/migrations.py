"""The store's schema versions and how a store reaches the newest, on SQLite and PostgreSQL
(the tables themselves: :mod:`solver.io.store.tables`; their conventions:
:mod:`solver.io.store.schema`).

Migration ``n`` takes a database from version ``n - 1`` to ``n``, and ``schema_version`` holds
the version reached. Opening an older database applies the missing ones, each in its own
transaction, so a crash mid-migration leaves the last complete version. A shipped migration is
never edited; a change is a new entry at the end. A database newer than the code is refused
rather than guessed at.

Versions 1 to 10 are SQLite's history (:data:`HISTORY`, SQL as it was shipped): an SQLite store
older than version 10 walks it. A new store, on either backend, is created at version 10 from
:data:`~solver.io.store.tables.TABLES` in one step, and a test checks that the history and the
tables give the same schema. Every migration after 10 (:data:`LATER`) is written once, as
dialect-free steps, and applied to both backends: one schema, two dialects.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

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
_QUOTE_COLUMNS = (
    "quote_id, quote_hash, created_at, deadline, asset_in, asset_out, amount_in, amount_out, "
    "fee, nonce, signed_data, state, intent_hash, tx_hash, reason, updated_at, exact_in, "
    "partner_id"
)
_JSON_TEXT = ("plan", "quote_request", "quote_response", "deposit_signed", "status_response")
_REBALANCE_DOC = ", ".join(
    f"'{column}', " + (f"json({column})" if column in _JSON_TEXT else column)
    for column in (
        "id", "created_at", "updated_at", "state", "asset", "asset_in", "asset_out", "amount_in",
        "plan", "reason", "quote_request", "quote_response", "quote_signature",
        "deposit_address", "deposit_memo", "amount_out", "min_amount_out",
        "deposit_intent_hash", "deposit_signed", "deposit_nonce", "deposit_deadline",
        "deposit_tx_hash", "swap_status", "status_response", "finished_at",
    )
)  # fmt: skip
"""Migration 10's document of a ``rebalances`` row (its JSON columns embedded as JSON)."""
HISTORY: tuple[tuple[str, ...], ...] = (
    # 1: the quote journal: every signed quote, its nonce, and its state changes.
    (
        """CREATE TABLE quotes (
            quote_id TEXT PRIMARY KEY,
            quote_hash TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            deadline TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            amount_out TEXT NOT NULL,
            fee TEXT NOT NULL,
            nonce BLOB NOT NULL,
            signed_data TEXT NOT NULL,
            state TEXT NOT NULL,
            intent_hash TEXT,
            tx_hash TEXT,
            reason TEXT,
            updated_at TEXT
        )""",
        "CREATE INDEX quotes_created_at ON quotes (created_at)",
        "CREATE INDEX quotes_open ON quotes (state) WHERE state IN ('OPEN', 'WON', 'SETTLING')",
        """CREATE TABLE transitions (
            id INTEGER PRIMARY KEY,
            quote_id TEXT NOT NULL,
            old TEXT NOT NULL,
            new TEXT NOT NULL,
            at TEXT NOT NULL,
            reason TEXT,
            intent_hash TEXT,
            tx_hash TEXT
        )""",
        "CREATE INDEX transitions_quote_id ON transitions (quote_id)",
        """CREATE TABLE nonces (
            account TEXT NOT NULL,
            nonce TEXT NOT NULL,
            quote_id TEXT,
            signed_at TEXT NOT NULL,
            PRIMARY KEY (account, nonce)
        ) WITHOUT ROWID""",
    ),
    # 2: what settled and what it earned, balance snapshots, alerts.
    (
        """CREATE TABLE fills (
            quote_id TEXT PRIMARY KEY,
            quote_hash TEXT NOT NULL,
            intent_hash TEXT,
            tx_hash TEXT,
            at TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_out TEXT NOT NULL,
            fee TEXT NOT NULL,
            price_in_usd TEXT,
            price_out_usd TEXT,
            realized_pnl_usd TEXT,
            markouts TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX fills_at ON fills (at)",
        """CREATE TABLE balance_snapshots (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            asset TEXT NOT NULL,
            amount TEXT NOT NULL,
            expected TEXT
        )""",
        "CREATE INDEX balance_snapshots_at ON balance_snapshots (at)",
        """CREATE TABLE alerts (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            kind TEXT NOT NULL,
            detail TEXT NOT NULL,
            resolved_at TEXT
        )""",
        "CREATE INDEX alerts_open ON alerts (kind) WHERE resolved_at IS NULL",
    ),
    # 3: a sample of the quote requests seen; the request side of each quote.
    (
        """CREATE TABLE requests (
            id INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            quote_id TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            exact_in INTEGER NOT NULL,
            amount TEXT NOT NULL,
            min_deadline_ms INTEGER NOT NULL,
            partner_id TEXT,
            outcome TEXT NOT NULL,
            reason TEXT
        )""",
        "CREATE INDEX requests_ts ON requests (ts)",
        "ALTER TABLE quotes ADD COLUMN exact_in INTEGER",
        "ALTER TABLE quotes ADD COLUMN partner_id TEXT",
    ),
    # 4: rebalances through the swap API, each step as it happened (solver.rebalance.rebalancer).
    (
        """CREATE TABLE rebalances (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            state TEXT NOT NULL,
            asset TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            plan TEXT NOT NULL,
            reason TEXT,
            quote_request TEXT,
            quote_response TEXT,
            quote_signature TEXT,
            deposit_address TEXT,
            deposit_memo TEXT,
            amount_out TEXT,
            min_amount_out TEXT,
            deposit_intent_hash TEXT,
            deposit_signed TEXT,
            deposit_nonce TEXT,
            deposit_deadline TEXT,
            deposit_tx_hash TEXT,
            swap_status TEXT,
            status_response TEXT,
            finished_at TEXT
        )""",
        "CREATE INDEX rebalances_created_at ON rebalances (created_at)",
        "CREATE INDEX rebalances_open ON rebalances (state) WHERE finished_at IS NULL",
        """CREATE TABLE rebalance_steps (
            id INTEGER PRIMARY KEY,
            rebalance_id TEXT NOT NULL,
            at TEXT NOT NULL,
            state TEXT NOT NULL,
            detail TEXT
        )""",
        "CREATE INDEX rebalance_steps_rebalance_id ON rebalance_steps (rebalance_id)",
    ),
    # 5: the desk's journal (solver.core.facts): every state change, in order, and snapshots of
    # the desk that let a restart apply only what came after them.
    (
        """CREATE TABLE journal (
            seq INTEGER PRIMARY KEY,
            at INTEGER NOT NULL,
            kind TEXT NOT NULL,
            body TEXT NOT NULL
        )""",
        """CREATE TABLE desk_snapshots (
            seq INTEGER PRIMARY KEY,
            at INTEGER NOT NULL,
            body TEXT NOT NULL
        )""",
    ),
    # 6: how far the query tables (quotes, transitions, fills, balances, alerts) have been
    # derived from the journal: the quote path appends only the journal (and, before version 8,
    # the nonce), and the projection catches up in batches, off the quote path
    # (solver.io.store.projection).
    (
        "CREATE TABLE projection (seq INTEGER NOT NULL)",
        # A version-5 store projected each fact as it was appended: all of it is done.
        "INSERT INTO projection (seq) SELECT COALESCE(MAX(seq), 0) FROM journal",
    ),
    # 7: no UNIQUE index on quotes.quote_hash. Nothing looks a quote up by its hash in the
    # store (the desk keeps its own map), and the index, keyed by a random hash, cost the
    # projection ~15 µs and a random B-tree page of WAL per answer (issue 11). SQLite drops a
    # column constraint only by rebuilding the table: once, ~15 s per million quotes (measured).
    # The new table is spelled out, not derived from migration 1's text: a migration is a
    # frozen record of what it did.
    (
        """CREATE TABLE quotes_v7 (
            quote_id TEXT PRIMARY KEY,
            quote_hash TEXT NOT NULL,
            created_at TEXT NOT NULL,
            deadline TEXT NOT NULL,
            asset_in TEXT NOT NULL,
            asset_out TEXT NOT NULL,
            amount_in TEXT NOT NULL,
            amount_out TEXT NOT NULL,
            fee TEXT NOT NULL,
            nonce BLOB NOT NULL,
            signed_data TEXT NOT NULL,
            state TEXT NOT NULL,
            intent_hash TEXT,
            tx_hash TEXT,
            reason TEXT,
            updated_at TEXT,
            exact_in INTEGER,
            partner_id TEXT
        )""",
        f"INSERT INTO quotes_v7 ({_QUOTE_COLUMNS}) SELECT {_QUOTE_COLUMNS} FROM quotes",  # noqa: S608 (constants)
        "DROP TABLE quotes",
        "ALTER TABLE quotes_v7 RENAME TO quotes",
        "CREATE INDEX quotes_created_at ON quotes (created_at)",
        "CREATE INDEX quotes_open ON quotes (state) WHERE state IN ('OPEN', 'WON', 'SETTLING')",
    ),
    # 8: the prefixes of the bot's quote nonce sequences, one per start
    # (solver.protocol.nonce.NonceSequence). Quote nonces are unique by construction and no
    # longer write a ``nonces`` row each: keyed by a random nonce, that row cost the quote path
    # ~26 µs and a random B-tree page of WAL per answer (issue 11). ``nonces`` keeps the
    # nonces of rebalance deposits, and of the quotes signed before this version.
    (
        """CREATE TABLE nonce_prefixes (
            account TEXT NOT NULL,
            prefix BLOB NOT NULL,
            claimed_at TEXT NOT NULL,
            PRIMARY KEY (account, prefix)
        )""",
    ),
    # 9: no partial index of the open quotes. Nothing queries the table by state since the
    # desk is rebuilt from the journal (it was for the old restart's ``load_open_quotes``),
    # and every quote entered it at projection and left it when it expired: ~8 µs and a
    # random B-tree page per answer, about a fifth of the projection (issue 11).
    ("DROP INDEX IF EXISTS quotes_open",),
    # 10: rebalances are desk facts (``rebalance_stepped``, solver.core.rebalancing): the
    # journal carries each step and the ``rebalances`` tables are projected from it. The
    # unfinished rows of an older store, which its rebalancer wrote itself, are carried into
    # the journal as one ``carried`` step each (the row as it is: their steps are in
    # ``rebalance_steps`` already), so the desk holds them and the rebalancer takes them up.
    # The document is the row, column for column (solver.core.rebalance_record.record_doc).
    (
        f"""INSERT INTO journal (at, kind, body)
        SELECT CAST(strftime('%s', updated_at) AS INTEGER) * 1000000
                   + CAST(substr(updated_at, 21, 6) AS INTEGER),
               'rebalance_stepped',
               json_object('record', json_object({_REBALANCE_DOC}), 'detail', NULL,
                           'carried', json('true'))
        FROM rebalances WHERE finished_at IS NULL ORDER BY created_at""",  # noqa: S608 (constants)
    ),
)
"""SQLite's migrations 1 to 10, frozen."""
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
