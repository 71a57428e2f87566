"""The official third-party clients against the sandbox (issue 13; docs/sandbox.md, "Using other
clients with the sandbox").

Node scripts in this folder drive the pinned packages of ``package.json`` / ``package-lock.json``
(the intents SDK, the 1Click client, near-api-js) against a sandbox started here on 127.0.0.1
port 0, with the bot itself as the solver on the bus. Each script prints one JSON object; the
tests assert on it and on the sandbox ledger.

Set-up: ``npm ci`` runs once per lockfile. ``node_modules`` is kept between runs (it is in
.gitignore) and reused while the sha256 of ``package-lock.json`` recorded in it after a
successful install still matches; a full run starts the install in the background when it
begins (:mod:`tests.interop.installs`), and the fixture waits for what is left of it. Without
``node`` and ``npm`` on PATH the module is skipped with the reason printed (they are on CI).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from solver.protocol.signing import secp256k1_address
from tests.app.harness import E6, E24, NEAR, USDC, LiveBot, live_bot, running_sandbox
from tests.interop import installs

HERE = Path(__file__).resolve().parent
SCRIPT_TIMEOUT_S = 90
EVM_PRIVATE_KEY = hashlib.sha256(b"sandbox interop erc191 key").digest()
RECEIVER = "receiver.sandbox"


@pytest.fixture(scope="module")
def node_modules() -> Iterator[Path]:
    """``npm ci`` from the lockfile, unless the kept node_modules was installed from it (or the
    run's background install, :mod:`tests.interop.installs`, is doing it: then its lock is
    waited for)."""
    reason = installs.missing_tools()
    if reason is not None:
        print(f"\ninterop suite skipped: {reason}", file=sys.stderr)
        pytest.skip(f"interop suite needs node and npm: {reason}")
    failure, seconds = installs.npm_install()
    assert failure is None, f"npm ci failed:\n{failure[-3000:]}"
    if seconds is not None:
        print(f"\ninterop: npm ci took {seconds:.1f} s", file=sys.stderr)
    yield installs.MODULES


async def run_script(name: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``node <name>`` in this folder with ``env`` added; its one JSON line, parsed.

    An asyncio subprocess: the sandbox and the bot run on this same event loop and must keep
    serving while the script talks to them.
    """
    process = await asyncio.create_subprocess_exec(
        "node",
        name,
        cwd=HERE,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), SCRIPT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{name} ran longer than {SCRIPT_TIMEOUT_S} s") from None
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    assert lines, f"{name} printed no JSON (exit {process.returncode}):\n{err.decode()[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    assert "failed" not in result, f"{name} failed: {result['failed']}\n{err.decode()[-2000:]}"
    return result


def assert_flows_ok(result: dict[str, Any]) -> dict[str, Any]:
    flows: dict[str, Any] = result["flows"]
    failed = {name: flow for name, flow in flows.items() if not flow["ok"]}
    assert not failed, json.dumps(failed, indent=1)[:4000]
    return flows


@contextlib.asynccontextmanager
async def bot_on_vendor_prefix(tmp_path: Path) -> AsyncIterator[LiveBot]:
    """The sandbox with the vendor prefix (the SDK reads ``defuse_…`` fields) and the bot
    configured for it, quoting every pair of the sandbox."""
    async with (
        running_sandbox(tmp_path, asset_field_prefix="defuse") as sandbox,
        live_bot(tmp_path, sandbox=sandbox, overrides={"bus.asset_field_prefix": "defuse"}) as bot,
    ):
        yield bot


def chain_env(sandbox: Sandbox) -> dict[str, str]:
    urls = sandbox.urls()
    return {
        "CHAIN_RPC": urls["chain_rpc"],
        "RELAY_URL": urls["relay_rpc"].removesuffix("rpc"),
        "CONTRACT": sandbox.ledger.contract_id,
        "USDC": USDC,
        "WNEAR": NEAR,
    }


async def test_near_api_js_reads_the_ledger_rpc(node_modules: Path, tmp_path: Path) -> None:
    async with running_sandbox(tmp_path) as sandbox:
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        sandbox.ledger.deposit(account, USDC, E6)
        result = await run_script(
            "near_rpc.mjs",
            {
                **chain_env(sandbox),
                "ACCOUNT_ID": account,
                "PUBLIC_KEY": key.public_key.to_text(),
            },
        )
    assert result["chain_id"] == "sandbox"
    assert result["block_height"] == result["latest_block_height"] == 1
    assert result["block_hash_matches"] is True
    assert result["gas_price"] == "100000000"
    assert result["access_key_permission"] == "FullAccess"
    assert result["access_key_list"] == [key.public_key.to_text()]
    assert result["account_access_keys"] == 1
    assert result["current_salt"] == sandbox.ledger.current_salt()
    assert result["account_balance_available"] == "0"
    assert result["unknown_account_error"]["type"] == "AccountDoesNotExist"


