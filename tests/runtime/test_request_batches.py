"""The requests of one read of the socket, in stages (:meth:`Executor.request_many`): every
decision, then every signature, then every record. The same decisions, records and answers in
the same order as one by one; a repeated id is still a duplicate; a request whose path fails
leaves the others answered. A real desk and signer, the journal and sender doubles of
``test_executor``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from solver.core import facts as f
from solver.core.actions import Decision
from solver.core.lifecycle import Quote
from solver.core.market import QuoteRequest
from solver.core.quoting import DUPLICATE_QUOTE_ID, STRATEGY_NO_QUOTE, Skip
from solver.protocol.quote_signing import SignedQuote
from solver.runtime.executor import Executor
from tests.core.desk_helpers import request
from tests.runtime.test_executor import Recorder, build, drain

# USDC in, wNEAR out at 2 USD: 1,000 wNEAR cover 1,600 USDC's 800 alone, not after the three
# before it reserved theirs (a skip amid the answers that only the reservations explain).
AMOUNTS = (100, 250, 100, 1_600, 300)


def _requests(prefix: str) -> list[QuoteRequest]:
    return [request(f"{prefix}{n}", amount) for n, amount in enumerate(AMOUNTS)]


def _decisions(facts: list[f.Fact]) -> list[tuple[object, ...]]:
    """What was decided and recorded, less what differs between two signers' runs (the
    nonce's random prefix, hence the hash and the signed message)."""
    out: list[tuple[object, ...]] = []
    for fact in facts:
        assert isinstance(fact, f.QuoteOpened)
        fields = dataclasses.asdict(fact)
        for name in ("nonce", "quote_hash", "signed_data"):
            fields.pop(name)
        out.append(tuple(sorted(fields.items())))
    return out


async def test_a_read_in_stages_decides_records_and_sends_as_one_by_one() -> None:
    one, staged = Recorder(), Recorder()
    single, _ = build(one)
    batched, _ = build(staged)
    now = single.clock()
    alone = [single.request(r, now) for r in _requests("q")]
    together = batched.request_many(_requests("q"), now)
    await drain(single)
    await drain(batched)

    assert [type(a) for a in together] == [type(a) for a in alone]
    skipped = [a for a in together if isinstance(a, Skip)]
    assert skipped == [a for a in alone if isinstance(a, Skip)]
    assert [s.reason for s in skipped] == [STRATEGY_NO_QUOTE]
    assert staged.events == one.events  # records in request order, one commit, then sends
    assert one.events[-4:] == ["send:q0", "send:q1", "send:q2", "send:q4"]
    assert _decisions(staged.facts) == _decisions(one.facts)
    assert [s["quote_output"] for s in staged.sent] == [s["quote_output"] for s in one.sent]
    assert batched.desk.inventory.reserved == single.desk.inventory.reserved
    assert sorted(batched.desk.book.quotes) == sorted(single.desk.book.quotes)


async def test_a_repeated_id_in_one_read_is_refused_as_a_duplicate() -> None:
    """The first is decided and reserved but not signed nor in the book when the second is
    decided: its reservation tells (a remote signer's quotes wait so too)."""
    recorder = Recorder()
    executor, _ = build(recorder)
    first, second = executor.request_many([request("q1"), request("q1")], executor.clock())
    await drain(executor)
    assert type(first) is Quote
    assert second == Skip(DUPLICATE_QUOTE_ID, "a quote with this id is still open")
    assert [s["quote_id"] for s in recorder.sent] == ["q1"]


async def test_a_request_whose_path_fails_leaves_the_others_answered(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    executor, _ = build(recorder)
    queue_signed = Executor._queue_signed

    def failing(self: Executor, quote: Quote, *args: object) -> None:
        if quote.quote_id == "q1":
            raise RuntimeError("a bug on the way to the journal")
        queue_signed(self, quote, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Executor, "_queue_signed", failing)
    results = executor.request_many([request("q0"), request("q1"), request("q2")], executor.clock())
    await drain(executor)
    assert results[1] is None and results[0] and results[2]
    assert [s["quote_id"] for s in recorder.sent] == ["q0", "q2"]
    assert "request q1: recording failed" in caplog.text


async def test_a_journal_refusing_a_read_sends_none_of_it_and_releases_all() -> None:
    """The journal refuses the first record: quoting pauses (``store_error``), and the read's
    later requests, decided and signed already, are not recorded either: none leaves, every
    reservation is released (one by one they would have been skipped as paused)."""
    recorder = Recorder(fail=True)
    executor, _ = build(recorder)
    results = executor.request_many([request(f"q{n}") for n in range(3)], executor.clock())
    await drain(executor)
    assert all(r is not None for r in results)
    assert recorder.sent == [] and recorder.events == []
    desk = executor.desk
    assert desk.inventory.reserved == {} and desk.book.quotes == {}
    reason = desk.pauses.reason("*")
    assert reason is not None and reason.startswith("store_error: not recorded: disk full")
    assert executor.outbox.sent == 0


def _traced(executor: Executor, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the executor does, in order: each desk decision, signature and record."""
    trace: list[str] = []
    decide, sign, signed = executor._decide, executor._sign, executor._signed
    assert sign is not None

    def traced_decide(request: QuoteRequest, now: int) -> Decision:
        trace.append(f"decide:{request.quote_id}")
        return decide(request, now)

    def traced_sign(**kw: Any) -> SignedQuote:
        trace.append("sign")
        return sign(**kw)

    def traced_signed(quote: Quote, *rest: Any) -> None:
        trace.append(f"record:{quote.quote_id}")
        signed(quote, *rest)

    monkeypatch.setattr(executor, "_decide", traced_decide)
    monkeypatch.setattr(executor, "_sign", traced_sign)
    monkeypatch.setattr(executor, "_signed", traced_signed)
    return trace


async def test_a_read_goes_stage_by_stage_and_one_request_goes_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stages are the point (the caches): every decision, then every signature, then
    every record; a request alone goes through all of them before the next."""
    staged, _ = build(Recorder())
    trace = _traced(staged, monkeypatch)
    staged.request_many([request(f"q{n}") for n in range(3)], staged.clock())
    await drain(staged)
    assert trace == [
        "decide:q0", "decide:q1", "decide:q2", "sign", "sign", "sign",
        "record:q0", "record:q1", "record:q2",
    ]  # fmt: skip
    single, _ = build(Recorder())
    trace = _traced(single, monkeypatch)
    for n in range(2):
        single.request(request(f"q{n}"), single.clock())
    await drain(single)
    assert trace == ["decide:q0", "sign", "record:q0", "decide:q1", "sign", "record:q1"]
