"""The executor's quote path with a real desk and no network: the record is durable before the
answer leaves, shadow mode signs nothing, a store failure never sends and pauses.

The journal, the sender, the ledger and the bus RPC are in-memory doubles of the interfaces the
executor uses; the executor's outbox schedules its flush (commit, then send) with
``call_soon``, so every test runs in the event loop and waits for ``drain``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.clock import SECOND
from solver.core.desk import Desk
from solver.core.lifecycle import Quote, QuoteState
from solver.errors import SolverError
from solver.io.bus_rpc import BusRpcClient
from solver.io.desk_ports import (
    BusStatusSource,
    LedgerNonceOracle,
    LoggedAlerts,
    RunningLoop,
    Tasks,
)
from solver.io.ledger_client import LedgerClient
from solver.io.metrics import Metrics
from solver.io.store.schema import StoreError
from solver.protocol.bus import IntentStatus, StatusData, StatusResult, quote_response
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, QuoteNonces
from solver.protocol.quote_signing import QuoteSigner, SignedQuote
from solver.protocol.signing import parse_signed, verify_signed
from solver.runtime import outbox as outbox_module
from solver.runtime.executor import Executor
from solver.runtime.ports import Ports, Refresh
from tests.core.desk_helpers import E24, NEAR, at, make_desk, request, state_of

ACCOUNT = "solver.sandbox"


class Recorder:
    """The journal and the sender in one, so their order is one list of events."""

    def __init__(self, *, fail: bool = False, fail_commit: bool = False) -> None:
        self.fail = fail
        self.fail_commit = fail_commit
        self.events: list[str] = []
        self.facts: list[f.Fact] = []
        self.committed: list[f.Fact] = []  # what a commit made durable (a failed one: none)
        self._txn: list[f.Fact] = []
        self.signed: dict[str, Mapping[str, Any]] = {}
        self.sent: list[dict[str, Any]] = []
        self.refuse_send: set[str] = set()
        self.corks: list[list[str]] = []  # the answers sent inside each ``corked`` block
        self._cork: list[str] | None = None

    def append(self, fact: f.Fact) -> None:
        if self.fail:
            raise StoreError("disk full")
        quote_id = getattr(fact, "quote_id", "-")
        self.events.append(f"record:{f.kind_of(fact)}:{quote_id}")
        self.facts.append(fact)
        self._txn.append(fact)
        if type(fact) is f.QuoteOpened and fact.signed_data is not None:
            self.signed[quote_id] = fact.signed_data

    def commit(self) -> None:
        if self.fail_commit:
            self._txn = []  # rolled back
            raise StoreError("disk full at commit")
        self.events.append("commit")
        self.committed += self._txn
        self._txn = []

    def rollback(self) -> None:
        self.events.append("rollback")

    def send_answer(self, quote: Quote, signed: SignedQuote) -> None:
        params = quote_response(
            quote.quote_id, quote.exact_in, quote.amount_in, quote.amount_out,
            signed.signed_data,
        )  # fmt: skip
        if params["quote_id"] in self.refuse_send:
            raise SolverError("connection closed")
        self.events.append(f"send:{params['quote_id']}")
        self.sent.append(params)
        if self._cork is not None:
            self._cork.append(params["quote_id"])

    @contextlib.contextmanager
    def corked(self) -> Iterator[None]:
        self._cork = []
        try:
            yield
        finally:
            self.corks.append(self._cork)
            self._cork = None


class Ledger(LedgerClient):
    def __init__(self, used: dict[bytes, bool]) -> None:  # no RPC client: nothing to call
        self.used = used
        self.asked: list[tuple[str, bytes]] = []

    async def is_nonce_used(self, account_id: str, nonce: bytes) -> bool:
        self.asked.append((account_id, nonce))
        return self.used[nonce]


class Bus(BusRpcClient):
    def __init__(self, statuses: dict[str, tuple[IntentStatus, str | None]]) -> None:
        self.statuses = statuses

    async def get_status(self, intent_hash: str) -> StatusResult:
        status, tx_hash = self.statuses[intent_hash]
        data = StatusData(hash=tx_hash) if tx_hash else None
        return StatusResult(intent_hash=intent_hash, status=status, data=data)


class Clock:
    def __init__(self) -> None:
        self.now = at(1)

    def __call__(self) -> int:
        return self.now


def build(
    recorder: Recorder,
    desk: Desk | None = None,
    *,
    journal: bool = True,
    ledger: Ledger | None = None,
    bus: Bus | None = None,
) -> tuple[Executor, list[str]]:
    """The executor with the live ports over in-memory doubles of the journal, the sender, the
    ledger and the bus RPC."""
    calls: list[str] = []
    tasks = Tasks()
    executor = Executor(
        desk or make_desk(),
        Ports(
            signer=QuoteSigner(SecretKey(bytes(32)), ACCOUNT, "intents.sandbox"),
            nonces=QuoteNonces("salted", NonceSequence.unregistered()),
            journal=recorder if journal else None,
            sender=recorder,
            statuses=BusStatusSource(bus or Bus({}), tasks),
            nonce_oracle=LedgerNonceOracle(ledger or Ledger({}), ACCOUNT, tasks),
            balances=Refresh(lambda: calls.append("balances")),
            salt=Refresh(lambda: calls.append("salt")),
            alerts=LoggedAlerts(None),
            metrics=Metrics(),
            loop=RunningLoop(),
            clock=Clock(),
        ),
    )
    return executor, calls


def statuses(executor: Executor) -> BusStatusSource:
    port = executor.ports.statuses
    assert isinstance(port, BusStatusSource)
    return port


def oracle(executor: Executor) -> LedgerNonceOracle:
    port = executor.ports.nonce_oracle
    assert isinstance(port, LedgerNonceOracle)
    return port


async def drain(executor: Executor) -> None:
    """Until every queued answer is committed and sent and every question answered."""
    tasks = statuses(executor).tasks
    while not executor.idle or tasks:
        if tasks:
            await tasks.drain()
        else:
            await asyncio.sleep(0)


def quote(executor: Executor, quote_id: str = "q1") -> None:
    executor.request(request(quote_id), executor.clock())


# 100 USDC in at 1 USD, wNEAR out at 2 USD, less the 20 bps spread.
AMOUNT_OUT = 49_900 * E24 // 1000


async def test_a_quote_is_recorded_and_committed_before_it_is_sent_and_verifies() -> None:
    recorder = Recorder()
    executor, _ = build(recorder)
    quote(executor)
    assert recorder.events == ["record:quote_opened:q1"]  # nothing left yet: not committed
    await drain(executor)
    assert recorder.events == ["record:quote_opened:q1", "commit", "send:q1"]
    (sent,) = recorder.sent
    verified = verify_signed(parse_signed(sent["signed_data"]))
    assert verified.message.signer_id == ACCOUNT
    assert sent["quote_output"] == {"amount_out": str(AMOUNT_OUT)}
    # What the journal holds is exactly what was sent: the signed answer, its nonce and hash.
    assert recorder.signed["q1"] == sent["signed_data"]
    (opened,) = recorder.facts
    assert isinstance(opened, f.QuoteOpened)
    assert opened.amount_out == AMOUNT_OUT and opened.asset_out == NEAR
    tracked = executor.desk.book.get("q1")
    assert tracked is not None
    assert (tracked.nonce, tracked.quote_hash) == (opened.nonce, opened.quote_hash)
    assert executor.desk.inventory.reserved == {NEAR: AMOUNT_OUT}
    assert executor.outbox.sent == 1


async def test_a_store_failure_sends_nothing_releases_and_pauses() -> None:
    recorder = Recorder(fail=True)
    executor, _ = build(recorder)
    quote(executor)
    await drain(executor)
    assert recorder.events == [] and recorder.sent == []
    desk = executor.desk
    assert desk.inventory.reserved == {}
    assert desk.book.quotes == {}
    reason = desk.pauses.reason("*")
    assert reason is not None and reason.startswith("store_error: not recorded: disk full")
    assert desk.stats.outcomes["REJECTED"] == 1
    assert any(alert.kind == "store_error" for _, alert in executor.alerts)
    quote(executor, "q2")
    await drain(executor)
    assert desk.stats.skipped["paused"] == 1 and recorder.sent == []


async def test_shadow_mode_decides_but_signs_records_and_sends_nothing() -> None:
    recorder = Recorder()
    executor, _ = build(recorder, make_desk(shadow=True))
    quote(executor)
    await drain(executor)
    assert recorder.events == [] and recorder.sent == []
    stats = executor.desk.stats
    assert stats.shadow_quotes == 1 and executor.outbox.sent == 0
    assert executor.desk.inventory.reserved == {}
    assert executor.desk.book.quotes == {}


async def test_without_a_journal_the_answer_is_sent_unrecorded() -> None:
    recorder = Recorder()
    executor, _ = build(recorder, journal=False)
    quote(executor)
    await drain(executor)
    assert recorder.events == ["send:q1"]


async def test_a_relay_rejection_releases_the_reservation_and_refreshes_the_salt() -> None:
    recorder = Recorder()
    executor, calls = build(recorder)
    quote(executor)
    await drain(executor)
    executor.feed(ev.RelayReplied("q1", False, "simulation failed: invalid salt"))
    await drain(executor)
    assert executor.desk.inventory.reserved == {}
    assert recorder.events[-2:] == ["record:quote_moved:q1", "commit"]
    moved = recorder.facts[-1]
    assert isinstance(moved, f.QuoteMoved) and moved.new == "REJECTED"
    assert executor.desk.state.salt_at is None  # no quoting before the salt is fetched again
    assert calls == ["salt"]


async def test_a_burst_is_committed_once_then_sent() -> None:
    recorder = Recorder()
    executor, _ = build(recorder)
    for i in range(5):
        quote(executor, f"b{i}")
    await drain(executor)
    assert recorder.events == [
        *(f"record:quote_opened:b{i}" for i in range(5)),
        "commit",
        *(f"send:b{i}" for i in range(5)),
    ]
    assert recorder.corks == [[f"b{i}" for i in range(5)]]  # the five leave in one write


async def test_a_failed_commit_sends_nothing_and_rejects_the_batch() -> None:
    recorder = Recorder(fail_commit=True)
    executor, _ = build(recorder)
    quote(executor, "c1")
    quote(executor, "c2")
    await drain(executor)
    assert not any(e.startswith("send") for e in recorder.events) and recorder.sent == []
    desk = executor.desk
    assert desk.inventory.reserved == {} and desk.book.quotes == {}
    assert desk.stats.outcomes["REJECTED"] == 2
    reason = desk.pauses.reason("*")
    assert reason is not None and reason.startswith("store_error: not recorded: disk full")


async def test_the_facts_a_failed_commit_lost_are_committed_again() -> None:
    """A claim decided in the same turn as an answer whose commit fails: the answer is
    rejected, but the claim the desk applied goes back to the journal and is committed once
    the store takes commits again; a claim the store refused at append time too."""
    recorder = Recorder()
    executor, _ = build(recorder)
    quote(executor, "c1")
    await drain(executor)
    tracked = executor.desk.book.get("c1")
    assert tracked is not None
    recorder.fail_commit = True
    executor.feed(ev.QuoteStatusSeen(tracked.quote_hash, "i1", None))
    quote(executor, "c2")
    await drain(executor)
    assert executor.desk.stats.outcomes["REJECTED"] == 1  # c2, never sent
    assert not any(type(x) is f.ClaimAdded for x in recorder.committed)
    recorder.fail_commit = False
    recorder.fail = True  # the next claim is refused at append time
    executor.feed(ev.QuoteStatusSeen(tracked.quote_hash, "i2", None))
    recorder.fail = False
    await asyncio.sleep(outbox_module.RETRY_COMMIT_S * 1.5)
    await drain(executor)
    claims = [x.intent_hash for x in recorder.committed if type(x) is f.ClaimAdded]
    assert claims == ["i1", "i2"]
    assert sorted(tracked.claims) == ["i1", "i2"]


async def test_an_answer_that_cannot_be_sent_is_rejected_without_a_pause() -> None:
    recorder = Recorder()
    recorder.refuse_send.add("s1")
    executor, _ = build(recorder)
    quote(executor, "s1")
    quote(executor, "s2")
    await drain(executor)
    assert recorder.events == [
        "record:quote_opened:s1",
        "record:quote_opened:s2",
        "commit",
        "record:quote_moved:s1",  # REJECTED: never written to the socket
        "send:s2",
        "commit",
    ]
    desk = executor.desk
    assert executor.outbox.send_failed == 1 and executor.outbox.sent == 1
    assert desk.book.get("s1") is None and desk.book.get("s2") is not None
    assert desk.stats.outcomes["REJECTED"] == 1
    assert not desk.pauses  # nobody can use an answer that never left: nothing to stop for
    tracked = desk.book.get("s2")
    assert tracked is not None and desk.inventory.reserved == {NEAR: tracked.outflow}


async def test_settlement_io_reports_back_to_the_desk() -> None:
    recorder = Recorder()
    executor, calls = build(recorder)
    quote(executor, "p1")
    quote(executor, "n1")
    await drain(executor)
    desk = executor.desk
    p1, n1 = desk.book.get("p1"), desk.book.get("n1")
    assert p1 is not None and n1 is not None
    # A quote_status: the claim is polled with get_status, whose answer moves the quote.
    statuses(executor).bus = Bus({"i1": (IntentStatus.SETTLED, "tx-1")})
    executor.feed(ev.QuoteStatusSeen(p1.quote_hash, "i1", None))
    await drain(executor)
    assert desk.book.get("p1") is None and p1.state == "SETTLED" and p1.tx_hash == "tx-1"
    assert calls == ["balances"]
    # Past the deadline after a disconnect: the verifier's nonce decides.
    ledger = oracle(executor).ledger = Ledger({n1.nonce: False})
    executor.feed(ev.ConnectionRestored(), at(2))
    late = n1.deadline + 3 * SECOND
    executor.tick(late)
    await drain(executor)
    assert ledger.asked == [(ACCOUNT, n1.nonce)]
    assert desk.book.get("n1") is None and n1.state == "LOST"
    kinds = [e for e in recorder.events if e.startswith("record:quote_moved")]
    # p1: OPEN→WON→SETTLED (a settled quote passes through WON); n1: OPEN→LOST.
    assert kinds == ["record:quote_moved:p1", "record:quote_moved:p1", "record:quote_moved:n1"]
    assert recorder.events[-1] == "commit"


async def test_a_fact_that_cannot_be_recorded_pauses_without_ending_the_quote_it_names() -> None:
    """A claim the store cannot take is no reason to reject the quote an intent just named:
    the desk pauses on the store error, and the quote stays OPEN with its reservation."""
    recorder = Recorder()
    executor, _ = build(recorder)
    quote(executor, "c1")
    await drain(executor)
    desk = executor.desk
    tracked = desk.book.get("c1")
    assert tracked is not None
    recorder.fail = True
    executor.feed(ev.QuoteStatusSeen(tracked.quote_hash, "i1", None))
    assert desk.book.get("c1") is tracked and state_of(tracked) is QuoteState.OPEN
    assert desk.inventory.reserved == {NEAR: tracked.outflow}
    assert desk.pauses.get("*", "store_error") is not None


async def test_a_quote_is_signed_under_the_salt_its_decision_checked() -> None:
    """Issue 29: the decision's quote is the action and carries the salt ``decide`` checked, so
    a salt that comes between the decision and the signature cannot sign it; the next
    decision signs under the new one."""
    recorder = Recorder()
    executor, _ = build(recorder)
    desk, now = executor.desk, executor.clock()
    actions = desk.receive(request("q1"), now)
    desk.receive(ev.SaltSeen(b"new!", now), now)  # fetched again before the signature
    executor.carry_out(actions, now)
    quote(executor, "q2")
    await drain(executor)
    first, second = recorder.facts
    assert isinstance(first, f.QuoteOpened) and isinstance(second, f.QuoteOpened)
    assert (first.quote_id, first.nonce[:4]) == ("q1", b"salt")  # salted: salt ‖ prefix ‖ n
    assert (second.quote_id, second.nonce[:4]) == ("q2", b"new!")
    assert [s["quote_id"] for s in recorder.sent] == ["q1", "q2"]
