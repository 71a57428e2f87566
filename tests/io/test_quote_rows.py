"""Lost quotes sampled in the query tables (issue 29, :mod:`solver.io.store.quote_rows`): one
journal projected at rate 1 and at rate 0.1 gives the same totals exactly, the same rows for
every quote that did not end LOST, a weighted sample of the lost ones, and survives restarts,
a second projector, a late settlement and the retention."""

from __future__ import annotations

import dataclasses
import itertools
import random
import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.core import fact_codec
from solver.core import facts as f
from solver.core.clock import SECOND, span
from solver.core.lifecycle import QuoteState as S
from solver.io.store import journal as journal_module
from solver.io.store.projection import project
from solver.io.store.quote_rows import QuoteRows
from solver.io.store.sqlite_store import Store
from tests.io.store_helpers import ETH, T0, T0_US, USDC, WNEAR

PAIRS = ((USDC, WNEAR), (WNEAR, USDC), (ETH, USDC))
FILL = f.FillPrices(1.0, 3.0, 0.25)


def quote(i: int, rng: random.Random) -> f.QuoteOpened:
    created = T0_US + span(0.7 * i)
    asset_in, asset_out = PAIRS[i % 3]
    amount_in = int(10 ** rng.uniform(5, 12))
    return f.QuoteOpened(
        f"q{i:05d}", f"h{i}", asset_in, asset_out, amount_in, amount_in // 3 + 1, 0,
        created + 5 * SECOND, i.to_bytes(32, "big"), created, True, None,
        {"standard": "nep413", "payload": {"message": f"m{i}"}, "signature": f"s{i}"},
    )  # fmt: skip


def journal_facts(n: int = 3000, seed: int = 7) -> list[f.Fact]:
    """What a desk journals for ``n`` answers: each ends (or not) about 20 answers after it
    opened — LOST in ticks of up to 64 mostly, some LOST one by one, won and settled (with
    markouts), failed, settling, rejected, a few still open, and a few settled after LOST (a
    status heard late)."""
    rng = random.Random(seed)
    facts: list[f.Fact] = []
    pending: list[tuple[int, f.QuoteOpened, str]] = []
    expiring: list[str] = []
    late: list[tuple[str, int]] = []
    for i in range(n + 25):
        if i < n:
            q = quote(i, rng)
            facts.append(q)
            roll = rng.random()
            fate = (
                "lost" if roll < 0.70 else "lost_one" if roll < 0.75 else "settled"
                if roll < 0.88 else "failed" if roll < 0.91 else "settling" if roll < 0.93
                else "rejected" if roll < 0.96 else "late" if roll < 0.98 else "open"
            )  # fmt: skip
            pending.append((i + 20, q, fate))
        while pending and pending[0][0] <= i:
            _, q, fate = pending.pop(0)
            at = q.created_at + 14 * SECOND
            qid = q.quote_id
            if fate in ("lost", "late"):
                expiring.append(qid)
                if fate == "late":
                    late.append((qid, i + 40))
            elif fate == "lost_one":
                facts.append(f.QuoteMoved(qid, S.LOST.value, at, "nonce unused"))
            elif fate == "rejected":
                facts.append(f.QuoteMoved(qid, S.REJECTED.value, at, "relay error"))
            elif fate != "open":
                facts.append(f.QuoteMoved(qid, S.WON.value, at, None, f"I{qid}"))
                if fate == "settled":
                    facts.append(f.QuoteMoved(qid, S.SETTLED.value, at, None, None, "tx", FILL))
                    facts.append(f.Markout(qid, 60, 0.5, at))
                elif fate == "failed":
                    facts.append(f.QuoteMoved(qid, S.FAILED.value, at, "expired"))
                else:
                    facts.append(f.QuoteMoved(qid, S.SETTLING.value, at, None, None, "tx"))
        if len(expiring) >= rng.randint(1, 64) or (i >= n and expiring):
            facts.append(f.QuotesLost(tuple(expiring), T0_US + span(0.7 * i), "expired"))
            expiring = []
        for qid, when in [x for x in late if x[1] <= i]:
            facts.append(f.QuoteMoved(qid, S.SETTLED.value, T0_US, "missed_status", fill=FILL))
            late.remove((qid, when))
    return facts


