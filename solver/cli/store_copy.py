"""``solver store copy --to postgresql://…``: an SQLite store into an empty PostgreSQL one, to
move a bot onto the shared journal (docs/operations.md, "Two instances").

The bot must be stopped (the SQLite store is opened as a reader: a running bot holds it alone,
and copying a journal that still grows would lose its tail). Every table is copied row for row,
sequence numbers included — the journal's ``seq``, the snapshots that name them and the
projection's position stay consistent, so the first instance on PostgreSQL rebuilds exactly the
desk the SQLite bot had — with ``COPY``, in one transaction: a failed copy leaves the target as
it was. A target that holds a journal already is refused (nothing is merged).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from solver.cli import EXIT_OK
from solver.config import load_bot_config
from solver.errors import ConfigError
from solver.io.store.migrations import current_tables
from solver.io.store.schema import StoreError
from solver.io.store.sqlite_store import Store
from solver.io.store.tables import numbered_keys

if TYPE_CHECKING:  # loaded by the command itself: `solver store …` starts without psycopg
    import psycopg

    from solver.io.store.pg.store import PgStore

TABLES = tuple(t.name for t in current_tables("sqlite") if t.name != "projection")
"""Every table of the store but the projection's position (set after the rows)."""
IDENTITY = numbered_keys("postgresql")
"""Tables whose key PostgreSQL numbers: its sequence goes on after the last copied row."""


def register_copy(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    copy = commands.add_parser(
        "copy",
        help="copy a stopped bot's SQLite store into an empty PostgreSQL one",
        description=(
            "Copy every table of the SQLite store (the bot stopped) into an empty PostgreSQL "
            "database, sequence numbers included, in one transaction. The password comes from "
            "the variable --password-env names, never from the command line."
        ),
    )
    copy.add_argument("--config", metavar="FILE", help="the bot's YAML config (storage.path)")
    copy.add_argument("--db", metavar="PATH", help="the SQLite store (overrides the config)")
    copy.add_argument("--to", metavar="URL", required=True, help="postgresql://user@host/db")
    copy.add_argument("--password-env", metavar="VAR", help="variable holding the password")
    copy.set_defaults(handler=cmd_copy)


def cmd_copy(args: argparse.Namespace) -> int:
    path = Path(args.db) if args.db else None
    account = ""
    if args.config:
        config = load_bot_config(args.config)
        path = path or config.storage.path
        account = config.account.id
    if path is None:
        raise ConfigError("give --config FILE (its storage.path) or --db PATH")
    if not str(args.to).startswith(("postgresql://", "postgres://")):
        raise ConfigError("--to must be a postgresql:// URL")
    from solver.io.store.pg.store import PgStore

    with Store(path, create=False, checkpoint_every_s=None) as source:
        target = PgStore(args.to, password_env=args.password_env, account=account, writer=False)
        try:
            counts = copy_store(source, target)
        finally:
            target.close()
    total = sum(counts.values())
    detail = ", ".join(f"{table} {n:,}" for table, n in counts.items() if n)
    print(f"copied {path} into {target.shown}: {total:,} rows ({detail or 'empty'})")
    return EXIT_OK


def copy_store(source: Store, target: PgStore) -> dict[str, int]:
    """Copy every table of ``source`` into ``target`` (empty); rows per table."""
    import psycopg  # loaded already by ``target``

    raw = target._connection()
    counts: dict[str, int] = {}
    try:
        with raw.transaction():
            if raw.execute("SELECT 1 FROM journal LIMIT 1").fetchone() is not None:
                raise StoreError(f"{target.shown} holds a journal already: nothing copied")
            for table in TABLES:
                counts[table] = _copy_table(source, raw, table)
            position = source._conn.execute(
                "SELECT seq, open_from, lost_sample_rate FROM projection"
            ).fetchone()
            raw.execute(
                "UPDATE projection SET seq = %s, open_from = %s, lost_sample_rate = %s",
                tuple(position),
            )
            for table, column in IDENTITY.items():
                raw.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "  # noqa: S608
                    f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
                )
    except psycopg.Error as exc:
        raise StoreError(f"cannot copy into {target.shown}: {exc}; nothing copied") from None
    return counts


def _copy_table(source: Store, raw: psycopg.Connection, table: str) -> int:
    cursor = source._conn.execute(f"SELECT * FROM {table}")  # noqa: S608 (constants)
    names = ", ".join(d[0] for d in cursor.description)
    count = 0
    with raw.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        while rows := cursor.fetchmany(1000):
            for row in rows:
                copy.write_row(row)
                count += 1
    return count
