"""The SQLite store: round trips, WAL, nonces, migrations, export, crash safety. Written only
through the desk's journal (``store.journal``); the journal itself: ``tests/io/test_journal.py``."""

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
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from solver.core import fact_codec
from solver.core import facts as f
from solver.core.clock import SECOND, from_micros, micros
from solver.core.lifecycle import Quote, QuoteState
from solver.core.rebalance_record import RebalanceRecord
from solver.io.store.checkpoint import Pacing
from solver.io.store.migrations import MIGRATIONS, migrate
from solver.io.store.schema import TABLES, NonceReusedError, tracked_row
from solver.io.store.sqlite_store import (
    SCHEMA_VERSION,
    Fill,
    Store,
    StoreError,
)
from solver.protocol.nonce import PREFIX_LEN, NonceSequence, new_nonce
from solver.runtime.ports import Journal
from tests.io.store_helpers import (
    ACCOUNT,
    ETH,
    SALT,
    SELECT_OPEN,
    T0,
    T0_US,
    U128_MAX,
    USDC,
    WNEAR,
    append_quotes,
    checkpointed,
    committed_view,
    move,
    opened,
    record,
    signed_quote,
    step,
)

REPO = Path(__file__).resolve().parents[2]
S = QuoteState


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "var" / "nested" / "solver.sqlite"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store(db, account=ACCOUNT) as opened_store:
        yield opened_store


def open_quotes(store: Store) -> list[Quote]:
    """What the old ``load_open_quotes`` returned: the quotes not final, oldest first."""
    return [tracked_row(row) for row in store._conn.execute(SELECT_OPEN)]


def count(db: Path, table: str) -> int:
    """Rows of ``table`` another process would find (what is committed)."""
    with committed_view(db) as conn:
        value: int = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return value


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
        assert set(TABLES) | {"schema_version", "journal", "desk_snapshots"} <= tables
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


def test_naive_datetimes_are_refused_and_write_nothing(db: Path) -> None:
    """Facts, requests and snapshots hold µs: a naive datetime is refused where it would
    become µs (:func:`solver.core.clock.micros`), so none reaches the journal; the store's own
    datetime inputs refuse one too."""
    naive = datetime(2025, 1, 1)  # noqa: DTZ001
    quote = signed_quote("q1")
    with Store(db, account=ACCOUNT, sample_requests=1.0) as store:
        facts: list[Callable[[], f.Fact]] = [
            lambda: f.PauseSet("*", "stale_data", "naive", micros(naive)),
            lambda: f.QuoteMoved("q1", "LOST", micros(naive)),
            lambda: f.BalancesReconciled(micros(naive), {USDC: 1}),
            lambda: dataclasses.replace(opened(quote), created_at=micros(naive)),
            lambda: dataclasses.replace(opened(quote), deadline=micros(naive)),
            lambda: move(store, "q1", S.LOST, naive),
        ]
        for fact in facts:
            with pytest.raises(ValueError, match="timezone-aware"):
                store.journal.append(fact())
        with pytest.raises(ValueError, match="timezone-aware"):
            store.record_request(quote[2], "quoted", micros(naive))
        with pytest.raises(ValueError, match="timezone-aware"):
            store.journal.write_snapshot({"version": 1}, micros(naive))
        with pytest.raises(ValueError, match="timezone-aware"):
            store.register_nonce(ACCOUNT, bytes(32), naive)
        store.commit()
        record(store, quote)  # nothing was left half written
    for table in ("journal", "quotes"):
        assert count(db, table) == 1, table
    for table in ("alerts", "balance_snapshots", "requests", "transitions", "desk_snapshots",
                  "nonces"):  # fmt: skip
        assert count(db, table) == 0, table


# ------------------------------------------------------------------------------ quotes and nonces


def test_a_quote_round_trips_u128_amounts_signed_data_and_nonce(db: Path) -> None:
    quote = signed_quote("q1")
    with Store(db, account=ACCOUNT) as store:
        record(store, quote)
    tracked, signed, _ = quote
    with Store(db, account=ACCOUNT) as store:
        (loaded,) = open_quotes(store)
        assert loaded == tracked
        assert store.quotes_since() == [tracked]
        assert (loaded.amount_in, loaded.amount_out, loaded.fee) == (
            U128_MAX,
            U128_MAX - 1,
            U128_MAX - 2,
        )
        assert loaded.nonce == tracked.nonce
        assert store.signed_data("q1") == signed.signed_data
        assert store.signed_data("nope") is None
        row = store._conn.execute(
            "SELECT amount_in, amount_out, fee, exact_in, partner_id FROM quotes"
        ).fetchone()
        assert row == (str(U128_MAX), str(U128_MAX - 1), str(U128_MAX - 2), 1, "partner-1")
        # The journal keeps the same amounts exactly (as decimal strings in its JSON body).
        _, facts = store.journal.load()
        assert facts == [opened(quote)]
        (body,) = store._conn.execute("SELECT body FROM journal").fetchone()
        assert orjson.loads(body)["amount_in"] == str(U128_MAX)


