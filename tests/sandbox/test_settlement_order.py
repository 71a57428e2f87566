"""The sandbox's order of events after a publish is the real relay's (issue 23; protocol-notes 6).

``quote_status`` is the notification that a solver's quote *was executed*: when it arrives, the
ledger has moved and ``get_status`` answers SETTLED. A batch that fails in execution sends none.
The fault knob (:mod:`sandbox.notify_faults`) drops or delays chosen notifications while the
batch still settles. The settlement delay is long (1.2 s) so that the old order (notify at
TX_BROADCASTED, execute 0.6 s later) would be seen by every check here, even on a busy machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.sandbox.scripted import NEAR, USDC, ScriptedSolver, rpc, sandbox_config, user_item

E6, E24 = 10**6, 10**24
DELAY_MS = 1200


class WatchingSolver(ScriptedSolver):
    """Records, the moment each ``quote_status`` arrives, its balances on the ledger and the
    relay's answer to ``get_status`` for the notified intent."""

    def __init__(self, *args: Any, relay_rpc: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.relay_rpc = relay_rpc
        self.seen_at_notice: list[tuple[list[int], str]] = []
        self.notified = asyncio.Event()
        self.on_status = self._look

    async def _look(self, data: dict[str, Any]) -> None:
        balances = self.ledger.mt_batch_balance_of(self.account, [NEAR, USDC])
        async with httpx.AsyncClient(timeout=10) as client:
            body = await rpc(
                client, self.relay_rpc, "get_status", {"intent_hash": data["intent_hash"]}
            )
        self.seen_at_notice.append((balances, body["result"]["status"]))
        self.notified.set()


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(sandbox_config(settlement_delay_ms=DELAY_MS), run_takers=False) as sb:
        yield sb


async def watching_solver(sb: Sandbox, usdc: int) -> WatchingSolver:
    key = SecretKey.generate()
    sb.ledger.deposit(key.public_key.implicit_account_id(), USDC, usdc)
    solver = WatchingSolver(
        sb.urls()["relay_ws"],
        key,
        sb.ledger,
        rate_num=3 * E6,
        rate_den=E24,
        relay_rpc=sb.urls()["relay_rpc"],
    )
    await solver.start()
    return solver


async def quote_and_publish(sb: Sandbox, client: httpx.AsyncClient) -> str:
    """A fresh user sells 2 NEAR for 6 USDC against the best quote; the intent hash."""
    url = sb.urls()["relay_rpc"]
    user = SecretKey.generate()
    sb.ledger.deposit(user.public_key.implicit_account_id(), NEAR, 2 * E24)
    offers = await rpc(
        client,
        url,
        "quote",
        {
            "core_asset_identifier_in": NEAR,
            "core_asset_identifier_out": USDC,
            "exact_amount_in": str(2 * E24),
            "min_deadline_ms": 60000,
        },
    )
    best = offers["result"][0]
    item = user_item(user, sb.ledger, {NEAR: -2 * E24, USDC: 6 * E6})
    published = await rpc(
        client, url, "publish_intent", {"quote_hashes": [best["quote_hash"]], "signed_data": item}
    )
    assert published["result"]["status"] == "OK", published
    intent_hash: str = published["result"]["intent_hash"]
    return intent_hash


async def final_status(client: httpx.AsyncClient, url: str, intent_hash: str) -> dict[str, Any]:
    """Polls until the intent leaves PENDING / TX_BROADCASTED (at most 30 s)."""
    for _ in range(1500):
        result: dict[str, Any] = (
            await rpc(client, url, "get_status", {"intent_hash": intent_hash})
        )["result"]
        if result["status"] not in ("PENDING", "TX_BROADCASTED"):
            return result
        await asyncio.sleep(0.02)
    raise AssertionError(f"{intent_hash} never settled nor failed")


async def test_quote_status_arrives_after_execution_with_balances_moved(
    sandbox: Sandbox,
) -> None:
    solver = await watching_solver(sandbox, 100 * E6)
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            intent_hash = await quote_and_publish(sandbox, client)
            await asyncio.wait_for(solver.notified.wait(), 30)
        balances, status = solver.seen_at_notice[0]
        assert balances == [2 * E24, 94 * E6], "notified before the ledger moved"
        assert status == "SETTLED"
        assert solver.statuses[0]["intent_hash"] == intent_hash
    finally:
        await solver.stop()


async def test_a_batch_that_fails_in_execution_sends_no_quote_status(sandbox: Sandbox) -> None:
    # The solver can pay one 6 USDC quote, not two: both pass simulation at publish time, the
    # second fails once the first executed.
    solver = await watching_solver(sandbox, 6 * E6)
    url = sandbox.urls()["relay_rpc"]
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            first = await quote_and_publish(sandbox, client)
            second = await quote_and_publish(sandbox, client)
            assert (await final_status(client, url, first))["status"] == "SETTLED"
            failed = await final_status(client, url, second)
            assert failed["status"] == "NOT_FOUND_OR_NOT_VALID", failed
            assert failed["status_details"] == "FAILED"
            await asyncio.wait_for(solver.notified.wait(), 30)
        # Notifications leave right after their batch executed, so both outcomes are decided.
        assert sandbox.bus.stats.quote_status_sent == 1
        assert [s["intent_hash"] for s in solver.statuses] == [first]
    finally:
        await solver.stop()


async def test_fault_knob_drops_then_lets_through(sandbox: Sandbox) -> None:
    solver = await watching_solver(sandbox, 100 * E6)
    url = sandbox.urls()["relay_rpc"]
    rule = sandbox.bus.notify_faults.drop(solver=solver.account, count=1)
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            silent = await quote_and_publish(sandbox, client)
            assert (await final_status(client, url, silent))["status"] == "SETTLED"
            assert sandbox.bus.stats.quote_status_dropped == 1 and rule.applied == 1
            heard = await quote_and_publish(sandbox, client)
            await asyncio.wait_for(solver.notified.wait(), 30)
        assert [s["intent_hash"] for s in solver.statuses] == [heard]
        assert solver.seen_at_notice[0][0] == [4 * E24, 88 * E6]
    finally:
        await solver.stop()


async def test_fault_knob_delays_a_notification(sandbox: Sandbox) -> None:
    solver = await watching_solver(sandbox, 100 * E6)
    url = sandbox.urls()["relay_rpc"]
    sandbox.bus.notify_faults.delay(1.0)
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            intent_hash = await quote_and_publish(sandbox, client)
            assert (await final_status(client, url, intent_hash))["status"] == "SETTLED"
            assert solver.statuses == [], "a delayed notification came at once"
            await asyncio.wait_for(solver.notified.wait(), 30)
        assert solver.statuses[0]["intent_hash"] == intent_hash
        assert sandbox.bus.stats.quote_status_sent == 1
    finally:
        await solver.stop()


def test_fault_knob_refuses_bad_rules() -> None:
    from sandbox.notify_faults import NotifyFaults

    faults = NotifyFaults()
    with pytest.raises(ValueError, match="count must be >= 1"):
        faults.drop(count=0)
    with pytest.raises(ValueError, match="seconds must be >= 0"):
        faults.delay(-1.0)
    assert faults.verdict("anyone", "hash") is None
