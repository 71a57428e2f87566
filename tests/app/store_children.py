"""Helpers of the store-ownership acceptance tests (issue 24): ``solver`` commands as child
processes against a sandbox, with the control API on 127.0.0.1 port 0 and a control token."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sandbox.server import Sandbox
from solver.io.store.owner import read_holder
from solver.protocol.keys import SecretKey
from tests.app.harness import DEFAULT_BALANCES, E24, NEAR, USDC, bot_overrides, eventually, fund
from tests.app.test_cli_run import write_config
from tests.sandbox.scripted import rpc

TOKEN = "store-owner-test-token-0123456789"


@dataclass
class Setup:
    config: Path
    db: Path
    env: dict[str, str]
    account: str


def setup(sandbox: Sandbox, tmp_path: Path, key_env: str, db: Path) -> Setup:
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    fund(sandbox, account, DEFAULT_BALANCES)
    overrides = {**bot_overrides(sandbox, account, key_env, db), "metrics.listen": "127.0.0.1:0"}
    config = write_config(tmp_path / "bot.yaml", overrides)
    env = {k: v for k, v in os.environ.items() if k != key_env}
    env[key_env] = key.to_text()
    env["SOLVER_CONTROL_TOKEN"] = TOKEN
    return Setup(config, db, env, account)


async def control_url(db: Path) -> str:
    """The running bot's control API, from the lock file beside its store."""

    def known() -> bool:
        holder = read_holder(db)
        return holder is not None and holder.control is not None

    await eventually(known, "the bot to name its control API in the lock file", 20)
    holder = read_holder(db)
    assert holder is not None and holder.control is not None
    return holder.control


async def solver(
    env: dict[str, str], cwd: Path, *args: str, timeout_s: float = 60
) -> tuple[int, str]:
    """Run ``solver ARGS`` to its end: its exit code and output (stdout and stderr)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "solver.cli",
        *args,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(child.communicate(), timeout_s)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise AssertionError(f"solver {' '.join(args)} still running after {timeout_s} s") from None
    assert child.returncode is not None
    return child.returncode, out.decode(errors="replace")


async def ask(http: httpx.AsyncClient, relay_rpc: str) -> list[dict[str, Any]]:
    """One quote request over the relay (1 wNEAR for USDC): the offers it gathered."""
    body = await rpc(
        http,
        relay_rpc,
        "quote",
        {
            "core_asset_identifier_in": NEAR,
            "core_asset_identifier_out": USDC,
            "exact_amount_in": str(E24),
            "min_deadline_ms": 60_000,
        },
    )
    offers: list[dict[str, Any]] = body["result"]
    return offers


async def quoted(http: httpx.AsyncClient, relay_rpc: str, tries: int = 5) -> dict[str, Any]:
    """An offer, asking again while the bot's caches warm up."""
    for _ in range(tries):
        offers = await ask(http, relay_rpc)
        if offers:
            assert len(offers) == 1, offers
            return offers[0]
    raise AssertionError(f"no offer in {tries} requests")


def headers() -> dict[str, str]:
    return {"authorization": f"Bearer {TOKEN}"}