def test_each_start_claims_a_nonce_prefix_never_claimed_before(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quote nonces are ``prefix ‖ counter`` (NonceSequence): the store hands each start a
    prefix it never handed out for that account, durably, so nonces never repeat across
    restarts without a row per nonce."""
    with Store(db, account=ACCOUNT) as store:
        first = store.claim_nonce_prefix(T0)
    with Store(db, account=ACCOUNT) as store:  # a restart does not forget them
        assert store.nonce_prefixes(ACCOUNT) == {first}
        draws = iter([first, first, b"\x07" * PREFIX_LEN])  # a repeat is drawn again
        monkeypatch.setattr("solver.io.store.nonce_registry.os.urandom", lambda n: next(draws))
        second = store.claim_nonce_prefix(T0)
        monkeypatch.undo()
        assert second == b"\x07" * PREFIX_LEN
        assert store.nonce_prefixes(ACCOUNT) == {first, second}
        assert store.nonce_prefixes("someone.else") == set()
        runs = [NonceSequence(first), NonceSequence(second)]
        nonces = [
            new_nonce(layout, SALT, T0, run)
            for run in runs
            for layout in ("salted", "versioned")
            for _ in range(500)
        ]
        assert len(set(nonces)) == len(nonces) == 2000
    with Store(db, account="other.sandbox") as store:  # per account
        assert store.claim_nonce_prefix(T0) not in store.nonce_prefixes(ACCOUNT)
        assert len(store.nonce_prefixes("other.sandbox")) == 1
    with Store(db) as store, pytest.raises(StoreError, match="no account"):
        store.claim_nonce_prefix(T0)
    assert count(db, "nonces") == 0


def test_a_duplicate_quote_id_is_journaled_and_its_projection_skipped(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The desk never signs one quote id twice (its book refuses it); should a second one ever
    reach the journal, the journal keeps it (a record is never lost) and the projection logs
    it and keeps the first quote row."""
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("d1"))
        duplicate = signed_quote("d1", amount_in=9)
        record(store, duplicate, signed_quote("d0"))
        facts = store.journal.load()[1]
        opened_ids = [fact.quote_id for fact in facts if isinstance(fact, f.QuoteOpened)]
        assert opened_ids == ["d1", "d1", "d0"]
        (row,) = store._conn.execute("SELECT amount_in FROM quotes WHERE quote_id = 'd1'")
        assert row[0] == str(U128_MAX)  # the first one's
    assert (count(db, "journal"), count(db, "quotes")) == (3, 2)
    assert any("journal entry 2 (quote_opened) not projected" in r.message for r in caplog.records)


def test_a_quote_whose_journal_entry_fails_takes_its_rows_back(store: Store, db: Path) -> None:
    store._conn.execute(
        "CREATE TEMP TRIGGER no_room BEFORE INSERT ON journal WHEN NEW.kind = 'quote_opened' "
        "BEGIN SELECT RAISE(ABORT, 'no room'); END"
    )
    quote = signed_quote("q1")
    with pytest.raises(StoreError, match="no room"):
        record(store, quote)
    store._conn.execute("DROP TRIGGER no_room")
    store.project()
    assert store.quotes_since() == [] and count(db, "journal") == 0
    with pytest.raises(StoreError, match="no room"):
        store.journal.commit()  # the driver hears of the loss (and appends its facts again)
    record(store, quote)  # and it can be recorded once the store works again
    assert count(db, "quotes") == 1


# ------------------------------------------------------------------------------ projections


def test_moves_are_projected_and_open_quotes_survive_a_restart(db: Path) -> None:
    names = ("open", "won", "settling", "settled", "direct", "lost", "rejected", "failed")
    quotes = {name: signed_quote(name) for name in names}
    at = T0 + timedelta(seconds=5)
    moves = [
        ("won", S.WON, {"intent_hash": "I-won", "tx_hash": "T-won"}),
        ("settling", S.WON, {"intent_hash": "I-s"}),
        ("settling", S.SETTLING, {"tx_hash": "T-s"}),
        ("settled", S.WON, {"intent_hash": "I-d"}),
        ("settled", S.SETTLED, {"tx_hash": "T-d"}),
        ("direct", S.SETTLED, {"intent_hash": "I-x", "tx_hash": "T-x"}),  # OPEN -> SETTLED
        ("lost", S.LOST, {"reason": "deadline passed, nonce unused"}),
        ("rejected", S.REJECTED, {"reason": "invalid salt"}),
        ("failed", S.WON, {"intent_hash": "I-f"}),
        ("failed", S.FAILED, {"reason": "deadline passed, nonce unused"}),
    ]
    with Store(db, account=ACCOUNT) as store:
        append_quotes(store, *quotes.values())
        for name, new, extra in moves:
            move(store, name, new, at, **extra)  # type: ignore[arg-type]
        store.project()

    with Store(db, account=ACCOUNT) as store:
        loaded = {q.quote_id: q for q in open_quotes(store)}
        assert set(loaded) == {"open", "won", "settling"}
        assert loaded["open"] == quotes["open"][0]
        assert loaded["won"].state is S.WON
        assert (loaded["won"].intent_hash, loaded["won"].tx_hash) == ("I-won", "T-won")
        assert loaded["won"].updated_at == micros(at)
        assert loaded["settling"].state is S.SETTLING
        assert (loaded["settling"].intent_hash, loaded["settling"].tx_hash) == ("I-s", "T-s")
        assert all(q.nonce == quotes[name][0].nonce for name, q in loaded.items())

        rows = store._conn.execute(
            "SELECT quote_id, old, new, at, reason, intent_hash, tx_hash FROM transitions "
            "ORDER BY id"
        ).fetchall()
        olds = ["OPEN", "OPEN", "WON", "OPEN", "WON", "OPEN", "OPEN", "OPEN", "OPEN", "WON"]
        assert [(r[0], r[1], r[2]) for r in rows] == [
            (name, old, new.value) for (name, new, _), old in zip(moves, olds, strict=True)
        ]
        assert rows[-1][4:] == ("deadline passed, nonce unused", None, None)
        states = dict(store._conn.execute("SELECT quote_id, state FROM quotes").fetchall())
        assert states["settled"] == "SETTLED" and states["rejected"] == "REJECTED"
        assert states["failed"] == "FAILED" and states["lost"] == "LOST"
        assert states["direct"] == "SETTLED"
        failed = store._conn.execute(
            "SELECT intent_hash, reason FROM quotes WHERE quote_id = 'failed'"
        ).fetchone()
        assert failed == ("I-f", "deadline passed, nonce unused")  # kept from the WON move
        # Every settled quote has a fill row; nothing else has.
        assert {fill.quote_id for fill in store.fills_since()} == {"settled", "direct"}
        assert store.stats(3600, at)["states"] == {
            "OPEN": 1, "WON": 1, "SETTLING": 1, "SETTLED": 2, "LOST": 1, "REJECTED": 1,
            "FAILED": 1,
        }  # fmt: skip


