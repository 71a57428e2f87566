"""py-near driven against the sandbox: run by the interpreter of py-near's own venv
(``tests/interop/pynear/.venv``), never imported by the project's tests (issue 23).

``python pynear_client.py MODE`` with the URLs, the account and its key in the environment;
each mode prints one JSON object (``{"failed": …}`` when a flow raised) for
``tests/interop/test_pynear.py`` to assert on:

- ``reads``: ``Account`` start-up (``status``), ``fetch_state``, ``get_access_key`` (the key
  sent without its curve prefix), ``get_access_key_list``, ``get_balance``, ``get_block``,
  ``get_validators``, ``view_function`` on the verifier, and ``OmniBalance.simulate_intent``;
- ``transfer``: an ``OmniBalance`` transfer published through the relay without a quote
  (``quote_hashes: null``), then its ``get_status`` until it settles;
- ``taker``: ``get_quote_hash`` exact-in and exact-out, then the mirrored ``token_diff``
  published with the quote hash and waited for;
- ``solver``: ``run_solver`` with ``SolverFixedRate`` answering the sandbox's quote events
  until the process is stopped.

py-near hard-codes the relay's URLs and the contract id where no argument reaches them
(``SOLVER_BUS_URL`` in ``get_direct_quote``, ``SOLVER_BUS_WSS`` in ``run_solver``,
``INTENTS_CONTRACT`` in ``is_nonce_used``); they are set here as module attributes, the
package itself is unchanged. Its signer writes random 32-byte (legacy) nonces: the sandbox
runs with ``nonces: deployed`` (sandbox/nonce_policy.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from decimal import Decimal
from typing import Any

import aiohttp
from py_near.account import Account
from py_near.omni_balance import OmniBalance, get_quote_hash
from py_near.omni_balance import manager as omni_manager
from py_near.omni_balance.solver import solver as omni_solver
from py_near.omni_balance.solver import solver_bus_client
from py_near.omni_balance.solver.solver_fix_rate import SolverFixedRate, SolverRateTokenConfig

ENV = os.environ
SETTLE_POLLS = 600
SETTLE_POLL_S = 0.05


def point_at_sandbox() -> None:
    solver_bus_client.SOLVER_BUS_URL = ENV["RELAY_RPC"]
    omni_solver.SOLVER_BUS_WSS = ENV["RELAY_WS"]
    omni_manager.INTENTS_CONTRACT = ENV["CONTRACT"]


def omni() -> Any:
    return OmniBalance(
        ENV["ACCOUNT_ID"],
        ENV["SECRET_KEY"],
        rpc_urls=ENV["CHAIN_RPC"],
        solver_bus_url=ENV["RELAY_RPC"],
        intents_contract=ENV["CONTRACT"],
    )


async def reads() -> dict[str, Any]:
    contract, usdc = ENV["CONTRACT"], ENV["USDC"]
    account = Account(ENV["ACCOUNT_ID"], ENV["SECRET_KEY"], rpc_addr=ENV["CHAIN_RPC"])
    await account.startup()
    try:
        access_key = await account.get_access_key(None)
        keys = await account.get_access_key_list()
        block = await account.provider.get_block(None)
        validators = await account.provider.get_validators()
        salt = await account.view_function(contract, "current_salt", {})
        usdc_balance = await account.view_function(
            contract, "mt_balance_of", {"account_id": ENV["ACCOUNT_ID"], "token_id": usdc}
        )
        own_keys = await account.view_function(
            contract, "public_keys_of", {"account_id": ENV["ACCOUNT_ID"]}
        )
        out = {
            "chain_id": account.chain_id,
            "state_amount": (await account.fetch_state())["amount"],
            "balance": await account.get_balance(),
            "access_key_nonce": access_key.nonce,
            "access_key_permission": str(access_key.permission),
            "access_key_list": [k.public_key for k in keys],
            "block_height": block["header"]["height"],
            "validators": [v["account_id"] for v in validators["current_validators"]],
            "current_salt": salt.result,
            "mt_balance_of": usdc_balance.result,
            "public_keys_of": own_keys.result,
        }
    finally:
        await account.shutdown()
    async with omni() as manager:
        commitment = manager.transfer(tokens={usdc: "1"}, receiver_id=ENV["RECEIVER"]).sign()
        simulation = await manager.simulate_intent(commitment)
        out["simulated_intents"] = len(simulation.intents_executed or [])
        out["simulation_error"] = simulation.error_msg
        out["nonce_used_before"] = await manager.is_nonce_used(
            json.loads(commitment.payload)["nonce"]
        )
    return out


async def settled(intent_hash: str) -> dict[str, Any]:
    """``get_status`` until SETTLED or failed. Not py-near's ``wait_for_settlement``: it reads
    every status but PENDING and SETTLED as a failure, the relay's TX_BROADCASTED included."""
    async with aiohttp.ClientSession() as session:
        for _ in range(SETTLE_POLLS):
            request = {
                "jsonrpc": "2.0",
                "id": "dontcare",
                "method": "get_status",
                "params": [{"intent_hash": intent_hash}],
            }
            async with session.post(ENV["RELAY_RPC"], json=request) as response:
                status: dict[str, Any] = (await response.json())["result"]
            if status["status"] in ("SETTLED", "NOT_FOUND_OR_NOT_VALID"):
                return status
            await asyncio.sleep(SETTLE_POLL_S)
    return status


async def transfer() -> dict[str, Any]:
    async with omni() as manager:
        intent_hash = await manager.transfer(
            tokens={ENV["USDC"]: ENV["AMOUNT"]}, receiver_id=ENV["RECEIVER"]
        ).submit()
        return {"intent_hash": intent_hash, "status": await settled(intent_hash)}


async def taker() -> dict[str, Any]:
    near, usdc = ENV["WNEAR"], ENV["USDC"]
    out: dict[str, Any] = {}
    async with omni() as manager:
        for name, kwargs in (
            ("exact_in", {"amount_in": ENV["EXACT_IN"]}),
            ("exact_out", {"exact_amount_out": ENV["EXACT_OUT"]}),
        ):
            quote = await get_quote_hash(token_from=near, token_to=usdc, **kwargs)
            if quote is None:
                out[name] = {"quote": None}
                continue
            # token_diff, not give()/take(): py-near 1.2.22's builder appends the collected
            # diff once per read of its ``intents`` property, three times in sign().
            diff = {near: f"-{quote.amount_in}", usdc: quote.amount_out}
            signed = manager.token_diff(diff=diff).sign()
            intent_hash = await manager.publish_intents(signed, quote_hashes=quote.quote_hashes)
            out[name] = {
                "amount_in": quote.amount_in,
                "amount_out": quote.amount_out,
                "quote_hashes": quote.quote_hashes,
                "status": await settled(intent_hash),
            }
    return out


async def solver() -> dict[str, Any]:
    """Quotes wNEAR at ``NEAR_USD`` against USDC at 1 until stopped (SIGTERM)."""
    price = Decimal(ENV["NEAR_USD"])
    tokens = [
        SolverRateTokenConfig(ENV["WNEAR"], 24, price, price),
        SolverRateTokenConfig(ENV["USDC"], 6, Decimal(1), Decimal(1)),
    ]
    async with omni() as manager:
        await omni_solver.run_solver([SolverFixedRate(tokens, swap_limit_usd=1_000)], manager)
    return {}


MODES = {"reads": reads, "transfer": transfer, "taker": taker, "solver": solver}


def main() -> None:
    point_at_sandbox()
    try:
        result = asyncio.run(MODES[sys.argv[1]]())
    except Exception as exc:
        result = {"failed": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
