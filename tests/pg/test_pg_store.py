"""The journal and the query tables on a real PostgreSQL: the same facts in, the same desk and
the same rows out as SQLite; and the lease's fence on every commit."""

from __future__ import annotations

import io
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from solver.core import facts as f
from solver.core.clock import micros
from solver.core.lifecycle import QuoteState
from solver.io.store.migrations import SCHEMA_VERSION, current_tables, migrate
from solver.io.store.pg import projector
from solver.io.store.pg.conn import PgConn
from solver.io.store.pg.store import PgStore
from solver.io.store.projection import project
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.schema import FencedError, NonceReusedError, StoreError
from tests.io.store_helpers import ACCOUNT, T0, move, opened, record, signed_quote
from tests.io.test_journal import one_of_each_kind
from tests.io.test_quote_rows import journal_facts, projected, rows, write_journal
from tests.pg.cluster import PASSWORD, PASSWORD_ENV, Cluster


def _took(store: PgStore) -> bool:
    try:
        return store.try_take_lease()
    except StoreError:  # a lock timeout while the stuck session lives
        return False


def open_store(url: str, lease_s: float = 2.0, take: bool = True, **options: Any) -> PgStore:
    """A store of the test account (``options``: more of ``PgStore``'s), its lease taken."""
    store = PgStore(url, password_env=PASSWORD_ENV, account=ACCOUNT, lease_s=lease_s, **options)
    if take:
        assert store.try_take_lease()
    return store


@pytest.fixture
def store(pg_url: str) -> Iterator[PgStore]:
    s = open_store(pg_url)
    yield s
    s.close()


def _committed_then_read_back(store: PgStore, pg_url: str, facts: list[f.Fact]) -> None:
    """Commit ``facts``, close the store, and read them back through a new one: the same."""
    for fact in facts:
        store.journal.append(fact)
    store.journal.commit()
    store.close()
    again = open_store(pg_url)
    try:
        assert again.journal.load() == (None, facts)
        assert again.schema_version == SCHEMA_VERSION
    finally:
        again.close()


def test_every_kind_of_fact_comes_back_in_order(store: PgStore, pg_url: str) -> None:
    _committed_then_read_back(store, pg_url, one_of_each_kind())


def test_a_commit_keeps_every_character_of_its_facts(store: PgStore, pg_url: str) -> None:
    """The commit sends its columns as binary arrays, as they are: what a text array would have
    to quote or escape, text beyond ASCII, an empty text and a long one come back unchanged."""
    reasons = ['"quoted"', "back\\slash", "{braces}, commas", "NULL", "", "é 中文 \u2028 \x1e",
               "x" * 70_000]  # fmt: skip
    facts: list[f.Fact] = [f.PauseSet("*", "daily_loss", r, micros(T0)) for r in reasons]
    _committed_then_read_back(store, pg_url, facts)


def _projected(store: PgStore, timeout_s: float = 5.0) -> None:
    give_up = time.monotonic() + timeout_s
    while store.unprojected():
        assert time.monotonic() < give_up, "the projection's thread did not catch up"
        time.sleep(0.01)