def test_quotes_that_expire_untouched_are_lost_on_their_row_without_transition_rows(
    store: Store,
) -> None:
    """The desk retires expired quotes in one ``QuotesLost`` fact: each row says LOST with the
    time and reason, no transition row is written for them (the common case, kept cheap);
    a quote that moved before keeps its transitions."""
    append_quotes(store, *(signed_quote(f"x{i}") for i in range(3)))
    move(store, "x2", S.WON, T0, intent_hash="I")
    later = T0 + timedelta(seconds=70)
    store.journal.append(f.QuotesLost(("x0", "x1"), micros(later), "deadline passed, never named"))
    store.project()
    rows = store._conn.execute(
        "SELECT quote_id, state, updated_at, reason FROM quotes ORDER BY quote_id"
    ).fetchall()
    assert rows[:2] == [
        (q, "LOST", later.isoformat(timespec="microseconds"), "deadline passed, never named")
        for q in ("x0", "x1")
    ]
    assert rows[2][1] == "WON"
    moves = store._conn.execute("SELECT quote_id, old, new FROM transitions").fetchall()
    assert moves == [("x2", "OPEN", "WON")]


def test_a_move_of_a_quote_the_store_never_saw_is_journaled_without_rows(store: Store) -> None:
    move(store, "ghost", S.REJECTED, T0, reason="not sent")
    store.project()
    assert store.quotes_since() == [] and store.fills_since() == []
    assert store._conn.execute("SELECT quote_id, old, new FROM transitions").fetchall() == [
        ("ghost", "?", "REJECTED")
    ]
    assert [type(fact) for fact in store.journal.load()[1]] == [f.QuoteMoved]


def test_fills_round_trip_exactly_and_markouts_merge(db: Path) -> None:
    quote = signed_quote("q1")
    settled_at = T0 + timedelta(seconds=3)
    prices = f.FillPrices(1.0001, 3.123456789012345, -1e-18)
    with Store(db, account=ACCOUNT) as store:
        append_quotes(store, quote, signed_quote("bare"))
        move(store, "q1", S.WON, T0, intent_hash="I1")
        move(store, "q1", S.SETTLED, settled_at, tx_hash="T1", fill=prices)
        move(store, "bare", S.SETTLED, settled_at, reason="nonce used")  # no prices known
        for horizon, value in ((1, 0.1), (60, -0.25), (300, 1e-7)):
            store.journal.append(f.Markout("q1", horizon, value, micros(settled_at)))
        store.journal.append(f.Markout("absent", 1, 1.0, micros(settled_at)))  # no fill: no row
        store.project()
    with Store(db) as store:
        loaded = {fill.quote_id: fill for fill in store.fills_since()}
    assert set(loaded) == {"q1", "bare"}
    tracked = quote[0]
    assert loaded["q1"] == Fill(
        "q1",
        tracked.quote_hash,
        settled_at,
        USDC,
        U128_MAX,
        WNEAR,
        U128_MAX - 1,
        U128_MAX - 2,
        "I1",
        "T1",
        Decimal("1.0001"),
        Decimal("3.123456789012345"),
        Decimal("-1E-18"),
        {"1": 0.1, "60": -0.25, "300": 1e-7},
    )
    bare = loaded["bare"]
    assert (bare.price_in_usd, bare.price_out_usd, bare.realized_pnl_usd) == (None, None, None)
    assert bare.markouts == {} and bare.amount_in == U128_MAX


def test_balance_snapshots_round_trip_and_the_last_one_wins(store: Store) -> None:
    assert store.last_balance_snapshot() is None
    store.journal.append(f.BalancesReconciled(T0_US, {USDC: 5, WNEAR: 6}))
    later = T0 + timedelta(seconds=2)
    store.journal.append(f.BalancesReconciled(micros(later), {USDC: U128_MAX, WNEAR: 0}))
    store.project()
    snapshot = store.last_balance_snapshot()
    assert snapshot is not None
    assert snapshot.at == later
    assert snapshot.balances == {USDC: U128_MAX, WNEAR: 0}
    assert snapshot.expected is None  # the journal's projection does not write it
    store.journal.append(f.BalancesReconciled(micros(later) + SECOND, {ETH: 1}))
    store.project()
    last = store.last_balance_snapshot()
    assert last is not None and last.balances == {ETH: 1}


def test_alerts_open_with_a_risk_pause_and_resolve_when_it_clears(store: Store) -> None:
    journal = store.journal
    journal.append(f.PauseSet("*", "reconciliation", "USDC off by 5", T0_US))
    journal.append(f.PauseSet("*", "stale_data", "no price for 30 s", T0_US + SECOND))
    journal.append(f.PauseSet("a->b", "operator", "maintenance", T0_US))  # an operator's: no alert
    journal.append(f.PauseSet("*", "reconciliation", "USDC off by 7", T0_US + 2 * SECOND))
    store.project()
    assert [(a.kind, a.detail) for a in store.open_alerts()] == [
        ("reconciliation", "USDC off by 5"),
        ("stale_data", "no price for 30 s"),
        ("reconciliation", "USDC off by 7"),
    ]
    assert store.open_alerts()[0].at == T0
    resolved_at = T0 + timedelta(seconds=9)
    journal.append(f.PauseCleared("*", "reconciliation", micros(resolved_at), "operator"))
    journal.append(f.PauseCleared("a->b", "operator", micros(resolved_at), "operator"))
    store.project()
    assert [a.kind for a in store.open_alerts()] == ["stale_data"]
    rows = store._conn.execute("SELECT kind, resolved_at FROM alerts ORDER BY id").fetchall()
    assert rows[0] == ("reconciliation", resolved_at.isoformat(timespec="microseconds"))
    assert len(rows) == 3


# ------------------------------------------------------------------------------ requests


def test_request_sampling_is_deterministic_and_near_the_fraction(db: Path) -> None:
    ids = [f"quote-{i:05d}" for i in range(20_000)]
    with Store(db, sample_requests=0.1) as first:
        picked = [i for i in ids if first.sampled(i)]
    with Store(db, sample_requests=0.1) as second:
        assert [i for i in ids if second.sampled(i)] == picked
    assert 1_800 <= len(picked) <= 2_200  # 2,000 expected; sd ~42
    with Store(db, sample_requests=0.0) as none:
        assert not any(none.sampled(i) for i in ids[:1000])
    with Store(db, sample_requests=1.0) as every:
        assert all(every.sampled(i) for i in ids[:1000])


