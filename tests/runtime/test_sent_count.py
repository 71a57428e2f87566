""" "The answer left" is counted once, by the executor's outbox (docs/architecture.md
"Counting sent answers"); the metrics show that count, so the two cannot disagree, and an
answer the sender refused counts as sent nowhere.

The executor runs its live ports over the in-memory journal and sender of
``tests/runtime/test_executor.py``, or over a real bus websocket client that is not connected
(its ``send_answer`` refuses, as live after a drop).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from backtest.ports import ImmediateLoop
from solver.io.bus_ws import BusWsClient
from solver.io.desk_ports import (
    BusStatusSource,
    LedgerNonceOracle,
    LoggedAlerts,
    RunningLoop,
    Tasks,
)
from solver.io.metrics import Metrics
from solver.io.metrics_series import OTHER
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, QuoteNonces
from solver.protocol.quote_signing import QuoteSigner
from solver.runtime.executor import Executor
from solver.runtime.outbox import GroupCommitOutbox
from solver.runtime.ports import Ports, Refresh, Sender
from tests.core.desk_helpers import NEAR, USDC, at, make_desk, request
from tests.runtime.test_executor import ACCOUNT, Bus, Clock, Ledger, Recorder, drain

PAIR = "wNEAR/USDC"


def executor_over(
    recorder: Recorder, sender: Sender, *, at_once: bool = False
) -> tuple[Executor, Metrics]:
    """``at_once``: the replay's ports (no journal, deferred work run at once, no metrics)."""
    metrics = Metrics(pairs=[(NEAR, USDC)], symbols={NEAR: "wNEAR", USDC: "USDC"})
    tasks = Tasks()
    executor = Executor(
        make_desk(),
        Ports(
            signer=QuoteSigner(SecretKey(bytes(32)), ACCOUNT, "intents.sandbox"),
            nonces=QuoteNonces("salted", NonceSequence.unregistered()),
            journal=None if at_once else recorder,
            sender=sender,
            statuses=BusStatusSource(Bus({}), tasks),
            nonce_oracle=LedgerNonceOracle(Ledger({}), ACCOUNT, tasks),
            balances=Refresh(lambda: None),
            salt=Refresh(lambda: None),
            alerts=LoggedAlerts(None),
            metrics=None if at_once else metrics,
            loop=ImmediateLoop() if at_once else RunningLoop(),
            clock=Clock(),
        ),
    )
    return executor, metrics


def quotes_shown(metrics: Metrics) -> dict[str, float]:
    """``solver_quotes_total`` by pair, as a scrape of ``/metrics`` reads it."""
    return {
        sample.labels["pair"]: sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name == "solver_quotes_total"
    }


async def test_a_refused_answer_is_not_sent_anywhere() -> None:
    recorder = Recorder()
    client = BusWsClient("ws://127.0.0.1:9/never-connected", on_quote=lambda event: None)
    executor, metrics = executor_over(recorder, client)
    executor.request(request("q1"), at(1))
    await drain(executor)
    assert recorder.events == [
        "record:quote_opened:q1",
        "commit",
        "record:quote_moved:q1",  # REJECTED: never written
        "commit",
    ]
    assert executor.outbox.send_failed == 1
    assert executor.outbox.sent == 0 and executor.outbox.sent_by_pair == {}
    assert quotes_shown(metrics) == {PAIR: 0, OTHER: 0}
    assert client.counters.responses_ok == 0 and client.counters.unanswered == 0


async def test_what_the_metrics_show_is_what_the_executor_sent() -> None:
    recorder = Recorder()
    recorder.refuse_send |= {"q2", "q4"}
    executor, metrics = executor_over(recorder, recorder)
    for quote_id in ("q1", "q2", "q3"):  # one batch: q2 refused inside the corked write
        executor.request(request(quote_id), at(1))
    await drain(executor)
    executor.request(request("q4"), at(2))  # a batch of one, refused
    await drain(executor)
    executor.request(request("q5"), at(3))
    await drain(executor)
    assert [answer["quote_id"] for answer in recorder.sent] == ["q1", "q3", "q5"]
    opened = sum(1 for event in recorder.events if event.startswith("record:quote_opened"))
    assert (executor.outbox.sent, executor.outbox.send_failed, opened) == (3, 2, 5)
    assert executor.outbox.sent_by_pair == {PAIR: 3}
    assert quotes_shown(metrics) == {PAIR: 3, OTHER: 0}
    assert len(executor.outbox.response_us) == 3  # timed: the answers that left, only


def test_with_nothing_to_wait_on_an_answer_leaves_as_it_is_queued() -> None:
    """No journal to commit, a loop that runs deferred work at once, nothing to time (the
    replay's ports): the outbox's door is the flush's own send of one answer (issue 29), so
    each answer leaves inside its request, counted once, and one the sender refused is
    counted as failed and released, as through a flush."""
    recorder = Recorder()
    recorder.refuse_send.add("q2")
    executor, _ = executor_over(recorder, recorder, at_once=True)
    outbox = executor.outbox
    assert getattr(outbox.queue, "__func__", None) is GroupCommitOutbox._send_one
    executor.request(request("q1"), at(1))
    assert [answer["quote_id"] for answer in recorder.sent] == ["q1"] and executor.idle
    executor.request(request("q2"), at(1))
    assert (outbox.sent_by_pair, outbox.send_failed) == ({OTHER: 1}, 1)
    desk = executor.desk
    assert "q2" not in desk.inventory.reservations and list(desk.book.quotes) == ["q1"]
    assert recorder.events == ["send:q1"] and recorder.corks == []  # nothing journaled or corked
    live, _ = executor_over(Recorder(), Recorder())  # a journal to wait on: queued for the flush
    assert getattr(live.outbox.queue, "__func__", None) is GroupCommitOutbox._queue
