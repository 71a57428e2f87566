"""The bus dropping the connection mid-run is survived (issue 4, item 5), and a graceful stop
returns within the shutdown wait with every open quote terminal or reported (item 7)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from solver.core.lifecycle import QuoteState
from solver.core.quoting import PAUSED
from solver.io.bus_state import STOPPED
from tests.app.harness import E24, NEAR, USDC, eventually, live_bot


async def test_relay_drop_is_survived_and_every_later_request_answered(tmp_path: Path) -> None:
    async with live_bot(tmp_path) as bot:
        app, sandbox = bot.app, bot.sandbox
        assert len(await bot.quote(NEAR, USDC, exact_in=E24)) == 1

        await sandbox.stop_service("relay")
        await eventually(lambda: not app.ws.connected, "the bot to see the drop")
        assert sandbox.bus.connections == {}
        # The bot retries against the closed port meanwhile.
        await eventually(lambda: app.ws.counters.connect_failures >= 1, "a refused retry")
        await sandbox.start_service("relay")
        await eventually(lambda: app.ws.connected, "the bot to reconnect by itself", 5)
        assert app.ws.counters.reconnects == 1 and app.ws.counters.disconnects == 1
        (conn,) = sandbox.bus.connections.values()
        assert sorted(conn.subscriptions.values()) == ["quote", "quote_status"]

        # Every request after the reconnect is answered: one at a time, then five together.
        sent_before = app.executor.outbox.sent
        for _ in range(3):
            assert len(await bot.quote(NEAR, USDC, exact_in=E24)) == 1
        together = await asyncio.gather(*(bot.quote(NEAR, USDC, exact_in=E24) for _ in range(5)))
        assert [len(offers) for offers in together] == [1] * 5, bot.diagnosis()
        assert app.executor.outbox.sent - sent_before == 8
        assert app.executor.outbox.send_failed == 0 and app.desk.stats.skipped == {}

        # quote_status comes over the new connection: a won quote settles as usual.
        user = bot.new_user({NEAR: 10 * E24})
        await bot.take(user, together[0][0])
        await eventually(lambda: app.desk.stats.outcomes["SETTLED"] == 1, "the settlement")
        assert app.desk.stats.outcomes["WON"] == 1


async def test_graceful_stop_lets_won_quotes_settle_and_returns_at_once(tmp_path: Path) -> None:
    async with live_bot(tmp_path, shutdown_wait_s=60) as bot:
        app = bot.app
        (offer,) = await bot.quote(NEAR, USDC, exact_in=2 * E24)
        await bot.take(bot.new_user({NEAR: 10 * E24}), offer)
        elapsed = await bot.shutdown()  # the quote is still OPEN/WON here: settlement is 100 ms
        # run() waited for the settlement, not for the whole 60 s shutdown wait.
        assert elapsed < 30, elapsed
        assert app.desk.stats.outcomes["SETTLED"] == 1
        assert app.desk.book.quotes == {} and app.desk.inventory.reserved == {}
        assert app.ws.state == STOPPED and not app.ws.connected
        assert app.http.is_closed


async def test_graceful_stop_reports_quotes_still_open_after_the_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="solver.bot")
    async with live_bot(tmp_path, shutdown_wait_s=1.0) as bot:
        app = bot.app
        (offer,) = await bot.quote(NEAR, USDC, exact_in=2 * E24, min_deadline_ms=60_000)
        (quote,) = app.desk.book.quotes.values()
        started = time.monotonic()
        bot.stop.set()
        # While it drains, new requests are refused: nothing new is signed after stop.
        assert await bot.unanswered(NEAR, USDC, exact_in=E24) == []
        assert app.desk.stats.skipped == {PAUSED: 1}
        await asyncio.wait_for(asyncio.shield(bot.task), 30)
        elapsed = time.monotonic() - started
        # The whole 1 s wait, and then it stops: not at the quote's deadline, a minute away.
        assert 1.0 <= elapsed < 30, elapsed
        # Nobody took it and its deadline is a minute away: still OPEN, and reported.
        assert quote.state is QuoteState.OPEN and app.desk.book.get(quote.quote_id) is quote
        assert app.desk.inventory.reserved == {USDC: int(offer["amount_out"])}
        (stopped,) = [
            r.getMessage() for r in caplog.records if r.getMessage().startswith("stopped")
        ]
        assert "open=1" in stopped and "quoted=1" in stopped, stopped
        assert app.ws.state == STOPPED
