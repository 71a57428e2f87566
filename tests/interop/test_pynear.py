"""py-near, the published Python client, against the sandbox (issue 23; docs/sandbox.md "Using
other clients with the sandbox").

``pynear_client.py`` runs in py-near's own venv (:mod:`tests.interop.pynear_venv`: pinned in
``pynear/requirements.txt``, skipped with a printed reason when it cannot be installed) against
a sandbox started here on 127.0.0.1 port 0; each mode prints one JSON object, and the tests
assert on it and on the sandbox's ledger.

The sandbox runs as py-near needs it: ``nonces: deployed`` (py-near signs random legacy
nonces) and ``bus.asset_field_prefix: defuse`` (its quote request and its solver read the
vendor field names). The client polls ``get_status`` itself: py-near's ``wait_for_settlement``
reads any status but PENDING and SETTLED as a failure, ``TX_BROADCASTED`` included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.app.harness import E6, E24, NEAR, USDC, live_bot, sandbox_config
from tests.interop import pynear_venv

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "pynear_client.py"
RUN_TIMEOUT_S = 90
RECEIVER = "receiver.sandbox"
NEAR_USD = 3  # the harness's wNEAR price


@pytest.fixture(scope="module")
def pynear_python(request: pytest.FixtureRequest) -> Path:
    return pynear_venv.python_or_skip(request.config)


@contextlib.asynccontextmanager
async def pynear_sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    config = sandbox_config(tmp_path / "sandbox", asset_field_prefix="defuse").model_copy(
        update={"nonces": "deployed"}
    )
    async with Sandbox(config, run_takers=False) as sandbox:
        yield sandbox


def client_env(sandbox: Sandbox, key: SecretKey, **extra: str) -> dict[str, str]:
    urls = sandbox.urls()
    return {
        "CHAIN_RPC": urls["chain_rpc"],
        "RELAY_RPC": urls["relay_rpc"],
        "RELAY_WS": urls["relay_ws"],
        "CONTRACT": sandbox.ledger.contract_id,
        "ACCOUNT_ID": key.public_key.implicit_account_id(),
        "SECRET_KEY": key.to_text(),
        "USDC": USDC,
        "WNEAR": NEAR,
        "RECEIVER": RECEIVER,
        **extra,
    }


async def start(python: Path, mode: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(python),
        str(CLIENT),
        mode,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def run_client(python: Path, mode: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one mode to its end on this event loop (the sandbox keeps serving meanwhile)."""
    process = await start(python, mode, env)
    try:
        out, err = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"pynear_client.py {mode} ran longer than {RUN_TIMEOUT_S} s") from None
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    assert lines, f"{mode} printed no JSON (exit {process.returncode}):\n{err.decode()[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    assert "failed" not in result, f"{mode}: {result['failed']}\n{result.get('trace', '')}"
    return result


def funded(sandbox: Sandbox) -> SecretKey:
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    sandbox.ledger.deposit(account, USDC, 1_000 * E6)
    sandbox.ledger.deposit(account, NEAR, 100 * E24)
    return key


async def test_pynear_reads_the_node_and_the_verifier(pynear_python: Path, tmp_path: Path) -> None:
    async with pynear_sandbox(tmp_path) as sandbox:
        key = funded(sandbox)
        result = await run_client(pynear_python, "reads", client_env(sandbox, key))
        ledger = sandbox.ledger
        assert result["chain_id"] == "sandbox"
        assert (result["state_amount"], result["balance"]) == ("0", 0)
        # The key py-near sends without its ed25519: prefix is found.
        assert (result["access_key_permission"], result["access_key_nonce"]) == ("FullAccess", 0)
        assert result["access_key_list"] == [key.public_key.to_text()]
        assert result["block_height"] == sandbox.chain.block_height
        assert result["validators"] == [ledger.contract_id]
        assert result["current_salt"] == ledger.current_salt()
        assert result["mt_balance_of"] == str(1_000 * E6)
        assert result["public_keys_of"] == [key.public_key.to_text()]
        assert (result["simulated_intents"], result["simulation_error"]) == (1, None)
        assert result["nonce_used_before"] is False


