"""Which way into the store: the file while the bot is stopped, the bot while it runs (issue 24).

The running bot holds its store alone (exclusive locking: :mod:`solver.io.store.owner`), so
``solver history``, ``solver store export`` and ``solver store backup`` first try the file
(waiting :data:`READER_WAIT_MS` at most, so a bot that holds it is noticed at once) and, when a
running bot holds it, ask that bot through its control API instead: the URL from ``--url``,
else the one the bot wrote in ``<store>.lock``, else the config's ``metrics.listen``; the token
from ``SOLVER_CONTROL_TOKEN`` (or ``--token-env``), as ``solver status`` does. Either way the
output is the same (:mod:`solver.io.store.records`).

``solver store backup --out FILE`` makes a consistent copy with SQLite's online backup API:
the bot makes it itself while it runs (on its host, as its user), this process while it is
stopped. The copy is a self-contained database (no ``-wal``), checked before it is named.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from solver.cli import EXIT_OK
from solver.cli.ops import ControlClient
from solver.config import TokenSpec, load_bot_config
from solver.errors import ConfigError
from solver.io.control import DEFAULT_TOKEN_ENV, parse_listen, url_host
from solver.io.store.owner import StoreBusyError
from solver.io.store.sqlite_store import Store

READER_WAIT_MS = 250
"""How long a reader waits for the store's lock before it asks the bot that holds it."""


@dataclass
class StoreTarget:
    """The store's path and what the config says about it (tokens, pairs, the API)."""

    path: Path
    tokens: dict[str, TokenSpec]
    pairs: list[tuple[str, str]]
    listen: str | None
    url: str | None = None
    """``storage.url``: the store is PostgreSQL, read directly whoever runs (no lock to ask
    around: the instances share it)."""
    password_env: str | None = None
    account: str = ""


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="the bot's YAML config (storage.path)")
    parser.add_argument("--db", metavar="PATH", help="the store's file (overrides the config)")
    parser.add_argument(
        "--url",
        help="while the bot runs: its control API's base URL (default: the one it wrote in "
        "<store>.lock, else http://<metrics.listen>)",
    )
    parser.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        metavar="VAR",
        help=f"environment variable holding the bot's control token (default {DEFAULT_TOKEN_ENV})",
    )


def target(args: argparse.Namespace) -> StoreTarget:
    tokens: dict[str, TokenSpec] = {}
    pairs: list[tuple[str, str]] = []
    listen: str | None = None
    path: Path | None = Path(args.db) if args.db else None
    url: str | None = None
    password_env: str | None = None
    account = ""
    if args.config:
        config = load_bot_config(args.config)  # validates the file; the key is not loaded
        tokens = dict(config.tokens)
        pairs = [(p.base, p.quote) for p in config.pairs]
        path = path or config.storage.path
        listen = config.metrics.listen
        if not args.db and config.storage.url is not None:
            url, password_env = config.storage.url, config.storage.password_env
            account = config.account.id
    if path is None:
        raise ConfigError("give --config FILE (its storage.path) or --db PATH")
    return StoreTarget(path, tokens, pairs, listen, url, password_env, account)


def open_or_bot(args: argparse.Namespace, where: StoreTarget) -> Store | ControlClient:
    """The store itself, or — when a running bot holds it — a client of that bot's API."""
    if where.url is not None:  # PostgreSQL: read directly, a reader (no lease, no projection)
        from solver.io.store.pg.store import PgStore  # psycopg only when it is used

        return PgStore(
            where.url, password_env=where.password_env, account=where.account, writer=False
        )
    try:
        return Store(
            where.path, create=False, checkpoint_every_s=None, busy_timeout_ms=READER_WAIT_MS
        )
    except StoreBusyError as busy:
        if busy.holder is None:  # another program: nobody to ask
            raise
        url = args.url or busy.holder.control
        if url is None and where.listen is not None:
            host, port = parse_listen(where.listen)
            url = f"http://{url_host(host)}:{port}"
        if url is None:
            raise ConfigError(
                f"{busy}; it serves no known control API to read it through: give --url"
            ) from None
        return client(args, str(url).rstrip("/"), busy)


def client(args: argparse.Namespace, url: str, busy: StoreBusyError) -> ControlClient:
    token = os.environ.get(args.token_env)
    if not token:
        raise ConfigError(
            f"{busy}; to read it through the bot, export its control token in {args.token_env}"
        )
    return ControlClient(url, token, args.token_env, 30.0)


def register_backup(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = commands.add_parser(
        "backup",
        help="a consistent copy of the store, the bot running or not",
        description=(
            "Copy the whole store to a new file with SQLite's online backup API. While the bot "
            "runs it makes the copy itself (through its control API: the path is on its host, "
            "written as its user); while it is stopped this command does. The copy is a "
            "self-contained database, checked before it is named."
        ),
    )
    add_store_arguments(backup)
    backup.add_argument("--out", metavar="FILE", required=True, help="the new file to write")
    backup.set_defaults(handler=cmd_backup)


def cmd_backup(args: argparse.Namespace) -> int:
    where = target(args)
    if where.url is not None:
        raise ConfigError(
            "the store is on PostgreSQL (storage.url): back it up with pg_dump or base "
            "backups (docs/operations.md, Backups on PostgreSQL)"
        )
    out = Path(args.out).absolute()
    if out.exists():
        raise ConfigError(f"--out {out} exists already: give a new file")
    source = open_or_bot(args, where)
    if isinstance(source, Store):
        with source:
            size = source.backup(out)
        print(f"backed up {where.path} to {out} ({size:,} bytes; the bot was not running)")
        return EXIT_OK
    doc = source.request("POST", "/control/store/backup", {"path": str(out)})
    size = int(doc.get("bytes", 0)) if isinstance(doc, dict) else 0
    print(f"backed up {where.path} to {out} ({size:,} bytes, made by the running bot)")
    return EXIT_OK
