"""The message bus end to end on loopback: a scripted solver on the real websocket, a scripted
user on the real JSON-RPC endpoint, the real ledger underneath (issue 3 acceptance)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.sandbox.scripted import NEAR, USDC, ScriptedSolver, rpc, sandbox_config, user_item

E6 = 10**6
E24 = 10**24


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox(sandbox_config(), run_takers=False) as sb:
        yield sb


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


def fund(sb: Sandbox, key: SecretKey, balances: dict[str, int]) -> str:
    account = key.public_key.implicit_account_id()
    for asset, amount in balances.items():
        sb.ledger.deposit(account, asset, amount)
    return account


async def solver_on(sb: Sandbox, **kwargs: Any) -> ScriptedSolver:
    key = SecretKey.generate()
    fund(sb, key, {USDC: 1_000 * E6, NEAR: 1_000 * E24})
    kwargs.setdefault("rate_num", 3 * E6)  # 3 USDC per NEAR unless a test says otherwise
    kwargs.setdefault("rate_den", E24)
    solver = ScriptedSolver(sb.urls()["relay_ws"], key, sb.ledger, **kwargs)
    await solver.start()
    return solver


async def wait_status(
    client: httpx.AsyncClient, url: str, intent_hash: str, want: str
) -> list[str]:
    seen: list[str] = []
    for _ in range(200):
        body = await rpc(client, url, "get_status", {"intent_hash": intent_hash})
        status = body["result"]["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == want:
            return seen
        await asyncio.sleep(0.01)
    raise AssertionError(f"status never reached {want}: {seen}")


async def test_quote_publish_settle_moves_balances_by_the_diffs(
    sandbox: Sandbox, client: httpx.AsyncClient
) -> None:
    url = sandbox.urls()["relay_rpc"]
    # Two solvers: the better one (3 USDC per NEAR) wins, the other never hears of the fill.
    good = await solver_on(sandbox, rate_num=3 * E6, rate_den=E24)
    poor = await solver_on(sandbox, rate_num=29 * E6, rate_den=10 * E24)
    user = SecretKey.generate()
    user_account = fund(sandbox, user, {NEAR: 10 * E24})
    try:
        body = await rpc(
            client,
            url,
            "quote",
            {
                "core_asset_identifier_in": NEAR,
                "core_asset_identifier_out": USDC,
                "exact_amount_in": str(2 * E24),
                "min_deadline_ms": 60000,
            },
        )
        offers = body["result"]
        assert [o["amount_out"] for o in offers] == [str(6 * E6), str(58 * E6 // 10)]
        best = offers[0]
        assert best["amount_in"] == str(2 * E24)
        before_solver = sandbox.ledger.mt_batch_balance_of(good.account, [NEAR, USDC])
        item = user_item(user, sandbox.ledger, {NEAR: -2 * E24, USDC: 6 * E6})
        published = await rpc(
            client,
            url,
            "publish_intent",
            {"quote_hashes": [best["quote_hash"]], "signed_data": item},
        )
        assert published["result"]["status"] == "OK", published
        intent_hash = published["result"]["intent_hash"]
        seen = await wait_status(client, url, intent_hash, "SETTLED")
        assert seen[0] in ("PENDING", "TX_BROADCASTED") and seen[-1] == "SETTLED"
        status = await rpc(client, url, "get_status", {"intent_hash": intent_hash})
        assert len(status["result"]["data"]["hash"]) >= 32
        assert sandbox.ledger.mt_batch_balance_of(user_account, [NEAR, USDC]) == [8 * E24, 6 * E6]
        after_solver = sandbox.ledger.mt_batch_balance_of(good.account, [NEAR, USDC])
        assert after_solver == [before_solver[0] + 2 * E24, before_solver[1] - 6 * E6]
        for _ in range(100):
            if good.statuses:
                break
            await asyncio.sleep(0.01)
        assert good.statuses == [
            {
                "quote_hash": best["quote_hash"],
                "intent_hash": intent_hash,
                "tx_hash": status["result"]["data"]["hash"],
            }
        ]
        assert poor.statuses == []
    finally:
        await good.stop()
        await poor.stop()


async def test_exact_out_quote_and_prefix_of_events(
    sandbox: Sandbox, client: httpx.AsyncClient
) -> None:
    solver = await solver_on(sandbox, rate_num=3 * E6, rate_den=E24)
    try:
        body = await rpc(
            client,
            sandbox.urls()["relay_rpc"],
            "quote",
            {
                "core_asset_identifier_in": NEAR,
                "core_asset_identifier_out": USDC,
                "exact_amount_out": str(9 * E6),
                "min_deadline_ms": 1000,
            },
        )
        (offer,) = body["result"]
        assert offer["amount_out"] == str(9 * E6) and offer["amount_in"] == str(3 * E24)
        assert solver.events[0]["exact_amount_out"] == str(9 * E6)
        assert "exact_amount_in" not in solver.events[0]
    finally:
        await solver.stop()


async def _quote(sb: Sandbox, client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    return await rpc(
        client,
        sb.urls()["relay_rpc"],
        "quote",
        {
            "core_asset_identifier_in": NEAR,
            "core_asset_identifier_out": USDC,
            "exact_amount_in": str(E24),
            "min_deadline_ms": 60000,
            **extra,
        },
    )


def _bad_signature(event: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    sig = answer["signed_data"]["signature"]
    answer["signed_data"]["signature"] = sig[:-2] + ("1" if sig[-2] != "1" else "2") + sig[-1]
    return answer


def _wrong_output(event: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    answer["quote_output"] = {"amount_out": "1"}
    return answer


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"tamper": _bad_signature}, "invalid signature"),
        ({"overrides": {"recipient": "other.sandbox"}}, "wrong verifying_contract"),
        ({"overrides": {"deadline_ms": 1000}}, "deadline too short"),
        ({"overrides": {"salt": "00000000"}}, "simulation failed: invalid salt"),
        ({"overrides": {"extra_in": 1}}, "quote does not match the request"),
        ({"tamper": _wrong_output}, "quote does not match the request"),
        ({"delay_s": 0.9}, "late answer"),
    ],
)
async def test_bad_answers_are_refused_with_a_reason(
    sandbox: Sandbox, client: httpx.AsyncClient, kwargs: dict[str, Any], reason: str
) -> None:
    solver = await solver_on(sandbox, **kwargs)
    try:
        body = await _quote(sandbox, client)
        assert body["result"] == []
        for _ in range(150):
            if solver.reply_errors():
                break
            await asyncio.sleep(0.01)
        assert solver.reply_errors()[0].startswith(reason), solver.reply_errors()
    finally:
        await solver.stop()
    # The server keeps serving after every refusal.
    healthy = await solver_on(sandbox)
    try:
        result = (await _quote(sandbox, client))["result"]
        assert len(result) == 1, (healthy.reply_errors(), sandbox.bus.stats)
    finally:
        await healthy.stop()


async def test_solver_that_cannot_afford_is_refused(
    sandbox: Sandbox, client: httpx.AsyncClient
) -> None:
    key = SecretKey.generate()  # never funded
    solver = ScriptedSolver(sandbox.urls()["relay_ws"], key, sandbox.ledger)
    await solver.start()
    try:
        assert (await _quote(sandbox, client))["result"] == []
        await asyncio.sleep(0.05)
        assert solver.reply_errors() == ["simulation failed: insufficient balance or overflow"]
    finally:
        await solver.stop()


async def test_reused_nonce_is_refused(sandbox: Sandbox, client: httpx.AsyncClient) -> None:
    nonce = bytes.fromhex(sandbox.ledger.current_salt()) + bytes(28)
    solver = await solver_on(sandbox, overrides={"nonce": nonce})
    user = SecretKey.generate()
    fund(sandbox, user, {NEAR: 10 * E24})
    url = sandbox.urls()["relay_rpc"]
    try:
        (offer,) = (await _quote(sandbox, client))["result"]
        item = user_item(user, sandbox.ledger, {NEAR: -E24, USDC: int(offer["amount_out"])})
        published = await rpc(
            client,
            url,
            "publish_intent",
            {"quote_hashes": [offer["quote_hash"]], "signed_data": item},
        )
        await wait_status(client, url, published["result"]["intent_hash"], "SETTLED")
        assert (await _quote(sandbox, client))["result"] == []
        await asyncio.sleep(0.05)
        assert solver.reply_errors()[-1] == "simulation failed: nonce was already used"
    finally:
        await solver.stop()


async def test_publish_failures_carry_reasons(sandbox: Sandbox, client: httpx.AsyncClient) -> None:
    solver = await solver_on(sandbox)
    user = SecretKey.generate()
    fund(sandbox, user, {NEAR: 10 * E24})
    url = sandbox.urls()["relay_rpc"]
    try:
        (offer,) = (await _quote(sandbox, client))["result"]
        amount_out = int(offer["amount_out"])
        unknown = await rpc(
            client,
            url,
            "publish_intent",
            {
                "quote_hashes": ["1111111111111111111111111111111111111111111"],
                "signed_data": user_item(user, sandbox.ledger, {NEAR: -E24, USDC: amount_out}),
            },
        )
        assert unknown["result"]["status"] == "FAILED"
        assert unknown["result"]["reason"].startswith("unknown quote hash")
        unbalanced = await rpc(
            client,
            url,
            "publish_intent",
            {
                "quote_hashes": [offer["quote_hash"]],
                "signed_data": user_item(user, sandbox.ledger, {NEAR: -E24, USDC: amount_out + 1}),
            },
        )
        assert unbalanced["result"]["status"] == "FAILED"
        assert unbalanced["result"]["reason"].startswith("invariant violated")
        expired = await rpc(
            client,
            url,
            "publish_intent",
            {
                "quote_hashes": [offer["quote_hash"]],
                "signed_data": user_item(
                    user, sandbox.ledger, {NEAR: -E24, USDC: amount_out}, deadline_s=-5
                ),
            },
        )
        assert expired["result"]["reason"] == "deadline has expired"
        wrong_recipient = await rpc(
            client,
            url,
            "publish_intent",
            {
                "quote_hashes": [offer["quote_hash"]],
                "signed_data": user_item(
                    user, sandbox.ledger, {NEAR: -E24, USDC: amount_out}, recipient="x.sandbox"
                ),
            },
        )
        assert wrong_recipient["result"]["reason"] == "wrong verifying_contract"
        good = user_item(user, sandbox.ledger, {NEAR: -E24, USDC: amount_out})
        ok = await rpc(
            client,
            url,
            "publish_intent",
            {"quote_hashes": [offer["quote_hash"]], "signed_data": good},
        )
        assert ok["result"]["status"] == "OK"
        again = await rpc(
            client,
            url,
            "publish_intent",
            {"quote_hashes": [offer["quote_hash"]], "signed_data": good},
        )
        assert again["result"] == {
            "status": "FAILED",
            "reason": "already processed",
            "intent_hash": ok["result"]["intent_hash"],
        }
        missing = await rpc(client, url, "get_status", {"intent_hash": "unknown"})
        assert missing["result"]["status"] == "NOT_FOUND_OR_NOT_VALID"
    finally:
        await solver.stop()


async def test_malformed_input_gets_json_rpc_errors(
    sandbox: Sandbox, client: httpx.AsyncClient
) -> None:
    url = sandbox.urls()["relay_rpc"]
    bad_json = (await client.post(url, content=b"{not json")).json()
    assert bad_json["error"]["code"] == -32700
    envelope = (await client.post(url, json={"id": 1, "method": "quote"})).json()
    assert envelope["error"]["code"] == -32600 and "jsonrpc" in envelope["error"]["message"]
    unknown = await rpc(client, url, "nope", {})
    assert unknown["error"]["code"] == -32601
    both = await rpc(
        client,
        url,
        "quote",
        {
            "core_asset_identifier_in": NEAR,
            "core_asset_identifier_out": USDC,
            "exact_amount_in": "1",
            "exact_amount_out": "1",
        },
    )
    assert both["error"]["code"] == -32602 and "exactly one" in both["error"]["message"]
    number = await rpc(
        client,
        url,
        "quote",
        {"core_asset_identifier_in": NEAR, "core_asset_identifier_out": USDC, "exact_amount_in": 5},
    )
    assert number["error"]["code"] == -32602 and "exact_amount_in" in number["error"]["message"]
    huge = await client.post(url, content=b" " * (2 << 20))
    assert huge.status_code == 413

    async with connect(sandbox.urls()["relay_ws"]) as ws:
        await ws.send("{broken")
        assert orjson.loads(await ws.recv())["error"]["code"] == -32700
        await ws.send(orjson.dumps({"jsonrpc": "1.0", "id": 5, "method": "subscribe"}))
        assert orjson.loads(await ws.recv())["error"]["code"] == -32600
        await ws.send(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 6,
                    "method": "quote_response",
                    "params": [{"quote_id": "nope"}],
                }
            )
        )
        reply = orjson.loads(await ws.recv())
        assert reply["id"] == 6 and reply["error"]["message"] == "unknown quote_id"
        await ws.send(
            orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "subscribe", "params": ["trades"]})
        )
        assert orjson.loads(await ws.recv())["error"]["code"] == -32602
    async with connect(sandbox.urls()["relay_ws"], max_size=None) as ws:
        await ws.send("x" * (2 << 20))
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    # Still serving.
    assert (await _quote(sandbox, client))["result"] == []


async def test_bearer_key_guards_ws_and_rpc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BUS_KEY", "s3cret-key")
    async with (
        Sandbox(sandbox_config(api_key_env="TEST_BUS_KEY"), run_takers=False) as sb,
        httpx.AsyncClient() as c,
    ):
        url = sb.urls()["relay_rpc"]
        denied = await c.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "get_status",
                "params": [{"intent_hash": "x"}],
            },
        )
        assert denied.status_code == 401
        allowed = await c.post(
            url,
            headers={"Authorization": "Bearer s3cret-key"},
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "get_status",
                "params": [{"intent_hash": "x"}],
            },
        )
        assert allowed.json()["result"]["status"] == "NOT_FOUND_OR_NOT_VALID"
        with pytest.raises(InvalidStatus):
            async with connect(sb.urls()["relay_ws"]):
                pass
        async with connect(
            sb.urls()["relay_ws"], additional_headers={"Authorization": "Bearer s3cret-key"}
        ) as ws:
            await ws.send(
                orjson.dumps(
                    {"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": ["quote"]}
                )
            )
            assert orjson.loads(await ws.recv())["result"].startswith("quote-")


async def test_asset_field_prefix_is_one_config_value(client: httpx.AsyncClient) -> None:
    async with (
        Sandbox(sandbox_config(asset_field_prefix="defuse"), run_takers=False) as sb,
        connect(sb.urls()["relay_ws"]) as ws,
    ):
        await ws.send(
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": ["quote"]})
        )
        await ws.recv()
        pending = asyncio.create_task(
            rpc(
                client,
                sb.urls()["relay_rpc"],
                "quote",
                {
                    "defuse_asset_identifier_in": NEAR,
                    "defuse_asset_identifier_out": USDC,
                    "exact_amount_in": "5",
                },
            )
        )
        event = orjson.loads(await ws.recv())["params"]["data"]
        assert (
            event["defuse_asset_identifier_in"] == NEAR and "core_asset_identifier_in" not in event
        )
        assert (await pending)["result"] == []