def write_journal(path: Path, facts: list[f.Fact]) -> None:
    """The facts in a store's journal, none of them projected."""
    store = Store(path, checkpoint_every_s=None)
    try:
        for fact in facts:
            store.journal.append(fact)
        store.commit()
    finally:
        store._close()  # no projection at close: the journal alone


def projected(journal: Path, path: Path, rate: float) -> Store:
    """A copy of ``journal`` projected at ``rate`` (the writer projects when it opens)."""
    shutil.copy(journal, path)
    return Store(path, lost_quote_sample_rate=rate, checkpoint_every_s=None)


def rows(store: Store, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store._conn.execute(sql, params).fetchall()]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("journal") / "journal.sqlite"
    write_journal(path, journal_facts())
    return path


NOT_LOST = "SELECT * FROM quotes WHERE state NOT IN ('LOST', 'OPEN') ORDER BY quote_id"
TRANSITIONS = (
    "SELECT quote_id, old, new, at, reason, intent_hash, tx_hash FROM transitions "
    "WHERE new != 'LOST' ORDER BY quote_id, id"
)


def test_totals_are_exact_and_the_lost_quotes_a_weighted_sample(
    journal: Path, tmp_path: Path
) -> None:
    every = projected(journal, tmp_path / "every.sqlite", 1.0)
    tenth = projected(journal, tmp_path / "tenth.sqlite", 0.1)
    with every, tenth:
        assert every.unprojected() == tenth.unprojected() == 0
        # The counts are the same table, and the totals and windows read from them.
        counts = "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5"
        assert rows(every, counts) == rows(tenth, counts)
        for since in (None, T0 + timedelta(minutes=7, seconds=31)):
            assert every.pair_totals(since) == tenth.pair_totals(since)
        now = T0 + timedelta(minutes=40)
        for window_s in (600.0, 3600.0):
            a, b = every.stats(window_s, now), tenth.stats(window_s, now)
            assert a.pop("lost_quote_sample_rate") == 1.0
            assert b.pop("lost_quote_sample_rate") == 0.1
            assert a == b
        # Every quote that did not end LOST has its row, as it would at rate 1; and the
        # money: fills and markouts, the late settlement of a quote closed LOST included.
        assert rows(every, NOT_LOST) == rows(tenth, NOT_LOST)
        assert rows(every, TRANSITIONS) == rows(tenth, TRANSITIONS)
        assert rows(every, "SELECT * FROM fills ORDER BY 1") == rows(
            tenth, "SELECT * FROM fills ORDER BY 1"
        )
        late = "SELECT COUNT(*) FROM quotes WHERE reason = 'missed_status' AND state = 'SETTLED'"
        assert rows(tenth, late)[0][0] == rows(every, late)[0][0] > 20

        # The lost quotes: all of them at rate 1; a sample at 0.1, each weighing 10.
        lost = "SELECT quote_id, amount_in, weight FROM quotes WHERE state = 'LOST'"
        all_lost, sample = rows(every, lost), rows(tenth, lost)
        assert len(all_lost) == count_state(every, "LOST") == count_state(tenth, "LOST")
        assert {w for _, _, w in all_lost} == {1.0} and {w for _, _, w in sample} == {10.0}
        assert {q for q, _, _ in sample} <= {q for q, _, _ in all_lost}
        n = len(all_lost)
        assert abs(sum(w for _, _, w in sample) - n) < 4 * 10 * (n * 0.1 * 0.9) ** 0.5
        # A distribution from the sample, weighted, is close to the whole one.
        digits = [len(str(a)) for _, a, _ in all_lost]
        weighted = sum(len(str(a)) * w for _, a, w in sample) / sum(w for _, _, w in sample)
        assert weighted == pytest.approx(sum(digits) / n, abs=0.4)
        assert len(sample) < n / 5
        assert every.lost_sample_rate() == 1.0 and tenth.lost_sample_rate() == 0.1