async def test_pynear_transfer_through_the_relay(pynear_python: Path, tmp_path: Path) -> None:
    async with pynear_sandbox(tmp_path) as sandbox:
        key = funded(sandbox)
        result = await run_client(
            pynear_python, "transfer", client_env(sandbox, key, AMOUNT="1234")
        )
        assert result["status"]["status"] == "SETTLED", result
        assert result["status"]["intent_hash"] == result["intent_hash"]
        assert sandbox.ledger.mt_balance_of(RECEIVER, USDC) == 1234


def assert_settled(flows: dict[str, Any]) -> tuple[int, int]:
    """Both quotes settled: (wNEAR paid, USDC received) by the taker over both."""
    spent = got = 0
    for name in ("exact_in", "exact_out"):
        flow = flows[name]
        assert flow.get("status", {}).get("status") == "SETTLED", (name, flow)
        assert len(flow["quote_hashes"]) == 1
        spent, got = spent + int(flow["amount_in"]), got + int(flow["amount_out"])
    assert flows["exact_in"]["amount_in"] == str(E24)
    assert flows["exact_out"]["amount_out"] == str(3 * E6)
    return spent, got


async def test_pynear_taker_quotes_from_the_bot(pynear_python: Path, tmp_path: Path) -> None:
    async with (
        pynear_sandbox(tmp_path) as sandbox,
        live_bot(tmp_path, sandbox=sandbox, overrides={"bus.asset_field_prefix": "defuse"}) as bot,
    ):
        taker = funded(sandbox)
        before = bot.balances()
        flows = await run_client(
            pynear_python,
            "taker",
            client_env(sandbox, taker, EXACT_IN=str(E24), EXACT_OUT=str(3 * E6)),
        )
        spent, got = assert_settled(flows)
        account = taker.public_key.implicit_account_id()
        assert sandbox.ledger.mt_balance_of(account, NEAR) == 100 * E24 - spent
        assert sandbox.ledger.mt_balance_of(account, USDC) == 1_000 * E6 + got
        after = bot.balances()
        assert (after[NEAR] - before[NEAR], before[USDC] - after[USDC]) == (spent, got)


async def test_pynear_solver_loop_settles_quotes(pynear_python: Path, tmp_path: Path) -> None:
    """py-near on both sides: its ``run_solver`` answers (raw_ed25519, both amounts in
    ``quote_output``), its taker asks exact-in and exact-out and publishes; all settle."""
    async with pynear_sandbox(tmp_path) as sandbox:
        solver_key, taker = funded(sandbox), funded(sandbox)
        solver_account = solver_key.public_key.implicit_account_id()
        solver = await start(
            pynear_python, "solver", client_env(sandbox, solver_key, NEAR_USD=str(NEAR_USD))
        )
        try:
            for _ in range(RUN_TIMEOUT_S * 20):
                if any(c.subscription_for("quote") for c in sandbox.bus.connections.values()):
                    break
                assert solver.returncode is None, "py-near's solver exited"
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("py-near's solver never subscribed to quote")
            flows = await run_client(
                pynear_python,
                "taker",
                client_env(sandbox, taker, EXACT_IN=str(E24), EXACT_OUT=str(3 * E6)),
            )
        finally:
            if solver.returncode is None:
                solver.terminate()
            _, err = await solver.communicate()
        stats = sandbox.bus.stats
        assert stats.quote_answers_rejected == {}, (stats, err.decode()[-2000:])
        spent, got = assert_settled(flows)
        # A fixed rate of 3 USDC per wNEAR: 1 wNEAR in, and 3 USDC out for 1 wNEAR.
        assert (spent, got) == (2 * E24, 6 * E6)
        assert sandbox.ledger.mt_balance_of(solver_account, NEAR) == 102 * E24
        assert sandbox.ledger.mt_balance_of(solver_account, USDC) == 994 * E6
        assert stats.settled == 2
