"""The desk's journal in the SQLite store: facts back in order, damaged entries refused by
number, snapshots, and a desk rebuilt from the journal equal to the one that wrote it."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.core import events as ev
from solver.core import fact_codec
from solver.core import facts as f
from solver.core.actions import Action, Record
from solver.core.clock import SECOND, from_micros, micros
from solver.core.desk import Desk
from solver.core.desk_snapshot import restore, snapshot
from solver.core.rebalance_record import RebalanceRecord
from solver.core.risk import RiskLimits
from solver.io.store.sqlite_store import Store, StoreError
from tests.core.desk_helpers import (
    BALANCES,
    E6,
    E24,
    NEAR,
    USDC,
    answer,
    at,
    feed,
    make_desk,
    quote_hash,
)
from tests.core.test_desk import _fresh_like as fresh
from tests.io.store_helpers import ACCOUNT, T0, T0_US, U128_MAX, WNEAR, opened, signed_quote

PLUS_2 = timezone(timedelta(hours=2))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "solver.sqlite"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store(db, account=ACCOUNT) as opened_store:
        yield opened_store


STEPPED = RebalanceRecord(
    "r1", T0, T0, "DEPOSIT_SENT", WNEAR, WNEAR, USDC, U128_MAX, {"side": "sell"},
    quote_response={"quote": {"amountOut": "5"}}, deposit_nonce=bytes(32), deposit_deadline=T0,
    min_amount_out=U128_MAX,
)  # fmt: skip


def one_of_each_kind() -> list[f.Fact]:
    """Every kind of fact, with the values that are easy to get wrong (u128, bytes, None,
    tuples, a time taken from a zone not UTC)."""
    quote = signed_quote("q1")
    t = T0_US + SECOND
    away = micros(from_micros(t).astimezone(PLUS_2))  # the same instant, read in +02:00
    return [
        opened(quote),
        f.QuoteOpened("q2", "h2", USDC, WNEAR, 1, 2, 0, t, b"\x00" * 32, away, False, None),
        f.ClaimAdded("q1", "i1", None, t),
        f.ClaimAdded("q1", "i2", "tx2", t),
        f.ClaimEnded("q1", "i1", "NOT_FOUND_OR_NOT_VALID", t),
        f.QuoteMoved("q1", "WON", t, intent_hash="i2"),
        f.QuoteMoved("q1", "SETTLED", t, "why", "i2", "tx2", f.FillPrices(1.0, 2.5, -1e-18)),
        f.QuoteMoved("q2", "LOST", t, reason="deadline passed, never named"),
        f.QuotesLost(("q3", "q4"), t, "deadline passed, never named"),
        f.BalancesReconciled(t, {USDC: U128_MAX, WNEAR: 0}),
        f.BalancesReconciled(
            t, {USDC: 5}, (("rebalance-1", USDC, U128_MAX, WNEAR, 3),), own_settling=True
        ),
        f.OwnFlow("rebalance-1", WNEAR, 3, USDC, U128_MAX, t),
        f.PnlMarked(t, 1234.5, 0.0, "2025-01-02", -0.125),
        f.Markout("q1", 60, -0.25, t),
        f.PauseSet("*", "daily_loss", "daily loss 60.00 USD > 50.0", t),
        f.PauseSet(f"{USDC}->{WNEAR}", "operator", "watching", t),
        f.PauseCleared("*", "daily_loss", t, "operator"),
        f.BaselineAccepted(t, {USDC: 7, WNEAR: U128_MAX}, {USDC: -U128_MAX, WNEAR: 0}, -42.5),
        f.BaselineCorrected(t, {USDC: -U128_MAX, WNEAR: 3}, ("q1", "q2"), 0.25),
        f.RebalanceStarted("r1", f"{WNEAR}->{USDC}", WNEAR, U128_MAX, USDC, t, t),
        f.RebalanceDeposited("r1", t),
        f.RebalanceEnded("r1", f"{WNEAR}->{USDC}", "SUCCESS", t),
        f.RebalanceStepped(STEPPED, "transfer h"),
    ]


# ------------------------------------------------------------------------------ reading back


def test_load_returns_every_kind_of_fact_in_order(db: Path) -> None:
    facts = one_of_each_kind()
    assert {f.kind_of(fact) for fact in facts} == set(f.KINDS)  # none is left out
    with Store(db, account=ACCOUNT) as store:
        assert store.journal.load() == (None, [])
        for fact in facts:
            store.journal.append(fact)
        store.journal.commit()
        assert store.journal.appended == len(facts)
    with Store(db, account=ACCOUNT) as store:  # in another run
        snapshot_doc, loaded = store.journal.load()
    assert snapshot_doc is None
    assert loaded == facts
    assert [type(fact) for fact in loaded] == [type(fact) for fact in facts]
    # Exactly what the codec gives through JSON, which is what the table holds.
    through_json = [
        fact_codec.decode(f.kind_of(fact), orjson.loads(orjson.dumps(fact_codec.encode(fact))))
        for fact in facts
    ]
    assert through_json == facts
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT seq, at, kind, body FROM journal ORDER BY seq").fetchall()
    finally:
        conn.close()
    assert [r[0] for r in rows] == list(range(1, len(facts) + 1))
    assert [r[2] for r in rows] == [f.kind_of(fact) for fact in facts]
    bodies = [orjson.loads(r[3]) for r in rows]
    # A quote's entry also carries its signed answer (kept for disputes, projected to quotes).
    first = facts[0]
    assert isinstance(first, f.QuoteOpened) and first.signed_data
    assert bodies[0]["signed_data"] == first.signed_data
    assert bodies[1]["signed_data"] == {}  # a fact without one
    assert all(getattr(x, "signed_data", 0) is None for x in loaded[:2])  # the desk needs none
    assert bodies == [fact_codec.encode(fact) for fact in facts]
    assert rows[0][1] == T0_US  # a quote's entry is at its creation
    assert rows[9][1] == T0_US + SECOND  # balances: when observed


def test_only_committed_facts_are_loaded_after_the_writer_dies(db: Path) -> None:
    """The writer dies mid-transaction (its connection closed without a commit): the next
    opener of the store (it is held alone while open, issue 24) loads only what was
    committed."""
    store = Store(db, checkpoint_every_s=None)
    store.journal.append(f.PauseSet("*", "operator", "one", T0_US))
    store.journal.commit()
    store.journal.append(f.PauseSet("*", "drawdown", "two", T0_US))
    store._conn.close()  # as a process dying would: no commit
    with Store(db, create=False, checkpoint_every_s=None) as reader:
        assert reader.journal.load()[1] == [f.PauseSet("*", "operator", "one", T0_US)]


def _damage(db: Path, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("sql", "params", "says"),
    [
        (
            "UPDATE journal SET body = ? WHERE seq = 3",
            ('{"quote_id": "q1", "intent',),
            "end of data",
        ),
        ("UPDATE journal SET body = ? WHERE seq = 3", ("[1, 2]",), "claim_added"),
        ("UPDATE journal SET kind = ? WHERE seq = 3", ("quote_teleported",), "unknown"),
        ("UPDATE journal SET body = ? WHERE seq = 3", ('{"quote_id": "q1"}',), "missing field"),
        (
            "UPDATE journal SET body = json_set(body, '$.at', ?) WHERE seq = 3",
            ("yesterday",),
            "claim_added",
        ),
    ],
)
def test_a_damaged_entry_stops_the_load_naming_its_number(
    db: Path, sql: str, params: tuple[str], says: str
) -> None:
    with Store(db, account=ACCOUNT) as store:
        for fact in one_of_each_kind()[:6]:
            store.journal.append(fact)
    _damage(db, sql, *params)
    with (
        Store(db, account=ACCOUNT) as store,
        pytest.raises(StoreError, match=r"journal entry 3 \(.*\) cannot be read") as caught,
    ):
        store.journal.load()
    assert says in str(caught.value)


def test_a_damaged_snapshot_stops_the_load(db: Path) -> None:
    with Store(db, account=ACCOUNT) as store:
        store.journal.append(f.PauseSet("*", "operator", "x", T0_US))
        store.journal.write_snapshot({"version": 1}, T0_US)
    _damage(db, "UPDATE desk_snapshots SET body = ?", "{not json")
    with Store(db, account=ACCOUNT) as store, pytest.raises(StoreError, match="entry 1"):
        store.journal.load()


# ------------------------------------------------------------------------------ snapshots


def test_a_snapshot_covers_what_came_before_it(db: Path) -> None:
    facts = one_of_each_kind()
    with Store(db, account=ACCOUNT) as store:
        journal = store.journal
        for fact in facts[:5]:
            journal.append(fact)  # not committed: the snapshot commits them first
        assert journal.write_snapshot({"version": 1, "n": 5}, T0_US) == 5
        assert not store._conn.in_transaction
        for fact in facts[5:9]:
            journal.append(fact)
        journal.commit()
    with Store(db, account=ACCOUNT) as store:
        doc, later = store.journal.load()
        assert doc == {"version": 1, "n": 5}
        assert later == facts[5:9]
        away = micros(T0.astimezone(PLUS_2))
        assert store.journal.write_snapshot({"version": 1, "n": 9}, away) == 9
        assert store.journal.load() == ({"version": 1, "n": 9}, [])
        store.journal.append(facts[9])
        assert store.journal.write_snapshot({"version": 1, "n": 10}, T0_US) == 10
        # The latest and the one before it are kept; older ones are dropped.
        rows = store._conn.execute("SELECT seq, at FROM desk_snapshots ORDER BY seq").fetchall()
        assert rows == [(9, T0_US), (10, T0_US)]
        assert store.journal.load() == ({"version": 1, "n": 10}, [])
        # The journal itself is never cut: every fact is still there.
        assert store._conn.execute("SELECT COUNT(*) FROM journal").fetchone()[0] == 10


def _sqlite_memory_used() -> int | None:
    """Bytes SQLite has allocated in this process (``sqlite3_status64``), or None when the
    library's symbols cannot be reached from here (a statically linked ``_sqlite3``)."""
    import _sqlite3
    import ctypes

    try:
        status = ctypes.CDLL(_sqlite3.__file__).sqlite3_status64
    except (OSError, AttributeError):
        return None
    current, high = ctypes.c_int64(), ctypes.c_int64()
    if status(0, ctypes.byref(current), ctypes.byref(high), 0) != 0:  # SQLITE_STATUS_MEMORY_USED
        return None
    return current.value


