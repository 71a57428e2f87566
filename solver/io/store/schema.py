"""The SQLite store's SQL, the records it reads back, and exports (the schema itself and its
migrations: :mod:`solver.io.store.migrations`).

Conventions of every table:

- Amounts are decimal TEXT: a u128 does not fit SQLite's 64-bit INTEGER, and text keeps them
  exact. USD figures (reference prices, PnL) are decimal TEXT too, written from ``Decimal``.
- Times are TEXT, ISO 8601 in UTC with microseconds (``2025-01-02T03:04:05.000006+00:00``):
  readable in ``sqlite3`` and exports, exact to the microsecond, and one fixed width, so text
  order is time order and ranges use the indexes.
"""

from __future__ import annotations

import csv
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TextIO

import orjson

from solver.core.clock import micros
from solver.core.lifecycle import Quote, QuoteState
from solver.core.rebalance_record import FIELDS, RebalanceRecord
from solver.errors import SolverError
from solver.protocol.intents import second_text


class StoreError(SolverError):
    """The store cannot be opened or written (missing file, not a database, disk full...)."""


class FencedError(StoreError):
    """This instance no longer holds the lease (or cannot be sure it does): it must not write,
    send or sign anything more (the bot exits with ``EXIT_FENCED``). The lease is PostgreSQL's
    (:mod:`solver.io.store.pg.lease`); the error lives here so that the bot can name it
    without loading psycopg."""


_SQLITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,)


def db_errors() -> tuple[type[Exception], ...]:
    """What either backend raises (SQLite, or PostgreSQL through :mod:`solver.io.store.pg`):
    the queries and the projection are shared, and translate both into :class:`StoreError`.

    A function, called in ``except`` clauses (evaluated only when something was raised): only a
    PostgreSQL store loads psycopg, and only then can its errors occur, so a bot on SQLite and
    the CLI start without it (~0.4 s of CPU a start on a slow machine; docs/testing.md)."""
    psycopg = sys.modules.get("psycopg")
    return _SQLITE_ERRORS if psycopg is None else (sqlite3.Error, psycopg.Error)


def with_savepoint(cur: Any, work: Any) -> None:
    """``work`` all or nothing inside a batch (the projection's): a failing entry leaves no
    half rows."""
    cur.execute("SAVEPOINT entry")
    try:
        work()
    except BaseException:
        cur.execute("ROLLBACK TO entry")
        cur.execute("RELEASE entry")
        raise
    cur.execute("RELEASE entry")


class NonceReusedError(StoreError):
    """A nonce signed before (in this run or an earlier one) was about to be recorded again."""


TABLES = (
    "journal",
    "requests",
    "quotes",
    "quote_counts",
    "transitions",
    "fills",
    "balance_snapshots",
    "alerts",
    "nonces",
    "nonce_prefixes",
    "rebalances",
    "rebalance_steps",
)
JSON_COLUMNS = frozenset(
    {
        "body",
        "signed_data",
        "markouts",
        "plan",
        "quote_request",
        "quote_response",
        "deposit_signed",
        "status_response",
    }
)
"""Columns holding JSON text (exports embed them as JSON values)."""


# ------------------------------------------------------------------------------ statements

