"""Paper trading (issue 14): the live bot in shadow mode against the real sandbox, takers off.

A user asks for quotes over the real ``/rpc``: nobody answers (the bot signs and sends nothing),
but the paper book records the fills the backtest's models would have given, with their
inventory and PnL, apart from the real books; the real store is never created, the ledger and
the desk's own inventory and PnL do not move, and status, metrics, the summary line and the
status page (in a real Chromium, when installed) all say SHADOW.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from solver.cli.ops import status_table
from tests.app.browser import Dom, chromium_path, dump_dom
from tests.app.harness import E6, E24, NEAR, USDC, live_bot

TOKEN = "paper-test-token-0123456789"


def shadow_overrides(**fill: Any) -> dict[str, Any]:
    return {"metrics.listen": "127.0.0.1:0", "shadow.fill": fill}


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


async def test_shadow_mode_paper_trades_apart_from_the_real_books(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    fill = {"model": "always", "taker": {"kind": "fixed", "tolerance_bps": 60}}
    async with live_bot(tmp_path, overrides=shadow_overrides(**fill), shadow=True) as bot:
        app = bot.app
        assert app.shadow_mode is not None and app.store is None
        ledger_before = bot.balances()
        confirmed = dict(app.desk.inventory.confirmed)

        # The user sells 10 wNEAR twice: nobody answers, two paper fills at 25 bp of spread.
        for _ in range(2):
            assert await bot.unanswered(NEAR, USDC, exact_in=10 * E24) == []
        paper = app.shadow_mode.book
        assert (paper.quotes, paper.fills, dict(paper.lost)) == (2, 2, {})
        assert paper.flows == {NEAR: 20 * E24, USDC: -2 * 29_925_000}
        assert math.isclose(paper.realized_usd, 0.15, abs_tol=1e-9)
        assert math.isclose(paper.volume_usd, 60.0)

        # Nothing real moved: no answer on the bus, the ledger, the desk's books.
        assert bot.sandbox.bus.quotes == {}
        assert bot.balances() == ledger_before
        assert app.desk.inventory.confirmed == confirmed
        assert app.desk.pnl.fills == 0 and app.desk.pnl.realized_usd == 0.0
        assert app.executor.outbox.sent == 0 and app.desk.stats.shadow_quotes == 2

        url = app.control.url if app.control is not None else ""
        auth = {"authorization": f"Bearer {TOKEN}"}
        status = (await bot.http.get(f"{url}/control/status", headers=auth)).json()
        assert status["mode"] == "SHADOW"
        assert status["realized_pnl_usd"] == 0.0 and "recent_fills" not in status
        doc = status["paper"]
        assert (doc["fill_model"], doc["quotes"], doc["fills"]) == ("always", 2, 2)
        assert doc["balances"][NEAR] == str(confirmed[NEAR] + 20 * E24)
        assert doc["balances"][USDC] == str(confirmed[USDC] - 59_850_000)
        assert math.isclose(
            doc["pnl_usd"], 0.15, abs_tol=1e-6
        )  # constant prices: marked = realized
        assert [f["amount_out"] for f in doc["recent_fills"]] == ["29925000"] * 2
        assert doc["recent_fills"][0]["edge_bps"] == -25.0
        console = Console(record=True, width=200)
        console.print(status_table(status, url, app.config))
        shown = console.export_text()
        assert "SHADOW paper" in shown and "2 fills of 2 shadow quotes" in shown
        assert "recent_fills" not in shown  # for the page, not the terminal
        near = status["pairs"]["wNEAR/USDC"]
        assert (near["paper_fills"], near["fills_24h"]) == (2, 0)

        app.shadow_mode.refresh_metrics()
        text = (await bot.http.get(f"{url}/metrics")).text
        assert metric(text, "solver_paper_fills_total") == 2.0
        assert math.isclose(metric(text, "solver_paper_pnl_realized_usd"), 0.15)
        assert metric(text, f'solver_paper_inventory{{asset="{USDC}"}}') == pytest.approx(
            (confirmed[USDC] - 59_850_000) / E6
        )
        assert app.summary().startswith("SHADOW ") and "paper: quotes=2 fills=2" in app.summary()

        if chromium_path() is not None:
            page = await dump_dom(f"{url}/#token={TOKEN}", tmp_path / "profile")
            dom = Dom(page)
            assert dom.body.get("data-status") == "ok"
            assert dom.get("mode") == "SHADOW" and "paper-section" not in dom.hidden
            rows = dom.rows("paper-fills-table")
            assert [r["amount_out"] for r in rows] == ["29.925 USDC"] * 2
            assert dom.get("paper-fills") == "2 / 2"
            assert dom.rows("fills") == [{"empty": "none"}]  # no real fill
    assert not (tmp_path / "solver.sqlite").exists()  # the real store was never touched


async def test_a_taker_limit_tighter_than_the_spread_fills_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same flow with users who accept at most 10 bp: the 25 bp answers are refused."""
    fill = {"model": "always", "taker": {"kind": "fixed", "tolerance_bps": 10}}
    async with live_bot(tmp_path, overrides=shadow_overrides(**fill), shadow=True) as bot:
        assert await bot.unanswered(NEAR, USDC, exact_in=10 * E24) == []
        shadow = bot.app.shadow_mode
        assert shadow is not None
        paper = shadow.book
        assert (paper.quotes, paper.fills, dict(paper.lost)) == (1, 0, {"taker_limit": 1})
        assert paper.flows == {} and paper.marked_usd(bot.app.desk.price) == 0.0
