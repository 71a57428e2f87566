"""The store's tables, declared once and written out in each backend's dialect (SQLite,
PostgreSQL): the one place their columns are spelled (conventions: :mod:`solver.io.store.schema`).

:data:`TABLES` is the schema at version :data:`BASELINE_VERSION` (10), the version at which
PostgreSQL support began. A new store, on either backend, is created from it in one step
(:func:`baseline`); an older SQLite store reaches it through the frozen history of
:data:`solver.io.store.migrations.MIGRATIONS`, and a test checks that both roads give the same
tables. Like a migration, :data:`TABLES` is a record of what was done and is not edited: a later
change is a migration made of :data:`Step` values (:class:`AddColumn`, :class:`CreateTable`,
:class:`CreateIndex`, :class:`DropIndex`, or :class:`Sql` with a statement per dialect), which
:func:`render` writes out for each backend. So a column is written once, whatever the backend.

What the dialects differ in is said here, in :data:`TYPES` and :func:`_column`: an amount or a
time is TEXT on both (so the shared queries read both), a key that the database numbers is
SQLite's rowid alias or PostgreSQL's identity column, bytes are BLOB or BYTEA, and a few tables
exist on one backend only (the lease, on PostgreSQL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dialect = Literal["sqlite", "postgresql"]
Kind = Literal["text", "int", "bigint", "real", "bytes", "db_time"]

TYPES: dict[Kind, dict[Dialect, str]] = {
    "text": {"sqlite": "TEXT", "postgresql": "TEXT"},
    "int": {"sqlite": "INTEGER", "postgresql": "INTEGER"},
    "bigint": {"sqlite": "INTEGER", "postgresql": "BIGINT"},  # SQLite's INTEGER is 64-bit
    "real": {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION"},  # both IEEE doubles
    "bytes": {"sqlite": "BLOB", "postgresql": "BYTEA"},
    # A time on the database's own clock (the lease's): PostgreSQL only.
    "db_time": {"sqlite": "TEXT", "postgresql": "TIMESTAMPTZ"},
}
"""Each column kind's type per dialect."""
BASELINE_VERSION = 10
"""The schema version :data:`TABLES` describes."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: Kind = "text"
    null: bool = False
    """May hold NULL (every column is NOT NULL unless said)."""
    key: bool = False
    """The table's primary key, on its own."""
    auto: bool = False
    """A key the database numbers (SQLite's rowid alias, PostgreSQL's identity)."""
    default: str | None = None
    """A SQL literal, the same in both dialects."""


@dataclass(frozen=True, slots=True)
class Index:
    name: str
    columns: tuple[str, ...]
    where: str | None = None


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = ()
    primary_key: tuple[str, ...] = ()
    """A key of several columns (one column: :attr:`Column.key`)."""
    without_rowid: bool = False
    """SQLite only: the table is its primary key's B-tree."""
    only: Dialect | None = None
    """The one backend that has this table (None: both)."""


def _text(*names: str, null: bool = False) -> tuple[Column, ...]:
    return tuple(Column(name, null=null) for name in names)


def _id() -> Column:
    return Column("id", "bigint", key=True, auto=True)


REBALANCE_COLUMNS = (
    Column("id", key=True),
    *_text("created_at", "updated_at", "state", "asset", "asset_in", "asset_out", "amount_in",
           "plan"),
    *_text("reason", "quote_request", "quote_response", "quote_signature", "deposit_address",
           "deposit_memo", "amount_out", "min_amount_out", "deposit_intent_hash",
           "deposit_signed", "deposit_nonce", "deposit_deadline", "deposit_tx_hash",
           "swap_status", "status_response", "finished_at", null=True),
)  # fmt: skip
"""The columns of ``rebalances``: :data:`solver.core.rebalance_record.FIELDS`, in order (a test
checks it), as TEXT."""