def test_the_writer_projects_what_it_appended_as_a_reader_would(
    journal: Path, tmp_path: Path
) -> None:
    """The writer counts the quotes it appended from their facts (the journal's handoff), not
    from their bodies: the tables are those a reader projecting the same journal builds."""
    writer = Store(tmp_path / "writer.sqlite", lost_quote_sample_rate=0.1, checkpoint_every_s=None)
    reader = projected(journal, tmp_path / "reader.sqlite", 0.1)
    with writer, reader:
        handoff = writer.quote_rows.handoff
        handed = 0
        for i, fact in enumerate(journal_facts()):
            writer.journal.append(fact)
            if i % 97 == 96:
                writer.commit()
                handed += len(handoff)
                writer.project()
                assert not handoff  # each one projected from its fact or its row's body
        writer.commit()
        writer.project()
        assert handed > 2000
        for table in ("quotes", "transitions", "fills"):
            everything = f"SELECT * FROM {table} ORDER BY 1, 2, 3"
            assert rows(writer, everything) == rows(reader, everything), table
        counts = "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5"  # batches
        assert rows(writer, counts) == rows(reader, counts)  # leave counts back at 0 apart


def count_state(store: Store, state: str) -> int:
    found = rows(store, "SELECT SUM(n) FROM quote_counts WHERE state = ?", state)[0][0]
    return int(found or 0)


def test_a_sampled_quote_keeps_its_row_through_its_life(journal: Path, tmp_path: Path) -> None:
    with projected(journal, tmp_path / "tenth.sqlite", 0.1) as tenth:
        sampled = rows(tenth, "SELECT quote_id, state, weight FROM quotes")
        rate = tenth.quote_rows
        for quote_id, state, weight in sampled:
            if state in ("LOST", "OPEN"):
                assert rate.sampled(quote_id) and weight == 10.0
            else:
                assert weight == 1.0
        open_rows = [q for q, state, _ in sampled if state == "OPEN"]
        assert open_rows and count_state(tenth, "OPEN") > len(open_rows)


def test_restarts_and_a_second_projector_rebuild_the_open_quotes(
    journal: Path, tmp_path: Path
) -> None:
    """The journal projected in pieces — a new process each time, and another projector in
    between (another instance, on PostgreSQL) — ends as the one pass does."""
    facts = journal_facts()
    staged = tmp_path / "staged.sqlite"
    cuts = [0, 400, 1111, 2000, 3000, len(facts)]
    for i, (start, end) in enumerate(itertools.pairwise(cuts)):
        middle = (start + end) // 2
        with Store(staged, lost_quote_sample_rate=0.1, checkpoint_every_s=None) as store:
            for fact in facts[start:middle]:
                store.journal.append(fact)
            store.commit()
            if i % 2:  # another projector takes this part, then this one the rest
                assert project(store._conn, QuoteRows(0.1)) == middle - start
            else:
                store.project()
            for fact in facts[middle:end]:
                store.journal.append(fact)
            store.commit()
            store.project()
    with (
        projected(journal, tmp_path / "once.sqlite", 0.1) as once,
        Store(staged, lost_quote_sample_rate=0.1, checkpoint_every_s=None) as store,
    ):
        for sql in (
            "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5",
            "SELECT * FROM quotes ORDER BY quote_id",
            "SELECT * FROM fills ORDER BY quote_id",
            TRANSITIONS,
            "SELECT open_from, lost_sample_rate FROM projection",
        ):
            assert rows(store, sql) == rows(once, sql), sql


