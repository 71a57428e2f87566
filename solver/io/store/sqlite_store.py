"""The persistent store: SQLite in WAL mode (DESIGN "Settlement", "The quote path").

The desk's journal lives here (:class:`~solver.io.store.journal.SqliteJournal`, ``Store.journal``):
every fact the desk decides is appended, and made durable before any answer it caused leaves
the process, so a restart rebuilds the desk exactly. ``nonce_prefixes`` registers the prefix
of each start's quote nonce sequence, so no quote nonce repeats across restarts; ``nonces``
holds the nonces of rebalance deposits, registered before they are signed, whose reuse is
refused (:class:`NonceReusedError`). Beside them: the tables people query, projected from the
journal (quotes, fills, balances, alerts, rebalances), and sampled requests.

Durability. WAL with ``synchronous=NORMAL`` (the default): a commit appends to the WAL file
without an fsync. Once a journal commit returns, the transaction is in the OS page cache, so it
survives the process dying in any way, ``kill -9`` included (a test kills a writer and checks
this); an OS crash or power loss may lose the last commits, never the database's integrity.
``synchronous="full"`` fsyncs the WAL at every commit to survive those too, at the cost of a
disk flush on the hot path. Hot-path writes are plain prepared statements (sqlite3 caches them
by SQL text) in one group transaction per turn of the event loop; no ORM.

Checkpoints. SQLite's own auto-checkpoint runs inside whichever commit crosses 1000 WAL pages,
stalling that commit for several milliseconds every ~130 quotes. Here it is switched off on the
writing connection and a background thread checkpoints instead, on its own connection, in
PASSIVE mode: it never blocks the writer. It looks every 0.25 s (``checkpoint_every_s``) and
makes a pass once 512 journal entries are new, or 30 s after its last pass
(:class:`~solver.io.store.checkpoint.Pacing`: a pass that catches up makes the next commit sync
the reused WAL's header on the event loop, which a quiet bot paid several times a second).
Checkpoints keep the WAL short (each page read searches the WAL index), and
``journal_size_limit`` truncates the file after a burst. Under a steady flow of commits those
never restart the WAL, so the bot also restarts it from its own connection once it has 256 MiB
in use (:meth:`Store.restart_wal`): the next commit writes from the start of the file again,
which never grows past 512 MiB (``journal_size_limit``). When is the cheap moment: right after
the background thread has caught up (it then makes two more quick passes for what was committed
meanwhile, flushes both files to disk, makes one more pass and calls
:attr:`Store.on_wal_past_limit`), so the writer's checkpoint copies a few pages and syncs little.
RESTART, not TRUNCATE: cutting the file to zero cost 20–60 ms of the quote path (page cache
release, measured), and a restarted file is simply written over. The checkpoint's own fsyncs
stay (an unsynced checkpoint can corrupt the database on power loss); they used to wait for
everything written since the last sync, 10–65 ms on the writer under load, and wait for ~1 ms
now that the checkpointer's thread syncs the files just before (:mod:`solver.io.store.checkpoint`,
measured at 2,000 answers/s); the next commit then syncs the WAL's new header, as SQLite does
whenever a WAL is reused (not timed by itself: the one first write after a restart that was
timed took 20 ms, on a busy disk). A large limit also
makes the restart rare (about every 20 s at 1,000 answers/s: the writer thread wrote ~13 MB a
second, socket included, measured from /proc; ~23 MB of WAL and every 11 s while each quote
nonce still wrote its own row).

One connection per ``Store``, used from the thread that opened it (the event loop's). Readers in
other processes (``solver history``) do not block the writer under WAL.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TextIO

import orjson

from solver.core.lifecycle import QuoteState, TrackedQuote
from solver.core.market import QuoteRequest
from solver.core.rebalance_record import RebalanceRecord
from solver.io.store.checkpoint import CHECKPOINT_MIN_ENTRIES, Checkpointer, Pacing
from solver.io.store.checks import check_usable, open_error, refuse_unusable_file
from solver.io.store.journal import SqliteJournal
from solver.io.store.migrations import SCHEMA_VERSION, migrate, schema_version
from solver.io.store.projection import pending, project
from solver.io.store.retention import Pruned, Pruner
from solver.io.store.schema import (
    INSERT_NONCE,
    INSERT_REQUEST,
    REBALANCE_COLUMNS,
    SELECT_FILLS,
    SELECT_QUOTES,
    Alert,
    BalanceSnapshot,
    Fill,
    NonceReusedError,
    StoreError,
    export_rows,
    fill_row,
    from_ts,
    query_params,
    rebalance_row,
    tracked_row,
    ts,
)
from solver.io.store.totals import PairTotals, pair_totals
from solver.protocol.nonce import PREFIX_LEN

INSERT_NONCE_PREFIX = (
    "INSERT OR IGNORE INTO nonce_prefixes (account, prefix, claimed_at) VALUES (?, ?, ?)"
)

__all__ = [
    "SCHEMA_VERSION",
    "Alert",
    "BalanceSnapshot",
    "Fill",
    "NonceReusedError",
    "Store",
    "StoreError",
]

log = logging.getLogger("solver.store")

Synchronous = Literal["normal", "full"]
WAL_LIMIT_BYTES = 256 << 20
"""Past this in use, the writer restarts the WAL itself (:meth:`Store.restart_wal`)."""
ExportFormat = Literal["csv", "jsonl"]
Pair = tuple[str, str]

_WON_STATES = frozenset(
    {QuoteState.WON, QuoteState.SETTLING, QuoteState.SETTLED, QuoteState.FAILED}
)


class Store:
    """The bot's SQLite database: the desk's journal, quotes, fills, balances, alerts, nonces."""

    def __init__(
        self,
        path: str | Path,
        *,
        sample_requests: float = 0.0,
        synchronous: Synchronous = "normal",
        create: bool = True,
        busy_timeout_ms: int = 5000,
        checkpoint_every_s: float | None = 0.25,
        checkpoint_min_entries: int = CHECKPOINT_MIN_ENTRIES,
        account: str = "",
    ) -> None:
        """Open (``create``: or create, with its parent directory) and migrate the database.

        ``create`` is the writer's way in (the bot): SQLite itself must accept a write. Readers
        (``solver history``, ``solver store export``) pass ``create=False``: they never take
        the write lock to probe it, so they never wait for a running bot's transaction. (A
        store in WAL mode needs its ``-shm`` file writable even to be read, so a read-only
        file or directory is refused for readers too.)

        ``sample_requests`` is the fraction of quote requests :meth:`record_request` keeps.
        ``checkpoint_every_s``: copy the WAL into the database from a background thread at this
        period, off the hot path; ``None`` leaves it to SQLite, which checkpoints inside the
        commit that crosses 1000 pages and stalls that commit for milliseconds;
        ``checkpoint_min_entries``: a pass once this many journal entries are new
        (:class:`~solver.io.store.checkpoint.Pacing`; tests pass 1). ``account``:
        the bot's signing account, whose nonce prefixes :meth:`claim_nonce_prefix` registers.
        """
        if not 0.0 <= sample_requests <= 1.0:
            raise ValueError("sample_requests must be a fraction between 0 and 1")
        if synchronous not in ("normal", "full"):
            raise ValueError('synchronous must be "normal" or "full"')
        self.path = Path(path)
        self._busy_timeout_ms = int(busy_timeout_ms)
        self.sample_requests = sample_requests
        self._sample_below = int(sample_requests * 2**64)
        if not create and not self.path.is_file():
            raise StoreError(f"no store at {self.path}")
        refuse_unusable_file(self.path)
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from None
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            check_usable(self._conn, self.path, writable=create)
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot put the store {self.path} in WAL mode (got {mode})")
            self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            self._conn.execute(f"PRAGMA journal_size_limit = {2 * WAL_LIMIT_BYTES}")
            migrate(self._conn)
            if checkpoint_every_s is not None:
                self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        except sqlite3.Error as exc:
            self._conn.close()
            raise open_error(self.path, exc) from None
        except BaseException:
            self._conn.close()
            raise
        self._cur = self._conn.cursor()
        self._pruner = Pruner()
        self.journal = SqliteJournal(self._conn)
        self.account = account
        self._writer = create
        self._projected_at: int | None = None  # journal.appended when nothing was left
        if create:  # the writer: what a killed run appended but did not project yet
            self.project()
        self.wal_limit_bytes = WAL_LIMIT_BYTES
        self.on_wal_past_limit: Callable[[], None] | None = None
        """Called from the checkpointer's thread when the WAL is past :data:`WAL_LIMIT_BYTES`
        and the thread has just caught up: the writer should call :meth:`restart_wal` now (the
        live bot schedules it on its event loop)."""
        self._checkpointer: Checkpointer | None = None
        if checkpoint_every_s is not None:
            self._checkpointer = Checkpointer(
                self.path,
                checkpoint_every_s,
                busy_timeout_ms,
                self._wal_past_limit,
                self._appended,
                Pacing(time.monotonic(), min_entries=checkpoint_min_entries),
            )
            self._checkpointer.start()

    def _appended(self) -> int:
        return self.journal.appended

    def _wal_past_limit(self) -> tuple[int, Callable[[], None] | None]:
        return self.wal_limit_bytes, self.on_wal_past_limit

    def close(self) -> None:
        self.commit()
        self._close()

    def _close(self) -> None:
        """Stop the checkpointer and close; the last connection out folds the WAL back in."""
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return schema_version(self._conn)

    def commit(self) -> None:
        """Commit what the journal and :meth:`record_request` appended (the group commit)."""
        if self._conn.in_transaction:
            try:
                self._cur.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._cur.execute("ROLLBACK")
                raise StoreError(f"cannot commit recorded quotes: {exc}") from None

    def _fresh(self) -> None:
        """The writer's own reads (status windows, exports) see everything it journaled."""
        if self._writer:
            self.project()

    def restart_wal(self) -> bool:
        """Checkpoint on the writer's connection so that its next commit starts the WAL over;
        True when it did (False: a reader still uses the WAL, try again later).

        The background checkpointer copies the WAL into the database, but under a steady flow
        of commits (a thousand a second) a checkpoint never catches the last frame, so SQLite
        never starts the WAL over and the file grows without end (10 GB in ten minutes, seen
        in the soak benchmark) — and so do its ``-shm`` index and the bot's memory. From the
        writer itself, between two of its own commits, ``RESTART`` only has the frames since
        the last background checkpoint left to copy: a few pages when called as
        :attr:`on_wal_past_limit` asks."""
        self.commit()
        # Never wait on the quote path: while the background checkpointer holds its lock the
        # checkpoint is busy at once and is tried again at the next call (the soak benchmark
        # stalled the loop for seconds a time waiting out the usual busy timeout).
        conn = self._conn
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            (busy, _, _), *_ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot checkpoint the store {self.path}: {exc}") from None
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        return not busy

    def unprojected(self) -> int:
        """Journal entries the query tables do not show yet."""
        try:
            return pending(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read how far {self.path} is projected: {exc}") from None

    def project(self, budget_s: float | None = None) -> int:
        """Derive the query tables from the journal (:mod:`solver.io.store.projection`), after
        committing what was appended; ``budget_s``: at most about this long. Writer only.

        Once a call found nothing to project, the next ones run no SQL until the journal has
        a new entry: the ticker calls this 50 times a second, and a caught-up projection's
        transaction (locks, reads, commit) cost ~120 µs of the event loop each time (median, timed
        in the idle bot), ~8 µs for the call now."""
        self.commit()
        appended = self.journal.appended
        if self._projected_at == appended:
            return 0
        done = project(self._conn, budget_s=budget_s)
        if done == 0:
            self._projected_at = appended
        return done

    def disk_usage(self) -> tuple[int, int]:
        """``(the database and its WAL in bytes, free bytes on their volume for this user)``
        (the gauges; docs/operations.md "Disk"). Raises :class:`StoreError`."""
        try:
            size = self.path.stat().st_size
            with contextlib.suppress(FileNotFoundError):
                size += Path(f"{self.path}-wal").stat().st_size
            volume = os.statvfs(self.path.parent)
        except OSError as exc:
            raise StoreError(f"cannot read the size of the store {self.path}: {exc}") from None
        return size, volume.f_bavail * volume.f_frsize

    def prune(self, before: datetime, budget_s: float | None = None) -> Pruned:
        """Delete what the store may forget that is older than ``before``
        (:mod:`solver.io.store.retention`: quotes never traded, journal entries the desk no
        longer needs, old balance snapshots and request samples), after committing what was
        appended; ``budget_s``: at most about this long. Writer only."""
        self.commit()
        return self._pruner.prune(self._conn, before, budget_s=budget_s)

    def _write(self, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> int:
        """Run the statements in one transaction; return the last one's rowcount."""
        self.commit()  # what the journal appended goes first
        cur = self._cur
        rowcount = 0
        try:
            cur.execute("BEGIN")
            for sql, params in statements:
                rowcount = cur.execute(sql, params).rowcount
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._conn.in_transaction:
                cur.execute("ROLLBACK")
            raise StoreError(f"store write failed: {exc}") from None
        return rowcount

    def sampled(self, quote_id: str) -> bool:
        """Whether ``quote_id`` is in the request sample: a hash, so the same on every run."""
        digest = hashlib.blake2b(quote_id.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") < self._sample_below

    def record_request(
        self, request: QuoteRequest, outcome: str, at: datetime, reason: str | None = None
    ) -> bool:
        """Keep a sampled request with its outcome (``quoted``, ``skipped``...); True if kept."""
        if not self.sampled(request.quote_id):
            return False
        r = request
        row = (ts(at), r.quote_id, r.asset_in, r.asset_out, r.exact_in, str(r.amount),
               r.min_deadline_ms, r.partner_id, outcome, reason)  # fmt: skip
        try:  # in the journal's open transaction: committed with the next group commit
            if not self._conn.in_transaction:
                self._cur.execute("BEGIN")
            self._cur.execute(INSERT_REQUEST, row)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot record request {r.quote_id}: {exc}") from None
        return True

    # ------------------------------------------------------------------ records

    def open_alerts(self) -> list[Alert]:
        self._fresh()
        rows = self._conn.execute(
            "SELECT id, at, kind, detail FROM alerts WHERE resolved_at IS NULL ORDER BY id"
        )
        return [Alert(row[0], from_ts(row[1]), row[2], row[3]) for row in rows]

    def record_alert(
        self, kind: str, detail: str, at: datetime, resolved_at: datetime | None
    ) -> bool:
        """An alert the journal could not carry (a ``store_error`` the previous run kept in the
        alert spool only) into the ``alerts`` table, once: False when a row of ``kind`` opened
        about ``at`` is there already. Not a journal fact: the desk never knew of it durably."""
        self._fresh()
        at_text, near = ts(at), timedelta(seconds=2)  # the desk's pause and the alert: one turn
        found = self._conn.execute(
            "SELECT 1 FROM alerts WHERE kind = ? AND at BETWEEN ? AND ?",
            (kind, ts(at - near), ts(at + near)),
        ).fetchone()
        if found is not None:
            return False
        resolved = None if resolved_at is None else ts(resolved_at)
        self._write(
            [
                (
                    "INSERT INTO alerts (at, kind, detail, resolved_at) VALUES (?, ?, ?, ?)",
                    (at_text, kind, detail, resolved),
                )
            ]
        )
        return True

    # ------------------------------------------------------------------ restart

    def claim_nonce_prefix(self, at: datetime) -> bytes:
        """A nonce-sequence prefix for :attr:`account` never handed out before by this store,
        registered durably before it is returned (:class:`~solver.protocol.nonce.NonceSequence`;
        one per start of the bot)."""
        if not self.account:
            raise StoreError("the store has no account to claim a nonce prefix for")
        for _ in range(8):  # a prefix drawn before (2^-56 a time) inserts nothing: draw again
            prefix = os.urandom(PREFIX_LEN)
            if self._write([(INSERT_NONCE_PREFIX, (self.account, prefix, ts(at)))]):
                return prefix
        raise StoreError(f"cannot claim a fresh nonce prefix in {self.path}")

    def nonce_prefixes(self, account: str) -> set[bytes]:
        """Every nonce-sequence prefix claimed for ``account``."""
        sql = "SELECT prefix FROM nonce_prefixes WHERE account = ?"
        return {bytes(row[0]) for row in self._conn.execute(sql, (account,))}

    def nonce_used_before(self, account: str, nonce: bytes) -> bool:
        """Whether ``nonce`` is recorded as signed by ``account`` (rebalance deposits, and quotes
        signed before schema 8); a quote nonce is unique by its claimed prefix instead."""
        sql = "SELECT 1 FROM nonces WHERE account = ? AND nonce = ?"
        return self._conn.execute(sql, (account, nonce.hex())).fetchone() is not None

    def signed_data(self, quote_id: str) -> dict[str, Any] | None:
        """The signed item exactly as it was sent (for disputes), or None."""
        self._fresh()
        row = self._conn.execute(
            "SELECT signed_data FROM quotes WHERE quote_id = ?", (quote_id,)
        ).fetchone()
        if row is None:
            return None
        value: dict[str, Any] = orjson.loads(row[0])
        return value

    # ------------------------------------------------------------------ queries

    def quotes_since(
        self, since: datetime | None = None, pair: Pair | None = None, limit: int = 100
    ) -> list[TrackedQuote]:
        """Newest first; ``pair`` matches both directions."""
        self._fresh()
        params = query_params(since, pair, limit)
        return [tracked_row(row) for row in self._conn.execute(SELECT_QUOTES, params)]

    def fills_since(
        self, since: datetime | None = None, pair: Pair | None = None, limit: int = 100
    ) -> list[Fill]:
        """Newest first; ``pair`` matches both directions."""
        self._fresh()
        params = query_params(since, pair, limit)
        return [fill_row(row) for row in self._conn.execute(SELECT_FILLS, params)]

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

    def pair_totals(
        self,
        since: datetime | None = None,
        pair: Pair | None = None,
        decimals: Mapping[str, int] | None = None,
    ) -> list[PairTotals]:
        """Quotes, wins, fills, volume and realized PnL per pair (:mod:`store_totals`)."""
        return pair_totals(self._conn, "" if since is None else ts(since), pair, decimals)

    def stats(self, window_s: float, now: datetime) -> dict[str, Any]:
        """Counts of the quotes created in the last ``window_s`` and the volume they settled."""
        self._fresh()
        since = ts(now - timedelta(seconds=window_s))
        counts: dict[str, int] = {}
        volume_in: dict[str, int] = {}
        volume_out: dict[str, int] = {}
        sql = "SELECT state, COUNT(*) FROM quotes WHERE created_at >= ? GROUP BY state"
        for state, count in self._conn.execute(sql, (since,)):
            counts[state] = count
        sql = (
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
        }

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

    # ------------------------------------------------------------------ rebalances

    def register_nonce(self, account: str, nonce: bytes, at: datetime) -> None:
        """Record ``nonce`` as signed by ``account``, durably, before it is signed (a rebalance
        deposit: :func:`solver.io.ops_intents.sign_operation`); one recorded before, in this
        run or an earlier one, is refused with :class:`NonceReusedError` and nothing is
        signed."""
        try:
            self._write([(INSERT_NONCE, (account, nonce.hex(), None, ts(at)))])
        except StoreError as exc:
            if "nonces." in str(exc):
                raise NonceReusedError(
                    f"nonce {nonce.hex()} of {account} was signed before: not signed again"
                ) from None
            raise

    def open_rebalances(self) -> list[RebalanceRecord]:
        """Rebalances not finished yet, oldest first, as projected from the journal (the
        rebalancer takes them up from the desk, not from here)."""
        sql = REBALANCE_COLUMNS + "WHERE finished_at IS NULL ORDER BY created_at"
        return [rebalance_row(row) for row in self._conn.execute(sql)]

    def rebalances(self, limit: int = 100) -> list[RebalanceRecord]:
        """The latest rebalances, newest first."""
        sql = REBALANCE_COLUMNS + "ORDER BY created_at DESC LIMIT ?"
        return [rebalance_row(row) for row in self._conn.execute(sql, (limit,))]

    def rebalance_steps(self, rebalance_id: str) -> list[tuple[datetime, str, str | None]]:
        """``(at, state, detail)`` of every step of one rebalance, in order."""
        sql = "SELECT at, state, detail FROM rebalance_steps WHERE rebalance_id = ? ORDER BY id"
        return [(from_ts(a), s, d) for a, s, d in self._conn.execute(sql, (rebalance_id,))]

    # ------------------------------------------------------------------ export

    def export(self, table: str, fmt: ExportFormat, out: TextIO) -> int:
        """Stream every row of ``table`` to ``out`` as CSV (with a header) or JSON Lines.

        Values are as stored (amounts as decimal strings, times ISO, nonces hex); JSON Lines
        embeds the JSON columns (``signed_data``, ``markouts``) as values. Returns the row count.
        """
        self._fresh()
        return export_rows(self._conn, table, fmt, out)
