"""solver.io.control: a real uvicorn on 127.0.0.1:0 around a fake target."""

from __future__ import annotations

import signal
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from solver.config.fields import is_loopback
from solver.errors import ConfigError
from solver.io.control import (
    ControlServer,
    create_control_app,
    parse_listen,
    serve_control,
    url_host,
)
from solver.io.metrics import CONTENT_TYPE, Metrics
from tests.io.fake_control import TOKEN, TOKEN_VAR, FakeTarget, running_control

AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def target() -> FakeTarget:
    return FakeTarget()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def server(
    monkeypatch: pytest.MonkeyPatch, target: FakeTarget, metrics: Metrics
) -> AsyncIterator[ControlServer]:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    async with running_control(target, metrics) as running:
        yield running


@pytest.fixture
async def client(server: ControlServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=5) as c:
        yield c


async def test_serves_on_loopback_with_an_ephemeral_port(server: ControlServer) -> None:
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"


async def test_metrics_are_open_and_in_prometheus_format(
    client: httpx.AsyncClient, metrics: Metrics
) -> None:
    metrics.inc_request()
    metrics.inc_skip("no_price")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    assert CONTENT_TYPE.startswith("text/plain; version=")
    assert 'solver_quote_requests_total{pair="other"} 1.0' in response.text
    assert 'solver_skips_total{pair="other",reason="no_price"} 1.0' in response.text


async def test_healthz_ready_and_not_ready(client: httpx.AsyncClient, target: FakeTarget) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ready": True, "reasons": []}

    target.ready, target.reasons = False, ["bus disconnected", "no salt"]
    response = await client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"ready": False, "reasons": ["bus disconnected", "no salt"]}


async def test_healthz_failing_check_is_not_ready(
    client: httpx.AsyncClient, target: FakeTarget
) -> None:
    target.health_raises = True
    response = await client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["reasons"] == ["health check failed: RuntimeError"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong-token"},
        {"authorization": f"Basic {TOKEN}"},
        {"authorization": "Bearer"},
        {"authorization": f"Bearer {TOKEN}x"},
    ],
)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/control/status", None),
        ("POST", "/control/pause", {"reason": "x"}),
        ("POST", "/control/resume", {}),
    ],
)
async def test_control_needs_the_token(
    client: httpx.AsyncClient,
    target: FakeTarget,
    headers: dict[str, str],
    method: str,
    path: str,
    body: object,
) -> None:
    response = await client.request(method, path, headers=headers, json=body)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert target.calls == []
    assert target.paused == {}


async def test_status_with_the_token(client: httpx.AsyncClient, target: FakeTarget) -> None:
    response = await client.get("/control/status", headers=AUTH)
    assert response.status_code == 200
    assert response.json() == target.status()


async def test_pause_and_resume_call_through(client: httpx.AsyncClient, target: FakeTarget) -> None:
    response = await client.post("/control/pause", headers=AUTH, json={"reason": "maintenance"})
    assert response.status_code == 200
    assert response.json() == {"ok": True, "action": "pause", "pair": None, "reason": "maintenance"}
    assert target.paused == {"*": "maintenance"}

    response = await client.post(
        "/control/pause", headers=AUTH, json={"pair": "wNEAR/USDC", "reason": "wide spreads"}
    )
    assert response.status_code == 200
    assert len(target.paused) == 3

    response = await client.post("/control/resume", headers=AUTH, json={})
    assert response.status_code == 200
    assert "*" not in target.paused
    response = await client.post("/control/resume", headers=AUTH, json={"pair": "wNEAR/USDC"})
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "action": "resume",
        "pair": "wNEAR/USDC",
        "message": "resumed wNEAR/USDC",
        "still_paused": [],
    }
    assert target.paused == {}
    assert target.calls == [
        ("pause", None, "maintenance"),
        ("pause", "wNEAR/USDC", "wide spreads"),
        ("resume", None, False),
        ("resume", "wNEAR/USDC", False),
    ]


async def test_a_resume_that_leaves_the_bot_paused_is_409_with_why(
    client: httpx.AsyncClient, target: FakeTarget
) -> None:
    target.holds = ["daily_loss: daily loss 60.00 USD > 50.0"]
    await client.post("/control/pause", headers=AUTH, json={"reason": "maintenance"})
    response = await client.post("/control/resume", headers=AUTH, json={})
    assert response.status_code == 409
    assert response.json() == {
        "ok": False,
        "action": "resume",
        "pair": None,
        "message": "still paused: everything: daily_loss: daily loss 60.00 USD > 50.0",
        "still_paused": ["everything: daily_loss: daily loss 60.00 USD > 50.0"],
    }
    target.holds = []
    response = await client.post("/control/resume", headers=AUTH, json={"accept_balances": True})
    assert response.status_code == 200 and response.json()["ok"] is True
    assert target.calls[-2:] == [("resume", None, False), ("resume", None, True)]


async def test_resume_of_an_unknown_pair_is_404(
    client: httpx.AsyncClient, target: FakeTarget
) -> None:
    response = await client.post("/control/resume", headers=AUTH, json={"pair": "ETH/USDC"})
    assert response.status_code == 404
    assert response.json() == {"detail": "unknown pair ETH/USDC"}