def test_a_rate_changed_at_a_restart_keeps_every_count(journal: Path, tmp_path: Path) -> None:
    facts = journal_facts()
    path = tmp_path / "changed.sqlite"
    for rate, part in ((1.0, facts[:1500]), (0.1, facts[1500:2500]), (0.5, facts[2500:])):
        with Store(path, lost_quote_sample_rate=rate, checkpoint_every_s=None) as store:
            for fact in part:
                store.journal.append(fact)
            store.commit()
            store.project()
    with (
        projected(journal, tmp_path / "every.sqlite", 1.0) as every,
        Store(path, checkpoint_every_s=None) as store,
    ):
        counts = "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5"
        assert rows(store, counts) == rows(every, counts)
        assert rows(store, NOT_LOST) == rows(every, NOT_LOST)
        # No quote stays OPEN in its row once the journal ended it.
        ended = {q for q, s in rows(every, "SELECT quote_id, state FROM quotes") if s != "OPEN"}
        still = {q for (q,) in rows(store, "SELECT quote_id FROM quotes WHERE state = 'OPEN'")}
        assert not still & ended


def test_an_older_stores_rows_are_counted_and_move_on(tmp_path: Path) -> None:
    """A store of version 10 (every quote has its row, no counts): migration 11 counts its
    rows; its open quotes, unknown to the projection's memory, end through their rows."""
    facts = journal_facts(300)
    path = tmp_path / "old.sqlite"
    with Store(path, checkpoint_every_s=None) as store:
        for fact in facts[:150]:
            store.journal.append(fact)
        store.commit()
        store.project()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE quote_counts")
    conn.execute("ALTER TABLE quotes DROP COLUMN weight")
    conn.execute("ALTER TABLE projection DROP COLUMN open_from")
    conn.execute("ALTER TABLE projection DROP COLUMN lost_sample_rate")
    conn.execute("DELETE FROM schema_version WHERE version >= 11")
    conn.close()
    with Store(path, lost_quote_sample_rate=0.1, checkpoint_every_s=None) as store:
        for fact in facts[150:]:
            store.journal.append(fact)
        store.commit()
        store.project()
        journal = tmp_path / "journal.sqlite"
        write_journal(journal, facts)
        with projected(journal, tmp_path / "every.sqlite", 1.0) as every:
            counts = "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5"
            assert rows(store, counts) == rows(every, counts)
            assert store.pair_totals() == every.pair_totals()


def test_the_signed_answer_of_a_lost_quote_without_a_row_is_in_the_journal(
    journal: Path, tmp_path: Path
) -> None:
    with projected(journal, tmp_path / "tenth.sqlite", 0.1) as tenth:
        unsampled = next(
            f"q{i:05d}" for i in range(3000) if not tenth.quote_rows.sampled(f"q{i:05d}")
        )
        assert not rows(tenth, "SELECT 1 FROM quotes WHERE quote_id = ?", unsampled)
        assert (
            tenth.signed_data(unsampled) == quote(int(unsampled[1:]), random.Random()).signed_data
        )
        assert tenth.signed_data("nobody") is None


def test_the_journal_of_an_open_quote_without_a_row_is_kept(tmp_path: Path) -> None:
    """Retention keeps the journal from the oldest open quote without a row: it may still be
    won, and its row is built from its entry then."""
    rate = QuoteRows(0.1)
    unsampled = next(q for q in (f"u{i}" for i in range(100)) if not rate.sampled(q))
    old = dataclasses.replace(quote(0, random.Random(1)), quote_id=unsampled)
    path = tmp_path / "kept.sqlite"
    with Store(path, lost_quote_sample_rate=0.1, checkpoint_every_s=None) as store:
        store.journal.append(old)
        for i in range(1, 50):
            store.journal.append(quote(i, random.Random(i)))
        store.journal.append(f.QuotesLost(tuple(f"q{i:05d}" for i in range(1, 50)), T0_US, "x"))
        store.commit()
        older = store.journal.write_snapshot({"v": 1}, T0_US)
        store.journal.append(f.PauseSet("all", "operator", "a test", T0_US))
        store.journal.write_snapshot({"v": 2}, T0_US)
        store.project()
        pruned = store.prune(T0 + timedelta(days=400))
        assert pruned.journal == 0  # the open quote's entry is the first
        store.journal.append(f.QuoteMoved(unsampled, S.WON.value, T0_US, None, "I"))
        store.commit()
        store.project()
        won = rows(store, "SELECT quote_id, state, weight FROM quotes WHERE state = 'WON'")
        assert won == [(unsampled, "WON", 1.0)]
        assert store.prune(T0 + timedelta(days=400)).journal == older - 1  # nothing holds it


