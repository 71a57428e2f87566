"""What the bot checks and refreshes on its own (issue 24, part 8), against the real sandbox.

- A valid key the account does not hold: ``solver run`` (a child process) refuses to start
  with exit code 2, a line naming the account and the key's public part (never the secret),
  and one ``key_not_registered`` alert; a restart while it still holds sends nothing new; the
  start that finds the key resolves it.
- The salt is refreshed as soon as the ledger is back after an outage, not at its next period.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from solver.core.pauses import GLOBAL
from solver.protocol.keys import SecretKey
from tests.app.alert_helpers import child_setup, told
from tests.app.harness import eventually, live_bot
from tests.app.test_restart import bot_process
from tests.io.http_sink import HttpSink

NAMED = "solver.sandbox"


@pytest.fixture
async def sink() -> AsyncIterator[HttpSink]:
    server = await HttpSink().start()
    yield server
    await server.stop()


async def run_once(config: Path, env: dict[str, str], log: Path) -> int:
    with log.open("wb") as out:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "solver.cli", "run", "--config", str(config),
            env=env, cwd=config.parent, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
        try:
            return await asyncio.wait_for(child.wait(), 30)
        finally:
            if child.returncode is None:  # it started instead of refusing
                child.kill()
                await child.wait()


async def test_a_key_the_account_does_not_hold_stops_the_start_with_an_alert(
    tmp_path: Path, sink: HttpSink
) -> None:
    key = SecretKey.generate()
    public = key.public_key.to_text()
    overrides = {"alerts.name": "bot-k", "alerts.retry_delays_s": [0.2]}
    async with child_setup(tmp_path, sink, overrides, key=key, account=NAMED) as (
        sandbox,
        config,
        env,
        _,
    ):
        log = tmp_path / "run1.log"
        assert await run_once(config, env, log) == 2, log.read_text()
        output = log.read_text()
        assert NAMED in output and public in output, output
        assert key.to_text() not in output and key.to_text().split(":")[1] not in output
        line = next(x for x in output.splitlines() if x.startswith("solver: error:"))
        assert "does not hold the signing key" in line, output
        alert = await told(sink, "[bot-k] ALERT: key_not_registered")
        assert NAMED in alert["message"] and public in alert["message"], alert
        assert key.to_text() not in str(alert)

        # Restarted by a service manager while it still holds: no second message.
        log = tmp_path / "run2.log"
        assert await run_once(config, env, log) == 2, log.read_text()
        assert "unclean" not in log.read_text()  # a refusal is a clean stop, not a crash
        assert [m["title"] for m in sink.messages()] == ["[bot-k] ALERT: key_not_registered"]

        sandbox.ledger.register_key(NAMED, public)  # the operator adds the key
        async with bot_process(sandbox, config, env, tmp_path / "run3.log", grace_s=None) as bot:
            resolved = await told(sink, "[bot-k] RESOLVED: key_not_registered", child=bot.output)
            assert "no longer holds after a restart" in resolved["message"], resolved


async def test_the_salt_is_refreshed_as_soon_as_the_ledger_is_back(tmp_path: Path) -> None:
    """``chain.salt_refresh_ms`` is a minute: only the ledger's return can explain a fresh
    salt within seconds of it."""
    overrides = {
        "chain.salt_refresh_ms": 60_000,
        "chain.salt_max_age_ms": 120_000,
        "chain.balance_refresh_ms": 200,
        "risk.max_stale_s": 600.0,
    }
    async with live_bot(tmp_path, overrides=overrides, allowed_errors=["stale"]) as bot:
        app = bot.app
        first = app.desk.state.salt_at
        assert first is not None
        bot.sandbox.rpc_faults.down = True
        await eventually(lambda: app.jobs.errors.get("balances", 0) >= 2, "the outage to be seen")
        bot.sandbox.ledger.rotate_salt()  # the verifier moved on meanwhile
        bot.sandbox.rpc_faults.down = False
        current = bytes.fromhex(bot.sandbox.ledger.current_salt())
        await eventually(lambda: app.desk.state.salt == current, "the new salt", 10)
        assert GLOBAL not in app.desk.pauses.as_dict()