def test_record_request_writes_only_the_sample_with_the_next_commit(db: Path) -> None:
    with Store(db, sample_requests=0.5) as store:
        kept = []
        for n in range(200):
            _, _, request = signed_quote(f"r{n}", amount_in=U128_MAX - n)
            if store.record_request(request, "skipped", T0_US, reason="no_price"):
                kept.append(request)
        assert kept == [r for r in kept if store.sampled(r.quote_id)]
        assert 50 < len(kept) < 150
        assert count(db, "requests") == 0  # in the open transaction, with the journal's facts
        store.commit()
        assert count(db, "requests") == len(kept)
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
    append_quotes(store, *quotes)
    for tracked, _, _ in quotes:
        move(store, tracked.quote_id, S.SETTLED, from_micros(tracked.created_at + SECOND))
    store.project()

    def ids(items: Sequence[Quote | Fill]) -> list[str]:
        return [item.quote_id for item in items]

    assert ids(store.quotes_since()) == ["c", "b", "a", "old"]
    assert ids(store.quotes_since(T0)) == ["c", "b", "a"]
    assert ids(store.quotes_since(T0, (USDC, WNEAR))) == ["b", "a"]
    assert ids(store.quotes_since(None, (WNEAR, USDC), limit=2)) == ["b", "a"]
    assert ids(store.fills_since(T0)) == ["c", "b", "a"]
    assert ids(store.fills_since(None, (USDC, ETH))) == ["c"]
    assert ids(store.fills_since(T0 + timedelta(seconds=2), limit=1)) == ["c"]


def test_stats_count_the_window_and_sum_settled_volume_exactly(store: Store) -> None:
    now = T0 + timedelta(minutes=10)
    old = signed_quote("old", at=T0 - timedelta(hours=2))
    fresh = [signed_quote(f"q{i}", at=T0 + timedelta(seconds=i)) for i in range(5)]
    append_quotes(store, old, *fresh)
    for name in ("old", "q0", "q1", "q2"):
        move(store, name, S.WON, now)
    for name in ("old", "q0", "q1"):
        move(store, name, S.SETTLED, now)
    move(store, "q3", S.LOST, now)
    store.project()

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
            from_micros(tracked.created_at).isoformat(timespec="microseconds"),
            from_micros(tracked.deadline).isoformat(timespec="microseconds"),
            tracked.asset_in,
            tracked.asset_out,
            str(tracked.amount_in),
            str(tracked.amount_out),
            str(tracked.fee),
            tracked.nonce,
            orjson.dumps(signed.signed_data).decode(),
        ),
    )
    conn.execute(
        "INSERT INTO nonces (account, nonce, quote_id, signed_at) VALUES (?, ?, ?, ?)",
        (ACCOUNT, tracked.nonce.hex(), "legacy", from_micros(tracked.created_at).isoformat()),
    )
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not tables & {"fills", "requests", "rebalances", "journal", "desk_snapshots"}
    conn.close()

    with Store(db, account=ACCOUNT) as store:
        assert SCHEMA_VERSION == len(MIGRATIONS) == 11
        assert store.schema_version == SCHEMA_VERSION
        assert open_quotes(store) == [tracked]
        assert store.journal.load() == (None, [])  # the journal starts empty
        assert store.nonce_used_before(ACCOUNT, tracked.nonce)  # the nonces signed before stay
        record(store, new := signed_quote("new"))  # the new tables are there
        move(store, "new", S.SETTLED, T0, fill=f.FillPrices(1.0, 2.0, 0.5))
        store.project()
        assert [fill.quote_id for fill in store.fills_since()] == ["new"]
        exact = dict(store._conn.execute("SELECT quote_id, exact_in FROM quotes").fetchall())
        assert exact == {"legacy": None, "new": 1}
        assert store.journal.load()[1][0] == opened(new)
    with Store(db) as store:  # opening a current store again is a no-op
        assert store.schema_version == SCHEMA_VERSION
        versions = store._conn.execute("SELECT version FROM schema_version").fetchall()
        assert [v[0] for v in versions] == list(range(1, SCHEMA_VERSION + 1))


def before_v11(conn: sqlite3.Connection) -> None:
    """Undo migration 11 (lost quotes sampled) on a current store."""
    conn.execute("DROP TABLE quote_counts")
    conn.execute("ALTER TABLE quotes DROP COLUMN weight")
    conn.execute("ALTER TABLE projection DROP COLUMN open_from")
    conn.execute("ALTER TABLE projection DROP COLUMN lost_sample_rate")
    conn.execute("DELETE FROM schema_version WHERE version >= 11")


def test_a_v4_store_gets_the_journal_and_keeps_its_rebalances(db: Path) -> None:
    with Store(db) as store:
        step(store, RebalanceRecord("r1", T0, T0, "PLANNED", USDC, USDC, WNEAR, U128_MAX, {}))
    conn = sqlite3.connect(db, isolation_level=None)
    before_v11(conn)
    conn.execute("DROP TABLE journal")
    conn.execute("DROP TABLE desk_snapshots")
    conn.execute("DROP TABLE projection")
    conn.execute("DROP TABLE nonce_prefixes")
    conn.execute("DELETE FROM schema_version")  # a new store holds only its version
    conn.execute("INSERT INTO schema_version (version) VALUES (4)")
    conn.close()
    with Store(db, account=ACCOUNT) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [r.id for r in store.rebalances()] == ["r1"]
        assert store.rebalances()[0].amount_in == U128_MAX
        # Migration 10: the unfinished row is carried into the journal, its step not repeated.
        _, facts = store.journal.load()
        assert facts == [f.RebalanceStepped(store.rebalances()[0], None, carried=True)]
        assert [s for _, s, _ in store.rebalance_steps("r1")] == ["PLANNED"]
        record(store, signed_quote("q1"))
        assert len(store.journal.load()[1]) == 2


