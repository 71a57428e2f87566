"""What real clients need of the sandbox's ledger RPC and bus, over real HTTP (issue 13).

The ledger RPC's start-up reads (sandbox/rpc_reads.py) have the shapes of the NEAR RPC docs that
py-near and near-api-js read; the interop suite (tests/interop/near_rpc.mjs) runs near-api-js
itself against the same node. The bus refuses bare-object params by name, prints failure
reasons as JSON, and marks an intent that failed in execution with ``status_details``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from sandbox.server import Sandbox
from solver.protocol.intents import Transfer
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import sign_nep413
from tests.sandbox.scripted import NEAR, USDC, rpc, sandbox_config, user_item

E24 = 10**24


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(sandbox_config(settlement_delay_ms=0), run_takers=False) as sb:
        yield sb


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


async def call(client: httpx.AsyncClient, sb: Sandbox, method: str, params: Any) -> dict[str, Any]:
    response = await client.post(
        sb.urls()["chain_rpc"],
        json={"jsonrpc": "2.0", "id": "dontcare", "method": method, "params": params},
    )
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    assert body["id"] == "dontcare"
    return body


async def test_status_block_and_gas_price(sandbox: Sandbox, client: httpx.AsyncClient) -> None:
    status = (await call(client, sandbox, "status", {"finality": "final"}))["result"]
    assert status["chain_id"] == "sandbox"
    sync = status["sync_info"]
    assert (sync["latest_block_height"], sync["syncing"]) == (1, False)
    assert sync["latest_block_hash"] == sandbox.chain.block_hash()
    assert sync["latest_block_time"].endswith("Z")
    assert (await call(client, sandbox, "status", []))["result"]["chain_id"] == "sandbox"

    final = (await call(client, sandbox, "block", {"finality": "final"}))["result"]
    header = final["header"]
    assert header["height"] == 1 and header["hash"] == sandbox.chain.block_hash(1)
    assert isinstance(header["timestamp"], int) and header["timestamp_nanosec"].isdigit()
    by_hash = (await call(client, sandbox, "block", {"block_id": header["hash"]}))["result"]
    by_height = (await call(client, sandbox, "block", [1]))["result"]
    assert by_hash["header"] == header == by_height["header"]

    gas = await call(client, sandbox, "gas_price", [None])
    assert gas["result"] == {"gas_price": "100000000"}


async def test_blocks_follow_settlements(sandbox: Sandbox, client: httpx.AsyncClient) -> None:
    sender, receiver = SecretKey.generate(), SecretKey.generate()
    sandbox.ledger.deposit(sender.public_key.implicit_account_id(), NEAR, E24)
    item = user_item(sender, sandbox.ledger, {NEAR: -E24})
    item_2 = user_item(receiver, sandbox.ledger, {NEAR: E24})
    sandbox.chain.execute([item, item_2])
    status = (await call(client, sandbox, "status", None))["result"]
    assert status["sync_info"]["latest_block_height"] == 2
    block = (await call(client, sandbox, "block", {"finality": "optimistic"}))["result"]
    assert block["header"]["prev_hash"] == sandbox.chain.block_hash(1)


async def test_accounts_and_access_keys(sandbox: Sandbox, client: httpx.AsyncClient) -> None:
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    sandbox.ledger.register_key("alice.sandbox", key.public_key.to_text())
    base = {"finality": "final"}

    contract = await call(
        client,
        sandbox,
        "query",
        {**base, "request_type": "view_account", "account_id": sandbox.ledger.contract_id},
    )
    assert contract["result"]["code_hash"] != "11111111111111111111111111111111"
    user = await call(
        client, sandbox, "query", {**base, "request_type": "view_account", "account_id": account}
    )
    assert user["result"]["amount"] == "0" and user["result"]["block_height"] == 1

    listing = await call(
        client,
        sandbox,
        "query",
        {**base, "request_type": "view_access_key_list", "account_id": "alice.sandbox"},
    )
    assert listing["result"]["keys"] == [
        {
            "public_key": key.public_key.to_text(),
            "access_key": {"nonce": 0, "permission": "FullAccess"},
        }
    ]
    one = await call(
        client,
        sandbox,
        "query",
        {
            **base,
            "request_type": "view_access_key",
            "account_id": account,
            "public_key": key.public_key.to_text(),
        },
    )
    assert one["result"]["permission"] == "FullAccess"


@pytest.mark.parametrize(
    ("method", "params", "cause", "text"),
    [
        (
            "query",
            {"request_type": "view_account", "finality": "final", "account_id": "nobody.sandbox"},
            "UNKNOWN_ACCOUNT",
            "account nobody.sandbox does not exist while viewing",
        ),
        (
            "query",
            {
                "request_type": "view_access_key",
                "finality": "final",
                "account_id": "intents.sandbox",
                "public_key": "ed25519:11111111111111111111111111111111",
            },
            "UNKNOWN_ACCESS_KEY",
            "does not exist while viewing",
        ),
        ("block", {"block_id": 99}, "UNKNOWN_BLOCK", "BLOCK: 99"),
        ("block", {"finality": "soon"}, "PARSE_ERROR", "finality must be one of"),
        ("gas_price", "x", "PARSE_ERROR", "params must be an object or an array"),
        ("query", {"request_type": "view_state"}, "PARSE_ERROR", "'view_state' is not served"),
        ("query", [1], "PARSE_ERROR", "params must be an object"),
        ("send_tx", ["AAAA"], "METHOD_NOT_FOUND", "serves query, status, block, gas_price"),
        (
            "query",
            {"request_type": "view_account", "account_id": 7},
            "PARSE_ERROR",
            "account_id must be a non-empty string",
        ),
    ],
)
async def test_bad_reads_get_structured_errors(
    sandbox: Sandbox,
    client: httpx.AsyncClient,
    method: str,
    params: Any,
    cause: str,
    text: str,
) -> None:
    body = await call(client, sandbox, method, params)
    error = body["error"]
    assert error["cause"]["name"] == cause
    assert text in error["data"]
    assert isinstance(error["code"], int) and error["name"] in (
        "HANDLER_ERROR",
        "REQUEST_VALIDATION_ERROR",
    )


# ---------------------------------------------------------------------------------- bus


async def test_bare_object_params_are_refused_by_name(
    sandbox: Sandbox, client: httpx.AsyncClient
) -> None:
    body = (
        await client.post(
            sandbox.urls()["relay_rpc"],
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "get_status",
                "params": {"intent_hash": "x"},
            },
        )
    ).json()
    assert body["error"]["code"] == -32602
    assert "params must be an array holding one object (spec 4.7)" in body["error"]["message"]
    # The array form of the same call works.
    ok = await rpc(client, sandbox.urls()["relay_rpc"], "get_status", {"intent_hash": "x"})
    assert ok["result"]["status"] == "NOT_FOUND_OR_NOT_VALID"


async def test_publish_failure_reason_prints_json(
    sandbox: Sandbox, client: httpx.AsyncClient
) -> None:
    user = SecretKey.generate()
    sandbox.ledger.deposit(user.public_key.implicit_account_id(), USDC, 10)
    item = user_item(user, sandbox.ledger, {USDC: -5})
    body = await rpc(
        client,
        sandbox.urls()["relay_rpc"],
        "publish_intents",
        {"quote_hashes": [], "signed_datas": [item]},
    )
    assert body["result"]["status"] == "FAILED"
    assert body["result"]["reason"] == (
        'invariant violated: unmatched deltas {"nep141:usdc.sandbox":"-5"}'
    )


async def test_intent_failed_in_execution_has_status_details(client: httpx.AsyncClient) -> None:
    async with Sandbox(sandbox_config(settlement_delay_ms=300), run_takers=False) as sb:
        user = SecretKey.generate()
        account = user.public_key.implicit_account_id()
        sb.ledger.deposit(account, USDC, 10)
        url = sb.urls()["relay_rpc"]
        hashes = []
        for _ in range(2):  # each alone is affordable; the second fails once the first ran
            item = sign_nep413(
                user,
                signer_id=account,
                verifying_contract=sb.ledger.contract_id,
                deadline=datetime.now(UTC) + timedelta(seconds=60),
                nonce=salted_nonce(bytes.fromhex(sb.ledger.current_salt())),
                intents=[Transfer(receiver_id="bob.sandbox", tokens={USDC: 10})],
            ).model_dump(mode="json", exclude_none=True)
            body = await rpc(
                client, url, "publish_intent", {"quote_hashes": [], "signed_data": item}
            )
            assert body["result"]["status"] == "OK", body
            hashes.append(body["result"]["intent_hash"])
        for _ in range(100):
            second = (await rpc(client, url, "get_status", {"intent_hash": hashes[1]}))["result"]
            if second["status"] == "NOT_FOUND_OR_NOT_VALID":
                break
            await asyncio.sleep(0.02)
        assert second["status_details"] == "FAILED"
        assert second["reason"] == "insufficient balance or overflow"
        first = (await rpc(client, url, "get_status", {"intent_hash": hashes[0]}))["result"]
        assert first["status"] == "SETTLED" and "status_details" not in first
        unknown = (await rpc(client, url, "get_status", {"intent_hash": "nope"}))["result"]
        assert unknown == {"intent_hash": "nope", "status": "NOT_FOUND_OR_NOT_VALID"}
