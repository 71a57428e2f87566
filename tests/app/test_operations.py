"""Operating the live bot (issue 5): the control API and ``/metrics`` end to end with the real
``solver status|pause|resume`` commands, shadow mode, and the ledger RPC going down — short
staleness makes pairs skip and clears by itself, staleness beyond ``risk.max_stale_s`` trips
the kill switch, which only an operator clears."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from solver.cli import main
from solver.core.pauses import GLOBAL
from solver.core.quoting import BELOW_MIN_SIZE, PAUSED, STALE_BALANCES
from solver.io.store.sqlite_store import Store
from tests.app.harness import (
    E6,
    E18,
    E24,
    ETH,
    NEAR,
    USDC,
    LiveBot,
    eventually,
    eventually_async,
    live_bot,
)

TOKEN = "operations-test-token"
CONTROL = {"metrics.listen": "127.0.0.1:0"}


async def cli(*argv: str) -> int:
    """The real ``solver`` command line, off the event loop (it blocks on HTTP)."""
    return await asyncio.to_thread(main, list(argv))


def control_url(bot: LiveBot) -> str:
    assert bot.app.control is not None
    return bot.app.control.url


async def get_metrics(bot: LiveBot) -> str:
    response = await bot.http.get(f"{control_url(bot)}/metrics")
    assert response.status_code == 200
    return response.text


async def test_control_api_and_metrics_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    async with live_bot(tmp_path, overrides=CONTROL) as bot:
        app = bot.app
        url = control_url(bot)
        assert app.control is not None and app.control.port != 0  # port 0: a free one
        health = await bot.http.get(f"{url}/healthz")
        assert (health.status_code, health.json()) == (200, {"ready": True, "reasons": []})
        assert (await bot.http.get(f"{url}/control/status")).status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert (await bot.http.get(f"{url}/control/status", headers=wrong)).status_code == 401

        (offer,) = await bot.quote(NEAR, USDC, exact_in=2 * E24)
        capsys.readouterr()
        assert await cli("status", "--url", url, "--json") == 0
        status: dict[str, Any] = orjson.loads(capsys.readouterr().out)
        assert (status["state"], status["connected"], status["paused"]) == ("RUNNING", True, {})
        assert status["account"] == app.account
        assert status["open_quotes"] == 1
        assert status["reserved"] == {USDC: offer["amount_out"]}
        assert status["open_exposure_usd"] == pytest.approx(int(offer["amount_out"]) / E6)
        assert status["windows"]["1h"] == {
            "quotes": 1,
            "won": 0,
            "win_rate": 0.0,
            "volume_usd": 0.0,
        }
        assert status["last_reconciliation"]["ok"] is True
        near = status["pairs"]["wNEAR/USDC"]
        assert {k: near[k] for k in ("requests", "quotes", "won", "win_rate", "open_quotes")} == {
            "requests": 1,
            "quotes": 1,
            "won": 0,
            "win_rate": 0.0,
            "open_quotes": 1,
        }
        assert near["open_exposure_usd"] == pytest.approx(int(offer["amount_out"]) / E6)
        assert status["pairs"]["ETH/USDC"]["requests"] == 0
        assert await cli("status", "--url", url) == 0  # the table renders too
        table = capsys.readouterr().out
        assert "RUNNING" in table
        # Whole units with symbols (2 wNEAR at 3 USD less 25 bps: 5.985 USDC reserved), and a
        # row per pair.
        assert "5.985 USDC" in table, table
        assert "wNEAR/USDC" in table and "ETH/USDC" in table

        # Pause one pair: both of its directions skip "paused", the other pair still quotes.
        reason = "widening spreads"
        assert await cli("pause", "--url", url, "--pair", "wNEAR/USDC", "--reason", reason) == 0
        assert capsys.readouterr().out.strip() == f"paused wNEAR/USDC: {reason}"
        assert await bot.unanswered(NEAR, USDC, exact_in=2 * E24) == []
        assert await bot.unanswered(USDC, NEAR, exact_in=10 * E6) == []
        assert len(await bot.quote(ETH, USDC, exact_in=E18 // 100)) == 1
        assert app.desk.stats.skipped == {PAUSED: 2}
        assert await cli("status", "--url", url, "--json") == 0
        status = orjson.loads(capsys.readouterr().out)
        assert status["state"] == "RUNNING"  # one pair paused is not the bot paused
        assert status["paused"] == {
            f"{NEAR}->{USDC}": f"operator: {reason}",
            f"{USDC}->{NEAR}": f"operator: {reason}",
        }

        assert await cli("resume", "--url", url, "--pair", "wNEAR/USDC") == 0
        assert capsys.readouterr().out.strip() == "resumed wNEAR/USDC"
        assert app.desk.pauses.as_dict() == {}
        assert len(await bot.quote(NEAR, USDC, exact_in=2 * E24)) == 1

        # Pausing everything (no pair) makes the bot PAUSED: every pair skips.
        assert await cli("pause", "--url", url) == 0
        assert app.desk.pauses.as_dict()[GLOBAL].startswith("operator:")
        assert await bot.unanswered(ETH, USDC, exact_in=E18 // 100) == []
        assert await cli("resume", "--url", url) == 0
        assert GLOBAL not in app.desk.pauses.as_dict()
        capsys.readouterr()

        bot.tick()  # the gauges are refreshed by the periodic risk tick
        text = await get_metrics(bot)
        # Per pair (bounded: the configured pairs and "other").
        assert 'solver_quote_requests_total{pair="wNEAR/USDC"} 4.0' in text
        assert 'solver_quote_requests_total{pair="ETH/USDC"} 2.0' in text
        assert 'solver_quotes_total{pair="wNEAR/USDC"} 2.0' in text
        assert 'solver_quotes_total{pair="ETH/USDC"} 1.0' in text
        assert 'solver_skips_total{pair="wNEAR/USDC",reason="paused"} 2.0' in text
        assert 'solver_skips_total{pair="ETH/USDC",reason="paused"} 1.0' in text
        assert 'solver_mode{mode="LIVE"} 1.0' in text
        assert 'solver_state{state="RUNNING"} 1.0' in text
        assert "solver_connected 1.0" in text
        assert "solver_open_quotes 3.0" in text
        assert f'solver_reconciliation_mismatch{{asset="{USDC}"}} 0.0' in text
        assert "solver_decision_seconds_count 6.0" in text

        # A wrong token is refused by the command too (exit 2, the usage/config error code).
        monkeypatch.setenv("SOLVER_CONTROL_TOKEN", "not-the-token")
        assert await cli("pause", "--url", url) == 2
        assert "refused the token" in capsys.readouterr().err
        assert GLOBAL not in app.desk.pauses.as_dict()


async def test_shadow_mode_decides_but_never_answers_or_stores(tmp_path: Path) -> None:
    async with live_bot(tmp_path, shadow=True) as bot:
        app = bot.app
        assert app.store is None
        assert await bot.unanswered(NEAR, USDC, exact_in=2 * E24) == []
        assert await bot.unanswered(ETH, USDC, exact_in=E18 // 100) == []
        assert await bot.unanswered(NEAR, USDC, exact_in=E24 // 10) == []  # 0.30 USD < 1 USD min
        stats = app.desk.stats
        assert (stats.requests, stats.shadow_quotes, app.executor.outbox.sent) == (3, 2, 0)
        assert stats.skipped == {BELOW_MIN_SIZE: 1}
        assert bot.sandbox.bus.stats.quote_requests == 3
        assert bot.sandbox.bus.stats.quote_answers_ok == 0
        assert bot.sandbox.bus.stats.quote_answers_rejected == {}
        assert app.desk.book.quotes == {} and app.desk.inventory.reserved == {}
    assert store_files(tmp_path) == []  # no store file at all


def store_files(directory: Path) -> list[Path]:
    return list(directory.glob("solver.sqlite*"))


# ---------------------------------------------------------------------------------- stale data

# The scenario is "the ledger RPC down for 30 s"; here the clocks are scaled down by
# configuration: balances refresh every 300 ms and are stale after 1.5 s, the outage lasts ~3 s.
# The node being down stales the salt too; its age limit is kept out of the way, as in a real
# config (balances stale after 15 s, the salt after 20 s), so these tests see the balances.
STALE = {
    "chain.balance_refresh_ms": 300,
    "chain.balance_max_age_ms": 1500,
    "chain.salt_max_age_ms": 60_000,
}


def balance_age(bot: LiveBot) -> float:
    age = bot.app.desk.inventory.balance_age_s(bot.app.clock())
    assert age is not None
    return age


def quote_count(bot: LiveBot) -> int:
    store = bot.app.store
    assert isinstance(store, Store)
    return int(store.stats(3600, bot.app.wall())["quotes"])


async def test_ledger_rpc_outage_skips_for_stale_balances_and_recovers_by_itself(
    tmp_path: Path,
) -> None:
    """The ledger RPC is down for ~3 s (the issue's 30 s scaled down by configuration:
    ``chain.balance_max_age_ms`` 1500, refresh 300 ms). Once the last snapshot is older than
    1.5 s every request skips with ``stale_balances`` and nothing is signed; when the node is
    back the next snapshot clears it by itself. ``risk.max_stale_s`` (10 s) is longer than the
    outage, so the kill switch stays off."""
    overrides = {**STALE, "risk.max_stale_s": 10.0}
    async with live_bot(tmp_path, overrides=overrides) as bot:
        app, sandbox = bot.app, bot.sandbox
        assert len(await bot.quote(NEAR, USDC, exact_in=E24)) == 1
        quoted, stored = app.executor.outbox.sent, quote_count(bot)
        loop = asyncio.get_running_loop()

        await sandbox.stop_service("chain_rpc")
        down_at = loop.time()
        await eventually(lambda: balance_age(bot) > 1.6, "the balances to go stale", 5)
        for asset_in, asset_out, amount in ((NEAR, USDC, E24), (ETH, USDC, E18 // 100)):
            assert await bot.unanswered(asset_in, asset_out, exact_in=amount) == []
        assert app.desk.stats.skipped == {STALE_BALANCES: 2}
        assert app.executor.outbox.sent == quoted and quote_count(bot) == stored
        assert app.jobs.errors.get("balances", 0) >= 1
        await asyncio.sleep(max(0.0, 3.0 - (loop.time() - down_at)))
        assert (
            GLOBAL not in app.desk.pauses.as_dict()
        )  # short staleness never trips the kill switch

        await sandbox.start_service("chain_rpc")
        await eventually(lambda: balance_age(bot) < 1.0, "a fresh snapshot", 5)
        assert len(await bot.quote(NEAR, USDC, exact_in=E24)) == 1
        assert app.executor.outbox.sent == quoted + 1
        bot.tick()
        assert app.desk.pauses.as_dict() == {}
        store = app.store
        assert store is not None and store.open_alerts() == []


async def test_staleness_beyond_max_stale_s_trips_the_kill_switch_until_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same outage with ``risk.max_stale_s`` 2: the risk tick moves the bot to PAUSED
    (reason ``stale_data``, stored as an alert); the node coming back does not clear it, only
    a resume through the control API does."""
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    overrides = {**STALE, **CONTROL, "risk.max_stale_s": 2.0}
    async with live_bot(
        tmp_path, overrides=overrides, allowed_errors=["PAUSED: stale_data", "ALERT: stale_data"]
    ) as bot:
        app, sandbox = bot.app, bot.sandbox
        store = app.store
        assert store is not None
        url = control_url(bot)
        auth = {"authorization": f"Bearer {TOKEN}"}

        sandbox.rpc_faults.down = True  # the node answers 503
        await eventually(lambda: GLOBAL in app.desk.pauses.as_dict(), "the kill switch", 6)
        assert balance_age(bot) > 2.0
        assert app.desk.pauses.as_dict()[GLOBAL].startswith("stale_data"), app.desk.pauses.as_dict()
        (alert,) = store.open_alerts()
        assert alert.kind == "stale_data"

        sandbox.rpc_faults.down = False
        await eventually(lambda: balance_age(bot) < 1.0, "a fresh snapshot", 5)
        assert await bot.unanswered(NEAR, USDC, exact_in=E24) == []
        assert app.desk.stats.skipped[PAUSED] == 1
        status = (await bot.http.get(f"{url}/control/status", headers=auth)).json()
        assert status["state"] == "PAUSED" and status["paused"][GLOBAL].startswith("stale_data")

        async def paused_gauge() -> bool:  # the gauges are published on a paced tick
            return 'solver_state{state="PAUSED"} 1.0' in await get_metrics(bot)

        await eventually_async(paused_gauge, "the state gauge at PAUSED", 5)

        resumed = await bot.http.post(f"{url}/control/resume", headers=auth, json={})
        assert resumed.status_code == 200 and resumed.json()["ok"] is True
        assert app.desk.pauses.as_dict() == {} and store.open_alerts() == []
        assert len(await bot.quote(NEAR, USDC, exact_in=E24)) == 1
        bot.tick()
        assert app.desk.pauses.as_dict() == {}  # fresh inputs: the tick does not trip it again