def test_a_v6_store_loses_the_quote_hash_index_and_keeps_every_quote(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Migration 7 rebuilds ``quotes`` without the UNIQUE index on ``quote_hash``: every row and
    column comes through, the index on ``created_at`` is back (migration 9 then drops the
    partial index of open quotes), and the store goes on working."""
    with Store(db, account=ACCOUNT) as store:
        record(store, *(signed_quote(f"m{i}") for i in range(30)))
        move(store, "m3", S.SETTLED, T0, fill=f.FillPrices(1.0, 2.0, 0.5))
        store.project()
    conn = sqlite3.connect(db, isolation_level=None)
    before = conn.execute("SELECT * FROM quotes ORDER BY quote_id").fetchall()
    before_v11(conn)  # (its weight column comes back last, 1 for every row: as before)
    conn.execute("DELETE FROM schema_version")  # a new store holds only its version
    conn.execute("INSERT INTO schema_version (version) VALUES (6)")
    conn.execute("DROP TABLE nonce_prefixes")
    conn.execute("BEGIN")  # back to the version-6 table, its UNIQUE index included
    conn.execute("ALTER TABLE quotes RENAME TO quotes_now")
    conn.execute(MIGRATIONS[0][0])
    conn.execute("ALTER TABLE quotes ADD COLUMN exact_in INTEGER")
    conn.execute("ALTER TABLE quotes ADD COLUMN partner_id TEXT")
    conn.execute("INSERT INTO quotes SELECT * FROM quotes_now")
    conn.execute("DROP TABLE quotes_now")
    conn.execute("COMMIT")
    assert any(i[2] for i in conn.execute("PRAGMA index_list(quotes)"))  # a unique index
    conn.close()
    with caplog.at_level("INFO", logger="solver.store"), Store(db, account=ACCOUNT) as store:
        said = [r.getMessage() for r in caplog.records if r.name == "solver.store"]
        assert said == [  # a rebuild is said first
            "migrating the store to schema version 7",
            "migrating the store to schema version 8",
            "migrating the store to schema version 9",
            "migrating the store to schema version 10",
            "migrating the store to schema version 11",
        ]
        assert store.schema_version == SCHEMA_VERSION == 11
        prefix = store.claim_nonce_prefix(T0)  # the new table is there
        assert store.nonce_prefixes(ACCOUNT) == {prefix}
        rows = store._conn.execute("SELECT * FROM quotes ORDER BY quote_id").fetchall()
        assert rows == before
        indexes = {i[1]: i[2] for i in store._conn.execute("PRAGMA index_list(quotes)")}
        # created_at's index is back; the open quotes' partial index is gone (migration 9)
        assert set(indexes) == {"quotes_created_at", "sqlite_autoindex_quotes_1"}
        assert [name for name, unique in indexes.items() if unique] == [
            "sqlite_autoindex_quotes_1"  # the primary key, quote_id
        ]
        record(store, signed_quote("after"))
        store.project()
        assert len(open_quotes(store)) == 30


def test_a_store_newer_than_the_code_is_refused(db: Path) -> None:
    Store(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match="newer than this program"):
        Store(db)


# ------------------------------------------------------------------------------ export


def seed_every_table(store: Store) -> None:
    quote = signed_quote("q1")
    append_quotes(store, quote)
    move(store, "q1", S.WON, T0, intent_hash="I1")
    move(store, "q1", S.SETTLED, T0, fill=f.FillPrices(1.0, 3.0, 0.5))
    store.journal.append(f.Markout("q1", 5, 0.5, T0_US))
    store.journal.append(f.BalancesReconciled(T0_US, {USDC: U128_MAX}))
    store.journal.append(
        f.PauseSet("*", "reconciliation", "detail, with a comma\nand a newline", T0_US)
    )
    store.record_request(quote[2], "quoted", T0_US)
    store.project()
    store.claim_nonce_prefix(T0)
    record = RebalanceRecord("r1", T0, T0, "PLANNED", USDC, USDC, WNEAR, 5, {"plan": [1, 2]})
    store.register_nonce(ACCOUNT, bytes(range(32)), T0)
    step(store, dataclasses.replace(record, deposit_nonce=bytes(range(32))), "planned")


def test_a_deposit_nonce_is_registered_once_and_refused_after(db: Path) -> None:
    """A rebalance deposit's nonce is registered before it is signed; a second registration,
    in the same run or after a restart, is refused (nothing is then signed)."""
    nonce = bytes(range(32))
    with Store(db, account=ACCOUNT) as store:
        store.register_nonce(ACCOUNT, nonce, T0)
        with pytest.raises(NonceReusedError, match="signed before"):
            store.register_nonce(ACCOUNT, nonce, T0)
    with Store(db, account=ACCOUNT) as store:
        with pytest.raises(NonceReusedError):
            store.register_nonce(ACCOUNT, nonce, T0)
        assert store.nonce_used_before(ACCOUNT, nonce)
        store.register_nonce("other.near", nonce, T0)  # per account


@pytest.mark.parametrize("table", TABLES)
def test_every_table_exports_as_csv_and_jsonl(db: Path, table: str) -> None:
    with Store(db, account=ACCOUNT, sample_requests=1.0) as store:
        seed_every_table(store)
        csv_out, jsonl_out = io.StringIO(), io.StringIO()
        count = store.export(table, "csv", csv_out)
        assert store.export(table, "jsonl", jsonl_out) == count
    assert count > 0  # every table has rows
    csv_rows = list(csv.DictReader(io.StringIO(csv_out.getvalue())))
    json_rows = [orjson.loads(line) for line in jsonl_out.getvalue().splitlines()]
    assert len(csv_rows) == len(json_rows) == count
    for flat, nested in zip(csv_rows, json_rows, strict=True):
        assert set(flat) == set(nested)


def test_the_journal_exports_its_body_as_json(db: Path) -> None:
    with Store(db, account=ACCOUNT, sample_requests=1.0) as store:
        seed_every_table(store)
        _, facts = store.journal.load()
        csv_out, jsonl_out = io.StringIO(), io.StringIO()
        store.export("journal", "csv", csv_out)
        store.export("journal", "jsonl", jsonl_out)
    flat = list(csv.DictReader(io.StringIO(csv_out.getvalue())))
    nested = [orjson.loads(line) for line in jsonl_out.getvalue().splitlines()]
    assert [int(r["seq"]) for r in flat] == [r["seq"] for r in nested] == list(range(1, 8))
    assert [r["kind"] for r in nested] == [f.kind_of(fact) for fact in facts]
    for row, csv_row, fact in zip(nested, flat, facts, strict=True):
        body, csv_body = dict(row["body"]), orjson.loads(csv_row["body"])
        encoded = fact_codec.encode(fact)
        if isinstance(fact, f.QuoteOpened):  # its entry keeps the signed answer too (the
            # fact read back for the desk does not)
            assert body.pop("signed_data")["standard"] == csv_body.pop("signed_data")["standard"]
            assert encoded.pop("signed_data") == {}
        assert body == encoded  # a JSON value, not a string
        assert csv_body == encoded  # JSON text in CSV
        assert fact_codec.decode(row["kind"], row["body"]) == fact
    assert nested[0]["body"]["amount_in"] == str(U128_MAX)
    assert nested[0]["at"] == T0_US


def test_export_parses_back_to_the_stored_values(store: Store) -> None:
    tracked, signed, _ = quote = signed_quote("q1")
    record(store, quote)
    move(store, "q1", S.SETTLED, T0)
    store.journal.append(f.Markout("q1", 5, 0.5, T0_US))
    store.project()
    csv_out, jsonl_out = io.StringIO(), io.StringIO()
    store.export("quotes", "csv", csv_out)
    store.export("quotes", "jsonl", jsonl_out)
    (flat,) = csv.DictReader(io.StringIO(csv_out.getvalue()))
    (nested,) = [orjson.loads(line) for line in jsonl_out.getvalue().splitlines()]
    for row in (flat, nested):
        assert row["quote_id"] == "q1"
        assert int(row["amount_in"]) == U128_MAX
        assert bytes.fromhex(row["nonce"]) == tracked.nonce
        assert micros(datetime.fromisoformat(row["created_at"])) == tracked.created_at
    assert orjson.loads(flat["signed_data"]) == signed.signed_data
    assert nested["signed_data"] == signed.signed_data
    fills = io.StringIO()
    store.export("fills", "jsonl", fills)
    assert orjson.loads(fills.getvalue())["markouts"] == {"5": 0.5}
    prefix = store.claim_nonce_prefix(T0)
    prefixes = io.StringIO()
    store.export("nonce_prefixes", "csv", prefixes)
    (prefix_row,) = csv.DictReader(io.StringIO(prefixes.getvalue()))
    assert (prefix_row["account"], prefix_row["prefix"]) == (ACCOUNT, prefix.hex())
    assert datetime.fromisoformat(prefix_row["claimed_at"]) == T0


def test_export_refuses_unknown_tables_and_formats(store: Store) -> None:
    with pytest.raises(StoreError, match="unknown table"):
        store.export("sqlite_master", "csv", io.StringIO())
    with pytest.raises(StoreError, match="unknown export format"):
        store.export("quotes", "xml", io.StringIO())  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ crash safety

_WRITER = textwrap.dedent(
    """
    import sys
    from solver.io.store.sqlite_store import Store
    from tests.io.store_helpers import ACCOUNT, append_quotes, signed_quote

    # Checkpoints race the kill too. Group commit: a batch of quotes per transaction, printed
    # only once committed, as the executor sends answers only after the commit.
    store = Store(sys.argv[1], checkpoint_every_s=0.01, checkpoint_min_entries=1, account=ACCOUNT)
    batch = int(sys.argv[2])
    n = 0
    while True:
        quotes = [signed_quote(f"q{n + i}") for i in range(batch)]
        append_quotes(store, *quotes)
        store.project()
        sys.stdout.write("".join(q[0].quote_id + "\\n" for q in quotes))
        sys.stdout.flush()
        n += batch
    """
)


@pytest.mark.parametrize("batch", [1, 7])
def test_everything_committed_survives_kill_9_of_the_writer(db: Path, batch: int) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db), str(batch)],
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
    # Only whole lines were printed after the commit returned.
    printed = rest.split(b"\n")[:-1]
    expected = {f"q{i}" for i in range(seen + len(printed))}

    # Commits made during a checkpoint pass are in the spill file, until the next owner.
    spill = Path(f"{db}-spill")
    lines = spill.read_bytes().splitlines() if spill.exists() else []
    spilled = [row for row in map(orjson.loads, lines) if isinstance(row, list)]  # not heads
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        journaled = {
            orjson.loads(body)["quote_id"]
            for (body,) in conn.execute("SELECT body FROM journal WHERE kind = 'quote_opened'")
        } | {orjson.loads(body)["quote_id"] for _, kind, body in spilled if kind == "quote_opened"}
        projected = {row[0] for row in conn.execute("SELECT quote_id FROM quotes")}
        entries = conn.execute("SELECT COUNT(*) FROM journal").fetchone()[0] + len(spilled)
    finally:
        conn.close()
    assert expected <= journaled
    assert len(journaled) - len(expected) <= batch  # at most one batch committed, not printed
    assert len(journaled) % batch == 0  # whole batches only: a transaction is all or nothing
    assert entries == len(journaled)  # one journal row per answer, nothing else
    # The query tables follow in their own transaction: the kill may fall between the two.
    assert projected <= journaled and len(journaled - projected) <= batch + len(spilled)
    with Store(db) as store:  # the writer recovers the spill, projects what a killed run left
        assert {q.quote_id for q in open_quotes(store)} == journaled
        _, facts = store.journal.load()
    assert [fact.quote_id for fact in facts if isinstance(fact, f.QuoteOpened)] == [
        f"q{i}" for i in range(len(journaled))
    ]


def test_the_writer_folds_the_wal_into_the_database_when_a_pass_is_due(db: Path) -> None:
    with Store(db, checkpoint_every_s=0.0, checkpoint_min_entries=1, account=ACCOUNT) as store:
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        empty = db.stat().st_size
        record(store, *(signed_quote(f"q{i}") for i in range(50)))
        assert checkpointed(store)
        assert db.stat().st_size > empty  # pages reached the database file: a pass ran
    with Store(db, checkpoint_every_s=None) as store:
        assert store.checkpoints is None
        assert not store.checkpoint_if_due()
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        assert len(open_quotes(store)) == 50


def test_checkpoint_passes_wait_for_enough_new_entries_or_long_enough() -> None:
    pacing = Pacing(100.0, min_entries=100, max_wait_s=30.0)  # opened at t=100 s
    assert not pacing.due(99, 101.0)  # 99 entries since the opening: not yet
    assert pacing.due(100, 101.25)  # 100 new entries
    assert not pacing.due(199, 101.5)
    assert not pacing.due(150, 131.0)
    assert pacing.due(150, 131.25)  # 30 s after the last pass, whatever was written
    assert (pacing.last_entries, pacing.last_at) == (150, 131.25)
    assert not pacing.due(150, 131.5)
    assert pacing.due(250, 131.75)


def test_a_quiet_writer_is_not_checkpointed_at_every_look(tmp_path: Path) -> None:
    """The ticker asks every 20 ms, but the writer looks at most every ``checkpoint_every_s``
    and the database file receives pages only once enough journal entries are new (the pass
    that catches up makes the next commit sync the WAL's header on the event loop)."""
    db = tmp_path / "quiet.sqlite"
    Store(db, account=ACCOUNT, checkpoint_every_s=None).close()  # schema in the file, no WAL
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=200) as store:
        folded = db.stat().st_size
        record(store, *(signed_quote(f"a{i}") for i in range(50)))
        assert not any(store.checkpoint_if_due() for _ in range(30))
        assert db.stat().st_size == folded
        record(store, *(signed_quote(f"b{i}") for i in range(200)))
        assert checkpointed(store)
        assert db.stat().st_size > folded  # a pass copied pages into the database file
    with Store(db, account=ACCOUNT, checkpoint_every_s=60.0, checkpoint_min_entries=1) as store:
        record(store, signed_quote("c"))
        assert checkpointed(store)  # the first look (then the WAL's flush)
        record(store, signed_quote("d"))
        assert not store.checkpoint_if_due()  # the next look is a minute away


def test_the_store_journal_is_a_journal(store: Store) -> None:
    journal: Journal = store.journal  # the executor's journal port
    quote = signed_quote("q1")
    journal.append(opened(quote))
    journal.append(f.QuoteMoved("q1", "LOST", T0_US))
    journal.commit()
    store.project()
    assert open_quotes(store) == []
    store.journal.append(f.PauseSet("*", "drawdown", "rolled back", T0_US))
    store.journal.rollback()
    assert store.open_alerts() == []
    assert [f.kind_of(fact) for fact in store.journal.load()[1]] == ["quote_opened", "quote_moved"]


def test_another_process_reads_the_store_once_the_writer_is_gone(db: Path) -> None:
    """The writer holds its store alone (issue 24): another process is refused while it
    runs, and finds everything committed once it closed."""
    reader = textwrap.dedent(
        """
        import sys
        from solver.io.store.sqlite_store import Store, StoreError
        try:
            store = Store(sys.argv[1], create=False, checkpoint_every_s=None, busy_timeout_ms=50)
        except StoreError as exc:
            print("refused:", exc)
            sys.exit(0)
        with store:
            print(",".join(sorted(q.quote_id for q in store.quotes_since())))
            print(len(store.journal.load()[1]))
        """
    )

    def read() -> str:
        result = subprocess.run(
            [sys.executable, "-c", reader, str(db)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return result.stdout

    with Store(db, account=ACCOUNT) as writer:
        record(writer, signed_quote("q1"))
        append_quotes(writer, signed_quote("q2"))
        assert read().startswith("refused: the store")
        writer.project()
    assert read().split() == ["q1,q2", "2"]


def test_group_commit_writes_the_batch_at_once_and_a_bad_row_fails_it_whole(db: Path) -> None:
    """Appends wait in memory and the commit writes them with one ``executemany`` (issue 29).
    A row SQLite refuses fails the whole group commit: the transaction is rolled back, nothing
    of the batch is in the journal (the executor sends none of its answers) and the next batch
    commits as usual."""
    first = signed_quote("g1")
    with Store(db, account=ACCOUNT, sample_requests=1.0) as store:
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        append_quotes(store, first)
        store.record_request(first[2], "quoted", T0_US)
        assert statements == [] and not store._conn.in_transaction  # nothing in SQLite yet
        store.journal.commit()
        assert (count(db, "journal"), count(db, "requests")) == (1, 1)
        store._conn.execute(
            "CREATE TEMP TRIGGER refuse_g2 BEFORE INSERT ON journal "
            """WHEN NEW.body LIKE '%"quote_id":"g2"%' BEGIN SELECT RAISE(ABORT, 'refused'); END"""
        )
        append_quotes(store, signed_quote("g3"))
        append_quotes(store, signed_quote("g2", amount_in=7))
        with pytest.raises(StoreError, match="refused"):
            store.journal.commit()
        assert count(db, "journal") == 1 and not store._conn.in_transaction
        assert store.journal.rows == []
        append_quotes(store, signed_quote("g4"))
        move(store, "g1", S.WON, T0, intent_hash="I")
        store.journal.append(f.PauseSet("*", "stale_data", "old prices", T0_US))
        store.project()  # the store's own commit writes what waits first
        with committed_view(db) as other:
            ids = [r[0] for r in other.execute("SELECT quote_id FROM quotes ORDER BY quote_id")]
            kinds = [r[0] for r in other.execute("SELECT kind FROM journal ORDER BY seq")]
        assert ids == ["g1", "g4"]
        assert kinds == ["quote_opened", "quote_opened", "quote_moved", "pause_set"]
        assert (count(db, "alerts"), count(db, "transitions")) == (1, 1)
        # A later ordinary write commits any pending batch first.
        append_quotes(store, signed_quote("g5"))
        store.register_nonce(ACCOUNT, bytes(32), T0)
        assert count(db, "journal") == 5 and count(db, "quotes") == 2  # projected: a tick later
        # A rollback drops the whole open batch, and nothing else.
        append_quotes(store, signed_quote("g6"))
        store.journal.rollback()
        store.journal.commit()
        assert count(db, "journal") == 5


def test_a_single_row_commit_is_one_autocommitted_insert_and_fails_alone(db: Path) -> None:
    """One entry in the loop's turn: its INSERT is the transaction, no BEGIN/COMMIT (issue 29).
    Refused, it leaves nothing in the journal and no transaction open; the next commits."""
    with Store(db, account=ACCOUNT) as store:
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        append_quotes(store, signed_quote("s1"))
        store.journal.commit()
        assert [s.split(" ")[0] for s in statements] == ["INSERT"]
        assert count(db, "journal") == 1 and not store._conn.in_transaction
        store._conn.execute(
            "CREATE TEMP TRIGGER refuse_s2 BEFORE INSERT ON journal "
            """WHEN NEW.body LIKE '%"quote_id":"s2"%' BEGIN SELECT RAISE(ABORT, 'refused'); END"""
        )
        append_quotes(store, signed_quote("s2"))
        with pytest.raises(StoreError, match="refused"):
            store.journal.commit()
        assert count(db, "journal") == 1 and not store._conn.in_transaction
        append_quotes(store, signed_quote("s3"))
        store.journal.commit()
        with committed_view(db) as other:
            bodies = [r[0] for r in other.execute("SELECT body FROM journal ORDER BY seq")]
        assert [orjson.loads(b)["quote_id"] for b in bodies] == ["s1", "s3"]


def test_a_projection_budget_stops_between_entries_and_the_next_call_resumes(
    db: Path, tmp_path: Path
) -> None:
    """With no time to spare a call projects exactly one entry, and calls in a row end with
    the same query tables as one catch-up: entries are read one at a time, none skipped or
    projected twice (``projection.seq`` moves with them)."""
    quotes = [signed_quote(f"s{i}") for i in range(6)]
    lost = f.QuotesLost(("s1", "s4"), T0_US + 70 * SECOND, "deadline passed, never named")
    tables = []
    for path, sliced in ((db, True), (tmp_path / "whole.sqlite", False)):
        with Store(path, account=ACCOUNT) as store:
            append_quotes(store, *quotes)
            move(store, "s2", S.WON, T0, intent_hash="I")
            store.journal.append(lost)
            store.commit()
            if sliced:
                steps = []
                while store.unprojected():
                    steps.append(store.project(budget_s=0.0))
                assert steps == [1] * 8  # six quotes, a move, a loss
                assert store.project(budget_s=0.0) == 0
            else:
                assert store.project() == 8
            tables.append(
                (
                    store._conn.execute("SELECT * FROM quotes ORDER BY quote_id").fetchall(),
                    store._conn.execute("SELECT quote_id, old, new FROM transitions").fetchall(),
                )
            )
    assert tables[0] == tables[1]
    assert [row[11] for row in tables[0][0]] == ["OPEN", "LOST", "WON", "OPEN", "LOST", "OPEN"]


def test_a_caught_up_projection_runs_no_sql_until_the_journal_grows(db: Path) -> None:
    """The ticker projects 50 times a second: once caught up, a call costs no transaction."""
    with Store(db, account=ACCOUNT, checkpoint_every_s=None) as store:
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        append_quotes(store, signed_quote("c1"))
        assert store.project() == 1
        assert store.project() == 0  # finds nothing: one look
        statements.clear()
        assert (store.project(), store.project(budget_s=0.0)) == (0, 0)
        assert statements == []
        append_quotes(store, signed_quote("c2"))
        assert store.project() == 1 and statements  # a new entry: projected at once
        assert count(db, "quotes") == 2
        store.journal.append(f.PauseSet("*", "drawdown", "rolled back", T0_US))
        store.journal.rollback()
        assert store.project() == 0  # appended and rolled back: one more look, nothing lost
        assert store.unprojected() == 0


def test_many_facts_in_one_transaction_cost_one_commit(db: Path) -> None:
    quotes = [signed_quote(f"b{i}") for i in range(500)]
    with Store(db, account=ACCOUNT) as store:
        append_quotes(store, *quotes)
        for i in range(0, 500, 2):
            move(store, f"b{i}", S.LOST, T0 + timedelta(seconds=61))
        assert len(store.journal.rows) == 750  # waiting for the one commit
        assert count(db, "journal") == 0
        store.project()
        assert not store._conn.in_transaction
        assert store.journal.appended == 750
    assert (count(db, "journal"), count(db, "quotes"), count(db, "transitions")) == (750, 500, 250)
    with Store(db) as store:
        assert len(open_quotes(store)) == 250


def test_the_writer_keeps_the_wal_bounded_under_a_steady_flow(db: Path) -> None:
    """Under a steady flow of commits the writer's own passes copy the whole WAL each time
    (no other connection reads), so the next commit writes the file from its start again:
    it stays the size of what a pass period writes (a 10-minute soak once grew it to 10 GB
    when a background thread checkpointed)."""
    sizes = []
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=100) as store:
        for batch in range(60):
            record(store, *(signed_quote(f"w{batch}-{j}") for j in range(50)))
            checkpoints = store.checkpoints
            assert checkpoints is not None and checkpoints.thread is not None
            store.checkpoint_if_due()  # the WAL's flush first, when a pass is due...
            checkpoints.thread.flushed.wait(10)
            store.checkpoint_if_due()  # ...then a pass starts in the store's thread...
            store.commit()  # ...and the owner waits for it when it must commit
            sizes.append(Path(f"{db}-wal").stat().st_size)
        assert store.checkpoints is not None and store.checkpoints.passes >= 20
        assert max(sizes[5:]) <= 2 * max(sizes[:5]), sizes
        assert len(store.journal.load()[1]) == 60 * 50  # nothing lost to the passes


def test_a_checkpoint_refused_by_an_open_statement_is_deferred_not_a_store_error(
    db: Path,
) -> None:
    """A pass that meets a statement of the connection still open gets SQLITE_LOCKED
    ("database table is locked"): the store is fine, so the pass is deferred to the next due
    one — a quote_path run had paused four times on it with ``store_error``."""
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=10) as store:
        for batch in range(3):
            record(store, *(signed_quote(f"l{batch}-{j}") for j in range(20)))
            store.commit()
        checkpoints = store.checkpoints
        assert checkpoints is not None
        reading = store._conn.execute("SELECT quote_id FROM quotes")
        reading.fetchone()  # an unfinished read: the statement stays open
        for _ in range(200):  # the pass starts in the store's thread, meets the lock, ends
            store.checkpoint_if_due()  # never raises StoreError for it
            if checkpoints.deferred:
                break
            time.sleep(0.01)
        assert checkpoints.deferred >= 1
        reading.close()
        record(store, *(signed_quote(f"m{j}") for j in range(20)))
        store.commit()
        for _ in range(500):  # and the next due pass runs
            store.checkpoint_if_due()
            if checkpoints.passes >= 1:
                break
            time.sleep(0.01)
        assert checkpoints.passes >= 1