def test_sqlite_lets_go_of_the_snapshot_once_written(db: Path) -> None:
    """SQLite keeps a statement's bound values until it is bound again, and the connection
    caches the statement: the body of the latest snapshot (~11 MB at 3,000 open quotes and
    20,000 recently lost) stayed in SQLite's memory until the next one (the soak, issue 29)."""
    with Store(db, account=ACCOUNT) as store:
        store.journal.append(f.PauseSet("*", "operator", "x", T0_US))
        store.journal.write_snapshot({"version": 1}, T0_US)  # statements prepared, pages cached
        before = _sqlite_memory_used()
        if before is None:
            pytest.skip("sqlite3_status64 is not reachable through _sqlite3")
        body = {"version": 1, "quotes": ["q" * 100] * 80_000}  # 8.2 MB of JSON
        size = len(orjson.dumps(body))
        store.journal.write_snapshot(body, T0_US)
        held = _sqlite_memory_used()
        assert held is not None
        # Its page cache may have grown meanwhile (2 MB at most, SQLite's default).
        assert held - before < size // 2, f"SQLite holds {held - before:,} bytes more"
        assert store.journal.load() == (body, [])


# ------------------------------------------------------------------------------ rebuilding a desk


class Recorder:
    """The executor's part that matters here: every ``Record`` goes to the journal, a
    ``QuoteOpened`` with its signed answer."""

    def __init__(self, desk: Desk, store: Store) -> None:
        self.desk = desk
        self.store = store
        self.facts: list[f.Fact] = []

    def take(self, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, Record):
                fact = action.fact
                if type(fact) is f.QuoteOpened:
                    fact = dataclasses.replace(fact, signed_data={"payload": fact.quote_id})
                self.store.journal.append(fact)
                self.facts.append(action.fact)
        return actions

    def receive(self, event: ev.Event, now: int) -> list[Action]:
        return self.take(self.desk.receive(event, now))

    def tick(self, now: int) -> list[Action]:
        return self.take(self.desk.tick(now))


