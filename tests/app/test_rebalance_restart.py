"""Acceptance (issue 22): "A rebalance in flight survives ``kill -9``: its reservation and pause
come back from the journal."

The bot runs as a child process (``solver run``) against the sandbox with its swap API, its
rebalancer on and its inventory out of band. In the first run the bus's RPC is down, so the
rebalance signs its deposit (DEPOSIT_SENT, journaled) but cannot publish it; the bot is killed
with SIGKILL there. The second run, on the same store with the bus back, must rebuild the
rebalance from the journal alone — the record, the reservation of its input and the pause of
its route — re-publish the very item signed before (never a second one) and finish the swap.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from solver.protocol.keys import SecretKey
from tests.app.harness import E6, E18, E24, ETH, NEAR, USDC, bot_overrides, eventually, fund
from tests.app.test_cli_run import write_config
from tests.app.test_restart import Child, bot_process, read
from tests.io.swap_sandbox import swap_sandbox

KEY_ENV = "SOLVER_APP_TEST_REBALANCE_RESTART_KEY"
SWAP_TOKEN_ENV = "SOLVER_APP_TEST_REBALANCE_RESTART_SWAP_TOKEN"
CONTROL_TOKEN = "rebalance-restart-control-token"
SKEWED = {USDC: 20_000 * E6, NEAR: 10_000 * E24, ETH: 5 * E18}
ROUTE = f"{NEAR}->{USDC}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def sigkill(child: Child) -> None:
    """``kill -9`` (the market maker stays on the bus: only the bot's exit is waited for)."""
    child.process.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(child.process.wait(), 5) == -signal.SIGKILL


def steps(db: Path) -> list[dict[str, Any]]:
    """The journal's rebalance steps, in order: the record each carries (and its detail)."""
    rows = read(db, "SELECT body FROM journal WHERE kind = 'rebalance_stepped' ORDER BY seq")
    return [orjson.loads(body) for (body,) in rows]


def in_state(db: Path, state: str) -> bool:
    return any(step["record"]["state"] == state for step in steps(db))


def finished(db: Path) -> bool:
    rows = read(db, "SELECT state FROM rebalances WHERE finished_at IS NOT NULL")
    return bool(rows)


async def started(http: httpx.AsyncClient, base: str, child: Child) -> dict[str, Any]:
    """The bot's status once its control API answers: it serves after the desk is rebuilt
    and the rebalances are taken up (the market maker's subscriptions make ``bot_process``
    return before the bot itself is up)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert child.process.returncode is None, child.output()
        doc = await status(http, base)
        if doc is not None:
            return doc
        await asyncio.sleep(0.05)
    raise AssertionError(f"the bot's control API did not answer: {child.output()}")


async def status(http: httpx.AsyncClient, base: str) -> dict[str, Any] | None:
    headers = {"authorization": f"Bearer {CONTROL_TOKEN}"}
    try:
        response = await http.get(f"{base}/control/status", headers=headers)
    except httpx.HTTPError:
        return None
    doc: dict[str, Any] | None = response.json() if response.status_code == 200 else None
    return doc


async def test_acceptance_a_rebalance_in_flight_survives_kill_9(tmp_path: Path) -> None:
    async with swap_sandbox(tmp_path, rate=(2_997 * E6, 1_000 * E24)) as swaps:
        sandbox = swaps.sandbox
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        fund(sandbox, account, SKEWED)
        db = tmp_path / "solver.sqlite"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        overrides: dict[str, Any] = {
            **bot_overrides(sandbox, account, KEY_ENV, db),
            "metrics.listen": f"127.0.0.1:{port}",
            "log.level": "INFO",
            "swap_api": {"base_url": swaps.swap_url, "token_env": SWAP_TOKEN_ENV},
            "rebalance.enabled": True,
            "rebalance.dry_run": False,
            "rebalance.bands": {NEAR: {"min_usd": 10_000, "max_usd": 20_000, "target_usd": 15_000}},
            "rebalance.counter_asset": USDC,
            "rebalance.max_swap_usd": 20_000,
            "rebalance.min_interval_s": 0,
            "rebalance.tick_s": 0.2,
            "rebalance.deposit_wait_s": 0.3,
        }
        env = {k: v for k, v in os.environ.items() if k != "SOLVER_CONTROL_TOKEN"}
        env |= {KEY_ENV: key.to_text(), SWAP_TOKEN_ENV: swaps.token}
        env["SOLVER_CONTROL_TOKEN"] = CONTROL_TOKEN
        # Run 1: the bus's RPC is down (nothing listens there): the deposit is signed and
        # journaled, never published.
        down = {**overrides, "bus.rpc_url": f"http://127.0.0.1:{free_port()}/rpc"}
        config = write_config(tmp_path / "bot.yaml", down)
        logs = (tmp_path / "run1.log", tmp_path / "run2.log")
        async with httpx.AsyncClient(timeout=10) as http:
            async with bot_process(sandbox, config, env, logs[0]) as child:
                await started(http, base, child)
                await eventually(
                    functools.partial(in_state, db, "DEPOSIT_SENT"), "a deposit signed", 20
                )
                before = await status(http, base)
                assert before is not None
                assert before["paused"][ROUTE].startswith("rebalancing:")
                assert before["reserved"] == {NEAR: str(5_000 * E24)}
                await sigkill(child)
            assert swaps.balances(account) == SKEWED  # nothing moved
            signed = [s for s in steps(db) if s["record"]["state"] == "DEPOSIT_SENT"]
            intent_hash = signed[-1]["record"]["deposit_intent_hash"]

            # Run 2: the same store, the bus back.
            write_config(tmp_path / "bot.yaml", overrides)
            async with bot_process(sandbox, config, env, logs[1]) as child:
                after = await started(http, base, child)
                text = logs[1].read_text(encoding="utf-8")
                # Before anything ran: the desk from the journal, with the pause and the hold.
                assert re.search(r"desk rebuilt from the journal: .*rebalancing", text), text
                assert re.search(r"rebalance \w+ resumed at DEPOSIT_SENT, holding ", text), text
                assert after["paused"][ROUTE] == before["paused"][ROUTE]
                await eventually(functools.partial(finished, db), "the swap to finish", 30)
                await sigkill(child)

        ((state, reason, deposit_hash),) = read(
            db, "SELECT state, reason, deposit_intent_hash FROM rebalances"
        )
        assert state == "SUCCESS", reason
        assert deposit_hash == intent_hash  # the item signed before the kill
        details = [d or "" for (d,) in read(db, "SELECT detail FROM rebalance_steps")]
        assert [d for d in details if d.startswith("transfer")] == [f"transfer {intent_hash}"]
        assert len(read(db, "SELECT nonce FROM nonces")) == 1  # one deposit nonce, ever
        assert swaps.balances(account) == {
            **SKEWED,
            NEAR: 5_000 * E24,
            USDC: SKEWED[USDC] + 14_985 * E6,
        }
        for log in logs:
            assert "Traceback" not in log.read_text(encoding="utf-8")
