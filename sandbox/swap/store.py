"""SQLite storage of the sandbox swaps: one row per non-dry quote, the transaction record of the
history API (spec 2.7, 4.3–4.5).

The full state of a swap is a JSON document (:class:`SwapRecord`); the columns beside it only
serve the history filters and the order (newest first: ``created_ms`` then ``id``, both
descending). Free-text search terms (deposit address, recipient, senders, transaction and
intent hashes) and app-fee recipients (the ``affiliate`` filter) live in side tables.

All calls run on the sandbox's one asyncio loop and are short, so the connection is used
synchronously; ``database: null`` in the config keeps everything in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandbox.swap.rules import OPEN_STATUSES, Terms, is_masking, is_test_transaction
from solver.protocol.history import Direction
from solver.protocol.swap import RefundReason, SwapStatus, SwapType

DEFAULT_CHAIN = "near"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS swaps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    deposit_address TEXT NOT NULL,
    memo_key TEXT NOT NULL,
    deposit_account TEXT NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    origin_asset TEXT NOT NULL,
    destination_asset TEXT NOT NULL,
    origin_chain TEXT NOT NULL,
    destination_chain TEXT NOT NULL,
    referral TEXT,
    usd_in REAL NOT NULL,
    usd_out REAL NOT NULL,
    masking INTEGER NOT NULL,
    test INTEGER NOT NULL,
    state TEXT NOT NULL,
    UNIQUE (deposit_address, memo_key)
);
CREATE INDEX IF NOT EXISTS swaps_order ON swaps (created_ms, id);
CREATE TABLE IF NOT EXISTS swap_terms (
    term TEXT NOT NULL, swap_id INTEGER NOT NULL, PRIMARY KEY (term, swap_id)
);
CREATE TABLE IF NOT EXISTS swap_affiliates (
    recipient TEXT NOT NULL, swap_id INTEGER NOT NULL, PRIMARY KEY (recipient, swap_id)
);
"""


class FeeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipient: str
    bps: str  # an exact fraction, "p/q" or "p"
    platform: bool = False


