"""What the official 1Click client calls beyond the spec (issue 13; sandbox/swap/client_api.py):
``GET /v0/tokens``, ``GET /v0/any-input/withdrawals``, the optional quote fields
``confidentiality`` / ``rebates`` / ``insured``, and JSON 404s naming the paths the sandbox does
not serve.
The interop suite runs the official client itself against the same endpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.sandbox.scripted import NEAR, USDC
from tests.sandbox.test_swap_api import assert_error
from tests.sandbox.test_swap_harness import E24, SwapWorld, future, swap_world


@pytest.fixture
async def world() -> AsyncIterator[SwapWorld]:
    async with swap_world() as w:
        yield w


async def test_tokens_lists_every_sandbox_token(world: SwapWorld) -> None:
    response = await world.client.get(world.base + "/v0/tokens")
    assert response.status_code == 200
    tokens = {t["assetId"]: t for t in response.json()}
    assert set(tokens) == set(world.sb.config.tokens)
    near = tokens[NEAR]
    assert near == {
        "assetId": NEAR,
        "decimals": 24,
        "blockchain": "near",
        "symbol": "wNEAR",
        "price": world.sb.prices.usd(NEAR),
        "priceUpdatedAt": near["priceUpdatedAt"],
        "contractAddress": "wrap.sandbox",
    }
    assert near["priceUpdatedAt"].endswith("Z") and tokens[USDC]["price"] == 1.0


@pytest.mark.parametrize(
    "extra",
    [
        {"confidentiality": "public"},
        {"confidentiality": "advanced"},
        {"insured": False},
        {"rebates": [{"recipient": "rebate.near", "share": 100}]},
        {
            "rebates": [
                {"recipient": "a.near", "share": 50},
                {"recipient": "b.near", "share": 25.5},
                {"recipient": "c.near", "share": 24.5},
            ]
        },
    ],
)
async def test_optional_client_fields_are_accepted_and_echoed(
    world: SwapWorld, extra: dict[str, Any]
) -> None:
    body = await world.ok_quote(dry=True, **extra)
    for key, value in extra.items():
        assert body["quoteRequest"][key] == value


@pytest.mark.parametrize(
    ("extra", "field", "text"),
    [
        ({"confidentiality": "secret"}, "confidentiality", "Input should be"),
        ({"insured": True}, "insured", "no swap insurance"),
        ({"insured": "false"}, "insured", "valid boolean"),
        ({"rebates": []}, "rebates", "at least 1"),
        ({"rebates": [{"recipient": "a.near", "share": 60}]}, "rebates", "add up to 100"),
        (
            {"rebates": [{"recipient": f"r{i}.near", "share": 25} for i in range(4)]},
            "rebates",
            "at most 3",
        ),
        ({"rebates": [{"recipient": "A.near", "share": 100}]}, "rebates.0.recipient", ""),
        ({"rebates": [{"recipient": "a.near", "share": "100"}]}, "rebates.0.share", ""),
        ({"rebates": [{"recipient": "a.near", "share": 0}]}, "rebates.0.share", ""),
        ({"depositType": "CONFIDENTIAL_INTENTS"}, "depositType", ""),
        ({"recipientType": "CONFIDENTIAL_INTENTS"}, "recipientType", ""),
    ],
)
async def test_bad_client_fields_are_400_naming_the_field(
    world: SwapWorld, extra: dict[str, Any], field: str, text: str
) -> None:
    response = await world.quote(dry=True, **extra)
    assert_error(response, 400, "INVALID_BODY", field)
    assert text in response.json()["message"]


async def test_any_input_withdrawals_list_the_payout(world: SwapWorld) -> None:
    quote = (await world.ok_quote(swapType="ANY_INPUT", deadline=future(60)))["quote"]
    address = quote["depositAddress"]
    url = world.base + "/v0/any-input/withdrawals"
    before = (await world.client.get(url, params={"depositAddress": address})).json()
    assert before["withdrawals"] == [] and before["asset"] == USDC
    assert (before["recipient"], before["page"], before["total"]) == ("bob.near", 1, 0)

    await world.deposit(address, E24)
    done = await world.wait_status(address)
    assert done["status"] == "SUCCESS"
    after = (await world.client.get(url, params={"depositAddress": address})).json()
    [withdrawal] = after["withdrawals"]
    assert withdrawal["status"] == "SUCCESS"
    assert withdrawal["amountOut"] == done["swapDetails"]["amountOut"]
    assert withdrawal["withdrawFee"] == "0" and withdrawal["hash"]
    later = await world.client.get(
        url, params={"depositAddress": address, "timestampFrom": future(3600)}
    )
    assert later.json()["withdrawals"] == []


async def test_withdrawals_refuse_bad_queries(world: SwapWorld) -> None:
    url = world.base + "/v0/any-input/withdrawals"
    exact = (await world.ok_quote(deadline=future(60)))["quote"]["depositAddress"]
    response = await world.client.get(url, params={"depositAddress": exact})
    assert_error(response, 400, "BAD_PARAMETER", "depositAddress")
    assert "ANY_INPUT quotes only" in response.json()["message"]
    assert_error(await world.client.get(url, params={"depositAddress": "0" * 64}), 404, "NOT_FOUND")
    assert_error(await world.client.get(url), 400, "BAD_PARAMETER", "depositAddress")
    for params in ({"limit": "51"}, {"page": "0"}, {"sortOrder": "up"}, {"extra": "1"}):
        response = await world.client.get(url, params={"depositAddress": exact, **params})
        assert_error(response, 400, "BAD_PARAMETER")


@pytest.mark.parametrize(
    ("method", "path", "text"),
    [
        ("POST", "/v0/generate-intent", "is a path of the 1Click API that the sandbox does not"),
        ("POST", "/v0/submit-intent", "is a path of the 1Click API"),
        ("GET", "/v0/account/balances", "is a path of the 1Click API"),
        ("POST", "/v0/auth/authenticate", "is a path of the 1Click API"),
        ("GET", "/v0/nothing-here", "no such path: GET /v0/nothing-here"),
    ],
)
async def test_unserved_paths_are_json_404s_naming_them(
    world: SwapWorld, method: str, path: str, text: str
) -> None:
    response = await world.client.request(method, world.base + path, json={})
    assert_error(response, 404, "NOT_FOUND")
    message = response.json()["message"]
    assert text in message and path in message


async def test_wrong_method_names_the_path(world: SwapWorld) -> None:
    response = await world.client.delete(world.base + "/v0/tokens")
    assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert response.headers["allow"] == "GET"
    assert response.json()["message"] == "DELETE is not allowed on /v0/tokens (allowed: GET)"
