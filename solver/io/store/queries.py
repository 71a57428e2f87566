"""The store's queries (the tables people query, exports): the read side of
:class:`~solver.io.store.sqlite_store.Store`, by role.

Every query translates SQLite's error into a :class:`StoreError` naming it: the status page and
the gauges read through these, and must keep answering from memory while the store fails
(issue 24: a failing store made ``/control/status`` answer HTTP 500). The writer's own reads
first project what it journaled (``_fresh``), so they see everything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, ParamSpec, TextIO, TypeVar

import orjson

from solver.core.lifecycle import Quote, QuoteState
from solver.core.rebalance_record import RebalanceRecord
from solver.io.store.quote_counts import minute_of
from solver.io.store.quote_journal import find_opened
from solver.io.store.schema import (
    REBALANCE_COLUMNS,
    SELECT_FILLS,
    SELECT_QUOTES,
    SELECT_WEIGHTED_QUOTES,
    Alert,
    BalanceSnapshot,
    Fill,
    StoreError,
    db_errors,
    export_rows,
    fill_row,
    from_ts,
    query_params,
    rebalance_row,
    tracked_row,
    ts,
)
from solver.io.store.totals import PairTotals, pair_totals

P = ParamSpec("P")
R = TypeVar("R")
ExportFormat = Literal["csv", "jsonl"]
Pair = tuple[str, str]

_WON_STATES = frozenset(
    {QuoteState.WON, QuoteState.SETTLING, QuoteState.SETTLED, QuoteState.FAILED}
)


def reads(method: Callable[P, R]) -> Callable[P, R]:
    """A query of the store: SQLite's error becomes a :class:`StoreError` naming the query
    (the status page and the gauges read through these, and must keep answering while the
    store fails: issue 24)."""

    @functools.wraps(method)
    def read(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except db_errors() as exc:
            raise StoreError(f"cannot read the store ({method.__name__}): {exc}") from None

    return read


class StoreQueries:
    """The queries of a store; :class:`~solver.io.store.sqlite_store.Store` is one."""

    _conn: Any
    """A ``sqlite3.Connection``, or :class:`solver.io.store.pg.conn.PgConn`, which takes the
    same SQL (``?`` parameters) to PostgreSQL: one set of queries for both backends."""

    def _fresh(self) -> None:
        """The writer's own reads see everything it journaled (the store projects first)."""

    @reads
    def open_alerts(self) -> list[Alert]:
        self._fresh()
        rows = self._conn.execute(
            "SELECT id, at, kind, detail FROM alerts WHERE resolved_at IS NULL ORDER BY id"
        )
        return [Alert(row[0], from_ts(row[1]), row[2], row[3]) for row in rows]

    @reads
    def signed_data(self, quote_id: str) -> dict[str, Any] | None:
        """The signed item exactly as it was sent (for disputes), or None. From the quote's
        row, else from its journal entry while the journal keeps it (a lost quote that was not
        sampled: the journal is searched, newest first, so this can take a while)."""
        self._fresh()
        row = self._conn.execute(
            "SELECT signed_data FROM quotes WHERE quote_id = ?", (quote_id,)
        ).fetchone()
        if row is not None:
            value: dict[str, Any] = orjson.loads(row[0])
            return value
        body = find_opened(self._conn, {quote_id}).get(quote_id)
        if body is None:
            return None
        signed: dict[str, Any] = orjson.loads(body).get("signed_data") or {}
        return signed

    # ------------------------------------------------------------------ queries

    @reads
    def quotes_since(
        self, since: datetime | None = None, pair: Pair | None = None, limit: int = 100
    ) -> list[Quote]:
        """Newest first; ``pair`` matches both directions."""
        self._fresh()
        params = query_params(since, pair, limit)
        return [tracked_row(row) for row in self._conn.execute(SELECT_QUOTES, params)]

    @reads
    def weighted_quotes_since(
        self, since: datetime | None = None, pair: Pair | None = None, limit: int = 100
    ) -> list[tuple[Quote, float]]:
        """:meth:`quotes_since` with each row's weight: how many quotes of its state it stands
        for (a sampled lost or open quote: 1 / the sample rate; any other: 1)."""
        self._fresh()
        params = query_params(since, pair, limit)
        rows = self._conn.execute(SELECT_WEIGHTED_QUOTES, params)
        return [(tracked_row(row), float(row[15])) for row in rows]

    @reads
    def fills_since(
        self, since: datetime | None = None, pair: Pair | None = None, limit: int = 100
    ) -> list[Fill]:
        """Newest first; ``pair`` matches both directions."""
        self._fresh()
        params = query_params(since, pair, limit)
        return [fill_row(row) for row in self._conn.execute(SELECT_FILLS, params)]

    @reads
    def fill_totals(self, since: datetime) -> list[tuple[str, str, int, float]]:
        """``(asset_in, asset_out, fills, realized PnL USD)`` per direction since ``since``: one
        grouped query (the status page asks every few seconds). The PnL is a float sum, for
        people; a fill without prices counts 0."""
        sql = (
            "SELECT asset_in, asset_out, COUNT(*), TOTAL(CAST(realized_pnl_usd AS REAL)) "
            "FROM fills WHERE at >= ? GROUP BY asset_in, asset_out ORDER BY asset_in, asset_out"
        )
        return [
            (asset_in, asset_out, int(count), float(total))
            for asset_in, asset_out, count, total in self._conn.execute(sql, (ts(since),))
        ]

    @reads
    def pair_totals(
        self,
        since: datetime | None = None,
        pair: Pair | None = None,
        decimals: Mapping[str, int] | None = None,
    ) -> list[PairTotals]:
        """Quotes, wins, fills, volume and realized PnL per pair (:mod:`store_totals`)."""
        self._fresh()  # the same rows as the lists beside it (solver history through the bot)
        return pair_totals(self._conn, "" if since is None else ts(since), pair, decimals)

    @reads
    def stats(self, window_s: float, now: datetime) -> dict[str, Any]:
        """Counts of the quotes created in the last ``window_s`` and the volume they settled.
        The window starts at the start of its first minute (``since``): the quotes are counted
        by minute (``quote_counts``: every quote, however few lost ones keep a row)."""
        self._fresh()
        since = minute_of(ts(now - timedelta(seconds=window_s)))
        counts: dict[str, int] = {}
        volume_in: dict[str, int] = {}
        volume_out: dict[str, int] = {}
        sql = "SELECT state, SUM(n) FROM quote_counts WHERE minute >= ? GROUP BY state"
        for state, count in self._conn.execute(sql, (since,)):
            if count:
                counts[state] = int(count)
        sql = (  # every settled quote has its row
            "SELECT asset_in, amount_in, asset_out, amount_out FROM quotes "
            "WHERE created_at >= ? AND state = 'SETTLED'"
        )
        for asset_in, amount_in, asset_out, amount_out in self._conn.execute(sql, (since,)):
            volume_in[asset_in] = volume_in.get(asset_in, 0) + int(amount_in)
            volume_out[asset_out] = volume_out.get(asset_out, 0) + int(amount_out)
        quotes = sum(counts.values())
        won = sum(n for s, n in counts.items() if s in _WON_STATES)
        return {
            "window_s": window_s,
            "since": since,
            "quotes": quotes,
            "won": won,
            "settled": counts.get(QuoteState.SETTLED, 0),
            "states": counts,
            "win_rate": won / quotes if quotes else None,
            "volume_in": {a: str(v) for a, v in sorted(volume_in.items())},
            "volume_out": {a: str(v) for a, v in sorted(volume_out.items())},
            "lost_quote_sample_rate": self.lost_sample_rate(),
        }

    @reads
    def lost_sample_rate(self) -> float | None:
        """The rate at which lost quotes keep their row, as the projection last used it (None:
        it has not projected since the store had sampling): for readers to say so."""
        row = self._conn.execute("SELECT lost_sample_rate FROM projection").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    @reads
    def last_balance_snapshot(self) -> BalanceSnapshot | None:
        self._fresh()
        row = self._conn.execute("SELECT MAX(at) FROM balance_snapshots").fetchone()
        if row is None or row[0] is None:
            return None
        balances: dict[str, int] = {}
        expected: dict[str, int] = {}
        sql = "SELECT asset, amount, expected FROM balance_snapshots WHERE at = ? ORDER BY id"
        for asset, amount, want in self._conn.execute(sql, (row[0],)):
            balances[asset] = int(amount)
            if want is not None:
                expected[asset] = int(want)
        return BalanceSnapshot(from_ts(row[0]), balances, expected or None)

    @reads
    def open_rebalances(self) -> list[RebalanceRecord]:
        """Rebalances not finished yet, oldest first, as projected from the journal (the
        rebalancer takes them up from the desk, not from here)."""
        sql = REBALANCE_COLUMNS + "WHERE finished_at IS NULL ORDER BY created_at"
        return [rebalance_row(row) for row in self._conn.execute(sql)]

    @reads
    def rebalances(self, limit: int = 100) -> list[RebalanceRecord]:
        """The latest rebalances, newest first."""
        sql = REBALANCE_COLUMNS + "ORDER BY created_at DESC LIMIT ?"
        return [rebalance_row(row) for row in self._conn.execute(sql, (limit,))]

    @reads
    def rebalance_steps(self, rebalance_id: str) -> list[tuple[datetime, str, str | None]]:
        """``(at, state, detail)`` of every step of one rebalance, in order."""
        sql = "SELECT at, state, detail FROM rebalance_steps WHERE rebalance_id = ? ORDER BY id"
        return [(from_ts(a), s, d) for a, s, d in self._conn.execute(sql, (rebalance_id,))]

    # ------------------------------------------------------------------ export

    @reads
    def export(self, table: str, fmt: ExportFormat, out: TextIO) -> int:
        """Stream every row of ``table`` to ``out`` as CSV (with a header) or JSON Lines.

        Values are as stored (amounts as decimal strings, times ISO, nonces hex); JSON Lines
        embeds the JSON columns (``signed_data``, ``markouts``) as values. Returns the row count.
        """
        self._fresh()
        return export_rows(self._conn, table, fmt, out)
