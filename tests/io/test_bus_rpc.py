"""BusRpcClient against the sandbox relay's real ``/rpc`` endpoint (spec 4.7, 3.2, 7)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from sandbox.server import Sandbox
from solver.errors import ProtocolError, RemoteError, TransportError
from solver.io.bus_rpc import BusRpcClient
from solver.protocol.bus import INVALID_PARAMS, IntentStatus, PublishStatus, QuoteParams
from solver.protocol.keys import SecretKey
from tests.io.peers import http_peer
from tests.sandbox.scripted import NEAR, USDC, sandbox_config, user_item

E24 = 10**24


async def test_quote_status_and_errors(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
    client = BusRpcClient(sandbox.urls()["relay_rpc"], client=http)
    params = QuoteParams(
        core_asset_identifier_in=NEAR, core_asset_identifier_out=USDC, exact_amount_in=E24
    )
    assert await client.quote(params) == []  # no solver connected
    assert await client.quote({**params.model_dump(mode="json"), "exact_amount_in": "5"}) == []

    status = await client.get_status("unknown-intent")
    assert status.status is IntentStatus.NOT_FOUND_OR_NOT_VALID
    assert status.intent_hash == "unknown-intent" and status.data is None

    with pytest.raises(RemoteError) as both:
        await client.quote(
            {
                "core_asset_identifier_in": NEAR,
                "core_asset_identifier_out": USDC,
                "exact_amount_in": "1",
                "exact_amount_out": "1",
            }
        )
    assert both.value.code == INVALID_PARAMS and "exactly one" in both.value.reason
    with pytest.raises(RemoteError) as number:
        await client.quote(
            {
                "core_asset_identifier_in": NEAR,
                "core_asset_identifier_out": USDC,
                "exact_amount_in": 5,
            }
        )
    assert number.value.code == INVALID_PARAMS
    with pytest.raises(RemoteError) as unknown_method:
        await client.call("no_such_method", {})
    assert unknown_method.value.code == -32601

    user = SecretKey.generate()
    item = user_item(user, sandbox.ledger, {NEAR: -E24, USDC: 3})
    failed = await client.publish_intent(["1" * 43], item)
    assert failed.status is PublishStatus.FAILED
    assert failed.reason is not None and failed.reason.startswith("unknown quote hash")
    many = await client.publish_intents(["1" * 43], [item])
    assert many.status is PublishStatus.FAILED


async def test_relay_down_is_a_transport_error(sandbox: Sandbox) -> None:
    async with BusRpcClient(sandbox.urls()["relay_rpc"], timeout_s=1) as client:
        await sandbox.stop_service("relay")
        with pytest.raises(TransportError):
            await client.get_status("x")
        await sandbox.start_service("relay")
        assert (await client.get_status("x")).status is IntentStatus.NOT_FOUND_OR_NOT_VALID


async def test_bearer_key_and_asset_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_IO_BUS_KEY", "k3y")
    config = sandbox_config(api_key_env="TEST_IO_BUS_KEY", asset_field_prefix="defuse")
    async with Sandbox(config, run_takers=False) as sb:
        url = sb.urls()["relay_rpc"]
        async with BusRpcClient(url, asset_field_prefix="defuse") as anonymous:
            with pytest.raises(RemoteError) as denied:
                await anonymous.get_status("x")
            assert denied.value.reason == "unauthorized" and denied.value.code == 401
        async with BusRpcClient(url, api_key="k3y", asset_field_prefix="defuse") as client:
            # core_* keys go out as defuse_*: the relay accepts them.
            offers = await client.quote(
                {
                    "core_asset_identifier_in": NEAR,
                    "core_asset_identifier_out": USDC,
                    "exact_amount_in": "5",
                }
            )
            assert offers == []
            with pytest.raises(RemoteError) as missing:  # a core-only relay field is missing
                await client.quote({"exact_amount_in": "5"})
            assert missing.value.code == INVALID_PARAMS


@pytest.mark.parametrize(
    ("method", "result"),
    [
        ("quote", {"not": "a list"}),
        ("quote", [1]),
        ("quote", [{"quote_hash": "h", "amount_in": 1}]),
        ("get_status", {"intent_hash": "h", "status": "MAYBE"}),
        ("get_status", "SETTLED"),
        ("publish_intent", {"status": "PERHAPS"}),
    ],
)
async def test_wrong_result_shapes_are_protocol_errors(method: str, result: object) -> None:
    def handler(body: bytes) -> tuple[int, bytes]:
        request = orjson.loads(body)
        return 200, orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})

    async with http_peer(handler) as url, BusRpcClient(url) as client:
        with pytest.raises(ProtocolError) as exc:
            if method == "quote":
                await client.quote({})
            elif method == "get_status":
                await client.get_status("h")
            else:
                await client.publish_intent([], {})
        assert method in str(exc.value)


async def test_quote_results_are_renamed_back_to_core() -> None:
    item = {
        "quote_hash": "qh",
        "defuse_asset_identifier_in": NEAR,
        "defuse_asset_identifier_out": USDC,
        "amount_in": "10",
        "amount_out": "30",
        "expiration_time": "2030-01-01T00:00:00.000Z",
    }
    seen: list[dict[str, object]] = []

    def handler(body: bytes) -> tuple[int, bytes]:
        request = orjson.loads(body)
        seen.append(request)
        return 200, orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": [item]})

    async with http_peer(handler) as url, BusRpcClient(url, asset_field_prefix="defuse") as c:
        (offer,) = await c.quote(
            QuoteParams(
                core_asset_identifier_in=NEAR, core_asset_identifier_out=USDC, exact_amount_in=10
            )
        )
    assert offer.core_asset_identifier_in == NEAR and offer.amount_out == 30
    assert seen[0]["params"] == [
        {
            "defuse_asset_identifier_in": NEAR,
            "defuse_asset_identifier_out": USDC,
            "exact_amount_in": "10",
            "min_deadline_ms": 60000,
        }
    ]