class SwapRecord(BaseModel):
    """Everything the service knows about one swap; amounts are ints in the smallest unit."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    correlation_id: str
    created_at: datetime
    updated_at: datetime
    status: SwapStatus
    deposit_address: str
    deposit_memo: str | None
    deposit_account: str
    timestamp_text: str
    quote_response: dict[str, Any]
    swap_type: SwapType
    origin_asset: str
    destination_asset: str
    deposit_type: str
    recipient: str
    recipient_type: str
    refund_to: str
    refund_type: str
    deadline: datetime
    time_when_inactive: datetime
    referral: str | None = None
    custom_recipient_msg: str | None = None
    app_fees: list[dict[str, Any]] = Field(default_factory=list)
    fees: list[FeeEntry] = Field(default_factory=list)
    terms: dict[str, int | None]
    refund_fee: int = 0
    solver_quote_hash: str | None = None
    solver_quote_expires: datetime | None = None
    solver_amount_in: int = 0
    solver_amount_out: int = 0
    usd_in: str = "0"
    usd_out: str = "0"
    usd_deposited: str = "0"
    usd_refunded: str = "0"
    deposited: int = 0
    deposit_tx_hashes: list[str] = Field(default_factory=list)
    senders: list[str] = Field(default_factory=list)
    intent_hashes: list[str] = Field(default_factory=list)
    near_tx_hashes: list[str] = Field(default_factory=list)
    destination_tx_hashes: list[str] = Field(default_factory=list)
    amount_in_actual: int | None = None
    amount_out_actual: int | None = None
    fees_paid: int = 0
    refunded: int = 0
    refund_reason: RefundReason | None = None
    refund_fee_charged: int | None = None
    slippage_actual: float | None = None

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @property
    def quote_terms(self) -> Terms:
        t = self.terms
        return Terms(
            amount_in=t["amount_in"] or 0,
            min_amount_in=t["min_amount_in"] or 0,
            max_amount_in=t["max_amount_in"],
            amount_out=t["amount_out"] or 0,
            min_amount_out=t["min_amount_out"] or 0,
            accept_in=t["accept_in"] or 0,
            accept_out=t["accept_out"] or 0,
        )


@dataclass(frozen=True, slots=True)
class HistoryWhere:
    """The effective history filters (after the precedence rules of 4.5)."""

    statuses: tuple[str, ...]
    search: str | None = None
    deposit_memo: str | None = None
    from_chain: str | None = None
    from_token: str | None = None
    to_chain: str | None = None
    to_token: str | None = None
    referral: str | None = None
    affiliate: str | None = None
    min_usd: float | None = None
    max_usd: float | None = None
    after_ms: float | None = None  # exclusive
    before_ms: float | None = None  # exclusive
    show_test: bool = False

    @property
    def excludes_masking(self) -> bool:
        """Rule of 4.5: any asset, chain, referral, affiliate or USD filter hides masking."""
        return any(
            value is not None
            for value in (
                self.from_chain,
                self.from_token,
                self.to_chain,
                self.to_token,
                self.referral,
                self.affiliate,
                self.min_usd,
                self.max_usd,
            )
        )

    def sql(self) -> tuple[str, list[Any]]:
        clauses = [f"status IN ({','.join('?' * len(self.statuses))})"]
        args: list[Any] = list(self.statuses)
        simple = (
            ("origin_chain", self.from_chain),
            ("origin_asset", self.from_token),
            ("destination_chain", self.to_chain),
            ("destination_asset", self.to_token),
            ("referral", self.referral),
            ("memo_key", self.deposit_memo),
        )
        for column, value in simple:
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if self.search is not None:
            clauses.append("id IN (SELECT swap_id FROM swap_terms WHERE term = ?)")
            args.append(self.search)
        if self.affiliate is not None:
            clauses.append("id IN (SELECT swap_id FROM swap_affiliates WHERE recipient = ?)")
            args.append(self.affiliate)
        if self.min_usd is not None:
            clauses.append("usd_in >= ? AND usd_out >= ?")
            args += [self.min_usd, self.min_usd]
        if self.max_usd is not None:
            clauses.append("usd_in <= ? AND usd_out <= ?")
            args += [self.max_usd, self.max_usd]
        if self.after_ms is not None:
            clauses.append("created_ms > ?")
            args.append(self.after_ms)
        if self.before_ms is not None:
            clauses.append("created_ms < ?")
            args.append(self.before_ms)
        if not self.show_test:
            clauses.append("test = 0")
        if self.excludes_masking:
            clauses.append("masking = 0")
        return " AND ".join(clauses), args


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class SwapStore:
    def __init__(
        self,
        path: Path | None = None,
        *,
        chains: Mapping[str, str] | None = None,
        test_referral_prefix: str = "test",
        test_accounts: Iterable[str] = (),
    ) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if path is None else str(path))
        self._db.executescript(_SCHEMA)
        self.chains = dict(chains or {})
        self.test_prefix = test_referral_prefix
        self.test_accounts = frozenset(test_accounts)

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ writes

    def save(self, record: SwapRecord) -> None:
        """Insert or update one swap, its search terms and affiliates, in one transaction."""
        columns = {
            "deposit_address": record.deposit_address,
            "memo_key": record.deposit_memo or "",
            "deposit_account": record.deposit_account,
            "created_ms": to_ms(record.created_at),
            "status": record.status.value,
            "origin_asset": record.origin_asset,
            "destination_asset": record.destination_asset,
            "origin_chain": self.chains.get(record.origin_asset, DEFAULT_CHAIN),
            "destination_chain": self.chains.get(record.destination_asset, DEFAULT_CHAIN),
            "referral": record.referral,
            "usd_in": float(record.usd_in),
            "usd_out": float(record.usd_out),
            "masking": int(is_masking(record.status, record.amount_out_actual or 0)),
            "test": int(
                is_test_transaction(
                    record.referral,
                    [record.recipient, record.refund_to, *record.senders],
                    self.test_prefix,
                    self.test_accounts,
                )
            ),
            "state": record.model_dump_json(),
        }
        names = ", ".join(columns)
        marks = ", ".join("?" * len(columns))
        updates = ", ".join(f"{n} = excluded.{n}" for n in columns if n != "deposit_account")
        with self._db:
            cur = self._db.execute(
                f"INSERT INTO swaps ({names}) VALUES ({marks}) "  # noqa: S608 - fixed names
                f"ON CONFLICT (deposit_account) DO UPDATE SET {updates} RETURNING id",
                list(columns.values()),
            )
            swap_id = cur.fetchone()[0]
            self._db.execute("DELETE FROM swap_terms WHERE swap_id = ?", (swap_id,))
            self._db.execute("DELETE FROM swap_affiliates WHERE swap_id = ?", (swap_id,))
            terms = {
                record.deposit_address,
                record.recipient,
                *record.senders,
                *record.deposit_tx_hashes,
                *record.intent_hashes,
                *record.near_tx_hashes,
                *record.destination_tx_hashes,
            }
            self._db.executemany(
                "INSERT INTO swap_terms (term, swap_id) VALUES (?, ?)",
                [(term, swap_id) for term in terms],
            )
            affiliates = {str(fee.get("recipient")) for fee in record.app_fees}
            self._db.executemany(
                "INSERT INTO swap_affiliates (recipient, swap_id) VALUES (?, ?)",
                [(a, swap_id) for a in affiliates],
            )

    # ------------------------------------------------------------------ reads

    def _one(self, sql: str, args: Iterable[Any]) -> SwapRecord | None:
        row = self._db.execute(sql, list(args)).fetchone()
        return None if row is None else SwapRecord.model_validate_json(row[0])

    def get(self, address: str, memo: str | None) -> SwapRecord | None:
        return self._one(
            "SELECT state FROM swaps WHERE deposit_address = ? AND memo_key = ?",
            (address, memo or ""),
        )

    def by_account(self, account: str) -> SwapRecord | None:
        return self._one("SELECT state FROM swaps WHERE deposit_account = ?", (account,))

    def memo_taken(self, address: str, memo: str) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM swaps WHERE deposit_address = ? AND memo_key = ?", (address, memo)
        ).fetchone()
        return row is not None

    def open_records(self) -> list[SwapRecord]:
        statuses = [s.value for s in OPEN_STATUSES]
        rows = self._db.execute(
            "SELECT state FROM swaps WHERE status IN (?, ?) ORDER BY id", statuses
        ).fetchall()
        return [SwapRecord.model_validate_json(row[0]) for row in rows]

    def count(self, where: HistoryWhere) -> int:
        clause, args = where.sql()
        row = self._db.execute(f"SELECT COUNT(*) FROM swaps WHERE {clause}", args).fetchone()  # noqa: S608
        return int(row[0])

    def page(self, where: HistoryWhere, limit: int, offset: int) -> list[SwapRecord]:
        """Newest first, ``limit`` records after skipping ``offset``."""
        clause, args = where.sql()
        rows = self._db.execute(
            f"SELECT state FROM swaps WHERE {clause} "  # noqa: S608 - clause is built from names
            "ORDER BY created_ms DESC, id DESC LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
        return [SwapRecord.model_validate_json(row[0]) for row in rows]

    def cursor_key(self, address: str, memo: str | None) -> tuple[int, int] | None:
        row = self._db.execute(
            "SELECT created_ms, id FROM swaps WHERE deposit_address = ? AND memo_key = ?",
            (address, memo or ""),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def walk(
        self,
        where: HistoryWhere,
        cursor: tuple[int, int] | None,
        direction: Direction,
        limit: int,
    ) -> list[SwapRecord]:
        """Cursor listing (4.3), always newest first: ``next`` gives the ``limit`` records just
        older than the cursor record, ``prev`` the ``limit`` records just newer."""
        clause, args = where.sql()
        if cursor is None:
            return self.page(where, limit, 0)
        older = direction is Direction.NEXT
        compare = (
            "(created_ms < ? OR (created_ms = ? AND id < ?))"
            if older
            else "(created_ms > ? OR (created_ms = ? AND id > ?))"
        )
        order = "DESC" if older else "ASC"
        rows = self._db.execute(
            f"SELECT state FROM swaps WHERE {clause} AND {compare} "  # noqa: S608
            f"ORDER BY created_ms {order}, id {order} LIMIT ?",
            [*args, cursor[0], cursor[0], cursor[1], limit],
        ).fetchall()
        records = [SwapRecord.model_validate_json(row[0]) for row in rows]
        return records if older else records[::-1]
