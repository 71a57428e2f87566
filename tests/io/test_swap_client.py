"""The swap and history API clients against the sandbox's own swap and history APIs on
127.0.0.1 (spec 4.1–4.5, 5.1, 7, 8), with a scripted market maker on its bus; broken answers
come from a raw HTTP peer (:func:`tests.io.peers.http_peer`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from solver.errors import ConfigError, ProtocolError, RemoteError, TransportError
from solver.io.swap_client import HistoryApiClient, SwapApiClient, token_from_env
from solver.protocol.history import HistoryStatus, TransactionsPagesQuery, TransactionsQuery
from solver.protocol.swap import (
    DepositSubmitRequest,
    DepositType,
    QuoteRequest,
    RecipientType,
    RefundType,
    SwapStatus,
    SwapType,
)
from tests.app.harness import E6, E24, NEAR, USDC
from tests.io.peers import http_peer
from tests.io.swap_sandbox import SwapSandbox, swap_sandbox

ACCOUNT = "solver.test"


def request(**changes: object) -> QuoteRequest:
    fields: dict[str, object] = {
        "dry": False,
        "swap_type": SwapType.EXACT_INPUT,
        "slippage_tolerance": 50,
        "origin_asset": NEAR,
        "deposit_type": DepositType.INTENTS,
        "destination_asset": USDC,
        "amount": 10 * E24,
        "refund_to": ACCOUNT,
        "refund_type": RefundType.INTENTS,
        "recipient": ACCOUNT,
        "recipient_type": RecipientType.INTENTS,
        "deadline": datetime.now(UTC) + timedelta(minutes=30),
    }
    fields.update(changes)
    return QuoteRequest.model_validate(fields)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[SwapSandbox]:
    async with swap_sandbox(tmp_path) as w:
        yield w


# ---------------------------------------------------------------------------------- swap api


async def test_a_quote_with_the_token_is_fee_free_and_kept_whole(world: SwapSandbox) -> None:
    async with SwapApiClient(world.swap_url, world.token) as client:
        response, body = await client.quote_with_body(request())
    assert response.quote.amount_in == 10 * E24
    assert response.quote.amount_out == 30 * E6  # the maker's price, no platform fee
    assert response.quote.min_amount_out == 30 * E6 * (10_000 - 50) // 10_000
    assert response.quote.deposit_address is not None and response.quote.deadline is not None
    assert response.quote_request == request().model_copy(
        update={"deadline": response.quote_request.deadline}
    )
    # The answer as received: the service's signature and every field, for disputes.
    assert body["signature"] == response.signature and body["signature"]
    assert body["quote"]["amountOut"] == "30000000"


async def test_without_a_token_the_platform_fee_applies(world: SwapSandbox) -> None:
    async with SwapApiClient(world.swap_url) as client:
        response = await client.quote(request(dry=True))
    assert response.quote.amount_out == 30 * E6 * (10_000 - 20) // 10_000  # 0.2 % (spec 1.3)
    assert response.quote.deposit_address is None and response.quote.deadline is None


async def test_a_dry_quote_with_deposit_fields_breaks_rule_4_1(world: SwapSandbox) -> None:
    async with SwapApiClient(world.swap_url, world.token) as client:
        _, body = await client.quote_with_body(request())
    body["quoteRequest"]["dry"] = True
    answer = orjson.dumps(body)
    async with http_peer(lambda _: (200, answer)) as peer, SwapApiClient(peer) as client:
        with pytest.raises(ProtocolError, match="dry quote carries deposit_address"):
            await client.quote(request(dry=True))


async def test_submit_and_status(world: SwapSandbox) -> None:
    async with SwapApiClient(world.swap_url, world.token) as client:
        quoted = await client.quote(request())
        address = quoted.quote.deposit_address
        assert address is not None
        assert (await client.status(address)).status is SwapStatus.PENDING_DEPOSIT
        submitted = await client.submit_deposit(
            DepositSubmitRequest(
                tx_hash="tx-1", deposit_address=address, near_sender_account=ACCOUNT
            )
        )
        assert submitted.status is SwapStatus.KNOWN_DEPOSIT_TX  # known, no funds seen yet
        assert submitted.quote_response.quote.deposit_address == address
        assert submitted.quote_response.signature == quoted.signature


async def test_unknown_deposits_and_bad_requests_are_the_remotes_refusals(
    world: SwapSandbox,
) -> None:
    async with SwapApiClient(world.swap_url, world.token) as client:
        with pytest.raises(RemoteError, match="HTTP 404: no swap for deposit address") as caught:
            await client.status("nobody.test", "memo-1")
        assert caught.value.code == 404
        with pytest.raises(RemoteError) as refused:
            await client.submit_deposit(DepositSubmitRequest(tx_hash="t", deposit_address="x.t"))
        assert refused.value.code == 404
        past = request(deadline=datetime.now(UTC) + timedelta(seconds=1))
        with pytest.raises(RemoteError, match="HTTP 400: deadline must be") as early:
            await client.quote(past)  # the sandbox wants the deadline further ahead
        assert early.value.code == 400  # the official API's bad-input status (protocol-notes 7)


async def test_a_bad_token_is_unauthorized_and_never_repeated(world: SwapSandbox) -> None:
    async with SwapApiClient(world.swap_url, "not.a.jwt") as client:
        with pytest.raises(RemoteError, match="unauthorized") as caught:
            await client.quote(request())
    assert caught.value.code == 401 and "not.a.jwt" not in str(caught.value)


async def test_a_stopped_service_is_a_transport_error(world: SwapSandbox) -> None:
    url = world.swap_url
    await world.sandbox.stop_service("swap_api")
    async with SwapApiClient(url, timeout_s=2) as client:
        with pytest.raises(TransportError):
            await client.quote(request())
    await world.sandbox.start_service("swap_api")
    async with SwapApiClient(url, world.token) as client:
        assert (await client.quote(request(dry=True))).quote.amount_out == 30 * E6


@pytest.mark.parametrize("status", [500, 502, 503, 429, 408])
async def test_no_usable_answer_is_a_transport_error(status: int) -> None:
    async with http_peer(lambda _: (status, b"{}")) as peer, SwapApiClient(peer) as client:
        with pytest.raises(TransportError, match=f"HTTP {status}"):
            await client.quote(request())


@pytest.mark.parametrize(
    ("status", "answer", "error", "match"),
    [
        (401, b"{}", RemoteError, "unauthorized \\(no token was sent\\)"),
        (404, b'{"error": "NOT_FOUND", "message": "gone"}', RemoteError, "HTTP 404: gone"),
        (400, b'{"message": "amount: must be digits"}', RemoteError, "HTTP 400: amount: must be"),
        (418, b"teapot", RemoteError, "HTTP 418: teapot"),
        (200, b"<html>oops</html>", ProtocolError, "not JSON"),
        (200, b"[1, 2]", ProtocolError, "not a JSON object"),
        (200, b'{"correlationId": "c"}', ProtocolError, "timestamp|signature|quote"),
    ],
)
async def test_answers_are_mapped_to_the_project_errors(
    status: int, answer: bytes, error: type[Exception], match: str
) -> None:
    async with http_peer(lambda _: (status, answer)) as peer, SwapApiClient(peer) as client:
        with pytest.raises(error, match=match):
            await client.quote(request())


async def test_amounts_as_json_numbers_are_refused(world: SwapSandbox) -> None:
    async with SwapApiClient(world.swap_url, world.token) as client:
        _, body = await client.quote_with_body(request())
    body["quote"]["amountOut"] = 30_000_000  # a number where the spec has a string
    answer = orjson.dumps(body)
    async with http_peer(lambda _: (200, answer)) as peer, SwapApiClient(peer) as client:
        with pytest.raises(ProtocolError, match="amount"):
            await client.quote(request())


def test_tokens_come_from_a_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWAP_TEST_TOKEN", "  the-token\n")
    assert token_from_env("SWAP_TEST_TOKEN", what="swap api", required=False) == "the-token"
    assert token_from_env(None, what="swap api", required=False) is None
    monkeypatch.delenv("SWAP_TEST_TOKEN")
    with pytest.raises(ConfigError, match="SWAP_TEST_TOKEN holding the token is unset"):
        SwapApiClient.from_env("http://127.0.0.1:9", "SWAP_TEST_TOKEN")
    with pytest.raises(ConfigError, match="required"):
        token_from_env(None, what="history api", required=True)
    with pytest.raises(ConfigError, match="required"):
        HistoryApiClient("http://127.0.0.1:9", "")


# ---------------------------------------------------------------------------------- history


async def made_swaps(world: SwapSandbox, count: int) -> list[str]:
    """``count`` finished swaps of 1, 2, … NEAR; their deposit addresses, oldest first."""
    addresses = []
    for n in range(count):
        done = await world.swap(f"user{n}.test", (n + 1) * E24)
        assert done["status"] == "SUCCESS", done
        addresses.append(done["quoteResponse"]["quote"]["depositAddress"])
    return addresses


async def test_iter_transactions_walks_every_page_with_the_cursor(world: SwapSandbox) -> None:
    addresses = await made_swaps(world, 5)
    query = TransactionsQuery(number_of_transactions=2, statuses=[HistoryStatus.SUCCESS])
    async with HistoryApiClient(world.history_url, world.token) as client:
        first = await client.transactions(query)
        walked = [r async for r in client.iter_transactions(query)]
        limited = [r async for r in client.iter_transactions(query, max_pages=1)]
    newest_first = addresses[::-1]
    assert [r.deposit_address for r in first] == newest_first[:2]
    assert [r.deposit_address for r in walked] == newest_first
    assert [r.deposit_address for r in limited] == newest_first[:2]
    oldest = walked[-1]
    assert (oldest.amount_in, oldest.amount_out) == (E24, 3 * E6)
    assert oldest.status is HistoryStatus.SUCCESS and oldest.recipient == "user0.test"


async def test_filters_reach_the_server(world: SwapSandbox) -> None:
    await made_swaps(world, 2)
    async with HistoryApiClient(world.history_url, world.token) as client:
        refunded = await client.transactions(TransactionsQuery(statuses=[HistoryStatus.REFUNDED]))
        later = await client.transactions(
            TransactionsQuery(start_timestamp=datetime.now(UTC) + timedelta(minutes=1))
        )
        both = await client.transactions(TransactionsQuery(min_usd_price=0))
    assert refunded == [] and later == [] and len(both) == 2


async def test_transactions_pages(world: SwapSandbox) -> None:
    addresses = await made_swaps(world, 3)
    async with HistoryApiClient(world.history_url, world.token) as client:
        second = await client.transactions_pages(TransactionsPagesQuery(page=2, per_page=2))
    assert (second.page, second.total_pages, second.total, second.per_page) == (2, 2, 3, 2)
    assert (second.next_page, second.prev_page) == (None, 1)
    assert [r.deposit_address for r in second.data] == [addresses[0]]


async def test_history_needs_a_valid_token(world: SwapSandbox) -> None:
    async with HistoryApiClient(world.history_url, "wrong-token") as client:
        with pytest.raises(RemoteError, match="unauthorized") as caught:
            await client.transactions()
    assert caught.value.code == 401 and "wrong-token" not in str(caught.value)


async def test_a_cursor_that_does_not_advance_is_a_protocol_error(world: SwapSandbox) -> None:
    await made_swaps(world, 2)
    async with HistoryApiClient(world.history_url, world.token) as client:
        page = orjson.dumps(
            [r.model_dump(mode="json", by_alias=True) for r in await client.transactions()]
        )
    async with http_peer(lambda _: (200, page)) as peer, HistoryApiClient(peer, "t") as client:
        with pytest.raises(ProtocolError, match="cursor does not advance"):
            async for _ in client.iter_transactions(TransactionsQuery(number_of_transactions=2)):
                pass


async def test_a_history_answer_that_is_not_a_list_is_a_protocol_error() -> None:
    answer = b'{"data": []}'
    async with http_peer(lambda _: (200, answer)) as peer, HistoryApiClient(peer, "t") as client:
        with pytest.raises(ProtocolError, match="not a JSON array"):
            await client.transactions()
