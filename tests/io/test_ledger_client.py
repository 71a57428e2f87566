"""LedgerClient against the real sandbox ledger node (spec 4.6; protocol-notes 3–5), plus a
raw HTTP peer for answers the sandbox never gives (garbage shapes)."""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from sandbox.server import Sandbox
from solver.errors import ProtocolError, RemoteError, TransportError
from solver.io.ledger_client import LedgerClient
from solver.protocol.intents import Transfer
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import sign_nep413
from tests.io.peers import http_peer
from tests.sandbox.scripted import NEAR, USDC, user_item

E6 = 10**6
E24 = 10**24


def ledger_client(sb: Sandbox, http: httpx.AsyncClient | None = None, **kw: Any) -> LedgerClient:
    return LedgerClient(sb.urls()["chain_rpc"], sb.ledger.contract_id, http, **kw)


async def test_every_view_reads_the_sandbox_ledger(
    sandbox: Sandbox, http: httpx.AsyncClient
) -> None:
    user = SecretKey.generate()
    account = user.public_key.implicit_account_id()
    sandbox.ledger.deposit(account, NEAR, 5 * E24)
    sandbox.ledger.deposit(account, USDC, 7 * E6)
    client = ledger_client(sandbox, http)

    assert await client.current_salt() == bytes.fromhex(sandbox.ledger.current_salt())
    assert await client.fee() == 25
    assert await client.mt_balance_of(account, NEAR) == 5 * E24
    assert await client.mt_batch_balance_of(account, [USDC, NEAR, "nep141:none.sandbox"]) == [
        7 * E6,
        5 * E24,
        0,
    ]
    assert await client.mt_batch_balance_of(account, []) == []
    assert await client.public_keys_of(account) == [user.public_key.to_text()]
    assert await client.has_public_key(account, user.public_key.to_text())
    assert await client.view("current_salt", {}) == sandbox.ledger.current_salt()

    # A lone token_diff is unbalanced: simulation reports it, it does not panic.
    item = user_item(user, sandbox.ledger, {NEAR: -E24, USDC: 3 * E6})
    simulated = await client.simulate_intents([item])
    assert simulated["invariant_violated"]["error"] == "unmatched_deltas"
    assert simulated["intents_executed"][0]["account_id"] == account
    assert simulated["state"]["current_salt"] == sandbox.ledger.current_salt()

    # A nonce flips to used once an intent carrying it executes.
    nonce = salted_nonce(await client.current_salt())
    assert await client.is_nonce_used(account, nonce) is False
    transfer = sign_nep413(
        user,
        signer_id=account,
        verifying_contract=sandbox.ledger.contract_id,
        deadline=datetime.now(UTC) + timedelta(seconds=60),
        nonce=nonce,
        intents=[Transfer(receiver_id="bob.sandbox", tokens={USDC: E6})],
    )
    sandbox.chain.execute([transfer.model_dump(mode="json", exclude_none=True)])
    assert await client.is_nonce_used(account, nonce) is True
    assert await client.mt_balance_of(account, USDC) == 6 * E6
    with pytest.raises(ProtocolError):
        await client.is_nonce_used(account, b"short")


async def test_contract_panics_and_node_errors_are_remote_errors(sandbox: Sandbox) -> None:
    async with ledger_client(sandbox) as client:
        with pytest.raises(RemoteError) as panic:
            await client.mt_balance_of("Not A Valid Account!", NEAR)
        assert "invalid account id" in panic.value.reason and panic.value.code is None
        with pytest.raises(RemoteError) as missing:
            await client.view("no_such_method")
        assert "MethodNotFound" in missing.value.reason
        bad_salt = user_item(
            SecretKey.generate(), sandbox.ledger, {NEAR: -1, USDC: 1}, nonce=bytes(32)
        )
        with pytest.raises(RemoteError) as refused:
            await client.simulate_intents([bad_salt])
        assert "invalid salt" in refused.value.reason
    # A JSON-RPC error object from the node itself (the contract account does not exist).
    async with LedgerClient(sandbox.urls()["chain_rpc"], "nobody.sandbox") as wrong:
        with pytest.raises(RemoteError) as unknown:
            await wrong.current_salt()
        assert unknown.value.reason.startswith("UNKNOWN_ACCOUNT: ")
        assert unknown.value.code == -32000


async def test_node_stopped_down_or_stalled_is_a_transport_error(sandbox: Sandbox) -> None:
    async with ledger_client(sandbox, timeout_s=0.3) as client:
        await sandbox.stop_service("chain_rpc")
        with pytest.raises(TransportError):
            await client.current_salt()
        await sandbox.start_service("chain_rpc")  # same port
        assert len(await client.current_salt()) == 4

        sandbox.rpc_faults.down = True
        with pytest.raises(TransportError) as down:
            await client.fee()
        assert "503" in str(down.value)
        sandbox.rpc_faults.down = False

        sandbox.rpc_faults.stall_s = 1.0
        with pytest.raises(TransportError) as stalled:
            await client.fee()
        assert "timed out" in str(stalled.value)
        sandbox.rpc_faults.stall_s = 0
        assert await client.fee() == 25


def _answer(value: Any) -> Callable[[bytes], tuple[int, bytes]]:
    """A node that answers every view with ``value`` as the method's JSON return."""

    def handler(body: bytes) -> tuple[int, bytes]:
        request = orjson.loads(body)
        result = {"result": list(orjson.dumps(value)), "logs": [], "block_height": 1}
        return 200, orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})

    return handler


