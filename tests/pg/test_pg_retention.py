"""Retention on PostgreSQL (``solver.io.store.retention``, run by :meth:`PgStore.prune`): what
SQLite forgets, PostgreSQL forgets — quotes never traded, the journal the desk no longer needs,
old balance snapshots and request samples — and what must stay stays: trades and their fills,
the entries of open quotes, the journal after the snapshots, so a restart rebuilds the same
desk. Only the holder of the lease deletes anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from solver.core import facts as f
from solver.core.clock import SECOND, micros
from solver.core.lifecycle import QuoteState as S
from solver.io.store.pg.store import PgStore
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.schema import FencedError
from tests.io.store_helpers import T0, T0_US, USDC, WNEAR, move, record, signed_quote
from tests.pg.test_pg_store import open_store as open_sampling_store

DAY = timedelta(days=1)
CUT = T0 + 30 * DAY
RATE = 0.1
_RATE = QuoteRows(RATE)
SAMPLED = [q for q in (f"s{i}" for i in range(400)) if _RATE.sampled(q)]
RECENT, AFTER = SAMPLED[7:9]  # newer than the cut: rows whatever becomes of them
UNSAMPLED = next(q for q in (f"u{i}" for i in range(100)) if not _RATE.sampled(q))


def open_store(url: str, *, take: bool = True, lease_s: float = 2.0) -> PgStore:
    return open_sampling_store(url, lease_s, take, lost_quote_sample_rate=RATE, sample_requests=1.0)


@pytest.fixture
def store(pg_url: str) -> Iterator[PgStore]:
    s = open_store(pg_url)
    yield s
    s.close()


def caught_up(store: PgStore) -> None:
    """Committed and projected (by the projection's thread, or here)."""
    store.commit()
    give_up = time.monotonic() + 10
    while store.unprojected() or store._project_here(None):
        assert time.monotonic() < give_up, "the projection did not catch up"
        time.sleep(0.01)


def rows(store: PgStore, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store._conn.execute(sql).fetchall()]


def ids(store: PgStore, table: str) -> set[str]:
    return {str(r[0]) for r in rows(store, f"SELECT quote_id FROM {table}")}


def seqs(store: PgStore) -> list[int]:
    return [int(str(r[0])) for r in rows(store, "SELECT seq FROM journal ORDER BY seq")]


def history(store: PgStore) -> tuple[int, int]:
    """An old past: a lost, a rejected and a settled quote, then an open one (no row: only the
    journal knows it), then more lost quotes and the two desk snapshots; newer quotes after
    the cut; old balances and request samples. Returns (the open quote's entry, the older
    snapshot's entry)."""
    lost, rejected, settled, *others = SAMPLED[:7]
    record(store, *(signed_quote(q) for q in (lost, rejected, settled)))
    store.journal.append(f.QuotesLost((lost,), T0_US + 90 * SECOND, "expired"))
    move(store, rejected, S.REJECTED, T0, reason="refused by the relay")
    move(store, settled, S.WON, T0, intent_hash="i1")
    move(store, settled, S.SETTLED, T0, intent_hash="i1", fill=f.FillPrices(1.0, 2.0, 0.5))
    for day in (0, 1):
        store.journal.append(f.BalancesReconciled(micros(T0 + day * DAY), {USDC: 5, WNEAR: day}))
        store.record_request(signed_quote(f"r{day}")[2], "quoted", micros(T0 + day * DAY))
    caught_up(store)
    record(store, signed_quote(UNSAMPLED, at=T0 + timedelta(hours=1)))
    caught_up(store)
    open_entry = seqs(store)[-1]
    record(store, *(signed_quote(q, at=T0 + timedelta(hours=2)) for q in others))
    store.journal.append(f.QuotesLost(tuple(others), micros(T0 + timedelta(hours=3)), "expired"))
    caught_up(store)
    older = store.journal.write_snapshot({"v": 1}, micros(T0 + timedelta(hours=3)))
    record(store, signed_quote(RECENT, at=CUT + DAY))
    store.journal.write_snapshot({"v": 2}, micros(CUT + DAY))
    record(store, signed_quote(AFTER, at=CUT + 2 * DAY))
    caught_up(store)
    return open_entry, older


def test_what_sqlite_forgets_postgresql_forgets_and_the_desk_is_the_same(
    store: PgStore, pg_url: str
) -> None:
    open_entry, older = history(store)
    lost, rejected, settled, *_ = SAMPLED
    loaded = store.journal.load()
    before = seqs(store)
    assert {lost, rejected, settled} <= ids(store, "quotes")

    pruned = store.prune(CUT)

    assert pruned.done
    assert (pruned.quotes, pruned.balance_snapshots, pruned.requests) == (6, 2, 2)
    assert settled in ids(store, "quotes") and not {lost, rejected} & ids(store, "quotes")
    assert {RECENT, AFTER} <= ids(store, "quotes")
    assert ids(store, "fills") == {settled}
    assert ids(store, "transitions") == {settled}
    # the journal goes up to the open quote's entry, and no further: it is still open
    assert pruned.journal == open_entry - 1
    assert seqs(store) == [s for s in before if s >= open_entry]
    assert rows(store, "SELECT COUNT(*) FROM balance_snapshots") == [(2,)]  # the latest
    latest = store.last_balance_snapshot()
    assert latest is not None and latest.at == T0 + DAY
    assert rows(store, "SELECT COUNT(*) FROM requests") == [(0,)]
    assert store.journal.load() == loaded  # the desk a restart rebuilds is the same
    assert store.prune(CUT).rows == 0  # the same cut again: nothing more

    # The open quote closes: nothing holds the journal before the older snapshot any more.
    store.journal.append(f.QuotesLost((UNSAMPLED,), micros(T0 + timedelta(hours=4)), "expired"))
    caught_up(store)
    loaded = store.journal.load()
    assert store.prune(CUT).journal == older - open_entry
    assert seqs(store)[0] == older
    store.close()
    again = open_store(pg_url)
    try:
        assert again.journal.load() == loaded
        record(again, signed_quote("next", at=CUT + 3 * DAY))
        assert seqs(again)[-1] == max(before) + 2  # the numbering goes on
    finally:
        again.close()


def test_a_standby_forgets_nothing_and_a_fenced_out_active_deletes_nothing(
    pg_url: str,
) -> None:
    old = open_store(pg_url, lease_s=1.0)
    try:
        history(old)
        before = (seqs(old), ids(old, "quotes"))
        standby = open_store(pg_url, take=False)
        try:
            step = standby.prune(CUT)
            assert step.done and step.rows == 0
            assert (seqs(standby), ids(standby, "quotes")) == before
            time.sleep(1.1)  # the old active's lease expires: the standby takes it
            assert standby.try_take_lease()
            with pytest.raises(FencedError):
                old.prune(CUT)
            assert (seqs(standby), ids(standby, "quotes")) == before
            assert not old._conn.in_transaction
            assert standby.prune(CUT).quotes == 6  # the new active does
        finally:
            standby.close()
    finally:
        old.close()