TABLES: tuple[Table, ...] = (
    # The desk's journal (solver.core.facts), and snapshots of the desk that let a restart apply
    # only what came after them; how far the query tables have been derived from the journal.
    Table("journal", (Column("seq", "bigint", key=True, auto=True), Column("at", "bigint"),
                      *_text("kind", "body"))),
    Table("desk_snapshots", (Column("seq", "bigint", key=True), Column("at", "bigint"),
                             Column("body"))),
    Table("projection", (Column("seq", "bigint"),)),
    # The query tables, projected from the journal (solver.io.store.projection).
    Table(
        "quotes",
        (Column("quote_id", key=True),
         *_text("quote_hash", "created_at", "deadline", "asset_in", "asset_out", "amount_in",
                "amount_out", "fee"),
         Column("nonce", "bytes"),
         *_text("signed_data", "state"),
         *_text("intent_hash", "tx_hash", "reason", "updated_at", null=True),
         Column("exact_in", "int", null=True),
         Column("partner_id", null=True)),
        (Index("quotes_created_at", ("created_at",)),),
    ),
    Table(
        "transitions",
        (_id(), *_text("quote_id", "old", "new", "at"),
         *_text("reason", "intent_hash", "tx_hash", null=True)),
        (Index("transitions_quote_id", ("quote_id",)),),
    ),
    Table(
        "fills",
        (Column("quote_id", key=True), Column("quote_hash"),
         *_text("intent_hash", "tx_hash", null=True),
         *_text("at", "asset_in", "amount_in", "asset_out", "amount_out", "fee"),
         *_text("price_in_usd", "price_out_usd", "realized_pnl_usd", null=True),
         Column("markouts", default="'{}'")),
        (Index("fills_at", ("at",)),),
    ),
    Table(
        "balance_snapshots",
        (_id(), *_text("at", "asset", "amount"), Column("expected", null=True)),
        (Index("balance_snapshots_at", ("at",)),),
    ),
    Table(
        "alerts",
        (_id(), *_text("at", "kind", "detail"), Column("resolved_at", null=True)),
        (Index("alerts_open", ("kind",), where="resolved_at IS NULL"),),
    ),
    # A sample of the quote requests seen.
    Table(
        "requests",
        (_id(), *_text("ts", "quote_id", "asset_in", "asset_out"), Column("exact_in", "int"),
         Column("amount"), Column("min_deadline_ms", "int"), Column("partner_id", null=True),
         Column("outcome"), Column("reason", null=True)),
        (Index("requests_ts", ("ts",)),),
    ),
    # The nonces of rebalance deposits (and of quotes signed before version 8), and the
    # prefixes of the quote nonce sequences, one per start (solver.protocol.nonce).
    Table(
        "nonces",
        (*_text("account", "nonce"), Column("quote_id", null=True), Column("signed_at")),
        primary_key=("account", "nonce"),
        without_rowid=True,
    ),
    Table(
        "nonce_prefixes",
        (Column("account"), Column("prefix", "bytes"), Column("claimed_at")),
        primary_key=("account", "prefix"),
    ),
    # Rebalances through the swap API (solver.core.rebalancing), each step as it happened.
    Table(
        "rebalances",
        REBALANCE_COLUMNS,
        (Index("rebalances_created_at", ("created_at",)),
         Index("rebalances_open", ("state",), where="finished_at IS NULL")),
    ),
    Table(
        "rebalance_steps",
        (_id(), *_text("rebalance_id", "at", "state"), Column("detail", null=True)),
        (Index("rebalance_steps_rebalance_id", ("rebalance_id",)),),
    ),
    # The lease (solver.io.store.pg.lease): one row per account, on the database's clock.
    Table(
        "lease",
        (Column("account", key=True), Column("holder"), Column("epoch", "bigint"),
         Column("acquired_at", "db_time"), Column("expires_at", "db_time")),
        only="postgresql",
    ),
)  # fmt: skip
"""Every table at schema version :data:`BASELINE_VERSION`."""