def _raw(status: int, body: bytes) -> Callable[[bytes], tuple[int, bytes]]:
    return lambda _request: (status, body)


@pytest.mark.parametrize(
    ("call", "value", "needle"),
    [
        ("current_salt", 12345678, "current_salt: expected a string"),
        ("current_salt", "xyz", "current_salt: salt must be 8 hex"),
        ("fee", "25", "fee: expected pips"),
        ("fee", True, "fee: expected pips"),
        ("mt_balance_of", 5, "mt_balance_of: amount must be a decimal string"),
        ("mt_balance_of", str(1 << 128), "mt_balance_of: amount"),
        ("mt_batch_balance_of", {"a": "1"}, "mt_batch_balance_of: expected a list"),
        ("mt_batch_balance_of", ["1"], "mt_batch_balance_of: 1 balances for 2 tokens"),
        ("mt_batch_balance_of", ["1", "-2"], "mt_batch_balance_of: amount"),
        ("is_nonce_used", "false", "is_nonce_used: expected a boolean"),
        ("public_keys_of", ["ed25519:x", 3], "public_keys_of: expected a list of strings"),
        ("simulate_intents", [], "simulate_intents: expected an object"),
        ("simulate_intents", {"logs": []}, "simulate_intents: intents_executed"),
    ],
)
async def test_wrong_shapes_are_protocol_errors_naming_the_method(
    call: str, value: Any, needle: str
) -> None:
    async with http_peer(_answer(value)) as url, LedgerClient(url, "intents.sandbox") as client:
        with pytest.raises(ProtocolError) as exc:
            if call == "mt_balance_of":
                await client.mt_balance_of("alice.sandbox", NEAR)
            elif call == "mt_batch_balance_of":
                await client.mt_batch_balance_of("alice.sandbox", [NEAR, USDC])
            elif call == "is_nonce_used":
                await client.is_nonce_used("alice.sandbox", bytes(32))
            elif call == "public_keys_of":
                await client.public_keys_of("alice.sandbox")
            elif call == "simulate_intents":
                await client.simulate_intents([])
            else:
                await getattr(client, call)()
        assert needle in str(exc.value), exc.value


def _envelope(result: Any, request_id: Any = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (200, b"<html>", ProtocolError),
        (200, b"[1, 2]", ProtocolError),
        (200, _envelope({"result": [300, 1]}), ProtocolError),
        (200, _envelope({"result": "abc"}), ProtocolError),
        (200, _envelope({"result": list(b"{not json")}), ProtocolError),
        (200, _envelope("text"), ProtocolError),
        (200, _envelope({"result": list(b'"00000000"')}, request_id=99), ProtocolError),
        (200, _envelope({"error": {"nested": True}}), RemoteError),
        (200, orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": "flat text"}), RemoteError),
        (404, b"{}", RemoteError),
        (500, b"oops", TransportError),
        (502, b"", TransportError),
        (429, b"{}", TransportError),
    ],
)
async def test_garbage_answers_never_crash(
    status: int, body: bytes, error: type[Exception]
) -> None:
    async with http_peer(_raw(status, body)) as url, LedgerClient(url, "x.sandbox") as client:
        with pytest.raises(error):
            await client.current_salt()


async def test_request_shape_is_the_documented_query() -> None:
    seen: list[dict[str, Any]] = []

    def handler(body: bytes) -> tuple[int, bytes]:
        seen.append(orjson.loads(body))
        return _answer(False)(body)

    async with http_peer(handler) as url, LedgerClient(url, "intents.sandbox") as client:
        assert await client.is_nonce_used("alice.sandbox", bytes(range(32))) is False
    (request,) = seen
    params = request["params"]
    assert request["method"] == "query" and request["jsonrpc"] == "2.0"
    assert params["request_type"] == "call_function" and params["finality"] == "final"
    assert params["account_id"] == "intents.sandbox"
    assert params["method_name"] == "is_nonce_used"
    args = orjson.loads(base64.b64decode(params["args_base64"]))
    assert args == {
        "account_id": "alice.sandbox",
        "nonce": base64.b64encode(bytes(range(32))).decode(),
    }


async def test_connection_refused_is_a_transport_error() -> None:
    async with http_peer(_raw(200, b"{}")) as url:
        pass  # the port is closed again
    async with LedgerClient(url, "intents.sandbox", timeout_s=1) as client:
        with pytest.raises(TransportError):
            await client.fee()


class _ImportSearches:
    """A finder first on ``sys.meta_path`` that only counts what the import system looks for:
    a module that is already imported is never looked for again, a missing one every time."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.names.append(name)


async def test_a_poll_searches_no_module_path(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
    """httpcore asks ``import sniffio`` at every lock it sets up (four a request); anyio 4.11
    stopped installing it, and Python does not remember a failed import, so each request
    searched every directory of ``sys.path`` again (encode/httpcore#1103): ~0.1–0.2 ms of the
    loop's time a balance poll. The project depends on sniffio itself, so nothing is searched."""
    client = ledger_client(sandbox, http)
    account = SecretKey.generate().public_key.implicit_account_id()
    await client.mt_batch_balance_of(account, [USDC, NEAR])  # the connection and imports made
    searches = _ImportSearches()
    sys.meta_path.insert(0, searches)
    try:
        for _ in range(3):
            await client.mt_batch_balance_of(account, [USDC, NEAR])
    finally:
        sys.meta_path.remove(searches)
    assert searches.names == []
