"""Write the store fixture ``tests/io/stores/25a75e5/`` with the code of commit ``25a75e5``.

``25a75e5`` is the last main whose desk took datetimes (its clock became integer microseconds
after it, issue 29): its journal and desk snapshots are what a store written before that
change holds. The script must be run with that commit's code, not today's (it imports
25a75e5's module paths and its desk's datetime interface, and refuses any other commit)::

    git -C REPO worktree add --detach /tmp/wt-25a 25a75e5
    cd /tmp/wt-25a && python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'
    .venv/bin/python REPO/tests/io/stores/make_store_25a75e5.py OUT_DIR

``OUT_DIR`` (created, must be empty) receives:

- ``bot.yaml``: the config the desk was built from (:func:`solver.runtime.wiring.build_desk`);
- ``store.sqlite``: the store, its WAL folded in (one file);
- ``expected.json``: what 25a75e5 reads back from it: the desk rebuilt from the journal (open
  quotes and their claims, reservations, balances, pauses, PnL references), the journal's
  entries by kind, the snapshots, the rows of each table, and what ``solver history`` and
  ``solver store export`` print. Its shape is that of ``tests/io/stores/087e129/``'s.

The story is the one ``make_store_087e129.py`` plays, ported to 25a75e5's code. A real desk is
driven with events at fixed times (a simulated clock) and every fact it records is appended to
the store's journal and committed after each event, as the executor does; the quotes are really
signed (a fixed test key). From 2026-11-20 23:57:00 UTC (so that the UTC day changes in the
middle): a quote won, broadcast and settled; one refused by the relay; one lost at its
deadline; one won whose claim proved invalid, failed at its deadline; a settled rebalance (own
flow); an unexplained deposit that pauses (reconciliation), accepted by the operator (new
baseline); an operator pause and resume; quotes left open (one with an ended and a pending
claim, one won); a quote answered while disconnected whose nonce was used; a settlement not yet
in a balance snapshot; a pair paused. Then the desk snapshot (the latest of two), and after it
the tail: the same kinds of fact again, a new UTC day, a pair paused by the operator and stale
balances pausing everything, both still in force at the end.

Where 25a75e5 differs from 087e129, the story follows 25a75e5 (everything else is unchanged):

- A rebalance is desk facts (issue 22): each one goes step by step as 25a75e5's rebalancer
  tells the desk (``RebalanceStarting``, then ``RebalanceStepping`` through QUOTED,
  DEPOSIT_SENT, DEPOSITED, SUBMITTED, SUCCESS; the deposit really signed, its nonce registered
  in the store first), its input held and its route paused meanwhile, and its two own flows
  (``rebalance:<id>:deposit`` when the deposit executed, ``rebalance:<id>:out`` when the swap
  paid) instead of 087e129's one. Same ids and amounts; they end at the same times (20 s,
  140 s).
- A balance gap is held before it pauses (issue 24): the unexplained deposit (25 s) and the
  withdrawal (160 s) each first ask the nonce of the lost quote that could explain them
  (``l1-lost``, ``l2-lost``: not used), and the pause comes with the next snapshot (25.5 s,
  160.5 s).
- The withdrawal is 100 USDC, not 40: at 25a75e5 a gap of 40 (25 beyond what the open quotes
  allow) fits rebalance-2's output (48 USDC, heard after the accept at 30 s: a doubt of that
  baseline) counted twice, and is corrected away (``baseline_corrected``) without a pause.
- ``baseline_corrected`` (issue 24) must be in the tail like every kind, so the tail has one
  quote more, ``d1-doubted``: settled on chain before the balances the operator accepts at
  165 s, heard of after it; the next snapshot (185 s) finds the baseline counted it twice.
- ``storage.lost_quote_sample_rate`` is 1 in ``bot.yaml`` (25a75e5's default samples LOST
  quotes' rows; 087e129 kept them all, and the store is written keeping them all).

Before it writes ``expected.json`` the script rebuilds two desks with 25a75e5's own code, from
the snapshot and the tail (as the bot starts) and from every journal entry, and checks that
both equal the desk that wrote the store (and each snapshot alone the desk it was taken of):
the fixture holds what that code restores.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import orjson
import yaml

import solver
from solver.cli import main as solver_main
from solver.config import load_bot_config
from solver.core import events as ev
from solver.core import fact_codec
from solver.core import facts as f
from solver.core.actions import Action, CheckNonce, OperatorReply, Record, SignAndSend
from solver.core.desk import Desk
from solver.core.desk_snapshot import restore, snapshot
from solver.core.lifecycle import TrackedQuote
from solver.core.market import QuoteRequest
from solver.core.quoting import Skip
from solver.core.rebalance_record import TERMINAL, RebalanceRecord, RebalanceState
from solver.core.rebalancing import reservation_id
from solver.io import ops_build, ops_intents
from solver.io.ledger_client import LedgerClient
from solver.io.store import schema as store_schema
from solver.io.store.sqlite_store import Store
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, new_nonce
from solver.protocol.quote_signing import QuoteSigner
from solver.runtime.wiring import build_desk

COMMIT = "25a75e5"
T0 = datetime(2026, 11, 20, 23, 57, 0, tzinfo=UTC)
USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"
E6, E24 = 10**6, 10**24
ACCOUNT, VERIFIER = "solver.sandbox", "intents.sandbox"
KEY = SecretKey(hashlib.sha256(b"store fixture 25a75e5: a test key, never funded").digest())
SALT = b"\x25\x28\x12\xb3"
LONG_MS = 600_000  # quotes left open: their deadline is past the end of the story
SHORT_MS = 3_000
SWAP_DEADLINE = timedelta(seconds=1800)  # rebalance.swap_deadline_s's default
DEPOSIT_DEADLINE_S = 120.0  # rebalance.deposit_deadline_s's default
EXPORTED = (
    "quotes", "transitions", "fills", "balance_snapshots", "alerts", "requests", "rebalances",
    "rebalance_steps",
)  # fmt: skip

CONFIG: dict[str, Any] = {
    "account": {"id": ACCOUNT, "key_env": "SOLVER_STORE_FIXTURE_KEY"},
    "verifier_contract": VERIFIER,
    "bus": {"ws_url": "ws://127.0.0.1:8760/ws", "rpc_url": "http://127.0.0.1:8760/rpc"},
    "chain": {
        "rpc_url": "http://127.0.0.1:8761/",
        "balance_refresh_ms": 2_000,
        "balance_max_age_ms": 120_000,
        "salt_refresh_ms": 10_000,
    },
    "tokens": {USDC: {"symbol": "USDC", "decimals": 6}, NEAR: {"symbol": "wNEAR", "decimals": 24}},
    "pairs": [
        {
            "base": NEAR,
            "quote": USDC,
            "strategy": "spread",
            "params": {"spread_bps": 25},
            "max_notional_usd": 1000.0,
        }
    ],
    "prices": {
        "max_age_ms": 120_000,
        "sources": [{"kind": "static", "prices": {USDC: 1.0, NEAR: 2.0}}],
    },
    "quote": {"deadline_margin_ms": 1_000, "max_min_deadline_ms": 900_000},
    "risk": {
        "max_reconciliation_mismatch": {USDC: str(1 * E6), NEAR: str(E24 // 10)},
        "halt_on_mismatch": True,
        "max_stale_s": 100.0,
    },
    "storage": {
        "path": "store.sqlite",
        "sample_requests": 1.0,
        "lost_quote_sample_rate": 1.0,
        "retain_days": None,
    },
    "metrics": {"listen": None},
}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def amounts(values: dict[str, int] | None) -> dict[str, str] | None:
    return None if values is None else {k: str(v) for k, v in sorted(values.items())}


class SaltOnly:
    """What :func:`solver.io.ops_intents.sign_operation` asks of the ledger: its salt and the
    verifier's account (no node runs here)."""

    verifier_contract = VERIFIER

    async def current_salt(self) -> bytes:
        return SALT