LIMITS = RiskLimits(max_daily_loss_usd=50, max_drawdown_usd=1e9, max_mismatch={})


def prices(desk: Desk, now: int, near_usd: float) -> None:
    desk.receive(ev.SaltSeen(b"salt", now), now)
    desk.receive(ev.PriceSeen(USDC, 1.0, now), now)
    desk.receive(ev.PriceSeen(NEAR, near_usd, now), now)


def dt(seconds: float) -> datetime:
    """:func:`at` as a datetime, for the rebalance records (they keep datetimes)."""
    return from_micros(at(seconds))


def trade_a_while(r: Recorder, *, snapshot_at: float | None = None) -> None:
    """A run that produces every kind of fact the desk decides."""
    desk = r.desk
    r.take(feed(desk, at(0), BALANCES))
    r.tick(at(0.5))  # the PnL references
    r.receive(ev.ConnectionRestored(), at(0.6))
    for name in ("q1", "q2", "q3", "q4", "q5"):
        r.take(answer(desk, name, at(1)))
    r.receive(ev.QuoteStatusSeen(quote_hash("q2"), "i2", None), at(1.1))
    r.receive(ev.IntentStatusSeen("i2", "PENDING"), at(1.2))  # WON
    r.receive(ev.QuoteStatusSeen(quote_hash("q3"), "i3", "t3"), at(1.1))
    r.receive(ev.IntentStatusSeen("i3", "SETTLED", "t3"), at(1.3))  # a fill, with prices
    r.receive(ev.QuoteStatusSeen(quote_hash("q4"), "i4a", None), at(1.1))
    r.receive(ev.QuoteStatusSeen(quote_hash("q4"), "i4b", None), at(1.1))
    r.receive(ev.IntentStatusSeen("i4a", "NOT_FOUND_OR_NOT_VALID"), at(1.4))  # claim ended
    r.receive(ev.IntentStatusSeen("i4b", "TX_BROADCASTED", "t4"), at(1.4))  # SETTLING
    r.receive(ev.RelayReplied("q5", False, "quote expired"), at(1.5))  # REJECTED
    r.take(feed(desk, at(1.6), {USDC: BALANCES[USDC] + 100 * E6, NEAR: BALANCES[NEAR] - E24}))
    r.receive(ev.OwnFlowSettled("rebalance-1", USDC, 10 * E6, NEAR, E24), at(2))
    plan = {"reason": "above max"}
    rb1 = RebalanceRecord("rb-1", dt(2.01), dt(2.01), "PLANNED", NEAR, NEAR, USDC, E24, plan)
    r.receive(ev.RebalanceStarting(rb1, at(60), "planned"), at(2.01))
    rb1 = dataclasses.replace(rb1, state="DEPOSITED", updated_at=dt(2.02), deposit_nonce=b"n" * 32)
    r.receive(ev.RebalanceStepping(rb1, "tx"), at(2.02))
    rb1 = dataclasses.replace(rb1, state="SUCCESS", updated_at=dt(2.03), finished_at=dt(2.03))
    r.receive(ev.RebalanceStepping(rb1, "received"), at(2.03))
    # One still in flight across the snapshot: the desk holds it, its input and its pause.
    rb2 = RebalanceRecord("rb-2", dt(2.04), dt(2.04), "PLANNED", NEAR, NEAR, USDC, E24, plan)
    r.receive(ev.RebalanceStarting(rb2, at(60), "planned"), at(2.04))
    quote = {"quote": {"depositAddress": "dep-2"}, "signature": "ed25519:x"}
    rb2 = dataclasses.replace(
        rb2, state="QUOTED", updated_at=dt(2.05), quote_response=quote, amount_out=3 * E6
    )
    r.receive(ev.RebalanceStepping(rb2, "quoted"), at(2.05))
    r.receive(ev.OperatorPause("wNEAR/USDC", "watching"), at(2.1))
    r.receive(ev.OperatorPause(None, "maintenance"), at(2.2))
    r.receive(ev.OperatorResume("wNEAR/USDC"), at(2.3))  # still paused: maintenance
    r.tick(at(2.5))  # the 1 s markout of q3
    if snapshot_at is not None:
        r.store.journal.write_snapshot(snapshot(desk), at(snapshot_at))
    prices(desk, at(3), near_usd=1.9)  # NEAR fell: a daily loss beyond 50 USD
    r.tick(at(3))
    q2 = desk.book.get("q2")
    assert q2 is not None
    # A withdrawal, and q2 executed on chain: the accepted snapshot holds it, heard of after.
    moved = {USDC: BALANCES[USDC] - 500 * E6 + q2.amount_in, NEAR: BALANCES[NEAR] - q2.outflow}
    r.take(feed(desk, at(4), moved))
    r.take(feed(desk, at(4.2), moved))
    r.receive(ev.OperatorResume(None, accept_balances=True), at(5))
    r.receive(ev.IntentStatusSeen("i2", "SETTLED"), at(5.1))
    r.take(feed(desk, at(6), moved))  # counted twice: the baseline is corrected
    r.tick(at(12))  # the 10 s markout of q3
    r.tick(at(20))  # q1 is past its deadline, never named while connected: QuotesLost
    r.store.journal.commit()