@pytest.mark.parametrize(
    "body",
    [
        {"pair": "wNEARUSDC"},
        {"accept_balances": "perhaps"},
        {"accept_balances": False, "scope": "*"},
    ],
)
async def test_bad_resume_bodies_are_422(
    client: httpx.AsyncClient, target: FakeTarget, body: dict[str, object]
) -> None:
    response = await client.post("/control/resume", headers=AUTH, json=body)
    assert response.status_code == 422
    assert target.calls == []


async def test_unknown_pair_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/control/pause", headers=AUTH, json={"pair": "ETH/USDC", "reason": "x"}
    )
    assert response.status_code == 404
    assert response.json() == {"detail": "unknown pair ETH/USDC"}


@pytest.mark.parametrize(
    "body",
    [
        {"pair": "wNEARUSDC", "reason": "x"},
        {"pair": "a/b/c", "reason": "x"},
        {"pair": "wNEAR/USDC"},
        {"reason": ""},
        {"reason": "x", "scope": "*"},
    ],
)
async def test_bad_pause_bodies_are_422(
    client: httpx.AsyncClient, target: FakeTarget, body: dict[str, str]
) -> None:
    response = await client.post("/control/pause", headers=AUTH, json=body)
    assert response.status_code == 422
    assert target.calls == []


async def test_no_token_configured_disables_control(
    monkeypatch: pytest.MonkeyPatch, target: FakeTarget
) -> None:
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    async with (
        running_control(target) as server,
        httpx.AsyncClient(base_url=server.url, timeout=5) as client,
    ):
        for method, path in (
            ("GET", "/control/status"),
            ("POST", "/control/pause"),
            ("POST", "/control/resume"),
        ):
            response = await client.request(method, path, headers=AUTH, json={"reason": "x"})
            assert response.status_code == 403
            assert response.json() == {"detail": "control disabled"}
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/healthz")).status_code == 200
    assert target.calls == []


async def test_empty_token_counts_as_not_configured(
    monkeypatch: pytest.MonkeyPatch, target: FakeTarget
) -> None:
    monkeypatch.setenv(TOKEN_VAR, "")
    async with (
        running_control(target) as server,
        httpx.AsyncClient(base_url=server.url, timeout=5) as client,
    ):
        response = await client.get("/control/status", headers={"authorization": "Bearer x"})
        assert response.status_code == 403


async def test_token_env_name_is_configurable(
    monkeypatch: pytest.MonkeyPatch, target: FakeTarget
) -> None:
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    monkeypatch.setenv("MY_BOT_TOKEN", "other-token")
    app = create_control_app(target, Metrics(), token_env="MY_BOT_TOKEN")
    server = await serve_control(app, "localhost:0")
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
            ok = await client.get(
                "/control/status", headers={"authorization": "Bearer other-token"}
            )
            assert ok.status_code == 200
    finally:
        await server.stop()


async def test_responses_do_not_stall(server: ControlServer, client: httpx.AsyncClient) -> None:
    """TCP_NODELAY on the accepted sockets: no ~40 ms Nagle / delayed-ACK stall per request.

    The option itself is read, not the time a request takes (a busy machine makes that slow
    for other reasons): uvicorn's connections carry the socket asyncio accepted."""
    assert (await client.get("/metrics")).status_code == 200
    connections = server.server.server_state.connections
    assert len(connections) == 1  # the client's keep-alive connection
    for connection in connections:
        sock = connection.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_stop_closes_the_port(server: ControlServer) -> None:
    url = server.url
    await server.stop()
    async with httpx.AsyncClient(timeout=2) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(url + "/healthz")


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "10.1.2.3:0", "[::]:0", "example.com:0"])
async def test_refuses_non_loopback(listen: str, target: FakeTarget) -> None:
    app = create_control_app(target, Metrics())
    with pytest.raises(ConfigError, match="not a loopback address"):
        await serve_control(app, listen)


@pytest.mark.parametrize("listen", ["127.0.0.1", "127.0.0.1:99999", ":80", "host:port"])
async def test_bad_listen_addresses(listen: str, target: FakeTarget) -> None:
    with pytest.raises(ConfigError, match="host:port"):
        await serve_control(create_control_app(target, Metrics()), listen)


async def test_port_in_use_is_a_config_error(server: ControlServer, target: FakeTarget) -> None:
    app = create_control_app(target, Metrics())
    with pytest.raises(ConfigError, match="cannot listen"):
        await serve_control(app, f"127.0.0.1:{server.port}")


def test_address_helpers() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert is_loopback("127.0.0.1")
    assert is_loopback("127.5.6.7")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.168.1.1")
    assert not is_loopback("localhost.example.com")
    assert url_host("0.0.0.0") == "127.0.0.1"
    assert url_host("::") == "[::1]"
    assert url_host("::1") == "[::1]"
    assert url_host("127.0.0.1") == "127.0.0.1"


async def test_leaves_the_bots_signal_handlers_alone(target: FakeTarget) -> None:
    """uvicorn would take SIGINT / SIGTERM for itself; the bot's own handlers must stay."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    async with running_control(target):
        assert {sig: signal.getsignal(sig) for sig in before} == before