INSERT_QUOTE = (
    "INSERT INTO quotes (quote_id, quote_hash, created_at, deadline, asset_in, asset_out, "
    "amount_in, amount_out, fee, nonce, signed_data, state, updated_at, exact_in, partner_id, "
    "weight) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_NONCE = "INSERT INTO nonces (account, nonce, quote_id, signed_at) VALUES (?, ?, ?, ?)"
UPDATE_STATE = (
    "UPDATE quotes SET state = ?, updated_at = ?, reason = COALESCE(?, reason), "
    "intent_hash = COALESCE(?, intent_hash), tx_hash = COALESCE(?, tx_hash) WHERE quote_id = ?"
)
INSERT_TRANSITION = (
    "INSERT INTO transitions (quote_id, old, new, at, reason, intent_hash, tx_hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
INSERT_REQUEST = (
    "INSERT INTO requests (ts, quote_id, asset_in, asset_out, exact_in, amount, "
    "min_deadline_ms, partner_id, outcome, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
QUOTE_COLUMNS = (
    "SELECT quote_id, quote_hash, asset_in, asset_out, amount_in, amount_out, fee, deadline, "
    "nonce, created_at, state, updated_at, intent_hash, tx_hash, reason FROM quotes "
)
PAIR = "(?1 IS NULL OR (asset_in = ?1 AND asset_out = ?2) OR (asset_in = ?2 AND asset_out = ?1))"
SELECT_QUOTES = (
    QUOTE_COLUMNS + f"WHERE created_at >= ?3 AND {PAIR} ORDER BY created_at DESC LIMIT ?4"
)
SELECT_WEIGHTED_QUOTES = SELECT_QUOTES.replace(" FROM quotes ", ", weight FROM quotes ")
""":data:`SELECT_QUOTES` with each row's weight last (issue 29: lost quotes are sampled)."""
INSERT_FILL = (
    "INSERT OR REPLACE INTO fills (quote_id, quote_hash, at, asset_in, amount_in, asset_out, "
    "amount_out, fee, intent_hash, tx_hash, price_in_usd, price_out_usd, realized_pnl_usd, "
    "markouts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
FILL_COLUMNS = (
    "SELECT quote_id, quote_hash, at, asset_in, amount_in, asset_out, amount_out, fee, "
    "intent_hash, tx_hash, price_in_usd, price_out_usd, realized_pnl_usd, markouts FROM fills "
)
SELECT_FILLS = FILL_COLUMNS + f"WHERE at >= ?3 AND {PAIR} ORDER BY at DESC, quote_id DESC LIMIT ?4"
"""Newest first; fills of one instant by quote id, so both backends (and a LIMIT) agree."""
REBALANCE_FIELDS = FIELDS
# The column names are the constant tuple above, never input.
SAVE_REBALANCE = (
    f"INSERT OR REPLACE INTO rebalances ({', '.join(REBALANCE_FIELDS)}) "  # noqa: S608
    f"VALUES ({', '.join('?' * len(REBALANCE_FIELDS))})"
)
INSERT_REBALANCE_STEP = (
    "INSERT INTO rebalance_steps (rebalance_id, at, state, detail) VALUES (?, ?, ?, ?)"
)
REBALANCE_COLUMNS = f"SELECT {', '.join(REBALANCE_FIELDS)} FROM rebalances "  # noqa: S608

# ------------------------------------------------------------------------------ values


def ts(moment: datetime) -> str:
    """A timezone-aware time as the store writes it (UTC, microseconds, fixed width)."""
    tz = moment.tzinfo
    if tz is None:
        raise ValueError("the store takes timezone-aware datetimes only")
    if tz is not UTC:  # the bot's own times are UTC already (one per answer: skip the copy)
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")


def ts_us(value: int) -> str:
    """:func:`ts` of a time in µs since the epoch (the desk's clock, :mod:`solver.core.clock`),
    the same text, its second from the deadlines' per-second cache (no ``datetime`` built)."""
    second, rest = divmod(value, 1_000_000)
    return f"{second_text(second)}.{rest:06d}+00:00"


def from_ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def opt_ts(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def usd(value: float | Decimal | str | None) -> Decimal | None:
    """A USD figure as an exact ``Decimal`` (a float keeps its shortest repr)."""
    if value is None or isinstance(value, Decimal):
        return value
    return Decimal(str(value))


def opt_text(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


# ------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class Fill:
    """A settled quote and what it was worth when it settled."""

    quote_id: str
    quote_hash: str
    at: datetime
    asset_in: str
    amount_in: int
    asset_out: str
    amount_out: int
    fee: int
    intent_hash: str | None = None
    tx_hash: str | None = None
    price_in_usd: Decimal | None = None
    price_out_usd: Decimal | None = None
    realized_pnl_usd: Decimal | None = None
    markouts: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_quote(
        cls,
        quote: Quote,
        at: datetime,
        *,
        price_in_usd: float | Decimal | str | None = None,
        price_out_usd: float | Decimal | str | None = None,
        realized_pnl_usd: float | Decimal | str | None = None,
        markouts: Mapping[str, Any] | None = None,
    ) -> Fill:
        return cls(
            quote.quote_id,
            quote.quote_hash,
            at,
            quote.asset_in,
            quote.amount_in,
            quote.asset_out,
            quote.amount_out,
            quote.fee,
            quote.intent_hash,
            quote.tx_hash,
            usd(price_in_usd),
            usd(price_out_usd),
            usd(realized_pnl_usd),
            dict(markouts or {}),
        )


@dataclass(frozen=True, slots=True)
class BalanceSnapshot:
    """On-chain balances at one time, with what the bookkeeping expected (when it knew)."""

    at: datetime
    balances: dict[str, int]
    expected: dict[str, int] | None


@dataclass(frozen=True, slots=True)
class Alert:
    id: int
    at: datetime
    kind: str
    detail: str
    resolved_at: datetime | None = None


def _json_text(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else orjson.dumps(dict(value)).decode()


def _opt_json(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _opt_int(text: str | None) -> int | None:
    return None if text is None else int(text)


def rebalance_values(doc: Mapping[str, Any]) -> tuple[Any, ...]:
    """The row of a record's document (:func:`~solver.core.rebalance_record.record_doc`, the
    body of its journal fact) in the order of :data:`REBALANCE_FIELDS`."""
    return tuple(
        _json_text(value) if isinstance(value, Mapping) else value
        for value in (doc[name] for name in REBALANCE_FIELDS)
    )


def rebalance_row(row: tuple[Any, ...]) -> RebalanceRecord:
    return RebalanceRecord(
        id=row[0],
        created_at=from_ts(row[1]),
        updated_at=from_ts(row[2]),
        state=row[3],
        asset=row[4],
        asset_in=row[5],
        asset_out=row[6],
        amount_in=int(row[7]),
        plan=orjson.loads(row[8]),
        reason=row[9],
        quote_request=_opt_json(row[10]),
        quote_response=_opt_json(row[11]),
        quote_signature=row[12],
        deposit_address=row[13],
        deposit_memo=row[14],
        amount_out=_opt_int(row[15]),
        min_amount_out=_opt_int(row[16]),
        deposit_intent_hash=row[17],
        deposit_signed=_opt_json(row[18]),
        deposit_nonce=None if row[19] is None else bytes.fromhex(row[19]),
        deposit_deadline=opt_ts(row[20]),
        deposit_tx_hash=row[21],
        swap_status=row[22],
        status_response=_opt_json(row[23]),
        finished_at=opt_ts(row[24]),
    )


# ------------------------------------------------------------------------------ rows


def query_params(
    since: datetime | None, pair: tuple[str, str] | None, limit: int
) -> tuple[str | int | None, ...]:
    # "" sorts before every stored time: no lower bound, and the time index still applies.
    a, b = pair if pair is not None else (None, None)
    return (a, b, "" if since is None else ts(since), limit)


def tracked_row(row: tuple[Any, ...]) -> Quote:
    return Quote(
        row[0],
        row[2],
        row[3],
        int(row[4]),
        int(row[5]),
        int(row[6]),
        micros(from_ts(row[7])),
        quote_hash=row[1],
        nonce=bytes(row[8]),
        created_at=micros(from_ts(row[9])),
        state=QuoteState(row[10]),
        updated_at=None if row[11] is None else micros(from_ts(row[11])),
        intent_hash=row[12],
        tx_hash=row[13],
        reason=row[14],
    )


def fill_row(row: tuple[Any, ...]) -> Fill:
    return Fill(
        row[0],
        row[1],
        from_ts(row[2]),
        row[3],
        int(row[4]),
        row[5],
        int(row[6]),
        int(row[7]),
        row[8],
        row[9],
        usd(row[10]),
        usd(row[11]),
        usd(row[12]),
        orjson.loads(row[13]),
    )


# ------------------------------------------------------------------------------ export


_ORDER = {  # the WITHOUT ROWID tables, by their key
    "nonces": "signed_at, account, nonce",
    "quote_counts": "minute, asset_in, asset_out, size_bucket, state",
}


def export_rows(conn: Any, table: str, fmt: str, out: TextIO) -> int:
    """Stream ``table`` to ``out`` as CSV or JSON Lines (see ``Store.export``); the row count."""
    if table not in TABLES:
        raise StoreError(f"unknown table {table!r}: one of {', '.join(TABLES)}")
    if fmt not in ("csv", "jsonl"):
        raise StoreError(f"unknown export format {fmt!r}: csv or jsonl")
    order = _ORDER.get(table, "rowid")
    cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {order}")  # noqa: S608
    names = [d[0] for d in cursor.description]
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(names)
    count = 0
    for row in _batches(cursor):
        values = [v.hex() if isinstance(v, bytes) else v for v in row]
        if writer is not None:
            writer.writerow(values)
        else:
            record = {
                n: orjson.Fragment(v) if n in JSON_COLUMNS and v is not None else v
                for n, v in zip(names, values, strict=True)
            }
            out.write(orjson.dumps(record).decode() + "\n")
        count += 1
    return count


def _batches(cursor: Any, size: int = 500) -> Iterator[tuple[Any, ...]]:
    while rows := cursor.fetchmany(size):
        yield from rows