def state(desk: Desk) -> dict[str, Any]:
    """Everything the journal must rebuild (market inputs and poll timing are not in it)."""
    inv, bal, pnl = desk.inventory, desk.balances, desk.pnl
    quotes = {
        q.quote_id: (
            q.quote_hash, q.asset_in, q.asset_out, q.amount_in, q.amount_out, q.fee, q.deadline,
            q.nonce, q.created_at, q.state, q.updated_at, q.intent_hash, q.tx_hash, q.reason,
            # A pending claim's last status is not journaled (nothing decides on it).
            {i: (c.tx_hash, c.heard_at, c.ended and c.status, c.ended) for i, c in q.claims.items()},
        )
        for q in desk.book.quotes.values()
    }  # fmt: skip
    return {
        "quotes": quotes,
        "by_hash": dict(desk.book.by_hash),
        "open_flows": (dict(desk.book.open_outflow), dict(desk.book.open_inflow)),
        "polling": dict(desk.settlement.polling),
        "reserved": dict(inv.reserved),
        "reservations": dict(inv.reservations),
        "confirmed": (dict(inv.confirmed), inv.confirmed_at),
        "unconfirmed_settlements": dict(inv.unconfirmed_settlements),
        "expected": bal.reconciler.expected,
        "gaps": bal.reconciler.last,
        "snapshot": (bal.snapshot_at, bal.last, bal.found, bal.own_settling, bal.report),
        "unresolved": dict(bal.unresolved),
        "unconfirmed": dict(bal.unconfirmed),
        "pnl": (pnl.start_equity, pnl.peak_pnl, pnl.day, pnl.day_start_pnl),
        "realized": (pnl.fills, pnl.realized_usd),
        "markouts": (dict(pnl.markout_sum), dict(pnl.markout_n)),
        "pnl_recorded": (desk.pnl_marks.recorded_at, desk.pnl_marks.recorded_day),
        "pauses": {(p.scope, p.kind): (p.reason, p.at) for p in desk.pauses},
        "rebalances": dict(desk.rebalancing.open),
    }