def test_the_projection_thread_follows_the_commits_and_rests_when_idle(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread projects what is committed by itself (nothing on the loop asks), and a wake
    with nothing committed since costs no pass (no round trip)."""
    passes: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> int:
        passes.append(1)
        return project(*args, **kwargs)

    monkeypatch.setattr(projector, "project", counted)
    store = open_store(pg_url)
    try:
        store.journal.append(opened(signed_quote("qa")))
        store.journal.commit()
        _projected(store)
        seen = len(passes)
        time.sleep(6 * projector.EVERY_S)  # wakes with nothing new
        assert len(passes) == seen
        store.journal.append(opened(signed_quote("qb")))
        store.journal.commit()
        _projected(store)
        assert len(passes) > seen
    finally:
        store.close()


def test_the_query_tables_and_exports_are_projected(store: PgStore) -> None:
    a, b = signed_quote("qa"), signed_quote("qb", at=T0 + timedelta(seconds=1))
    record(store, a, b)
    move(store, "qa", QuoteState.WON, intent_hash="i1")
    move(store, "qa", QuoteState.SETTLED, intent_hash="i1", tx_hash="t1",
         fill=f.FillPrices(1.0, 2.0, 0.5))  # fmt: skip
    store.journal.append(f.Markout("qa", 60, -0.25, micros(T0)))
    store.journal.append(f.PauseSet("*", "daily_loss", "too much", micros(T0)))
    store.project()
    quotes = store.quotes_since(limit=10)
    assert [q.quote_id for q in quotes] == ["qb", "qa"]
    assert quotes[1].state == QuoteState.SETTLED
    fills = store.fills_since()
    assert [(x.quote_id, x.markouts) for x in fills] == [("qa", {"60": -0.25})]
    assert [a.kind for a in store.open_alerts()] == ["daily_loss"]
    assert store.signed_data("qa") == opened(a).signed_data
    assert store.stats(3600 * 24 * 365 * 30, T0 + timedelta(days=1))["settled"] == 1
    assert store.fill_totals(T0 - timedelta(days=1))[0][2] == 1
    assert store.pair_totals()[0].fills == 1
    out = io.StringIO()
    assert store.export("quotes", "jsonl", out) == 2
    assert store.unprojected() == 0


def test_nonce_registers_refuse_repeats(store: PgStore) -> None:
    prefixes = {store.claim_nonce_prefix(T0) for _ in range(3)}
    assert store.nonce_prefixes(ACCOUNT) == prefixes
    store.register_nonce(ACCOUNT, b"\x01" * 32, T0)
    with pytest.raises(NonceReusedError):
        store.register_nonce(ACCOUNT, b"\x01" * 32, T0)
    assert store.nonce_used_before(ACCOUNT, b"\x01" * 32)


def test_a_second_instance_stands_by_until_the_lease_is_free(store: PgStore, pg_url: str) -> None:
    standby = open_store(pg_url, take=False)
    try:
        assert not standby.try_take_lease()
        holder = standby.lease_holder()
        assert holder is not None and holder.holder == store.lease.holder and holder.live
        store.close()  # a clean stop releases it
        assert standby.try_take_lease()
        assert standby.lease.epoch == 2
    finally:
        standby.close()


def test_a_commit_after_the_lease_is_taken_writes_nothing(pg_url: str) -> None:
    old = open_store(pg_url, lease_s=1.0)
    old.journal.append(opened(signed_quote("before")))
    old.journal.commit()
    time.sleep(1.1)  # expired by the database's clock: the standby takes it
    new = open_store(pg_url, take=False)
    try:
        assert new.try_take_lease()
        old.lease.valid_until = time.monotonic() + 60  # even if its own clock were wrong
        old.journal.append(opened(signed_quote("after")))
        with pytest.raises(FencedError):
            old.journal.commit()
        with pytest.raises(FencedError):  # and every later one, at once
            old.journal.append(opened(signed_quote("later")))
        _, facts = new.journal.load()
        assert [x.quote_id for x in facts if isinstance(x, f.QuoteOpened)] == ["before"]
    finally:
        old.close()
        new.close()


def test_its_own_clock_stops_the_active_before_the_database_would(store: PgStore) -> None:
    store.lease.valid_until = time.monotonic() - 0.001  # a refresh missed (SIGSTOP, a stall)
    store.journal.append(opened(signed_quote("late")))
    with pytest.raises(FencedError, match="not refreshed in time"):
        store.journal.commit()


def test_answers_written_aside_do_not_leave_once_the_lease_may_have_run_out(
    store: PgStore,
) -> None:
    """The store's own commit (before a projection slice or a read) writes what the executor
    appended; if that call then hangs on the database past the lease (a partition that holds
    the bytes), the executor's commit has nothing left to write, and its answers must still not
    leave: the partition test caught one reaching the relay after the cut."""
    store.journal.append(opened(signed_quote("written aside")))
    store.commit()  # the store's commit aside
    store.lease.valid_until = time.monotonic() - 0.001  # the hang outlasted the lease
    with pytest.raises(FencedError, match="not refreshed in time"):
        store.journal.commit()  # the executor's: nothing to write, and nothing may be sent
    with pytest.raises(FencedError):  # and nothing more is written
        store.journal.append(opened(signed_quote("later")))
    _, facts = store.journal.load()
    assert [x.quote_id for x in facts if isinstance(x, f.QuoteOpened)] == ["written aside"]


def test_a_taking_waits_for_the_commit_in_flight_and_sees_it(pg_url: str) -> None:
    """The fence locks the lease row: a successor's upsert waits for the old active's commit and
    then replays it; it never takes the lease between the fence and the insert. The old active's
    facts are written, but its answers do not leave: by its own clock, its lease may have run
    out while the insert ran."""
    old = open_store(pg_url, lease_s=1.0)
    with psycopg.connect(pg_url, password=PASSWORD, autocommit=True) as admin:
        # The old active's commit passes its fence, then its insert takes 1.5 s (a slow disk).
        admin.execute(
            "CREATE FUNCTION slow() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(1.5); "
            "RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        admin.execute("CREATE TRIGGER slow BEFORE INSERT ON journal FOR EACH ROW "
                      "EXECUTE FUNCTION slow()")  # fmt: skip
    old.journal.append(opened(signed_quote("in-flight")))
    done: list[BaseException | None] = []

    def commit() -> None:
        try:
            old.journal.commit()
            done.append(None)
        except BaseException as exc:
            done.append(exc)

    thread = threading.Thread(target=commit)
    thread.start()
    time.sleep(1.1)  # the lease expires by the database's clock while the insert runs
    new = open_store(pg_url, take=False)
    try:
        started = time.monotonic()
        assert new.try_take_lease()  # but the taking waits for the commit
        thread.join(10)
        assert len(done) == 1 and isinstance(done[0], FencedError), done
        assert "not refreshed in time" in str(done[0])
        assert time.monotonic() - started > 0.2
        _, facts = new.journal.load()
        assert [x.quote_id for x in facts if isinstance(x, f.QuoteOpened)] == ["in-flight"]
    finally:
        new.close()
        old.close()


def test_the_password_is_never_in_a_repr_or_an_error(pg_cluster: Cluster) -> None:
    url = pg_cluster.url("postgres").replace("solver@", f"solver:{PASSWORD}@")
    store = PgStore(url, account=ACCOUNT)
    try:
        assert PASSWORD not in repr(store) and PASSWORD not in store.shown
    finally:
        store.close()
    bad = url.replace(f"127.0.0.1:{pg_cluster.port}", "127.0.0.1:1")
    with pytest.raises(StoreError) as caught:
        PgStore(bad, account=ACCOUNT)
    assert PASSWORD not in str(caught.value)


def test_an_instance_stopped_inside_a_transaction_blocks_nobody(pg_url: str) -> None:
    """SIGSTOP inside a transaction (the projection's, a snapshot's) leaves its locks held: the
    server ends that session after a second, so the lease is taken all the same; and a
    projection never waits on the event loop for another's (it skips its turn)."""
    old = open_store(pg_url, lease_s=1.0)
    stuck = old._connection()
    stuck.execute("BEGIN")
    stuck.execute("SELECT 1 FROM lease FOR UPDATE")  # as a snapshot's fence does, then stops
    stuck.execute("SELECT seq FROM projection FOR UPDATE")  # as the projection does
    new = open_store(pg_url, take=False)
    try:
        new.journal.append(opened(signed_quote("x")))  # (not committed: no lease yet)
        new.journal.rollback()
        started = time.monotonic()
        while not _took(new):
            assert time.monotonic() - started < 5, "the stuck session still holds the lease"
            time.sleep(0.1)
        new.journal.append(opened(signed_quote("y")))
        new.journal.commit()
        t = time.monotonic()
        new.project()
        assert time.monotonic() - t < 0.4  # never waits for a lock on the loop
        assert [q.quote_id for q in new.quotes_since()] == ["y"]
        new.journal.append(opened(signed_quote("z")))
        new.commit()
        with psycopg.connect(pg_url, password=PASSWORD) as mine:
            adapter = PgConn(mine)
            with psycopg.connect(pg_url, password=PASSWORD) as other:  # another's projection
                other.execute("SELECT seq FROM projection FOR UPDATE")
                t = time.monotonic()
                assert project(adapter, QuoteRows(), savepoints=True) == 0  # skipped, not waited
                assert time.monotonic() - t < 0.4
        assert {q.quote_id for q in new.quotes_since()} == {"y", "z"}  # projected meanwhile
    finally:
        new.close()
        old.close()


PG_TYPES = {
    "TEXT": {"text"},
    "INTEGER": {"integer", "bigint"},
    "BLOB": {"bytea"},
    "REAL": {"double precision"},
}


def test_the_tables_are_sqlites_in_postgresqls_dialect(store: PgStore) -> None:
    """Both backends' tables come from one declaration: the same columns, in the same order,
    with the same types (as each spells them), nullability, defaults and keys."""
    lite = sqlite3.connect(":memory:", isolation_level=None)
    migrate(lite)
    raw = store._connection()
    for table in current_tables("sqlite"):
        want = [
            (name, PG_TYPES[kind], bool(notnull) or bool(pk), default)
            for _, name, kind, notnull, default, pk in lite.execute(
                f"PRAGMA table_info({table.name})"
            )
        ]
        got = raw.execute(
            "SELECT column_name, data_type, is_nullable = 'NO', column_default "
            "FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            (table.name,),
        ).fetchall()
        assert [c[0] for c in got] == [c[0] for c in want], table.name
        for (name, kinds, required, default), (_, kind, not_null, pg_default) in zip(
            want, got, strict=True
        ):
            assert kind in kinds and not_null == required, (table.name, name)
            assert (default is None) == (pg_default is None or "nextval" in str(pg_default))
        lite_indexes = {r[1] for r in lite.execute(f"PRAGMA index_list({table.name})")}
        pg_indexes = {
            r[0]
            for r in raw.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (table.name,)
            )
        }
        named = {i for i in lite_indexes if not i.startswith("sqlite_autoindex")}
        assert named == {i for i in pg_indexes if not i.endswith("_pkey")}, table.name