class Story:
    """A desk, the store it writes, the chain's balances: the executor's part, by hand."""

    def __init__(self, desk: Desk, store: Store) -> None:
        self.desk, self.store = desk, store
        self.signer = QuoteSigner(KEY, ACCOUNT, VERIFIER)
        self.nonces = NonceSequence(store.claim_nonce_prefix(T0))
        self.chain = {USDC: 5_000 * E6, NEAR: 2_000 * E24}
        self.near_usd = 2.0
        self.checks: list[str] = []  # quote ids the desk asked a nonce check of
        self.now = T0  # the rebalancer's clock, at its latest step
        self.snapshots: dict[str, dict[str, Any]] = {}  # journal position: the desk then

    def snapshot(self, now: datetime) -> None:
        """A desk snapshot, as the bot's upkeep writes one; what the desk was, by position."""
        seq = self.store.journal.write_snapshot(snapshot(self.desk), now)
        self.snapshots[str(seq)] = desk_state(self.desk)

    def run(self, actions: list[Action], now: datetime) -> list[Action]:
        """Carry out the desk's actions: sign, journal its facts, commit (one group)."""
        done: list[Action] = []
        for action in actions:
            done.append(action)
            if isinstance(action, SignAndSend):
                quote = action.quote
                request = quote.request
                signed = self.signer.sign(
                    deadline=quote.deadline,
                    nonce=new_nonce("salted", action.salt, quote.deadline, self.nonces),
                    asset_in=request.asset_in,
                    amount_in=quote.amount_in,
                    asset_out=request.asset_out,
                    amount_out=quote.amount_out,
                )
                event = ev.QuoteSigned(quote, signed.quote_hash, signed.nonce, signed.signed_data)
                for opened in self.desk.receive(event, now):
                    assert isinstance(opened, Record), opened
                    self.store.journal.append(opened.fact)  # with its signed answer
                    done.append(opened)
            elif isinstance(action, Record):
                self.store.journal.append(action.fact)
            elif isinstance(action, CheckNonce):
                self.checks.append(action.quote_id)
        self.store.commit()
        self.store.project()  # the bot's ticker does it a tick later
        return done

    def feed(self, event: ev.Event, now: datetime) -> list[Action]:
        return self.run(self.desk.receive(event, now), now)

    def tick(self, now: datetime) -> list[Action]:
        return self.run(self.desk.tick(now), now)

    def market(self, now: datetime) -> None:
        """Prices and salt (not journaled: a started bot fetches them again)."""
        self.feed(ev.SaltSeen(SALT, now), now)
        self.feed(ev.PriceSeen(USDC, 1.0, now), now)
        self.feed(ev.PriceSeen(NEAR, self.near_usd, now), now)

    def balances(self, now: datetime) -> list[Action]:
        return self.feed(ev.BalancesSeen(dict(self.chain), now), now)

    def ask(
        self,
        quote_id: str,
        now: datetime,
        asset_in: str,
        asset_out: str,
        amount: int,
        *,
        exact_in: bool = True,
        min_deadline_ms: int = LONG_MS,
        partner: str | None = None,
    ) -> TrackedQuote | None:
        """A quote request: the quote answered (OPEN), or None if skipped."""
        request = QuoteRequest(
            quote_id, asset_in, asset_out, exact_in, amount, min_deadline_ms, partner
        )
        actions = self.feed(ev.QuoteRequested(request), now)  # as 25a75e5's executor feeds it
        first = actions[0] if actions else None
        reason = first.reason if isinstance(first, Skip) else None
        self.store.record_request(request, "skipped" if reason else "quoted", now, reason)
        self.store.commit()
        return self.desk.book.get(quote_id)

    def settled_on_chain(self, quote: TrackedQuote) -> None:
        self.chain[quote.asset_in] += quote.amount_in
        self.chain[quote.asset_out] -= quote.outflow

    def status(self, intent: str, status: str, now: datetime, tx: str | None = None) -> None:
        self.feed(ev.IntentStatusSeen(intent, status, tx), now)

    def claim(self, quote: TrackedQuote, intent: str, now: datetime, tx: str | None = None) -> None:
        self.feed(ev.QuoteStatusSeen(quote.quote_hash, intent, tx), now)

    def operator(self, event: ev.Event, now: datetime, *, ok: bool = True) -> None:
        replies = [a for a in self.feed(event, now) if isinstance(a, OperatorReply)]
        assert replies and replies[-1].ok is ok, replies

    def step(
        self,
        record: RebalanceRecord,
        state: RebalanceState,
        now: datetime,
        detail: str | None,
        **changes: Any,
    ) -> RebalanceRecord:
        """The rebalancer's ``_save``: the record's next version, told to the desk."""
        updated = dataclasses.replace(record, state=state, updated_at=now, **changes)
        if state in TERMINAL:
            updated = dataclasses.replace(updated, finished_at=now)
        self.feed(ev.RebalanceStepping(updated, detail), now)
        return updated

    def own_flow(self, key: str, asset_in: str, amount_in: int, asset_out: str, out: int) -> None:
        """The rebalancer's ``on_flow`` (the bot feeds it at the executor's clock)."""
        self.feed(ev.OwnFlowSettled(key, asset_in, amount_in, asset_out, out), self.now)

    def rebalance(self, key: str, now: datetime, usdc_in: int, near_out: int) -> None:
        """A rebalance that sold wNEAR for USDC, settled at ``now``: every step 25a75e5's
        rebalancer tells the desk (the hold and the route's pause, the steps, the own flows)."""
        plan = {"reason": "wNEAR above its band", "target": str(near_out)}
        planned = RebalanceRecord(
            key, now - timedelta(seconds=4), now - timedelta(seconds=4), RebalanceState.PLANNED,
            NEAR, NEAR, USDC, near_out, plan, reason=plan["reason"],
        )  # fmt: skip
        self.now = planned.created_at
        starting = ev.RebalanceStarting(planned, self.now + SWAP_DEADLINE, "sell wNEAR for USDC")
        replies = [a for a in self.feed(starting, self.now) if isinstance(a, OperatorReply)]
        assert replies and replies[-1].ok, replies
        address = f"{key}.deposit.sandbox"
        self.now = now - timedelta(seconds=3)
        # Abbreviated: 25a75e5 keeps the swap API's request and answer whole.
        sent = {"swapType": "EXACT_INPUT", "originAsset": NEAR, "destinationAsset": USDC,
                "amount": str(near_out), "depositType": "INTENTS", "recipient": ACCOUNT}  # fmt: skip
        answer = {"quote": {"amountIn": str(near_out), "amountOut": str(usdc_in),
                            "minAmountOut": str(usdc_in * 99 // 100), "depositAddress": address}}  # fmt: skip
        record = self.step(
            planned, RebalanceState.QUOTED, self.now, f"amountOut {usdc_in} to {address}",
            quote_request=sent, quote_response=answer, quote_signature=f"ed25519:quote-{key}",
            deposit_address=address, amount_out=usdc_in, min_amount_out=usdc_in * 99 // 100,
        )  # fmt: skip
        self.now = now - timedelta(seconds=2.5)
        op = asyncio.run(
            ops_intents.sign_operation(
                cast(LedgerClient, SaltOnly()), KEY, signer_id=ACCOUNT,
                intents=[ops_build.transfer(ACCOUNT, NEAR, near_out, address)],
                deadline_s=DEPOSIT_DEADLINE_S, now=self.now, register=self.store.register_nonce,
            )
        )  # fmt: skip
        record = self.step(
            record, RebalanceState.DEPOSIT_SENT, self.now, f"transfer {op.intent_hash}",
            deposit_intent_hash=op.intent_hash, deposit_signed=op.wire(), deposit_nonce=op.nonce,
            deposit_deadline=op.deadline,
        )  # fmt: skip
        rid = reservation_id(key)
        self.now = now - timedelta(seconds=2)
        tx = f"tx-deposit-{key}"
        record = self.step(record, RebalanceState.DEPOSITED, self.now, tx, deposit_tx_hash=tx)
        self.own_flow(f"{rid}:deposit", USDC, 0, NEAR, near_out)
        self.chain[NEAR] -= near_out
        self.now = now - timedelta(seconds=1)
        status = {"status": "PROCESSING", "swapDetails": {}}
        record = self.step(
            record, RebalanceState.SUBMITTED, self.now, "PROCESSING", swap_status="PROCESSING",
            status_response=status,
        )  # fmt: skip
        self.now = now
        self.own_flow(f"{rid}:out", USDC, usdc_in, NEAR, 0)
        self.chain[USDC] += usdc_in
        reason = f"received {usdc_in} {USDC}"
        status = {"status": "SUCCESS", "swapDetails": {"amountOut": str(usdc_in)}}
        self.step(
            record, RebalanceState.SUCCESS, self.now, reason, reason=reason, amount_out=usdc_in,
            swap_status="SUCCESS", status_response=status,
        )  # fmt: skip


def play(story: Story) -> datetime:
    """Everything up to the latest snapshot, then the tail; returns the end time."""
    s = story
    s.feed(ev.ConnectionRestored(), at(0))
    s.feed(ev.FeeSeen(100), at(0))
    s.market(at(0))
    s.balances(at(0))
    s.tick(at(0))  # the starting equity: PnlMarked

    # Won, broadcast, settled (the whole lifecycle), with the balances after it.
    s1 = s.ask("s1-settled", at(1), USDC, NEAR, 100 * E6, min_deadline_ms=30_000)
    assert s1 is not None
    s.feed(ev.RelayReplied(s1.quote_id, True), at(1))
    s.claim(s1, "intent-s1", at(2))
    s.status("intent-s1", "PENDING", at(2.5))
    s.status("intent-s1", "TX_BROADCASTED", at(3), "tx-s1")
    s.status("intent-s1", "SETTLED", at(4), "tx-s1")
    s.settled_on_chain(s1)
    s.balances(at(4.5))
    s.tick(at(5))  # markout at +1 s

    r1 = s.ask("r1-rejected", at(6), NEAR, USDC, 50 * E6, exact_in=False)
    assert r1 is not None
    s.feed(ev.RelayReplied(r1.quote_id, False, "quote refused: deadline too short"), at(6))
    assert s.ask("l1-lost", at(7), USDC, NEAR, 20 * E6, min_deadline_ms=SHORT_MS) is not None
    f1 = s.ask("f1-failed", at(8), NEAR, USDC, 10 * E24, min_deadline_ms=SHORT_MS)
    assert f1 is not None
    s.claim(f1, "intent-f1", at(8.5))
    s.status("intent-f1", "PENDING", at(9))
    s.status("intent-f1", "NOT_FOUND_OR_NOT_VALID", at(10))
    s.market(at(15))
    s.tick(at(15))  # l1 LOST (QuotesLost), f1's nonce asked, the +10 s markout
    assert s.checks == ["f1-failed"], s.checks
    s.feed(ev.NonceChecked("f1-failed", False), at(15.5))  # FAILED

    s.rebalance("rebalance-1", at(20), 99 * E6, 50 * E24)  # from 16 s
    s.balances(at(21))
    s.chain[USDC] += 250 * E6  # a deposit nobody told the bot of: reconciliation pause
    s.market(at(25))
    s.balances(at(25))  # the gap is held: could l1 have executed after all?
    assert s.checks[-1] == "l1-lost", s.checks
    assert s.desk.pauses.get("*", "reconciliation") is None
    s.feed(ev.NonceChecked("l1-lost", False), at(25.2))  # no: nothing explains the gap
    s.balances(at(25.5))  # a later snapshot confirms it
    assert s.desk.pauses.get("*", "reconciliation") is not None
    assert s.ask("k1-skipped", at(26), USDC, NEAR, 10 * E6) is None  # paused
    s.operator(ev.OperatorResume(None, accept_balances=True), at(30))  # BaselineAccepted
    s.operator(ev.OperatorPause(None, "checking the deposit"), at(32))
    s.operator(ev.OperatorResume(None), at(34))

    # Left open: one untouched, one with an ended and a pending claim, one won.
    s.market(at(40))
    s.balances(at(40))
    assert s.ask("o1-open", at(40), USDC, NEAR, 200 * E6) is not None
    c1 = s.ask("c1-claims", at(41), NEAR, USDC, 25 * E24, partner="partner-a")
    assert c1 is not None
    s.claim(c1, "intent-c1a", at(41.5))
    s.status("intent-c1a", "NOT_FOUND_OR_NOT_VALID", at(42))
    s.claim(c1, "intent-c1b", at(42.5), "tx-c1b")
    w1 = s.ask("w1-won", at(43), USDC, NEAR, 30 * E24, exact_in=False)
    assert w1 is not None
    s.claim(w1, "intent-w1", at(43.5))
    s.status("intent-w1", "PENDING", at(44))
    s.snapshot(at(50))  # the earlier one
    s.market(at(64))
    s.balances(at(64))
    s.tick(at(64))  # the +60 s markout of s1

    # Answered while the connection was down: its nonce is checked after the deadline.
    s.feed(ev.ConnectionLost(), at(70))
    assert s.ask("n1-nonce-used", at(70), USDC, NEAR, 40 * E6, min_deadline_ms=SHORT_MS)
    s.feed(ev.ConnectionRestored(), at(72))
    # Settled just before the snapshot, in no balance snapshot yet.
    u1 = s.ask("u1-unconfirmed", at(73), NEAR, USDC, 5 * E24)
    assert u1 is not None
    s.claim(u1, "intent-u1", at(73.2), "tx-u1")
    s.status("intent-u1", "SETTLED", at(73.5), "tx-u1")
    s.settled_on_chain(u1)
    s.operator(ev.OperatorPause("wNEAR/USDC", "rolled back by the tail"), at(74))
    s.market(at(75))
    s.snapshot(at(75))  # the latest: a start restores from here

    # ---------------------------------------------------------------- the tail
    s.operator(ev.OperatorResume("wNEAR/USDC"), at(76))
    s.market(at(80))
    s.balances(at(80))
    s.tick(at(80))  # n1 past its deadline, not connected throughout: its nonce is asked
    assert s.checks[-1] == "n1-nonce-used", s.checks
    n1 = s.desk.book.get("n1-nonce-used")
    assert n1 is not None
    s.feed(ev.NonceChecked("n1-nonce-used", True), at(80.5))  # WON, SETTLED: nonce used
    s.settled_on_chain(n1)
    s.balances(at(81))
    s.status("intent-c1b", "SETTLED", at(90), "tx-c1b")  # c1 settles on its second claim
    s.settled_on_chain(c1)
    s.balances(at(91))
    s.status("intent-w1", "TX_BROADCASTED", at(100), "tx-w1")  # SETTLING, left so
    s.market(at(110))
    assert s.ask("o2-open", at(110), NEAR, USDC, 15 * E6, exact_in=False) is not None
    r2 = s.ask("r2-rejected", at(111), USDC, NEAR, 30 * E6)
    assert r2 is not None
    s.feed(ev.RelayReplied(r2.quote_id, False, "quote refused: too many answers"), at(111))
    assert s.ask("l2-lost", at(112), NEAR, USDC, 3 * E24, min_deadline_ms=SHORT_MS)
    w2 = s.ask("w2-won", at(113), USDC, NEAR, 60 * E6, partner="partner-b")
    assert w2 is not None
    s.claim(w2, "intent-w2a", at(113.5))
    s.status("intent-w2a", "NOT_FOUND_OR_NOT_VALID", at(114))
    s.claim(w2, "intent-w2b", at(114.5), "tx-w2b")
    s.status("intent-w2b", "PENDING", at(115))  # WON, left so
    s.near_usd = 2.2  # wNEAR up: a new PnL peak
    s.market(at(120))
    s.tick(at(120))  # l2 LOST, markouts, PnlMarked
    s.rebalance("rebalance-2", at(140), 48 * E6, 20 * E24)  # from 136 s
    s.market(at(150))
    s.balances(at(150))
    s.tick(at(150))
    # Won and settled on chain before the balances the operator accepts, heard of after.
    d1 = s.ask("d1-doubted", at(151), NEAR, USDC, 200 * E24)
    assert d1 is not None
    s.claim(d1, "intent-d1", at(152), "tx-d1")
    s.status("intent-d1", "PENDING", at(153), "tx-d1")
    s.settled_on_chain(d1)
    s.chain[USDC] -= 100 * E6  # a withdrawal nobody told the bot of (40 USDC at 087e129)
    s.balances(at(160))  # held: could l2 have executed after all?
    assert s.checks[-1] == "l2-lost", s.checks
    assert s.desk.pauses.get("*", "reconciliation") is None
    s.feed(ev.NonceChecked("l2-lost", False), at(160.2))  # no
    s.balances(at(160.5))  # confirmed
    assert s.desk.pauses.get("*", "reconciliation") is not None
    s.operator(ev.OperatorResume(None, accept_balances=True), at(165))
    s.status("intent-d1", "SETTLED", at(170), "tx-d1")  # a doubt: the baseline may hold it
    s.market(at(185))  # past midnight UTC: a new day for the PnL
    s.balances(at(185))  # it did: BaselineCorrected, and the snapshot reconciles
    assert s.desk.pauses.get("*", "reconciliation") is None
    s.tick(at(185))
    s.operator(ev.OperatorPause("wNEAR/USDC", "spreads under review"), at(200))
    assert s.ask("k2-skipped", at(205), NEAR, USDC, 2 * E24) is None
    s.market(at(290))
    s.tick(at(290))  # balances 105 s old: stale, everything paused
    assert s.desk.pauses.get("*", "stale_data") is not None
    s.tick(at(295))
    return at(295)


# ------------------------------------------------------------------ what was written


def desk_state(desk: Desk) -> dict[str, Any]:
    """What the journal rebuilds, in plain JSON (the test reads today's desk the same way; the
    keys are those of ``tests/io/stores/087e129/expected.json``)."""
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
            # A claim's last get_status is not journaled (only its end is): not compared.
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
        "polling": dict(sorted(desk.quotes.polling.items())),
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


def rebuilt(config_path: Path, store: Store, *, from_snapshot: bool) -> Desk:
    """A desk rebuilt from the store as the bot starts (or from every entry, no snapshot)."""
    desk = build_desk(load_bot_config(config_path), timer=lambda: 0.0)
    if from_snapshot:
        doc, facts = store.journal.load()
        assert doc is not None
        restore(desk, doc)
    else:
        facts = [fact_codec.decode(kind, orjson.loads(body)) for kind, body in store._conn.execute(
            "SELECT kind, body FROM journal ORDER BY seq")]  # fmt: skip
    for fact in facts:
        desk.apply(fact)
    return desk


def cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = solver_main(list(argv))
    assert code == 0, (argv, code)
    return out.getvalue()


def source_commit() -> str:
    root = Path(solver.__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not head.startswith(COMMIT) or dirty:
        sys.exit(f"run this with the code of {COMMIT} (clean), not {head[:12]} at {root}")
    return head


def main(out_dir: Path) -> None:
    head = source_commit()
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.iterdir()):
        sys.exit(f"{out_dir} is not empty")
    config_path = out_dir / "bot.yaml"
    config_path.write_text(
        f"# The config the store fixture's desk was built from, at {COMMIT}.\n"
        + yaml.safe_dump(CONFIG, sort_keys=False),
        encoding="utf-8",
    )
    config = load_bot_config(config_path)
    db = out_dir / "store.sqlite"
    store = Store(
        db, sample_requests=config.storage.sample_requests,
        lost_quote_sample_rate=config.storage.lost_quote_sample_rate, checkpoint_every_s=None,
        account=ACCOUNT,
    )  # fmt: skip
    desk = build_desk(config, timer=lambda: 0.0)
    story = Story(desk, store)
    end = play(story)
    store.project()
    written = desk_state(desk)
    assert desk.rebalancing.open == {}
    for from_snapshot in (True, False):
        again_desk = rebuilt(config_path, store, from_snapshot=from_snapshot)
        again = desk_state(again_desk)
        assert again == written, (from_snapshot, again, written)
        assert again_desk.rebalancing.open == {}, from_snapshot
    for seq, body in store._conn.execute("SELECT seq, body FROM desk_snapshots"):
        alone = build_desk(config, timer=lambda: 0.0)
        restore(alone, orjson.loads(body))  # each snapshot by itself: the desk when written
        assert desk_state(alone) == story.snapshots[str(seq)], seq

    conn = store._conn
    kinds = Counter(kind for (kind,) in conn.execute("SELECT kind FROM journal"))
    assert set(kinds) == set(f.KINDS), sorted(set(f.KINDS) - set(kinds))
    snapshots = [int(seq) for (seq,) in conn.execute("SELECT seq FROM desk_snapshots ORDER BY seq")]
    tail = Counter(
        kind for (kind,) in conn.execute("SELECT kind FROM journal WHERE seq > ?", (snapshots[-1],))
    )
    assert set(tail) == set(f.KINDS), sorted(set(f.KINDS) - set(tail))
    counts = {
        t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in store_schema.TABLES
    }
    states = dict(conn.execute("SELECT state, COUNT(*) FROM quotes GROUP BY state ORDER BY state"))
    open_alerts = [[a.kind, a.detail] for a in store.open_alerts()]
    prefixes = sorted(p.hex() for p in store.nonce_prefixes(ACCOUNT))
    schema = store.schema_version
    store.close()  # the last connection out folds the WAL into the file
    for extra in ("-wal", "-shm", "-spill", ".lock"):
        assert not Path(f"{db}{extra}").exists(), extra

    def history(kind: str) -> Any:
        return orjson.loads(cli("history", "--db", str(db), "--config", str(config_path),
                                "--kind", kind, "--format", "json", "--limit", "1000"))  # fmt: skip

    def export(table: str) -> list[Any]:
        text = cli("store", "export", "--db", str(db), "--table", table, "--format", "jsonl")
        return [orjson.loads(line) for line in text.splitlines()]

    expected = {
        "made_by": {
            "commit": head,
            "script": "tests/io/stores/make_store_25a75e5.py",
            "schema_version": schema,
            "snapshot_version": snapshot(desk)["version"],
        },
        "account": ACCOUNT,
        "public_key": KEY.public_key.to_text(),
        "start": iso(T0),
        "end": iso(end),
        "journal": {
            "entries": sum(kinds.values()),
            "kinds": dict(sorted(kinds.items())),
            "snapshots": snapshots,
            "tail": sum(tail.values()),
            "tail_kinds": dict(sorted(tail.items())),
        },
        "desk": written,
        "desk_at_snapshots": story.snapshots,
        "tables": {
            "rows": counts,
            "quote_states": states,
            "open_alerts": open_alerts,
            "nonce_prefixes": prefixes,
        },
        "cli": {
            "history_quotes": history("quotes"),
            "history_fills": history("fills"),
            "history_pairs": history("pairs"),
            **{f"export_{table}": export(table) for table in EXPORTED},
        },
    }
    for extra in ("-wal", "-shm", "-spill", ".lock"):  # the readers left nothing either
        assert not Path(f"{db}{extra}").exists(), extra
    assert sorted(p.name for p in out_dir.iterdir()) == ["bot.yaml", "store.sqlite"]
    (out_dir / "expected.json").write_bytes(
        orjson.dumps(expected, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )
    print(f"{db}: {db.stat().st_size:,} bytes, {sum(kinds.values())} journal entries")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
