"""Alerts reach a person, end to end (issue 14): the live bot against the real sandbox, with
``SOLVER_ALERT_URLS`` pointing Apprise's ``json://`` plugin at a real HTTP sink on 127.0.0.1.

One message when an incident opens, one when it recovers, nothing for the repeats in between:
a reconciliation mismatch (7 USDC taken from the ledger behind the bot's back) and its
``resume``; the ledger RPC down beyond ``risk.max_stale_s`` and the node coming back. Nothing
of our own network code is mocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from solver.cli import main
from solver.core.pauses import GLOBAL
from tests.app.harness import E6, USDC, LiveBot, eventually, live_bot
from tests.io.http_sink import HttpSink

TOKEN = "alerts-test-token"
OVERRIDES = {
    "metrics.listen": "127.0.0.1:0",
    "chain.balance_refresh_ms": 300,
    "chain.balance_max_age_ms": 1500,
    "chain.salt_max_age_ms": 60_000,
    "risk.max_stale_s": 2.0,
    "alerts.name": "bot-a",
    "alerts.retry_delays_s": [0.2],
}
EXPECTED_ERRORS = (
    "PAUSED: reconciliation",
    "ALERT: reconciliation",
    "PAUSED: stale_data",
    "ALERT: stale_data",
)


@pytest.fixture
async def sink() -> AsyncIterator[HttpSink]:
    server = await HttpSink().start()
    yield server
    await server.stop()


def titles(sink: HttpSink) -> list[str]:
    return [m["title"] for m in sink.messages()]


async def settled(sink: HttpSink, count: int, what: str, quiet_s: float = 1.0) -> list[Any]:
    """Wait for ``count`` messages, then make sure no other arrives for ``quiet_s``."""
    await eventually(lambda: len(sink.messages()) >= count, what, 10)
    await asyncio.sleep(quiet_s)
    messages = sink.messages()
    assert len(messages) == count, titles(sink)
    return messages


async def metric(bot: LiveBot, text: str) -> None:
    control = bot.app.control
    assert control is not None

    async def scrape() -> str:
        bot.tick()
        return (await bot.http.get(f"{control.url}/metrics")).text

    deadline = asyncio.get_running_loop().time() + 3
    while text not in (body := await scrape()):
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.1)


async def test_one_message_per_incident_and_one_on_recovery(
    tmp_path: Path, sink: HttpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    monkeypatch.setenv("SOLVER_ALERT_URLS", sink.url("/hook/secret-path"))
    async with live_bot(tmp_path, overrides=OVERRIDES, allowed_errors=EXPECTED_ERRORS) as bot:
        app = bot.app
        assert app.control is not None
        url = app.control.url

        # 1. A reconciliation mismatch: one message, however many snapshots follow.
        bot.sandbox.ledger.balances[app.account][USDC] -= 7 * E6
        await eventually(lambda: GLOBAL in app.desk.pauses.as_dict(), "the mismatch pause", 5)
        bot.overstated.clear()  # the harness saw the theft before the bot did, rightly
        (opened,) = await settled(sink, 1, "the mismatch alert", quiet_s=1.5)  # ~5 snapshots
        assert (opened["title"], opened["type"]) == ("[bot-a] ALERT: reconciliation", "failure")
        assert str(-7 * E6) in opened["message"] and "opened at" in opened["message"]
        assert sink.received[0].path == "/hook/secret-path"

        # 2. resume taking the balances as they are (a plain resume refuses while the gap
        # holds): one recovery message.
        assert await asyncio.to_thread(main, ["resume", "--url", url]) == 1
        assert await asyncio.to_thread(main, ["resume", "--accept-balances", "--url", url]) == 0
        messages = await settled(sink, 2, "the recovery message")
        assert (messages[1]["title"], messages[1]["type"]) == (
            "[bot-a] RESOLVED: reconciliation",
            "success",
        )
        assert "open for" in messages[1]["message"]

        # 3. The ledger RPC down beyond risk.max_stale_s: one message, however long it stays
        # down (the kill switch re-checks every tick).
        bot.sandbox.rpc_faults.down = True
        await eventually(
            lambda: GLOBAL in app.desk.pauses.as_dict(), "the stale-data kill switch", 6
        )
        messages = await settled(sink, 3, "the stale-data alert", quiet_s=1.5)
        assert messages[2]["title"] == "[bot-a] ALERT: stale_data"
        assert "inputs" in messages[2]["message"]

        # 4. The node comes back: one recovery message, which says quoting stays paused.
        bot.sandbox.rpc_faults.down = False
        messages = await settled(sink, 4, "the stale-data recovery")
        assert messages[3]["title"] == "[bot-a] RESOLVED: stale_data"
        assert "fresh again" in messages[3]["message"] and "solver resume" in messages[3]["message"]
        assert GLOBAL in app.desk.pauses.as_dict()

        # The resume lifts the pause: recovered already, so no second message.
        assert await asyncio.to_thread(main, ["resume", "--url", url]) == 0
        await settled(sink, 4, "nothing more", quiet_s=0.5)
        assert app.notifier.tracker.open_incidents() == []
        await metric(bot, 'solver_notifications_total{result="sent"} 4.0')
        await metric(bot, 'solver_notifications_total{result="failed"} 0.0')


async def test_a_short_bus_outage_says_nothing_and_a_long_one_is_told_with_its_url(
    tmp_path: Path, sink: HttpSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``alerts.bus_down_after_s``: reconnecting within it is normal; beyond, one message
    naming the relay, and one when it is back."""
    monkeypatch.setenv("SOLVER_ALERT_URLS", sink.url())
    overrides = {"alerts.bus_down_after_s": 1.0}
    async with live_bot(tmp_path, overrides=overrides, allowed_errors=["bus_disconnected"]) as bot:
        app, sandbox = bot.app, bot.sandbox
        await sandbox.stop_service("relay")
        await eventually(lambda: not app.ws.connected, "the bot to see the outage", 5)
        await sandbox.start_service("relay")
        await eventually(lambda: app.ws.connected, "the bot to reconnect", 10)
        await asyncio.sleep(1.2)
        assert sink.messages() == []  # back within bus_down_after_s: nothing to tell

        await sandbox.stop_service("relay")
        (opened,) = await settled(sink, 1, "the outage alert", quiet_s=0.5)
        assert opened["title"] == "[solver] ALERT: bus_disconnected"
        assert app.ws.url in opened["message"]
        await sandbox.start_service("relay")
        messages = await settled(sink, 2, "the outage recovery", quiet_s=0.5)
        assert messages[1]["title"] == "[solver] RESOLVED: bus_disconnected"
        assert "restored after" in messages[1]["message"]
