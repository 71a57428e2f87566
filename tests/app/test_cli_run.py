"""``solver run --config`` as a child process against a sandbox started in the test: it quotes,
and SIGTERM makes it exit 0 within a few seconds (issue 4, item 8). ``--set`` overrides apply
and are named in the start-up line (issue 14)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import yaml

from solver.config import apply_overrides, load_bot_config
from solver.protocol.keys import SecretKey
from tests.app.harness import (
    DEFAULT_BALANCES,
    DEFAULT_YAML,
    E24,
    NEAR,
    USDC,
    bot_overrides,
    eventually,
    fund,
    running_sandbox,
)
from tests.sandbox.scripted import rpc

KEY_ENV = "SOLVER_APP_TEST_RUN_KEY"


def write_config(path: Path, overrides: dict[str, object]) -> Path:
    data = yaml.safe_load(DEFAULT_YAML.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump(apply_overrides(data, overrides)), encoding="utf-8")
    load_bot_config(path)  # what the child will read is a valid configuration
    return path


async def test_solver_run_quotes_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    async with running_sandbox(tmp_path) as sandbox:
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        fund(sandbox, account, DEFAULT_BALANCES)
        overrides = bot_overrides(sandbox, account, KEY_ENV, tmp_path / "solver.sqlite")
        config = write_config(tmp_path / "bot.yaml", overrides)
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        env[KEY_ENV] = key.to_text()
        log = (tmp_path / "solver.log").open("wb")
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "solver.cli",
            "run",
            "--config",
            str(config),
            "--shutdown-wait",
            "1",
            "--set",
            "pairs.0.params.spread_bps=100",
            env=env,
            cwd=tmp_path,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:

            def subscribed() -> bool:
                kinds = [
                    kind
                    for conn in sandbox.bus.connections.values()
                    for kind in conn.subscriptions.values()
                ]
                return sorted(kinds) == ["quote", "quote_status"] or child.returncode is not None

            await eventually(subscribed, "the child to subscribe to the relay", 20, 0.05)
            assert child.returncode is None, (tmp_path / "solver.log").read_text()
            offers = []
            for _ in range(3):  # the first requests may come before its caches are warm
                offers = await _quote(sandbox.urls()["relay_rpc"])
                if offers:
                    break
            assert len(offers) == 1, (tmp_path / "solver.log").read_text()
            (offer,) = offers
            # 1 wNEAR at 3 USD less the 100 bps of --set (the file says 25).
            assert offer["amount_in"] == str(E24)
            assert 2_900_000 < int(offer["amount_out"]) <= 2_970_000, offer
            record = sandbox.bus.quotes[offer["quote_hash"]]
            assert f'"signer_id":"{account}"' in record.signed_data["payload"]["message"]

            started = time.monotonic()
            child.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(child.wait(), 10)
            elapsed = time.monotonic() - started
            assert code == 0, (tmp_path / "solver.log").read_text()
            # The open quote holds it for the 1 s --shutdown-wait, then it flushes and exits.
            assert elapsed < 6, elapsed
            output = (tmp_path / "solver.log").read_text()
            assert "Traceback" not in output, output
            assert "overrides: pairs.0.params.spread_bps=100" in output, output
            await eventually(lambda: sandbox.bus.connections == {}, "the child's socket to close")
        finally:
            if child.returncode is None:
                child.kill()
                with contextlib.suppress(ProcessLookupError):
                    await asyncio.wait_for(child.wait(), 5)
            log.close()


async def _quote(url: str) -> list[dict[str, str]]:
    async with httpx.AsyncClient(timeout=10) as client:
        body = await rpc(
            client,
            url,
            "quote",
            {
                "core_asset_identifier_in": NEAR,
                "core_asset_identifier_out": USDC,
                "exact_amount_in": str(E24),
                "min_deadline_ms": 60_000,
            },
        )
    offers: list[dict[str, str]] = body["result"]
    return offers
