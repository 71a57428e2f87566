"""What the store forgets after ``storage.retain_days`` (``solver.io.store.retention``), with
time as an argument: quotes never traded go, trades stay; journal entries go only once the desk
no longer needs them, so a restart rebuilds the same desk; the work stops at its budget."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from solver.core import facts as f
from solver.core.clock import SECOND, micros
from solver.core.lifecycle import QuoteState as S
from solver.io.store import retention
from solver.io.store.sqlite_store import Store
from tests.io.store_helpers import ACCOUNT, T0, T0_US, USDC, WNEAR, move, record, signed_quote

DAY = timedelta(days=1)
CUT = T0 + 30 * DAY


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "s.sqlite", account=ACCOUNT, checkpoint_every_s=None) as opened:
        yield opened


def rows(store: Store, sql: str) -> list[tuple[object, ...]]:
    return list(store._conn.execute(sql))


def ids(store: Store, table: str) -> set[str]:
    return {str(r[0]) for r in rows(store, f"SELECT quote_id FROM {table}")}


def lose(store: Store, *quote_ids: str) -> None:
    store.journal.append(f.QuotesLost(quote_ids, T0_US + 90 * SECOND, "expired"))


def test_quotes_never_traded_are_forgotten_after_the_cut_and_trades_stay(store: Store) -> None:
    record(store, *(signed_quote(q) for q in ("lost", "rejected", "settled", "failed")))
    record(store, signed_quote("recent", at=CUT + DAY))
    lose(store, "lost")
    move(store, "rejected", S.REJECTED, T0, reason="refused by the relay")
    move(store, "settled", S.WON, T0, intent_hash="i1")
    move(store, "settled", S.SETTLED, T0, intent_hash="i1", fill=f.FillPrices(1.0, 2.0, 0.5))
    move(store, "failed", S.WON, T0, intent_hash="i2")
    move(store, "failed", S.FAILED, T0, intent_hash="i2")
    store.journal.append(f.QuotesLost(("recent",), micros(CUT + 2 * DAY), "expired"))
    store.project()
    assert "rejected" in ids(store, "transitions")

    pruned = store.prune(CUT)

    assert pruned.done and pruned.quotes == 2
    assert ids(store, "quotes") == {"settled", "failed", "recent"}
    assert ids(store, "transitions") == {"settled", "failed"}  # the rejected one's went too
    assert ids(store, "fills") == {"settled"}
    assert store.prune(CUT).quotes == 0  # nothing left to do: the same cut deletes nothing


def test_journal_entries_go_only_once_the_desk_no_longer_needs_them(store: Store) -> None:
    """Covered by the older of the two snapshots and projected: a restart loads the same."""
    record(store, *(signed_quote(f"a{i}") for i in range(10)))
    assert store.prune(CUT).journal == 0  # no snapshot yet: the whole journal is needed
    first = store.journal.write_snapshot({"v": 1}, T0_US)
    record(store, *(signed_quote(f"b{i}") for i in range(10)))
    assert store.prune(CUT).journal == 0  # one snapshot: it could be the damaged one
    store.journal.write_snapshot({"v": 2}, T0_US)
    record(store, *(signed_quote(f"c{i}") for i in range(5)))
    store.journal.append(f.QuotesLost(("c0",), T0_US, "expired"))  # appended, not projected
    store.commit()
    loaded = store.journal.load()
    last_seq = int(str(rows(store, "SELECT MAX(seq) FROM journal")[0][0]))

    pruned = store.prune(CUT)

    assert pruned.journal == first - 1  # below the older snapshot's entry
    assert [r[0] for r in rows(store, "SELECT MIN(seq) FROM journal")] == [first]
    assert store.journal.load() == loaded  # the desk a restart rebuilds is the same
    assert store.unprojected() == 1  # the entry not projected yet is still there
    record(store, signed_quote("after"))
    assert rows(store, "SELECT MAX(seq) FROM journal")[0][0] == last_seq + 1


def test_entries_newer_than_the_cut_stay_even_when_a_snapshot_covers_them(store: Store) -> None:
    record(store, *(signed_quote(f"o{i}") for i in range(4)))
    record(store, *(signed_quote(f"n{i}", at=CUT + DAY) for i in range(4)))
    older = store.journal.write_snapshot({"v": 1}, T0_US)
    record(store, signed_quote("last", at=CUT + DAY))
    store.journal.write_snapshot({"v": 2}, T0_US)
    assert store.prune(CUT).journal == 4  # the four before the cut; n0..n2 are newer
    assert store.prune(CUT + 10 * DAY).journal == 3  # now they are old too
    assert [r[0] for r in rows(store, "SELECT seq FROM journal")] == [older, older + 1]


def test_old_balance_snapshots_and_request_samples_go_but_the_latest_balance_stays(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "b.sqlite", account=ACCOUNT, sample_requests=1.0) as store:
        for day in (0, 1, 2):
            at = T0 + day * DAY
            store.journal.append(f.BalancesReconciled(micros(at), {USDC: 5, WNEAR: day}))
            store.record_request(signed_quote(f"r{day}")[2], "quoted", micros(at))
        store.project()
        assert store.prune(T0 + 10 * DAY).done
        latest = store.last_balance_snapshot()
        assert latest is not None and latest.at == T0 + 2 * DAY
        assert rows(store, "SELECT COUNT(*) FROM balance_snapshots") == [(2,)]  # two assets
        assert rows(store, "SELECT COUNT(*) FROM requests") == [(0,)]


def test_a_pass_stops_at_its_budget_and_the_next_calls_finish_it(store: Store) -> None:
    count = retention.CHUNK * 2 + 10
    quotes = [signed_quote(f"q{i}") for i in range(count)]
    record(store, *quotes)
    lose(store, *(q[0].quote_id for q in quotes))
    store.project()
    first = store.prune(CUT, budget_s=0.0)  # one chunk, whatever the machine
    assert (first.quotes, first.done) == (retention.CHUNK, False)
    total = first.quotes
    for _ in range(10):
        step = store.prune(CUT, budget_s=0.0)
        total += step.quotes
        if step.done:
            break
    assert step.done and total == count
    assert ids(store, "quotes") == set()


def test_a_store_that_refuses_the_deletes_says_so_and_rolls_back(store: Store) -> None:
    record(store, signed_quote("x"))
    lose(store, "x")
    store.project()
    # The store refuses the deletes (a trigger here; a full or failing disk for real).
    store._conn.execute(
        "CREATE TEMP TRIGGER refuse_deletes BEFORE DELETE ON quotes "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    try:
        with pytest.raises(Exception, match="cannot delete old rows from the store"):
            store.prune(CUT)
        assert not store._conn.in_transaction
    finally:
        store._conn.execute("DROP TRIGGER temp.refuse_deletes")
    assert store.prune(CUT).quotes == 1


def test_a_quote_still_open_during_a_pass_goes_in_a_later_one(store: Store) -> None:
    """The pass walks quotes in creation order and moves on; the next pass starts over, so an
    old quote lost only later (a bot stopped for a month closes it at its restart) goes too."""
    record(store, signed_quote("early"), signed_quote("open", at=T0 + DAY))
    record(store, signed_quote("late", at=T0 + 2 * DAY))
    lose(store, "early", "late")
    store.project()
    assert store.prune(CUT).quotes == 2
    lose(store, "open")
    store.project()
    assert store.prune(CUT).quotes == 1
    assert ids(store, "quotes") == set()