async def test_intents_sdk_every_intent_type_and_quote_flow(
    node_modules: Path, tmp_path: Path
) -> None:
    async with bot_on_vendor_prefix(tmp_path) as bot:
        sandbox = bot.sandbox
        user = SecretKey.generate()
        account = user.public_key.implicit_account_id()
        evm = secp256k1_address(EVM_PRIVATE_KEY)
        for owner, asset, amount in (
            (account, USDC, 1_000 * E6),
            (account, NEAR, 100 * E24),
            (evm, USDC, 10 * E6),
        ):
            sandbox.ledger.deposit(owner, asset, amount)
        before = bot.balances()
        result = await run_script(
            "intents_sdk.mjs",
            {
                **chain_env(sandbox),
                "USER_ACCOUNT": account,
                "USER_KEY": user.to_text(),
                "EVM_PRIVATE_KEY": "0x" + EVM_PRIVATE_KEY.hex(),
                "RECEIVER": RECEIVER,
            },
        )
        flows = assert_flows_ok(result)
        ledger = sandbox.ledger
        for name, flow in flows.items():
            if "status" in flow:
                assert flow["status"] == "SETTLED", (name, flow)
        assert flows["transfer_versioned_nonce"]["ok"] and flows["transfer_salted_nonce"]["ok"]
        assert flows["erc191_transfer"]["signer_id"] == evm
        assert flows["removed_key_is_refused"]["code"] == "PUBLIC_KEY_NOT_EXIST" or (
            "doesn't exist" in flows["removed_key_is_refused"]["reason"]
        )
        # Transfers 1000 + 2000 + 4000 (user) and 5000 (erc191) reached the receiver.
        assert ledger.mt_balance_of(RECEIVER, USDC) == 12_000
        assert ledger.mt_balance_of(evm, USDC) == 10 * E6 - 5_000
        storage = 2 * 1_250_000_000_000_000_000_000
        exact_in = flows["quote_exact_in_settled"]
        exact_out = flows["quote_exact_out_settled"]
        spent_near = int(exact_in["amount_in"]) + int(exact_out["amount_in"])
        got_usdc = int(exact_in["amount_out"]) + int(exact_out["amount_out"])
        assert exact_out["amount_out"] == "3000000"
        assert ledger.mt_balance_of(account, NEAR) == 100 * E24 - storage - spent_near
        assert ledger.mt_balance_of(account, USDC) == 1_000 * E6 - 10_000 + got_usdc
        assert ledger.public_keys_of(account) == [user.public_key.to_text()]
        # The bot was the solver on the other side of both quotes.
        after = bot.balances()
        assert after[NEAR] - before[NEAR] == spent_near
        assert before[USDC] - after[USDC] == got_usdc


async def test_one_click_client_tokens_quotes_and_deposits(
    node_modules: Path, tmp_path: Path
) -> None:
    async with bot_on_vendor_prefix(tmp_path) as bot:
        sandbox = bot.sandbox
        result = await run_script(
            "one_click.mjs",
            {
                "SWAP_API": sandbox.urls()["swap_api"],
                "SWAP_TOKEN": sandbox.swap.keys.issue_token("interop"),
                "USDC": USDC,
                "WNEAR": NEAR,
            },
        )
    flows = assert_flows_ok(result)
    tokens = {t["assetId"]: t for t in flows["tokens"]["tokens"]}
    assert set(tokens) == set(sandbox.config.tokens)
    assert {tokens[NEAR]["symbol"], tokens[NEAR]["decimals"]} == {"wNEAR", 24}
    for swap_type in ("exact_input", "exact_output", "flex_input", "any_input"):
        free = flows[f"quote_{swap_type}_token"]["quote"]
        paid = flows[f"quote_{swap_type}_no_token"]["quote"]
        if swap_type == "exact_output":  # the fee is on the input: more in for the same out
            assert int(paid["amountIn"]) > int(free["amountIn"])
            assert paid["amountOut"] == free["amountOut"] == "6000000"
        else:  # 0.2 % of the input less to swap without a token (spec 1.3)
            assert int(paid["amountOut"]) < int(free["amountOut"])
            assert int(paid["amountOut"]) >= int(free["amountOut"]) * 9_970 // 10_000
        assert "depositAddress" not in free  # dry quotes (spec 4.1 rule 1)
    echoed = flows["optional_fields"]["echoed"]
    assert echoed["confidentiality"] == "public" and echoed["rebates"][0]["share"] == 100
    deposit = flows["deposit_success"]
    assert (deposit["submitted"], deposit["status"]) == ("KNOWN_DEPOSIT_TX", "SUCCESS")
    assert int(deposit["details"]["amountOut"]) > 0
    any_input = flows["any_input_withdrawals"]
    assert any_input["status"] == "SUCCESS"
    [withdrawal] = any_input["listing"]["withdrawals"]
    assert withdrawal["status"] == "SUCCESS" and int(withdrawal["amountOut"]) > 0
    bad = flows["bad_quote_is_400"]  # the client's own words for the schema's 400
    assert bad["status"] == 400 and bad["message"].startswith("Bad Request")
    assert bad["body"]["message"].startswith("amount:")
    missing = flows["unserved_path_is_json_404"]
    assert missing["status"] == 404 and missing["body"]["error"] == "NOT_FOUND"
    assert "/v0/generate-intent" in missing["body"]["message"]