def test_lost_quotes_are_sampled_as_on_sqlite(pg_url: str, tmp_path: Path) -> None:
    """Issue 29 on PostgreSQL: the journal of :mod:`tests.io.test_quote_rows` at rate 0.1,
    projected by the thread, the loop and a new instance after a restart, gives SQLite's
    counts and rows: the same quotes sampled (a hash of the id), the same totals."""
    facts = journal_facts(1200)
    first = PgStore(pg_url, password_env=PASSWORD_ENV, account=ACCOUNT, lost_quote_sample_rate=0.1)
    try:
        assert first.try_take_lease()  # the projection's thread starts
        for fact in facts[:700]:
            first.journal.append(fact)
        first.commit()
        first.stats(60, T0)  # the loop catches up with the thread
    finally:
        first.close()
    again = PgStore(pg_url, password_env=PASSWORD_ENV, account=ACCOUNT, lost_quote_sample_rate=0.1)
    journal = tmp_path / "journal.sqlite"
    write_journal(journal, facts)
    try:
        assert again.try_take_lease()
        for fact in facts[700:]:
            again.journal.append(fact)
        again.commit()
        give_up = time.monotonic() + 60
        while again.unprojected():  # the thread's passes (a busy machine: a while)
            assert time.monotonic() < give_up, again.unprojected()
            time.sleep(0.05)
        totals = again.pair_totals()
        with projected(journal, tmp_path / "tenth.sqlite", 0.1) as sqlite:
            assert totals == sqlite.pair_totals()
            for sql in (
                "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5",
                "SELECT quote_id, state, weight, amount_in, signed_data FROM quotes ORDER BY 1",
                "SELECT quote_id, at, realized_pnl_usd FROM fills ORDER BY 1",
            ):
                assert rows(again, sql) == rows(sqlite, sql), sql
            assert again.fills_since(limit=1000) == sqlite.fills_since(limit=1000)
            assert again.lost_sample_rate() == 0.1
    finally:
        again.close()


