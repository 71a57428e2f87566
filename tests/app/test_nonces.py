"""Nonces never repeat across 100k quotes (issue 4, item 3).

The real quote path (desk decision -> executor: nonce -> NEP-413 sign -> send) runs 100,000
times in-process against a collecting sender, on a clock that moves 1 ms per request, with the
salt rotated every 20,000 quotes; every nonce that left is collected in a set. Each quote is
then refused by the relay (it ends), as many are in a long live run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from solver.core import events as ev
from solver.core.clock import MILLI, MINUTE, from_micros, micros
from solver.core.desk import Desk, DeskSettings
from solver.core.lifecycle import Quote
from solver.core.market import MarketView, QuoteRequest
from solver.core.quoting import PipelineSettings, Route
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
from solver.protocol.encoding import b64decode
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceLayout, NonceSequence, QuoteNonces, new_nonce, parse_nonce
from solver.protocol.quote_signing import QuoteSigner, SignedQuote
from solver.runtime.executor import Executor
from solver.runtime.ports import Ports, Refresh
from tests.app.harness import E6, E24, NEAR, USDC

QUOTES = 100_000
T0 = micros(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))


class FixedRate:
    """3 USDC per wNEAR, exact-in only: the cheapest strategy, so the test measures the path."""

    def quote(self, request: QuoteRequest, market: MarketView) -> int | None:
        return request.amount * 3 * E6 // E24


class Collect:
    """The engine's ``Sender``: keeps the nonce of every answer that was sent."""

    def __init__(self) -> None:
        self.nonces: list[str] = []

    def send_answer(self, quote: Quote, signed: SignedQuote) -> None:
        self.nonces.append(signed.signed_data["payload"]["nonce"])

    def corked(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def build(layout: NonceLayout, clock: Callable[[], int]) -> tuple[Desk, Executor, Collect]:
    settings = DeskSettings(
        pipeline=PipelineSettings(
            balance_max_age_s=1e9,
            price_max_age_s=1e9,
            salt_max_age_s=1e9,
            max_open_exposure_usd=float("inf"),
            max_quotes_per_s=1e9,
            strategy_budget_ms=1e3,  # a GC pause must not turn into a skip here
        )
    )
    desk = Desk(settings, {(NEAR, USDC): Route(NEAR, USDC, FixedRate())}, {USDC: 6, NEAR: 24})
    desk.receive(ev.BalancesSeen({USDC: 10**30, NEAR: 0}, T0), T0)
    for asset, usd in ((USDC, 1.0), (NEAR, 3.0)):
        desk.receive(ev.PriceSeen(asset, usd, T0), T0)
    key = SecretKey.generate()
    sender = Collect()
    http = httpx.AsyncClient()
    tasks = Tasks()
    ledger = LedgerClient("http://127.0.0.1:9", "intents.sandbox", client=http)
    account = key.public_key.implicit_account_id()
    executor = Executor(
        desk,
        Ports(
            signer=QuoteSigner(key, account, "intents.sandbox"),
            nonces=QuoteNonces(layout, NonceSequence.unregistered()),
            journal=None,
            sender=sender,
            statuses=BusStatusSource(BusRpcClient("http://127.0.0.1:9", client=http), tasks),
            nonce_oracle=LedgerNonceOracle(ledger, account, tasks),
            balances=Refresh(lambda: None),
            salt=Refresh(lambda: None),
            alerts=LoggedAlerts(None),
            metrics=Metrics(),
            loop=RunningLoop(),
            clock=clock,
        ),
    )
    return desk, executor, sender


async def test_nonces_never_repeat_across_100k_quotes() -> None:
    layout: NonceLayout = "salted"  # the configured default
    now = [T0]
    desk, executor, sender = build(layout, lambda: now[0])
    salts = [bytes.fromhex(s) for s in ("0badc0de", "5a170002", "5a170003", "5a170004", "5a170005")]
    request = QuoteRequest("q", NEAR, USDC, True, E24, 60_000)
    for i in range(QUOTES):
        if i % 20_000 == 0:
            executor.feed(ev.SaltSeen(salts[i // 20_000], now[0]), now[0])
        now[0] = T0 + i * MILLI
        # One request, asked again and again: each answer is a new quote with a new nonce.
        executor.request(request, now[0])
        while not executor.idle:
            await asyncio.sleep(0)
        # It ran out unused: the book and reservations stay small.
        executor.feed(ev.RelayReplied("q", False, "expired"), now[0])

    assert executor.outbox.sent == QUOTES, desk.stats.skipped
    assert len(sender.nonces) == QUOTES
    assert len(set(sender.nonces)) == QUOTES  # not one repeat
    assert desk.stats.outcomes["REJECTED"] == QUOTES and not desk.book.quotes
    # Each nonce carries the salt that was current when it was signed.
    for i in (0, 19_999, 20_000, QUOTES - 1):
        parsed = parse_nonce(b64decode(sender.nonces[i], length=32, what="nonce"))
        assert (parsed.layout, parsed.salt) == (layout, salts[i // 20_000])


def test_versioned_nonces_never_repeat_across_100k_deadlines() -> None:
    """The deployed V1 layout: salt, the deadline in ns and 15 random bytes; even with the same
    salt and the same deadline for every quote, no two of 100k nonces are equal."""
    salt, deadline = bytes.fromhex("0badc0de"), from_micros(T0 + MINUTE)
    nonces = {new_nonce("versioned", salt, deadline) for _ in range(QUOTES)}
    assert len(nonces) == QUOTES
    parsed = parse_nonce(next(iter(nonces)))
    assert (parsed.layout, parsed.salt, parsed.deadline) == ("versioned", salt, deadline)
