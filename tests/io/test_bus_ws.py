"""BusWsClient against the sandbox relay's real websocket (protocol-notes 6; STYLE 9): quotes in,
answers out, replies matched, and a relay restart survived without help."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sandbox.server import Sandbox
from solver.errors import RemoteError, TransportError
from solver.io.bus_rpc import BusRpcClient
from solver.io.bus_ws import BusWsClient
from solver.protocol.bus import IntentStatus, PublishStatus, QuoteStatusEvent
from solver.protocol.keys import SecretKey
from solver.protocol.quote_request import QuoteRequest
from tests.io.peers import wait_for
from tests.sandbox.scripted import NEAR, USDC, ScriptedSolver, sandbox_config, user_item

E6 = 10**6
E24 = 10**24
FAST = {"backoff_initial_s": 0.05, "backoff_max_s": 0.2, "backoff_seed": 1}


@dataclass
class Bot:
    """A scripted strategy on top of the client: answers at 3 USDC per NEAR."""

    solver: ScriptedSolver
    tamper: Callable[[dict[str, Any]], None] | None = None
    quotes: list[QuoteRequest] = field(default_factory=list)
    statuses: list[QuoteStatusEvent] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    responses: list[tuple[str, bool, str | None]] = field(default_factory=list)
    client: BusWsClient | None = None

    async def on_quote(self, request: QuoteRequest) -> None:
        self.quotes.append(request)
        side = "exact_amount_in" if request.exact_in else "exact_amount_out"
        answer = self.solver.build_answer(
            {
                "quote_id": request.quote_id,
                "core_asset_identifier_in": request.asset_in,
                "core_asset_identifier_out": request.asset_out,
                side: str(request.amount),
                "min_deadline_ms": request.min_deadline_ms,
            }
        )
        if self.tamper is not None:
            self.tamper(answer)
        assert self.client is not None
        self.client.send_quote_response(answer)

    def on_response(self, quote_id: str, ok: bool, reason: str | None) -> None:
        self.responses.append((quote_id, ok, reason))


def make_bot(sb: Sandbox, **kwargs: Any) -> Bot:
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    sb.ledger.deposit(account, USDC, 1_000 * E6)
    sb.ledger.deposit(account, NEAR, 1_000 * E24)
    solver = ScriptedSolver(sb.urls()["relay_ws"], key, sb.ledger, rate_num=3 * E6, rate_den=E24)
    tamper = kwargs.pop("tamper", None)
    bot = Bot(solver, tamper)
    bot.client = BusWsClient(
        sb.urls()["relay_ws"],
        on_quote=bot.on_quote,
        on_quote_status=bot.statuses.append,
        on_state=bot.states.append,
        on_response=bot.on_response,
        **{**FAST, **kwargs},
    )
    return bot


@contextlib.asynccontextmanager
async def running(client: BusWsClient) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(client.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


QUOTE = {
    "core_asset_identifier_in": NEAR,
    "core_asset_identifier_out": USDC,
    "exact_amount_in": str(2 * E24),
    "min_deadline_ms": 30_000,
}


async def test_quote_answered_published_and_status_delivered(sandbox: Sandbox) -> None:
    bot = make_bot(sandbox)
    assert bot.client is not None
    async with running(bot.client), BusRpcClient(sandbox.urls()["relay_rpc"]) as rpc:
        await wait_for(lambda: bot.client is not None and bot.client.connected)
        (offer,) = await rpc.quote(QUOTE)
        assert offer.amount_in == 2 * E24 and offer.amount_out == 6 * E6
        (event,) = bot.quotes
        assert event.exact_in and event.amount == 2 * E24 and event.min_deadline_ms == 30_000
        assert event.partner_id == "sandbox"
        await wait_for(lambda: len(bot.responses) == 1)
        assert bot.responses == [(event.quote_id, True, None)]

        user = SecretKey.generate()
        sandbox.ledger.deposit(user.public_key.implicit_account_id(), NEAR, 10 * E24)
        item = user_item(user, sandbox.ledger, {NEAR: -2 * E24, USDC: 6 * E6})
        published = await rpc.publish_intent([offer.quote_hash], item)
        assert published.status is PublishStatus.OK and published.intent_hash
        await wait_for(lambda: len(bot.statuses) == 1)
        (status,) = bot.statuses
        assert status.quote_hash == offer.quote_hash
        assert status.intent_hash == published.intent_hash
        await wait_for(lambda: sandbox.bus.intents[offer.quote_hash].status == "SETTLED")
        assert (await rpc.get_status(published.intent_hash)).status is IntentStatus.SETTLED
    counters = bot.client.counters
    assert counters.quotes_in == 1 and counters.quote_statuses_in == 1
    assert counters.responses_ok == 1
    assert counters.bad_frames == {} and counters.reconnects == 0
    assert bot.states == ["connecting", "connected", "stopped"]
    assert not bot.client.connected


async def test_refused_answer_is_reported_with_the_relays_reason(sandbox: Sandbox) -> None:
    def wrong_output(answer: dict[str, Any]) -> None:
        answer["quote_output"] = {"amount_out": "1"}

    bot = make_bot(sandbox, tamper=wrong_output)
    assert bot.client is not None
    async with running(bot.client), BusRpcClient(sandbox.urls()["relay_rpc"]) as rpc:
        await wait_for(lambda: bot.client is not None and bot.client.connected)
        assert await rpc.quote(QUOTE) == []
        await wait_for(lambda: len(bot.responses) == 1)
        ((quote_id, ok, reason),) = bot.responses
        assert quote_id == bot.quotes[0].quote_id and not ok
        assert reason is not None and reason.startswith("quote does not match the request")
    assert bot.client.counters.responses_failed == 1


async def test_relay_restart_reconnects_and_resubscribes(sandbox: Sandbox) -> None:
    bot = make_bot(sandbox)
    client = bot.client
    assert client is not None
    async with running(client), BusRpcClient(sandbox.urls()["relay_rpc"]) as rpc:
        await wait_for(lambda: client.connected)
        await sandbox.stop_service("relay")
        await wait_for(lambda: not client.connected)
        # A refused attempt while the relay is away (counted, not slept for).
        await wait_for(lambda: client.counters.connect_failures >= 1)
        await sandbox.start_service("relay")
        await wait_for(lambda: client.connected)
        assert client.counters.reconnects == 1 and client.counters.connects == 2
        assert client.counters.connect_failures >= 1
        (offer,) = await rpc.quote(QUOTE)
        assert offer.amount_out == 6 * E6
        assert len(bot.quotes) == 1
    assert bot.states[:4] == ["connecting", "connected", "disconnected", "connecting"]
    assert bot.states[-2:] == ["connected", "stopped"]


async def test_send_without_a_connection_is_a_transport_error(sandbox: Sandbox) -> None:
    bot = make_bot(sandbox)
    assert bot.client is not None
    with pytest.raises(TransportError):
        bot.client.send_quote_response({"quote_id": "q"})


async def test_stop_while_the_relay_is_unreachable(sandbox: Sandbox) -> None:
    bot = make_bot(sandbox)
    assert bot.client is not None
    await sandbox.stop_service("relay")
    async with running(bot.client) as task:
        await wait_for(lambda: bot.client is not None and bot.client.counters.connect_failures >= 2)
    assert task.done() and bot.client.state == "stopped"


async def test_bearer_key_and_asset_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_IO_WS_KEY", "k3y")
    config = sandbox_config(api_key_env="TEST_IO_WS_KEY", asset_field_prefix="defuse")
    async with Sandbox(config, run_takers=False) as sb:
        anonymous = make_bot(sb, asset_field_prefix="defuse")
        assert anonymous.client is not None
        with pytest.raises(RemoteError) as denied:
            await asyncio.wait_for(anonymous.client.run(asyncio.Event()), 5)
        assert denied.value.reason == "unauthorized" and denied.value.code in (401, 403)

        bot = make_bot(sb, api_key="k3y", asset_field_prefix="defuse")
        assert bot.client is not None
        rpc = BusRpcClient(sb.urls()["relay_rpc"], api_key="k3y", asset_field_prefix="defuse")
        async with running(bot.client), rpc:
            await wait_for(lambda: bot.client is not None and bot.client.connected)
            (offer,) = await rpc.quote(QUOTE)
            assert offer.core_asset_identifier_in == NEAR and offer.amount_out == 6 * E6
            assert bot.quotes[0].asset_out == USDC