def test_a_version_10_store_is_migrated_to_11(pg_url: str) -> None:
    """Migration 11 on PostgreSQL: an older store's rows are counted, and its projection
    starts its memory of the open quotes where it stands."""
    store = open_store(pg_url)
    try:
        record(store, signed_quote("a"), signed_quote("b", at=T0 + timedelta(minutes=2)))
        move(store, "a", QuoteState.WON, intent_hash="i")
        store.project()
    finally:
        store.close()
    with psycopg.connect(pg_url, password=PASSWORD, autocommit=True) as raw:
        raw.execute("DROP TABLE quote_counts")
        raw.execute("ALTER TABLE quotes DROP COLUMN weight")
        raw.execute("ALTER TABLE projection DROP COLUMN open_from, DROP COLUMN lost_sample_rate")
        raw.execute("DELETE FROM schema_version WHERE version = 11")
    again = open_store(pg_url)
    try:
        assert again.schema_version == SCHEMA_VERSION == 11
        assert {(t.quotes, t.won) for t in again.pair_totals()} == {(2, 1)}
        move(again, "b", QuoteState.LOST)
        again.journal.commit()
        again.stats(60, T0)  # caught up
        counts = rows(again, "SELECT state, SUM(n) FROM quote_counts GROUP BY 1 ORDER BY 1")
        assert counts == [("LOST", 1), ("OPEN", 0), ("WON", 1)]
    finally:
        again.close()
