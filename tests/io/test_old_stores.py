"""Stores written by an older bot still open (issues 22 and 29): the journal, the desk snapshots
and the query tables of stores made by commits ``087e129`` and ``25a75e5`` restore with today's
code.

Each fixture ``tests/io/stores/<commit>/`` was written by that commit's own code
(``tests/io/stores/make_store_<commit>.py``, run in a checkout of it): a real desk driven
through a whole story (every kind of fact, before and after the latest desk snapshot, quotes left
open with claims and reservations, pauses in force), and ``expected.json``: what that code read
back from it. ``25a75e5`` is the last main whose desk held ``datetime`` times: since issue 29 it
holds µs (:mod:`solver.core.clock`), and its stores must restore to the same instants. Here
today's code opens a copy of the store as the bot does, rebuilds the desk
(:func:`solver.runtime.recovery.recover`: the latest snapshot, then the facts after it) and
must find what the old code found; it projects the old journal into the query tables as the old
code did, ``solver history`` and ``solver store export`` read it, and the store takes new facts.

A change of the fact encoding, the snapshot document or the schema that old stores cannot follow
fails here. Such a change needs a migration of old stores (or a reader of the old format), not a
new fixture. Only the reading side of this test (:func:`desk_state`) follows refactors of the
desk; ``expected.json`` is never regenerated with newer code.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.cli import main
from solver.config import load_bot_config
from solver.core import events as ev
from solver.core import fact_codec
from solver.core import facts as f
from solver.core.actions import Record
from solver.core.clock import SECOND, from_micros, micros
from solver.core.desk import Desk
from solver.core.desk_snapshot import VERSION, restore, snapshot
from solver.core.facts import opened_fact
from solver.core.lifecycle import TERMINAL, Quote, QuoteState
from solver.core.market import QuoteRequest
from solver.io.store.migrations import SCHEMA_VERSION
from solver.io.store.sqlite_store import Store
from solver.protocol.encoding import b58encode
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, new_nonce
from solver.protocol.quote_signing import QuoteSigner
from solver.protocol.signing import parse_signed, verify_signed
from solver.runtime.bot import LiveBot
from solver.runtime.recovery import recover
from solver.runtime.wiring import build_desk

STORES = Path(__file__).parent / "stores"
REBALANCE_1_STEPS = {
    "087e129": ["PLANNED", "SUCCESS"],  # its rebalancer wrote the first and the last step
    "25a75e5": ["PLANNED", "QUOTED", "DEPOSIT_SENT", "DEPOSITED", "SUBMITTED", "SUCCESS"],
}
"""The fixtures, by the commit that made each (``25a75e5``: the last main whose desk took
``datetime`` times; the desk's clock is µs since, issue 29), with ``rebalance-1``'s steps."""


@dataclass(frozen=True)
class Made:
    """A fixture: the store an older commit wrote, and what that commit read back from it."""

    commit: str
    path: Path
    expected: dict[str, Any]


def fixture_of(commit: str) -> Made:
    path = STORES / commit
    return Made(commit, path, orjson.loads((path / "expected.json").read_bytes()))


@pytest.fixture(params=sorted(REBALANCE_1_STEPS), scope="module")
def made(request: pytest.FixtureRequest) -> Made:
    return fixture_of(request.param)


USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"
PROJECTED = ("quotes", "transitions", "fills", "balance_snapshots", "alerts")
"""The tables derived from the journal (:mod:`solver.io.store.projection`)."""


def copied(made: Made, directory: Path) -> Path:
    """A copy of the fixture (the store is written to): its directory."""
    for name in ("store.sqlite", "bot.yaml"):
        shutil.copyfile(made.path / name, directory / name)
    (directory / "account").write_text(made.expected["account"])
    return directory


@pytest.fixture
def old(tmp_path: Path, made: Made) -> Path:
    return copied(made, tmp_path)


def open_store(directory: Path) -> Store:
    account = (directory / "account").read_text()
    return Store(directory / "store.sqlite", checkpoint_every_s=None, account=account)


def iso(moment: int | None) -> str | None:
    """A desk time (µs, :mod:`solver.core.clock`) as ``expected.json`` spells it: the ISO text
    of the UTC datetime 087e129's desk held."""
    return None if moment is None else from_micros(moment).isoformat()


def amounts(values: dict[str, int] | None) -> dict[str, str] | None:
    return None if values is None else {k: str(v) for k, v in sorted(values.items())}


def desk_state(desk: Desk) -> dict[str, Any]:
    """What the journal rebuilds, in the form of ``expected.json["desk"]`` (the fixture's script
    read 087e129's desk the same way; this is the part to adapt when the desk is refactored)."""
    inv, bal, pnl, book = desk.inventory, desk.balances, desk.pnl, desk.book
    quotes = {
        q.quote_id: {
            "state": q.state.value,
            "quote_hash": q.quote_hash,
            "asset_in": q.asset_in,
            "asset_out": q.asset_out,
            "amount_in": str(q.amount_in),
            "amount_out": str(q.amount_out),
            "fee": str(q.fee),
            "deadline": iso(q.deadline),
            "nonce": q.nonce.hex(),
            "created_at": iso(q.created_at),
            "updated_at": iso(q.updated_at),
            "intent_hash": q.intent_hash,
            "tx_hash": q.tx_hash,
            "reason": q.reason,
            "claims": [
                [c.intent_hash, c.tx_hash, iso(c.heard_at), c.ended] for c in q.claims.values()
            ],
        }
        for q in sorted(book.quotes.values(), key=lambda q: q.quote_id)
    }
    reservations = {
        r.quote_id: [r.asset_out, str(r.amount_out), r.asset_in, str(r.amount_in), iso(r.deadline)]
        for r in sorted(inv.reservations.values(), key=lambda r: r.quote_id)
    }
    return {
        "open_quotes": quotes,
        "open_outflow": amounts(book.open_outflow),
        "open_inflow": amounts(book.open_inflow),
        "polling": dict(sorted(desk.settlement.polling.items())),
        "reservations": reservations,
        "reserved": amounts(inv.reserved),
        "confirmed": amounts(inv.confirmed),
        "confirmed_at": iso(inv.confirmed_at),
        "unconfirmed_settlements": sorted(inv.unconfirmed_settlements),
        "expected_balances": amounts(bal.expected_now()),
        "reconciler_expected": amounts(bal.reconciler.expected),
        "last_balances": amounts(bal.last),
        "balances_at": iso(bal.snapshot_at),
        "gaps": amounts(bal.found),
        "unresolved": amounts(bal.unresolved),
        "own_settling": bal.own_settling,
        "report": bal.report,
        "pauses": sorted([p.scope, p.kind, p.reason, iso(p.at)] for p in desk.pauses),
        "stale_open": desk.risk.stale_open,
        "pnl": {
            "start_equity": pnl.start_equity,
            "peak_pnl": pnl.peak_pnl,
            "day": pnl.day,
            "day_start_pnl": pnl.day_start_pnl,
            "realized_usd": pnl.realized_usd,
            "fills": pnl.fills,
            "markout_sum": {str(h): v for h, v in sorted(pnl.markout_sum.items())},
            "markout_n": {str(h): n for h, n in sorted(pnl.markout_n.items())},
            "recorded_at": iso(desk.pnl_marks.recorded_at),
            "recorded_day": desk.pnl_marks.recorded_day,
        },
    }


def started_bot(directory: Path, store: Store, expected: dict[str, Any]) -> LiveBot:
    """The live bot on the old store, its desk rebuilt as at every start (nothing connects)."""
    config = load_bot_config(directory / "bot.yaml")
    bot = LiveBot(config, SecretKey.generate(), store=store)
    assert recover(bot.desk, bot.view, bot.store) == expected["journal"]["tail"]
    return bot


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    return out


def history(directory: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> Any:
    argv = ["history", "--db", str(directory / "store.sqlite"), "--config"]
    argv += [str(directory / "bot.yaml"), "--kind", kind, "--format", "json", "--limit", "1000"]
    return orjson.loads(run(argv, capsys))


def export(directory: Path, table: str, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    argv = ["store", "export", "--db", str(directory / "store.sqlite"), "--table", table]
    return [orjson.loads(line) for line in run([*argv, "--format", "jsonl"], capsys).splitlines()]


def assert_rows(found: list[Any], expected: list[Any], *, ignore: tuple[str, ...] = ()) -> None:
    """Row by row, every field 087e129 showed has the same value (new fields may be added)."""
    assert len(found) == len(expected)
    for row, want in zip(found, expected, strict=True):
        assert {k: row.get(k) for k in want if k not in ignore} == {
            k: v for k, v in want.items() if k not in ignore
        }


# ---------------------------------------------------------------------------------- the tests


def test_the_fixture_is_what_it_says(made: Made) -> None:
    by = made.expected["made_by"]
    assert by["commit"].startswith(made.commit)
    assert by["schema_version"] <= SCHEMA_VERSION  # opening it migrates it to today's
    assert (made.path / "store.sqlite").stat().st_size < 1 << 20
    assert not (made.path / "store.sqlite-wal").exists()  # one file: the WAL was folded in


def test_every_journal_entry_and_the_latest_snapshot_read_back(old: Path, made: Made) -> None:
    journal = made.expected["journal"]
    with open_store(old) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.unprojected() == 0
        doc, tail = store.journal.load()
        rows = list(store._conn.execute("SELECT seq, kind, body FROM journal ORDER BY seq"))
        snapshots = [seq for (seq,) in store._conn.execute("SELECT seq FROM desk_snapshots")]
    assert doc is not None and doc["version"] == VERSION
    assert sorted(snapshots) == journal["snapshots"]
    assert len(tail) == journal["tail"]
    decoded = [fact_codec.decode(kind, orjson.loads(body)) for _, kind, body in rows]
    kinds = sorted({f.kind_of(fact) for fact in decoded})
    # Every kind 087e129 knew is in the fixture (kinds added since cannot be) and still read.
    assert kinds == sorted(journal["kinds"]) and set(kinds) <= set(f.KINDS)
    assert {k: sum(f.kind_of(x) == k for x in decoded) for k in kinds} == journal["kinds"]
    assert decoded[-len(tail) :] == tail


def test_the_desk_rebuilds_from_the_snapshot_and_the_tail(old: Path, made: Made) -> None:
    with open_store(old) as store:
        bot = started_bot(old, store, made.expected)
        assert desk_state(bot.desk) == made.expected["desk"]
        # The open quotes, their states and reservations, the pauses still in force, the PnL
        # baseline (spelled out: these are what a restart must never lose).
        desk = bot.desk
        assert {q.quote_id: q.state for q in desk.book.quotes.values()} == {
            "o1-open": QuoteState.OPEN,
            "o2-open": QuoteState.OPEN,
            "w1-won": QuoteState.SETTLING,
            "w2-won": QuoteState.WON,
        }
        assert set(desk.inventory.reservations) == set(desk.book.quotes)
        assert sorted((p.scope, p.kind) for p in desk.pauses) == [
            ("*", "stale_data"),
            (f"{USDC}->{NEAR}", "operator"),
            (f"{NEAR}->{USDC}", "operator"),
        ]
        assert desk.pnl.start_equity == made.expected["desk"]["pnl"]["start_equity"]
        assert desk.pnl.day == "2026-11-21"


def test_each_snapshot_by_itself_restores_the_desk_it_was_taken_of(old: Path, made: Made) -> None:
    """Not only what the tail leaves of it: a part of a snapshot lost in reading can be hidden
    by the facts after it (a settlement not yet in a balance snapshot, for one)."""
    config = load_bot_config(old / "bot.yaml")
    with open_store(old) as store:
        docs = dict(store._conn.execute("SELECT seq, body FROM desk_snapshots"))
    assert sorted(docs) == made.expected["journal"]["snapshots"]
    for seq, body in docs.items():
        desk = build_desk(config, timer=lambda: 0.0)
        restore(desk, orjson.loads(body))
        assert desk_state(desk) == made.expected["desk_at_snapshots"][str(seq)], seq


def test_every_entry_from_the_first_rebuilds_the_same_desk(old: Path, made: Made) -> None:
    """Without the snapshot (the journal alone, from its first entry), the same desk."""
    desk = build_desk(load_bot_config(old / "bot.yaml"), timer=lambda: 0.0)
    with open_store(old) as store:
        for kind, body in store._conn.execute("SELECT kind, body FROM journal ORDER BY seq"):
            desk.apply(fact_codec.decode(kind, orjson.loads(body)))
    assert desk_state(desk) == made.expected["desk"]


def test_the_query_tables_read_back(old: Path, made: Made) -> None:
    tables = made.expected["tables"]
    with open_store(old) as store:
        conn = store._conn
        counts = {
            t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables["rows"]
        }
        assert counts == tables["rows"]
        states = dict(conn.execute("SELECT state, COUNT(*) FROM quotes GROUP BY state"))
        assert states == tables["quote_states"]
        assert [[a.kind, a.detail] for a in store.open_alerts()] == tables["open_alerts"]
        assert (
            sorted(p.hex() for p in store.nonce_prefixes(made.expected["account"]))
            == (tables["nonce_prefixes"])
        )
        last = store.last_balance_snapshot()
        assert last is not None and last.at.isoformat() == made.expected["desk"]["balances_at"]
        assert amounts(last.balances) == made.expected["desk"]["last_balances"]
        assert [r.id for r in store.rebalances()] == ["rebalance-2", "rebalance-1"]
        assert store.open_rebalances() == []
        assert [s for _, s, _ in store.rebalance_steps("rebalance-1")] == REBALANCE_1_STEPS[
            made.commit
        ]
        # The signed answers, kept for disputes: each still verifies and names its quote.
        for quote in store.quotes_since(limit=1000):
            signed = store.signed_data(quote.quote_id)
            item = verify_signed(parse_signed(signed))
            assert b58encode(item.intent_hash) == quote.quote_hash
            assert item.nonce == quote.nonce and item.public_key == made.expected["public_key"]
        assert made.expected["desk"]["open_quotes"]["w1-won"]["quote_hash"] in {
            q.quote_hash for q in store.quotes_since(limit=1000) if q.state not in TERMINAL
        }


def test_history_and_export_read_the_old_store(
    old: Path, made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = made.expected["cli"]
    for kind in ("quotes", "fills", "pairs"):
        assert_rows(history(old, kind, capsys), cli[f"history_{kind}"])
    for name, rows in cli.items():
        if name.startswith("export_"):
            assert_rows(export(old, name.removeprefix("export_"), capsys), rows)
    assert len(export(old, "journal", capsys)) == made.expected["journal"]["entries"]


def test_the_old_journal_projects_as_087e129_projected_it(
    old: Path, made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    """Today's projection of 087e129's journal entries gives 087e129's query tables."""
    # Closed before the store opens: the bot holds its store alone (exclusive locking).
    with contextlib.closing(sqlite3.connect(old / "store.sqlite")) as conn, conn:
        for table in PROJECTED:
            conn.execute(f"DELETE FROM {table}")
        conn.execute("UPDATE projection SET seq = 0")
    with open_store(old) as store:  # the writer projects what is left at its start
        assert store.unprojected() == 0
    cli = made.expected["cli"]
    for table in PROJECTED:
        assert_rows(export(old, table, capsys), cli[f"export_{table}"], ignore=("id",))


def test_the_old_store_takes_new_facts(old: Path, made: Made) -> None:
    """The bot goes on from the old store: resumed, it answers a request (journaled, committed,
    projected) and a snapshot of today's desk restores it."""
    end = micros(datetime.fromisoformat(made.expected["end"]))
    now = end + 10 * SECOND
    with open_store(old) as store:
        bot = started_bot(old, store, made.expected)
        desk = bot.desk
        desk.receive(ev.SaltSeen(b"\x25\x28\x12\xb3", now), now)
        desk.receive(ev.PriceSeen(USDC, 1.0, now), now)
        desk.receive(ev.PriceSeen(NEAR, 2.2, now), now)
        confirmed = {a: int(v) for a, v in made.expected["desk"]["confirmed"].items()}
        facts: list[f.Fact] = []
        for event in (
            ev.BalancesSeen(confirmed, now),
            ev.OperatorResume(None),  # the stale inputs are fresh again
            ev.OperatorResume("wNEAR/USDC"),
        ):
            facts += [a.fact for a in desk.receive(event, now) if isinstance(a, Record)]
        assert list(desk.pauses) == []
        request = QuoteRequest("new-1", USDC, NEAR, True, 25 * 10**6, 60_000)
        (quote,) = desk.receive(request, now)
        assert isinstance(quote, Quote)
        signer = QuoteSigner(SecretKey.generate(), made.expected["account"], "intents.sandbox")
        signed = signer.sign(
            deadline=quote.deadline,
            nonce=new_nonce(
                "salted", quote.salt, from_micros(quote.deadline), NonceSequence(b"\x01" * 7)
            ),
            asset_in=USDC,
            amount_in=quote.amount_in,
            asset_out=NEAR,
            amount_out=quote.amount_out,
        )
        desk.signed(quote, signed.quote_hash, signed.nonce, now)
        opened = opened_fact(quote, signed.signed_data)
        for fact in facts:
            store.journal.append(fact)
        store.journal.append(opened)
        store.commit()
        assert store.project() == len(facts) + 1
        (row,) = store.quotes_since(from_micros(now - SECOND))
        assert (row.quote_id, row.state, row.quote_hash) == ("new-1", "OPEN", signed.quote_hash)
        assert store.signed_data("new-1") == signed.signed_data
        doc, tail = store.journal.load()
        assert tail[-1] == opened and len(tail) == made.expected["journal"]["tail"] + len(facts) + 1
        assert doc is not None
        store.journal.write_snapshot(snapshot(desk), now)
        after = desk_state(desk)
    assert set(after["open_quotes"]) == {*made.expected["desk"]["open_quotes"], "new-1"}
    with open_store(old) as store:
        again = rebuilt_from_snapshot(old, store)
    assert desk_state(again) == after


def rebuilt_from_snapshot(directory: Path, store: Store) -> Desk:
    """A desk rebuilt from today's snapshot (no facts after it)."""
    desk = build_desk(load_bot_config(directory / "bot.yaml"), timer=lambda: 0.0)
    doc, tail = store.journal.load()
    assert doc is not None and tail == []
    restore(desk, doc)
    return desk


def test_a_rebalance_087e129_left_unfinished_is_carried_into_the_journal(tmp_path: Path) -> None:
    """087e129's rebalancer wrote its steps into ``rebalances`` itself. A store it left with a
    rebalance in flight (here: ``rebalance-2`` as it stood with its deposit signed) gets that
    row carried into the journal by migration 10: the desk rebuilt from the journal holds it,
    the query tables keep their rows (no step repeated), and the rebalancer's hold is taken
    again as today's resume asks for it."""
    made = fixture_of("087e129")  # only its rebalancer wrote its own rows (migration 10)
    old = copied(made, tmp_path)
    # Closed before the store opens: the bot holds its store alone (exclusive locking).
    with contextlib.closing(sqlite3.connect(old / "store.sqlite")) as conn, conn:
        conn.execute(
            "UPDATE rebalances SET state = 'DEPOSIT_SENT', finished_at = NULL, swap_status = NULL, "
            'deposit_signed = \'{"standard":"nep413"}\', deposit_deadline = updated_at '
            "WHERE id = 'rebalance-2'"
        )
        conn.execute("DELETE FROM rebalance_steps WHERE rebalance_id = 'rebalance-2' AND id = 4")
        conn.execute("UPDATE rebalance_steps SET state = 'DEPOSIT_SENT' WHERE id = 3")
    with open_store(old) as store:
        (row,) = store.open_rebalances()
        assert (row.id, row.state, row.deposit_signed) == (
            "rebalance-2",
            "DEPOSIT_SENT",
            {"standard": "nep413"},
        )
        doc, tail = store.journal.load()
        assert len(tail) == made.expected["journal"]["tail"] + 1
        assert tail[-1] == f.RebalanceStepped(row, None, carried=True)
        assert [s for _, s, _ in store.rebalance_steps("rebalance-2")] == ["DEPOSIT_SENT"]
        assert store.unprojected() == 0
    desk = build_desk(load_bot_config(old / "bot.yaml"), timer=lambda: 0.0)
    assert doc is not None
    restore(desk, doc)
    for fact in tail:
        desk.apply(fact)
    assert desk.rebalancing.open == {"rebalance-2": row}
    assert "rebalance:rebalance-2" not in desk.inventory.reservations  # 087e129 held none
    now = micros(datetime.fromisoformat(made.expected["end"]))
    assert row.deposit_deadline is not None
    facts = [
        a.fact
        for a in desk.receive(ev.RebalanceStarting(row, micros(row.deposit_deadline)), now)
        if isinstance(a, Record)
    ]
    assert [type(x) for x in facts] == [f.RebalanceStarted]  # the hold, no step repeated
    assert desk.inventory.reservations["rebalance:rebalance-2"].amount_out == row.amount_in