def test_the_run_journals_every_kind_of_fact(store: Store) -> None:
    recorder = Recorder(fresh(make_desk(limits=LIMITS)), store)
    trade_a_while(recorder)
    assert {f.kind_of(fact) for fact in recorder.facts} == set(f.KINDS)
    desk = recorder.desk
    # The operator's resume with accept_balances cleared all but the loss still in force.
    assert {(p.scope, p.kind) for p in desk.pauses} == {("*", "daily_loss")}
    kinds = {(fact.scope, fact.kind) for fact in recorder.facts if isinstance(fact, f.PauseSet)}
    assert {("*", "operator"), ("*", "reconciliation"), ("*", "daily_loss")} <= kinds
    assert desk.book.get("q1") is None and desk.stats.outcomes["LOST"] == 1  # QuotesLost
    assert NEAR in desk.inventory.reserved  # q4 (SETTLING) still holds its outflow
    assert desk.pnl.markout_n[1] == desk.pnl.markout_n[10] == 2  # q3's and q2's
    assert store.journal.load() == (None, recorder.facts)


def rebuilt_from(store: Store, like: Desk) -> Desk:
    """What the bot does at start: the latest snapshot, then every fact after it."""
    doc, facts = store.journal.load()
    desk = fresh(like)
    if doc is not None:
        restore(desk, orjson.loads(orjson.dumps(doc)))
    for fact in facts:
        desk.apply(fact)
    return desk