def _column(column: Column, dialect: Dialect) -> str:
    if column.auto and dialect == "postgresql":
        return f"{column.name} {TYPES[column.kind][dialect]} GENERATED BY DEFAULT AS IDENTITY"
    return f"{column.name} {TYPES[column.kind][dialect]}"


def column_sql(column: Column, dialect: Dialect) -> str:
    """A column's definition (``quote_id TEXT PRIMARY KEY``, ``at TEXT NOT NULL``...)."""
    sql = _column(column, dialect)
    if column.key:
        sql += " PRIMARY KEY"  # SQLite's INTEGER PRIMARY KEY: the rowid, numbered when absent
    elif not column.null:
        sql += " NOT NULL"
    if column.default is not None:
        sql += f" DEFAULT {column.default}"
    return sql


def create_table(table: Table, dialect: Dialect) -> str:
    parts = [column_sql(c, dialect) for c in table.columns]
    if table.primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(table.primary_key)})")
    sql = f"CREATE TABLE {table.name} ({', '.join(parts)})"
    return sql + " WITHOUT ROWID" if table.without_rowid and dialect == "sqlite" else sql


def create_index(table: str, index: Index) -> str:
    sql = f"CREATE INDEX {index.name} ON {table} ({', '.join(index.columns)})"
    return f"{sql} WHERE {index.where}" if index.where else sql


def tables(dialect: Dialect) -> tuple[Table, ...]:
    """The tables ``dialect`` has (at :data:`BASELINE_VERSION`)."""
    return tuple(t for t in TABLES if t.only in (None, dialect))


def baseline(dialect: Dialect) -> tuple[str, ...]:
    """The statements that create a new store at :data:`BASELINE_VERSION` in ``dialect``."""
    out: list[str] = []
    for table in tables(dialect):
        out.append(create_table(table, dialect))
        out += [create_index(table.name, index) for index in table.indexes]
    out.append("INSERT INTO projection (seq) VALUES (0)")
    return tuple(out)


def numbered_keys(dialect: Dialect = "postgresql") -> dict[str, str]:
    """Tables whose key the database numbers, and that key's column."""
    return {t.name: c.name for t in tables(dialect) for c in t.columns if c.auto}


# ------------------------------------------------------------------------------ later steps


@dataclass(frozen=True, slots=True)
class CreateTable:
    table: Table


@dataclass(frozen=True, slots=True)
class AddColumn:
    table: str
    column: Column


@dataclass(frozen=True, slots=True)
class CreateIndex:
    table: str
    index: Index


@dataclass(frozen=True, slots=True)
class DropIndex:
    name: str


@dataclass(frozen=True, slots=True)
class Sql:
    """A statement that has no dialect-free spelling (a data migration), given for each."""

    sqlite: str
    postgresql: str


Step = CreateTable | AddColumn | CreateIndex | DropIndex | Sql
"""One change of a migration after :data:`BASELINE_VERSION`, written once for both backends."""


def render(step: Step, dialect: Dialect) -> tuple[str, ...]:
    """The statements of ``step`` in ``dialect``."""
    if isinstance(step, CreateTable):
        if step.table.only not in (None, dialect):
            return ()
        indexes = [create_index(step.table.name, i) for i in step.table.indexes]
        return (create_table(step.table, dialect), *indexes)
    if isinstance(step, AddColumn):
        if step.column.key or step.column.auto:
            raise ValueError("a key cannot be added to an existing table")
        if not step.column.null and step.column.default is None:
            raise ValueError(f"{step.column.name}: a NOT NULL column added later needs a default")
        return (f"ALTER TABLE {step.table} ADD COLUMN {column_sql(step.column, dialect)}",)
    if isinstance(step, CreateIndex):
        return (create_index(step.table, step.index),)
    if isinstance(step, DropIndex):
        return (f"DROP INDEX IF EXISTS {step.name}",)
    return (step.sqlite if dialect == "sqlite" else step.postgresql,)