def test_the_sample_rate_is_a_fraction_above_zero() -> None:
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="lost_quote_sample_rate"):
            QuoteRows(bad)
    assert all(QuoteRows(1.0).sampled(f"x{i}") for i in range(100))
    picked = sum(QuoteRows(0.01).sampled(f"x{i}") for i in range(100_000))
    assert 800 < picked < 1200


def unsampled(store: Store, n: int) -> list[f.QuoteOpened]:
    """``n`` quotes that keep no row at the store's rate (the handoff's case)."""
    rng = random.Random(3)
    found = (quote(i, rng) for i in itertools.count())
    return list(itertools.islice((q for q in found if not store.quote_rows.sampled(q.quote_id)), n))


def counts(store: Store) -> list[tuple[Any, ...]]:
    return rows(store, "SELECT * FROM quote_counts WHERE n != 0 ORDER BY 1, 2, 3, 4, 5")


def test_a_body_changed_under_the_handoff_is_parsed(tmp_path: Path) -> None:
    """The handed key is taken only with the body it came with: an entry whose body is not
    the one this process wrote (another writer, a fact appended again otherwise) is counted
    from its own text."""
    with Store(tmp_path / "w.sqlite", lost_quote_sample_rate=0.1, checkpoint_every_s=None) as w:
        q = unsampled(w, 1)[0]
        w.journal.append(q)
        w.commit()
        other = dataclasses.replace(q, asset_in=ETH, amount_in=q.amount_in * 1000)
        body = orjson.dumps(fact_codec.encode(other)).decode()
        w._conn.execute("UPDATE journal SET body = ? WHERE kind = 'quote_opened'", (body,))
        assert q.quote_id in w.quote_rows.handoff
        w.project()
        ((_, asset_in, _, bucket, state, n),) = counts(w)
        assert (asset_in, bucket, state, n) == (ETH, len(str(other.amount_in)), "OPEN", 1)


def test_a_full_handoff_keeps_the_oldest_and_is_emptied_once_caught_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The projection reads in order: a full handoff keeps the quotes it holds (the next it
    will read) and takes no more; what a failed commit left there goes once the projection
    reads the journal to its end. Counts as a reader's, which parses every entry."""
    monkeypatch.setattr(journal_module, "HANDOFF_CAP", 4)
    writer = Store(tmp_path / "w.sqlite", lost_quote_sample_rate=0.1, checkpoint_every_s=None)
    with writer:
        quotes = unsampled(writer, 7)
        handoff = writer.quote_rows.handoff
        writer.journal.append(quotes[0])
        writer.journal.rollback()  # its commit failed: never in the journal
        for q in quotes[1:]:
            writer.journal.append(q)
        assert list(handoff) == [q.quote_id for q in quotes[:4]]
        writer.commit()
        writer.project()
        assert handoff == {}
        write_journal(tmp_path / "r.sqlite", list(quotes[1:]))
        with projected(tmp_path / "r.sqlite", tmp_path / "reader.sqlite", 0.1) as reader:
            assert counts(writer) == counts(reader) and sum(c[-1] for c in counts(reader)) == 6
