"""The SQLite store: round trips, WAL, restart support, migrations, export, crash safety."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from solver.core.inventory import Inventory
from solver.core.settlement import QuoteBook, QuoteState, TrackedQuote
from solver.engine import Journal
from solver.io.store import OPEN_STATES, SCHEMA_VERSION, Fill, NonceReusedError, Store, StoreError
from solver.io.store_schema import MIGRATIONS, SELECT_OPEN, TABLES, migrate
from solver.protocol.nonce import salted_nonce
from tests.io.store_helpers import (
    ACCOUNT,
    ETH,
    SALT,
    T0,
    U128_MAX,
    USDC,
    WNEAR,
    Signed,
    signed_quote,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "var" / "nested" / "solver.sqlite"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store(db) as opened:
        yield opened


def record(store: Store, *quotes: Signed) -> None:
    for tracked, signed, request in quotes:
        store.record_quote(tracked, signed, request)


# ------------------------------------------------------------------------------ opening


def test_opens_a_new_store_in_wal_mode_with_the_current_schema(db: Path) -> None:
    with Store(db) as store:
        assert db.is_file()  # the parent directories were created
        assert store.schema_version == SCHEMA_VERSION
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert set(TABLES) | {"schema_version"} <= tables
    finally:
        conn.close()


def test_synchronous_full_is_allowed_and_other_values_are_not(db: Path) -> None:
    with Store(db, synchronous="full") as store:
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with pytest.raises(ValueError, match="synchronous"):
        Store(db, synchronous="off")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sample_requests"):
        Store(db, sample_requests=1.5)


def test_a_missing_or_foreign_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "absent.sqlite", create=False)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database, not even close" * 100)
    with pytest.raises(StoreError, match=f"the store {junk} is not a SQLite database"):
        Store(junk)


def test_naive_datetimes_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        store.record_alert("stale", "naive", datetime(2025, 1, 1))  # noqa: DTZ001


# ------------------------------------------------------------------------------ the journal


def test_record_quote_round_trips_u128_amounts_signed_data_and_nonce(db: Path) -> None:
    quote = signed_quote("q1")
    with Store(db) as store:
        record(store, quote)
    tracked, signed, _ = quote
    with Store(db) as store:
        (loaded,) = store.load_open_quotes()
        assert loaded == tracked
        assert (loaded.amount_in, loaded.amount_out, loaded.fee) == (
            U128_MAX,
            U128_MAX - 1,
            U128_MAX - 2,
        )
        assert loaded.nonce == tracked.nonce
        assert store.signed_data("q1") == signed.signed_data
        assert store.signed_data("nope") is None
        assert store.nonce_used_before(ACCOUNT, tracked.nonce)
        assert not store.nonce_used_before("someone.else", tracked.nonce)
        assert not store.nonce_used_before(ACCOUNT, salted_nonce(SALT))
        row = store._conn.execute(
            "SELECT amount_in, amount_out, fee, exact_in, partner_id FROM quotes"
        ).fetchone()
        assert row == (str(U128_MAX), str(U128_MAX - 1), str(U128_MAX - 2), 1, "partner-1")


def test_a_reused_nonce_is_refused_and_nothing_is_written(db: Path) -> None:
    first = signed_quote("q1")
    with Store(db) as store:
        record(store, first)
    again = signed_quote("q2", nonce=first[0].nonce, amount_in=7)
    with Store(db) as store:  # a restart does not forget the nonces
        with pytest.raises(NonceReusedError, match="signed before"):
            record(store, again)
        assert [q.quote_id for q in store.load_open_quotes()] == ["q1"]
        record(store, signed_quote("q3"))  # the connection is usable after the rollback
        assert len(store.load_open_quotes()) == 2


def test_a_duplicate_quote_id_is_a_store_error(store: Store) -> None:
    record(store, signed_quote("q1"))
    with pytest.raises(StoreError, match="cannot record quote q1"):
        record(store, signed_quote("q1"))


def test_transitions_are_persisted_and_open_quotes_survive_a_restart(db: Path) -> None:
    book = QuoteBook()
    quotes = {name: signed_quote(name) for name in ("open", "won", "settling", "settled", "lost")}
    quotes["rejected"] = signed_quote("rejected")
    quotes["failed"] = signed_quote("failed")
    at = T0 + timedelta(seconds=5)
    with Store(db) as store:
        for tracked, signed, request in quotes.values():
            book.add(tracked)
            store.record_quote(tracked, signed, request)
        moves = [
            ("won", QuoteState.WON, {"intent_hash": "I-won", "tx_hash": "T-won"}),
            ("settling", QuoteState.WON, {"intent_hash": "I-s"}),
            ("settling", QuoteState.SETTLING, {"tx_hash": "T-s"}),
            ("settled", QuoteState.WON, {"intent_hash": "I-d"}),
            ("settled", QuoteState.SETTLED, {"tx_hash": "T-d"}),
            ("lost", QuoteState.LOST, {"reason": "deadline passed, nonce unused"}),
            ("rejected", QuoteState.REJECTED, {"reason": "invalid salt"}),
            ("failed", QuoteState.WON, {"intent_hash": "I-f"}),
            ("failed", QuoteState.FAILED, {"reason": "NOT_FOUND_OR_NOT_VALID"}),
        ]
        for name, new, extra in moves:
            store.record_transition(book.move(name, new, at, **extra))

    with Store(db) as store:
        loaded = {q.quote_id: q for q in store.load_open_quotes()}
        assert set(loaded) == {"open", "won", "settling"}
        assert loaded["open"] == quotes["open"][0]
        assert loaded["won"].state is QuoteState.WON
        assert (loaded["won"].intent_hash, loaded["won"].tx_hash) == ("I-won", "T-won")
        assert loaded["won"].updated_at == at
        assert loaded["settling"].state is QuoteState.SETTLING
        assert (loaded["settling"].intent_hash, loaded["settling"].tx_hash) == ("I-s", "T-s")
        assert all(q.nonce == quotes[name][0].nonce for name, q in loaded.items())

        rows = store._conn.execute(
            "SELECT quote_id, old, new, at, reason, intent_hash, tx_hash FROM transitions "
            "ORDER BY id"
        ).fetchall()
        assert [(r[0], r[1], r[2]) for r in rows] == [
            (name, old, new.value)
            for (name, new, _), old in zip(
                moves,
                ["OPEN", "OPEN", "WON", "OPEN", "WON", "OPEN", "OPEN", "OPEN", "WON"],
                strict=True,
            )
        ]
        assert rows[-1][4:] == ("NOT_FOUND_OR_NOT_VALID", "I-f", None)
        states = dict(store._conn.execute("SELECT quote_id, state FROM quotes").fetchall())
        assert states["settled"] == "SETTLED" and states["rejected"] == "REJECTED"
        assert states["failed"] == "FAILED" and states["lost"] == "LOST"


def test_the_open_query_lists_exactly_the_non_terminal_states() -> None:
    literal = SELECT_OPEN.split("state IN (")[1].split(")")[0]
    assert {s.strip().strip("'") for s in literal.split(",")} == {s.value for s in OPEN_STATES}


def test_reservations_rebuilt_from_the_store_reserve_amount_out_plus_fee(store: Store) -> None:
    a = signed_quote("a", amount_out=1_000, fee=3)
    b = signed_quote("b", amount_out=2_000, fee=5, asset_in=WNEAR, asset_out=ETH)
    record(store, a, b)
    reservations = Store.reservations_for(store.load_open_quotes())
    assert {(r.quote_id, r.asset_out, r.amount_out) for r in reservations} == {
        ("a", WNEAR, 1_003),
        ("b", ETH, 2_005),
    }
    assert {r.deadline for r in reservations} == {a[0].deadline}
    inventory = Inventory()
    inventory.restore(reservations)
    assert inventory.open_outflow() == {WNEAR: 1_003, ETH: 2_005}


# ------------------------------------------------------------------------------ other records


def test_fills_round_trip_exactly_and_markouts_merge(db: Path) -> None:
    tracked, _, _ = signed_quote("q1")
    tracked.intent_hash, tracked.tx_hash = "I1", "T1"
    fill = Fill.from_quote(
        tracked,
        T0 + timedelta(seconds=3),
        price_in_usd=1.0001,
        price_out_usd="3.123456789012345678901234567890",
        realized_pnl_usd=Decimal("-0.000000000000000001"),
        markouts={"5s": 0.1},
    )
    with Store(db) as store:
        store.record_fill(fill)
        assert store.update_markouts("q1", {"60s": -0.25, "300s": 1e-7})
        assert not store.update_markouts("absent", {"5s": 1.0})
    with Store(db) as store:
        (loaded,) = store.fills_since()
    assert loaded.amount_in == U128_MAX and loaded.fee == U128_MAX - 2
    assert loaded.price_in_usd == Decimal("1.0001")
    assert loaded.price_out_usd == Decimal("3.123456789012345678901234567890")
    assert loaded.realized_pnl_usd == Decimal("-1E-18")
    assert dict(loaded.markouts) == {"5s": 0.1, "60s": -0.25, "300s": 1e-7}
    assert loaded == dataclasses.replace(fill, markouts=loaded.markouts)

    with Store(db) as store:  # recording a fill again replaces it
        store.record_fill(Fill.from_quote(tracked, T0, realized_pnl_usd=2))
        (again,) = store.fills_since()
    assert again.realized_pnl_usd == Decimal(2) and again.markouts == {}


def test_balance_snapshots_round_trip_and_the_last_one_wins(store: Store) -> None:
    assert store.last_balance_snapshot() is None
    store.record_balances(T0, {USDC: 5, WNEAR: 6})
    later = T0 + timedelta(seconds=2)
    store.record_balances(later, {USDC: U128_MAX, WNEAR: 0}, {USDC: U128_MAX - 1})
    snapshot = store.last_balance_snapshot()
    assert snapshot is not None
    assert snapshot.at == later
    assert snapshot.balances == {USDC: U128_MAX, WNEAR: 0}
    assert snapshot.expected == {USDC: U128_MAX - 1}
    store.record_balances(later + timedelta(seconds=1), {ETH: 1})
    last = store.last_balance_snapshot()
    assert last is not None and last.expected is None and last.balances == {ETH: 1}


def test_alerts_open_and_resolve(store: Store) -> None:
    store.record_alert("balance_mismatch", "USDC off by 5", T0)
    store.record_alert("stale_prices", "no price for 30 s", T0 + timedelta(seconds=1))
    store.record_alert("balance_mismatch", "USDC off by 7", T0 + timedelta(seconds=2))
    assert [(a.kind, a.detail) for a in store.open_alerts()] == [
        ("balance_mismatch", "USDC off by 5"),
        ("stale_prices", "no price for 30 s"),
        ("balance_mismatch", "USDC off by 7"),
    ]
    assert store.open_alerts()[0].at == T0
    assert store.resolve_alerts("balance_mismatch", T0 + timedelta(seconds=9)) == 2
    assert store.resolve_alerts("balance_mismatch", T0 + timedelta(seconds=9)) == 0
    assert [a.kind for a in store.open_alerts()] == ["stale_prices"]


def test_request_sampling_is_deterministic_and_near_the_fraction(db: Path) -> None:
    ids = [f"quote-{i:05d}" for i in range(20_000)]
    with Store(db, sample_requests=0.1) as first:
        picked = [i for i in ids if first.sampled(i)]
    with Store(db, sample_requests=0.1) as second:
        assert [i for i in ids if second.sampled(i)] == picked
    assert 1_800 <= len(picked) <= 2_200  # 2,000 expected; sd ~42
    with Store(db, sample_requests=0.0) as none, Store(db, sample_requests=1.0) as every:
        assert not any(none.sampled(i) for i in ids[:1000])
        assert all(every.sampled(i) for i in ids[:1000])


def test_record_request_writes_only_the_sample(db: Path) -> None:
    with Store(db, sample_requests=0.5) as store:
        kept = []
        for n in range(200):
            _, _, request = signed_quote(f"r{n}", amount_in=U128_MAX - n)
            if store.record_request(request, "skipped", T0, reason="no_price"):
                kept.append(request)
        assert kept == [r for r in kept if store.sampled(r.quote_id)]
        assert 50 < len(kept) < 150
        out = io.StringIO()
        assert store.export("requests", "jsonl", out) == len(kept)
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [r["quote_id"] for r in rows] == [r.quote_id for r in kept]
    first = rows[0]
    assert first["amount"] == str(kept[0].amount)
    assert (first["outcome"], first["reason"], first["exact_in"]) == ("skipped", "no_price", 1)
    assert (first["min_deadline_ms"], first["partner_id"]) == (30_000, "partner-1")


# ------------------------------------------------------------------------------ queries


def test_quotes_and_fills_since_filter_by_time_and_pair_newest_first(store: Store) -> None:
    quotes = [
        signed_quote("old", at=T0 - timedelta(hours=2)),
        signed_quote("a", at=T0),
        signed_quote("b", at=T0 + timedelta(seconds=1), asset_in=WNEAR, asset_out=USDC),
        signed_quote("c", at=T0 + timedelta(seconds=2), asset_in=ETH, asset_out=USDC),
    ]
    record(store, *quotes)
    for tracked, _, _ in quotes:
        store.record_fill(Fill.from_quote(tracked, tracked.created_at + timedelta(seconds=1)))

    def ids(items: Sequence[TrackedQuote | Fill]) -> list[str]:
        return [item.quote_id for item in items]

    assert ids(store.quotes_since()) == ["c", "b", "a", "old"]
    assert ids(store.quotes_since(T0)) == ["c", "b", "a"]
    assert ids(store.quotes_since(T0, (USDC, WNEAR))) == ["b", "a"]
    assert ids(store.quotes_since(None, (WNEAR, USDC), limit=2)) == ["b", "a"]
    assert ids(store.fills_since(T0)) == ["c", "b", "a"]
    assert ids(store.fills_since(None, (USDC, ETH))) == ["c"]
    assert ids(store.fills_since(T0 + timedelta(seconds=2), limit=1)) == ["c"]


def test_stats_count_the_window_and_sum_settled_volume_exactly(store: Store) -> None:
    book = QuoteBook()
    now = T0 + timedelta(minutes=10)
    old = signed_quote("old", at=T0 - timedelta(hours=2))
    fresh = [signed_quote(f"q{i}", at=T0 + timedelta(seconds=i)) for i in range(5)]
    for tracked, signed, request in [old, *fresh]:
        book.add(tracked)
        store.record_quote(tracked, signed, request)
    for name in ("old", "q0", "q1", "q2"):
        store.record_transition(book.move(name, QuoteState.WON, now))
    for name in ("old", "q0", "q1"):
        store.record_transition(book.move(name, QuoteState.SETTLED, now))
    store.record_transition(book.move("q3", QuoteState.LOST, now))

    stats = store.stats(3600, now)
    assert (stats["quotes"], stats["won"], stats["settled"]) == (5, 3, 2)
    assert stats["win_rate"] == pytest.approx(0.6)
    assert stats["volume_in"] == {USDC: str(2 * U128_MAX)}
    assert stats["volume_out"] == {WNEAR: str(2 * (U128_MAX - 1))}
    assert store.stats(1, now)["win_rate"] is None


# ------------------------------------------------------------------------------ migrations


def test_a_v1_store_is_migrated_on_open(db: Path) -> None:
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db, isolation_level=None)
    assert migrate(conn, target=1) == 0
    tracked, signed, _ = signed_quote("legacy")
    conn.execute(
        "INSERT INTO quotes (quote_id, quote_hash, created_at, deadline, asset_in, asset_out, "
        "amount_in, amount_out, fee, nonce, signed_data, state) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'OPEN')",
        (
            tracked.quote_id,
            tracked.quote_hash,
            tracked.created_at.isoformat(timespec="microseconds"),
            tracked.deadline.isoformat(timespec="microseconds"),
            tracked.asset_in,
            tracked.asset_out,
            str(tracked.amount_in),
            str(tracked.amount_out),
            str(tracked.fee),
            tracked.nonce,
            orjson.dumps(signed.signed_data).decode(),
        ),
    )
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "fills" not in tables and "requests" not in tables
    conn.close()

    with Store(db) as store:
        assert SCHEMA_VERSION == len(MIGRATIONS) > 1
        assert store.schema_version == SCHEMA_VERSION
        assert store.load_open_quotes() == [tracked]
        store.record_fill(Fill.from_quote(tracked, T0))  # the new tables are there
        record(store, signed_quote("new"))
        exact = dict(store._conn.execute("SELECT quote_id, exact_in FROM quotes").fetchall())
        assert exact == {"legacy": None, "new": 1}
    with Store(db) as store:  # opening a current store again is a no-op
        assert store.schema_version == SCHEMA_VERSION
        versions = store._conn.execute("SELECT version FROM schema_version").fetchall()
        assert [v[0] for v in versions] == list(range(1, SCHEMA_VERSION + 1))


def test_a_store_newer_than_the_code_is_refused(db: Path) -> None:
    Store(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match="newer than this program"):
        Store(db)


# ------------------------------------------------------------------------------ export


@pytest.mark.parametrize("table", TABLES)
def test_every_table_exports_as_csv_and_jsonl(store: Store, table: str) -> None:
    tracked, _, _ = quote = signed_quote("q1")
    record(store, quote)
    store.record_fill(Fill.from_quote(tracked, T0, markouts={"5s": 0.5}))
    store.record_balances(T0, {USDC: U128_MAX})
    store.record_alert("kind", "detail, with a comma\nand a newline", T0)
    store.record_transition(QuoteBook({"q1": tracked}).move("q1", QuoteState.WON, T0))
    csv_out, jsonl_out = io.StringIO(), io.StringIO()
    count = store.export(table, "csv", csv_out)
    assert store.export(table, "jsonl", jsonl_out) == count
    csv_rows = list(csv.DictReader(io.StringIO(csv_out.getvalue())))
    json_rows = [orjson.loads(line) for line in jsonl_out.getvalue().splitlines()]
    assert len(csv_rows) == len(json_rows) == count
    for flat, nested in zip(csv_rows, json_rows, strict=True):
        assert set(flat) == set(nested)


def test_export_parses_back_to_the_stored_values(store: Store) -> None:
    tracked, signed, request = quote = signed_quote("q1")
    record(store, quote)
    store.record_fill(Fill.from_quote(tracked, T0, markouts={"5s": 0.5}))
    csv_out, jsonl_out = io.StringIO(), io.StringIO()
    store.export("quotes", "csv", csv_out)
    store.export("quotes", "jsonl", jsonl_out)
    (flat,) = csv.DictReader(io.StringIO(csv_out.getvalue()))
    (nested,) = [orjson.loads(line) for line in jsonl_out.getvalue().splitlines()]
    for row in (flat, nested):
        assert row["quote_id"] == "q1"
        assert int(row["amount_in"]) == U128_MAX
        assert bytes.fromhex(row["nonce"]) == tracked.nonce
        assert datetime.fromisoformat(row["created_at"]) == tracked.created_at
    assert orjson.loads(flat["signed_data"]) == signed.signed_data
    assert nested["signed_data"] == signed.signed_data
    fills = io.StringIO()
    store.export("fills", "jsonl", fills)
    assert orjson.loads(fills.getvalue())["markouts"] == {"5s": 0.5}
    nonces = io.StringIO()
    store.export("nonces", "csv", nonces)
    (nonce_row,) = csv.DictReader(io.StringIO(nonces.getvalue()))
    assert (nonce_row["account"], nonce_row["nonce"]) == (ACCOUNT, tracked.nonce.hex())
    assert request.quote_id == nonce_row["quote_id"]


def test_export_refuses_unknown_tables_and_formats(store: Store) -> None:
    with pytest.raises(StoreError, match="unknown table"):
        store.export("sqlite_master", "csv", io.StringIO())
    with pytest.raises(StoreError, match="unknown export format"):
        store.export("quotes", "xml", io.StringIO())  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ crash safety

_WRITER = textwrap.dedent(
    """
    import sys
    from solver.io.store import Store
    from tests.io.store_helpers import signed_quote

    store = Store(sys.argv[1], checkpoint_every_s=0.01)  # checkpoints race the kill too
    n = 0
    while True:
        tracked, signed, request = signed_quote(f"q{n}")
        store.record_quote(tracked, signed, request)
        sys.stdout.write(tracked.quote_id + "\\n")
        sys.stdout.flush()
        n += 1
    """
)


def test_quotes_survive_kill_9_of_the_writer(db: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        try:
            seen = 0
            while seen < 400:
                line = child.stdout.readline()
                assert line, child.stderr.read().decode()
                seen += 1
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()  # to EOF, with what readline() had buffered
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
    assert child.returncode == -signal.SIGKILL
    # Only whole lines were printed after record_quote returned.
    printed = rest.split(b"\n")[:-1]
    expected = {f"q{i}" for i in range(seen + len(printed))}

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {row[0] for row in conn.execute("SELECT quote_id FROM quotes")}
        nonces = conn.execute("SELECT COUNT(*) FROM nonces").fetchone()[0]
    finally:
        conn.close()
    assert expected <= stored
    assert len(stored) - len(expected) <= 1  # at most one committed but not yet printed
    assert nonces == len(stored)
    with Store(db) as store:
        assert {q.quote_id for q in store.load_open_quotes()} == stored


def test_the_background_checkpointer_folds_the_wal_into_the_database(db: Path) -> None:
    with Store(db, checkpoint_every_s=0.01) as store:
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        empty = db.stat().st_size
        record(store, *(signed_quote(f"q{i}") for i in range(50)))
        deadline = time.monotonic() + 10
        while db.stat().st_size == empty and time.monotonic() < deadline:
            time.sleep(0.01)
        assert db.stat().st_size > empty  # pages reached the database file: a checkpoint ran
        checkpointer = store._checkpointer
        assert checkpointer is not None and checkpointer.is_alive()
    assert not checkpointer.is_alive()
    with Store(db, checkpoint_every_s=None) as store:
        assert store._checkpointer is None
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        assert len(store.load_open_quotes()) == 50


def test_the_store_is_a_journal(store: Store) -> None:
    journal: Journal = store
    tracked, signed, request = signed_quote("q1")
    journal.record_quote(tracked, signed, request)
    journal.record_transition(QuoteBook({"q1": tracked}).move("q1", QuoteState.LOST, T0))
    assert store.load_open_quotes() == []


def test_a_store_is_readable_while_another_connection_writes(db: Path) -> None:
    with Store(db) as writer, Store(db, create=False, checkpoint_every_s=None) as reader:
        record(writer, signed_quote("q1"))
        assert [q.quote_id for q in reader.quotes_since()] == ["q1"]
        record(writer, signed_quote("q2"))
        assert {q.quote_id for q in reader.load_open_quotes()} == {"q1", "q2"}


def test_group_commit_batches_quotes_and_a_bad_one_rolls_back_alone(db: Path) -> None:
    first = signed_quote("g1")
    with Store(db, group_commit=True) as store:
        record(store, first)
        # Not committed yet: another connection does not see it.
        with sqlite3.connect(db) as other:
            assert other.execute("SELECT COUNT(*) FROM quotes").fetchone()[0] == 0
        with pytest.raises(NonceReusedError):
            record(store, signed_quote("g2", nonce=first[0].nonce, amount_in=7))
        record(store, signed_quote("g3"))
        store.commit()
        with sqlite3.connect(db) as other:
            ids = [r[0] for r in other.execute("SELECT quote_id FROM quotes ORDER BY quote_id")]
        assert ids == ["g1", "g3"]
        # A later ordinary write commits any pending batch first.
        record(store, signed_quote("g4"))
        store.record_alert("test", "detail", T0)
        with sqlite3.connect(db) as other:
            assert other.execute("SELECT COUNT(*) FROM quotes").fetchone()[0] == 3


def test_group_commit_duplicate_quote_id_leaves_no_orphan_nonce(db: Path) -> None:
    with Store(db, group_commit=True) as store:
        record(store, signed_quote("d1"))
        duplicate = signed_quote("d1", amount_in=9)
        with pytest.raises(StoreError, match="cannot record quote d1"):
            record(store, duplicate)
        store.commit()
        assert not store.nonce_used_before(ACCOUNT, duplicate[0].nonce)
        with sqlite3.connect(db) as other:
            assert other.execute("SELECT COUNT(*) FROM nonces").fetchone()[0] == 1
