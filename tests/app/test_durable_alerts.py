"""Alerts outlive the process (issue 24, part 7): ``solver run`` as a child process, killed
with real signals, delivering through Apprise's ``json://`` plugin to a real HTTP sink.

- an incident open when the bot dies (``kill -9``) gets its current state after the restart:
  RESOLVED when it no longer holds, or a reminder while it does;
- the restart after a ``kill -9`` says so (``unclean_restart``, naming the dead pid); a
  restart after SIGTERM does not;
- a change folded by the rate limit (not yet sent) is sent by the next run, not dropped.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.app.alert_helpers import child_setup, titles, told
from tests.app.harness import E6, E24, NEAR, USDC, LiveBot, eventually, live_bot
from tests.app.test_restart import Child, bot_process, read, sigkill
from tests.io.http_sink import HttpSink
from tests.sandbox.scripted import rpc


@pytest.fixture
async def sink() -> AsyncIterator[HttpSink]:
    server = await HttpSink().start()
    yield server
    await server.stop()


async def sigterm(child: Child) -> None:
    child.process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(child.process.wait(), 30) == 0, child.output()


NO_HALT = {
    "risk.halt_on_mismatch": False,
    "alerts.name": "bot-d",
    "alerts.retry_delays_s": [0.2],
    "log.level": "INFO",
}


async def test_an_incident_open_at_kill_9_is_resolved_after_the_restart(
    tmp_path: Path, sink: HttpSink
) -> None:
    async with child_setup(tmp_path, sink, NO_HALT) as (sandbox, config, env, account):
        async with bot_process(sandbox, config, env, tmp_path / "run1.log") as first:
            sandbox.ledger.balances[account][USDC] -= 7 * E6  # behind the bot's back
            await told(sink, "[bot-d] ALERT: reconciliation", child=first.output)
            dead_pid = first.process.pid
            await sigkill(sandbox, first)
        mode = os.stat(f"{tmp_path / 'solver.sqlite'}.alerts.json").st_mode
        assert mode & 0o077 == 0, oct(mode)  # the spool beside the store is owner-only
        sandbox.ledger.balances[account][USDC] += 7 * E6  # put back while it was down
        seen = len(sink.messages())
        async with bot_process(sandbox, config, env, tmp_path / "run2.log") as second:
            unclean = await told(sink, "[bot-d] ALERT: unclean_restart", seen, second.output)
            assert f"pid {dead_pid}" in unclean["message"], unclean
            assert "last seen alive at" in unclean["message"], unclean
            resolved = await told(sink, "[bot-d] RESOLVED: reconciliation", seen, second.output)
            # The opening was carried over the restart: it says how long it was open.
            assert "open for" in resolved["message"], resolved
            await sigterm(second)
        seen = len(sink.messages())
        async with bot_process(sandbox, config, env, tmp_path / "run3.log") as third:
            await asyncio.sleep(1.0)  # a clean stop before: nothing to say at this start
            assert titles(sink)[seen:] == [], third.output()[-3000:]
            await sigterm(third)


async def test_an_incident_still_holding_gets_a_reminder_after_kill_9(
    tmp_path: Path, sink: HttpSink
) -> None:
    """``risk.halt_on_mismatch`` (the default): the pause is in the journal, so after the
    restart the incident still holds: a reminder, not a silence."""
    overrides = {**NO_HALT, "risk.halt_on_mismatch": True}
    async with child_setup(tmp_path, sink, overrides) as (sandbox, config, env, account):
        async with bot_process(sandbox, config, env, tmp_path / "run1.log") as first:
            sandbox.ledger.balances[account][USDC] -= 7 * E6
            await told(sink, "[bot-d] ALERT: reconciliation", child=first.output)
            await sigkill(sandbox, first)
        seen = len(sink.messages())
        async with bot_process(sandbox, config, env, tmp_path / "run2.log") as second:
            reminder = await told(sink, "[bot-d] ALERT: reconciliation", seen, second.output)
            assert "still open after a restart" in reminder["message"], reminder
            await asyncio.sleep(1.0)
            assert "[bot-d] RESOLVED: reconciliation" not in titles(sink)[seen:]
            await sigterm(second)


async def test_a_change_folded_by_the_rate_limit_is_sent_by_the_next_run(
    tmp_path: Path, sink: HttpSink
) -> None:
    """``burst: 1``: the recovery right after the opening waits for a token (an hour away);
    a stop before then used to drop it ("rate-limited change(s) never sent")."""
    overrides = {**NO_HALT, "alerts.burst": 1, "alerts.per_hour": 1}
    async with child_setup(tmp_path, sink, overrides) as (sandbox, config, env, account):
        async with bot_process(sandbox, config, env, tmp_path / "run1.log") as first:
            sandbox.ledger.balances[account][USDC] -= 7 * E6
            await told(sink, "[bot-d] ALERT: reconciliation", child=first.output)
            sandbox.ledger.balances[account][USDC] += 7 * E6  # reconciles: rate limited
            await eventually(
                lambda: "rate limited" in first.output(), "the recovery to be held back", 10
            )
            assert "[bot-d] RESOLVED: reconciliation" not in titles(sink)
            await sigterm(first)
        seen = len(sink.messages())
        async with bot_process(sandbox, config, env, tmp_path / "run2.log") as second:
            resolved = await told(sink, "[bot-d] RESOLVED: reconciliation", seen, second.output)
            assert "resolved at" in resolved["message"], resolved
            await sigterm(second)


async def test_a_store_error_the_store_could_not_record_reaches_the_alerts_table(
    tmp_path: Path, sink: HttpSink
) -> None:
    """The store refuses writes (another process holds its write lock past the busy timeout):
    the ``store_error`` pause cannot be journaled, so before the spool it was in no table
    after the bot died. Now the next start records it in ``alerts`` and resolves it."""
    async with child_setup(tmp_path, sink, NO_HALT) as (sandbox, config, env, _):
        db = tmp_path / "solver.sqlite"
        async with bot_process(sandbox, config, env, tmp_path / "run1.log") as first:
            blocker = sqlite3.connect(db, timeout=1, isolation_level=None)
            try:
                blocker.execute("BEGIN IMMEDIATE")  # the bot's next write waits, then fails
                async with httpx.AsyncClient(timeout=30) as http:
                    await rpc(http, sandbox.urls()["relay_rpc"], "quote", {
                        "core_asset_identifier_in": NEAR, "core_asset_identifier_out": USDC,
                        "exact_amount_in": str(E24), "min_deadline_ms": 60_000, "wait_ms": 300,
                    })  # fmt: skip
                await told(sink, "[bot-d] ALERT: store_error", child=first.output)
                await sigkill(sandbox, first)
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
        assert read(db, "SELECT kind FROM alerts WHERE kind = 'store_error'") == []
        seen = len(sink.messages())
        async with bot_process(sandbox, config, env, tmp_path / "run2.log") as second:
            resolved = await told(sink, "[bot-d] RESOLVED: store_error", seen, second.output)
            assert "no longer holds after a restart" in resolved["message"], resolved
            rows = read(db, "SELECT detail, resolved_at FROM alerts WHERE kind = 'store_error'")
            assert len(rows) == 1 and rows[0][1] is not None, rows
            assert "not recorded" in rows[0][0], rows
            await sigterm(second)


async def heartbeat(bot: LiveBot) -> float:
    control = bot.app.control
    assert control is not None
    body = (await bot.http.get(f"{control.url}/metrics")).text
    found = re.search(r"^solver_heartbeat_timestamp_seconds ([0-9.e+]+)$", body, re.M)
    assert found is not None, body
    return float(found[1])


@pytest.mark.parametrize("shadow", [False, True], ids=["live", "shadow"])
async def test_the_heartbeat_metric_follows_the_ticker(tmp_path: Path, shadow: bool) -> None:
    """What ``SolverHeartbeatStale`` watches: near the wall clock, and moving (shadow mode,
    which has no store and no spool, too)."""
    overrides = {"metrics.listen": "127.0.0.1:0"}
    async with live_bot(tmp_path, overrides=overrides, shadow=shadow) as bot:
        first = await heartbeat(bot)
        assert abs(first - time.time()) < 30, first
        deadline = time.monotonic() + 5
        while (latest := await heartbeat(bot)) <= first:
            assert time.monotonic() < deadline, "the heartbeat does not move"
            await asyncio.sleep(0.05)
        assert latest > first
