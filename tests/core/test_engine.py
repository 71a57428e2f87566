"""The engine's quote path without a network: journal before send, shadow mode, store failure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from solver.core.inventory import Inventory
from solver.core.market import QuoteRequest
from solver.core.quoting import PipelineSettings, QuotePipeline, Route
from solver.core.lifecycle import TrackedQuote, Transition
from solver.core.state import MarketState
from solver.engine import Engine
from solver.errors import SolverError
from solver.protocol.amounts import WIRE
from solver.protocol.bus import QuoteRequestEvent
from solver.protocol.keys import SecretKey
from solver.protocol.quote_signing import QuoteSigner, SignedQuote
from solver.protocol.signing import parse_signed, verify_signed
from strategies.registry import load_strategy

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"


class Recorder:
    def __init__(self, fail: bool = False, fail_commit: bool = False) -> None:
        self.fail = fail
        self.fail_commit = fail_commit
        self.events: list[str] = []

    def record_quote(self, quote: TrackedQuote, signed: SignedQuote, request: QuoteRequest) -> None:
        if self.fail:
            raise SolverError("disk full")
        self.events.append(f"record:{quote.quote_id}")

    def record_transition(self, transition: Transition) -> None:
        self.events.append(f"{transition.quote_id}:{transition.new}")

    def record_request(
        self, request: QuoteRequest, outcome: str, at: datetime, reason: str | None = None
    ) -> bool:
        return False

    def commit(self) -> None:
        if self.fail_commit:
            raise SolverError("disk full at commit")
        self.events.append("commit")

    async def send_quote_response(self, params: dict[str, Any]) -> None:
        self.events.append(f"send:{params['quote_id']}")
        self.sent = params


def build(journal: Recorder, *, shadow: bool = False) -> Engine:
    state = MarketState(decimals={USDC: 6, NEAR: 24})
    state.set_salt(b"\x00\x01\x02\x03", NOW)
    state.set_price(USDC, 1.0, NOW)
    state.set_price(NEAR, 3.0, NOW)
    inventory = Inventory()
    inventory.set_confirmed({USDC: 10**12, NEAR: 10**30}, NOW)
    strategy = load_strategy("spread", {"spread_bps": 25})
    pipeline = QuotePipeline(
        PipelineSettings(), {(NEAR, USDC): Route(NEAR, USDC, strategy)}, inventory, state
    )
    signer = QuoteSigner(SecretKey(bytes(32)), "solver.sandbox", "intents.sandbox")
    return Engine(
        pipeline=pipeline,
        signer=signer,
        sender=journal,
        clock=lambda: NOW,
        journal=journal,
        shadow=shadow,
    )


def event(quote_id: str = "q1") -> QuoteRequestEvent:
    return QuoteRequestEvent.model_validate(
        {
            "quote_id": quote_id,
            "core_asset_identifier_in": NEAR,
            "core_asset_identifier_out": USDC,
            "exact_amount_in": str(10**24),
            "min_deadline_ms": 60_000,
        },
        context=WIRE,
    )


async def test_quote_is_recorded_before_it_is_sent_and_verifies() -> None:
    journal = Recorder()
    engine = build(journal)
    await engine.on_quote(event(), {})
    assert journal.events == ["record:q1", "commit", "send:q1"]
    verified = verify_signed(parse_signed(journal.sent["signed_data"]))
    assert verified.message.signer_id == "solver.sandbox"
    assert journal.sent["quote_output"] == {"amount_out": str(2_992_500)}  # 3 USD - 25 bps
    assert engine.inventory.reserved == {USDC: 2_992_500}


async def test_store_failure_sends_nothing_releases_and_pauses() -> None:
    journal = Recorder(fail=True)
    engine = build(journal)
    await engine.on_quote(event(), {})
    assert journal.events == []
    assert engine.inventory.reserved == {}
    assert engine.book.quotes == {}
    assert engine.state.paused["*"].startswith("store error")
    await engine.on_quote(event("q2"), {})
    assert engine.stats.skipped["paused"] == 1


async def test_shadow_mode_decides_but_signs_and_sends_nothing() -> None:
    journal = Recorder()
    engine = build(journal, shadow=True)
    await engine.on_quote(event(), {})
    assert journal.events == []
    assert engine.stats.shadow_quotes == 1 and engine.stats.quoted == 0
    assert engine.inventory.reserved == {}


async def test_relay_rejection_releases_the_reservation() -> None:
    journal = Recorder()
    engine = build(journal)
    await engine.on_quote(event(), {})
    engine.on_response("q1", False, "simulation failed: invalid salt")
    assert engine.inventory.reserved == {}
    assert journal.events[-1] == "q1:REJECTED"
    assert engine.state.salt_at is None  # forces a salt refresh before quoting again


async def test_a_burst_is_committed_once_then_sent() -> None:
    journal = Recorder()
    engine = build(journal)
    for i in range(5):
        engine.handle_quote(event(f"b{i}"), {})
    await engine.drain()
    assert journal.events == [f"record:b{i}" for i in range(5)] + ["commit"] + [
        f"send:b{i}" for i in range(5)
    ]


async def test_a_failed_commit_sends_nothing_and_rejects_the_batch() -> None:
    journal = Recorder(fail_commit=True)
    engine = build(journal)
    engine.handle_quote(event("c1"), {})
    engine.handle_quote(event("c2"), {})
    await engine.drain()
    assert not any(e.startswith("send") for e in journal.events)
    assert engine.inventory.reserved == {} and engine.book.quotes == {}
    assert engine.stats.outcomes["REJECTED"] == 2
    assert engine.state.paused["*"].startswith("store error")