@pytest.mark.parametrize("snapshot_at", [None, 2.5])
def test_a_desk_rebuilt_from_the_journal_equals_the_one_that_wrote_it(
    db: Path, snapshot_at: float | None
) -> None:
    with Store(db, account=ACCOUNT) as store:
        recorder = Recorder(fresh(make_desk(limits=LIMITS)), store)
        trade_a_while(recorder, snapshot_at=snapshot_at)
    original = recorder.desk
    with Store(db, account=ACCOUNT) as store:  # the next run
        rebuilt = rebuilt_from(store, original)
        doc, later = store.journal.load()
    assert (doc is None) == (snapshot_at is None)
    assert len(later) < len(recorder.facts) or snapshot_at is None
    assert state(rebuilt) == state(original)
    # Live from here on, both decide the same: the same facts for the same inputs.
    for desk in (original, rebuilt):
        prices(desk, at(13), near_usd=1.9)
        desk.receive(ev.ConnectionRestored(), at(13))
    after = [recorded(desk.tick(at(14))) for desk in (original, rebuilt)]
    assert after[0] == after[1]
    assert state(rebuilt) == state(original)
    assert rebuilt.pnl.pnl == pytest.approx(original.pnl.pnl)
    outcome = [
        recorded(desk.receive(ev.IntentStatusSeen("i4b", "SETTLED", "t4"), at(15)))
        for desk in (original, rebuilt)
    ]
    assert outcome[0] == outcome[1] and outcome[0]
    late = [recorded(desk.tick(at(80))) for desk in (original, rebuilt)]
    if snapshot_at is not None:  # markouts still due at a snapshot are dropped, by design
        late[0] = [m for m in late[0] if not (isinstance(m, f.Markout) and m.quote_id == "q3")]
    assert late[0] == late[1]
    due = {"q2", "q4"} if snapshot_at is not None else {"q2", "q3", "q4"}  # the 60 s ones
    assert {m.quote_id for m in late[1] if isinstance(m, f.Markout)} == due
    ours, theirs = state(original), state(rebuilt)
    if snapshot_at is not None:
        del ours["markouts"], theirs["markouts"]
    assert theirs == ours


def recorded(actions: list[Action]) -> list[f.Fact]:
    return [a.fact for a in actions if isinstance(a, Record)]


def test_rebuilt_reservations_are_the_outflow_plus_the_fee(store: Store) -> None:
    a = signed_quote("a", amount_out=1_000, fee=3)
    b = signed_quote("b", amount_out=2_000, fee=5, asset_in=WNEAR, asset_out="nep141:eth")
    for quote in (a, b):
        store.journal.append(opened(quote))
    store.journal.commit()
    desk = rebuilt_from(store, make_desk())
    assert desk.inventory.reserved == {WNEAR: 1_003, "nep141:eth": 2_005}
    assert {r.deadline for r in desk.inventory.reservations.values()} == {a[0].deadline}
    assert desk.book.open_outflow == {WNEAR: 1_003, "nep141:eth": 2_005}
    # Signed already: restored whatever the balances say now.
    assert desk.inventory.free(WNEAR) == 0


def test_times_come_back_as_the_same_instant_in_utc(store: Store) -> None:
    moment = datetime(2025, 6, 1, 12, 0, 0, 1, tzinfo=PLUS_2)
    store.journal.append(f.PauseSet("*", "operator", "x", micros(moment)))
    store.journal.commit()
    (fact,) = store.journal.load()[1]
    assert isinstance(fact, f.PauseSet)
    assert fact.at == micros(moment)
    assert from_micros(fact.at) == moment and from_micros(fact.at).tzinfo == UTC


def test_the_spelled_out_quote_opened_decoder_matches_the_encoder() -> None:
    """``decode`` reads ``quote_opened`` (one per answer: projection and restart) without the
    generic loop; it must give back exactly what ``encode`` wrote, u128 amounts and the partner
    included, and name what is wrong with a bad entry."""
    fact = f.QuoteOpened(
        "q-1", "hash", WNEAR, "nep141:usdc", U128_MAX, 1, 7, T0_US + 5 * SECOND,
        bytes(range(32)), T0_US, False, "partner-9",
    )  # fmt: skip
    body = orjson.loads(orjson.dumps(fact_codec.encode(fact)))
    assert fact_codec.decode("quote_opened", body) == fact
    del body["partner_id"]
    assert fact_codec.decode("quote_opened", body) == f.QuoteOpened(
        *(
            getattr(fact, name)
            for name in f.QuoteOpened.__dataclass_fields__
            if name != "partner_id"
        )
    )
    for field, bad, says in (
        ("fee", None, "missing field 'fee'"),
        ("amount_in", "12x", "ValueError"),
        ("nonce", "zz", "ValueError"),
        ("deadline", [], "TypeError"),
    ):
        broken = dict(body)
        if bad is None:
            del broken[field]
        else:
            broken[field] = bad
        with pytest.raises(fact_codec.FactError, match=f"quote_opened: .*{says}"):
            fact_codec.decode("quote_opened", broken)
