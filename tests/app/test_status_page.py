"""The status page (issue 14) in a real headless Chromium against the real bot and sandbox.

The bot serves its control API on 127.0.0.1 port 0 with a token; one trade settles so the
fills table has a row, one pair is paused by the operator; Chromium loads
``/#token=...`` (the token never in a query string), the page fetches ``/control/status`` with
it, and the dumped DOM must show what the status says: mode, state, inventory in whole tokens
with symbols, the per-pair table's cells and the fill. A screenshot is taken and must be a real
1280x900 picture, not a blank page. Skipped (with the reason) when chromium is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib import image

from tests.app.browser import Dom, dump_dom, require_chromium, screenshot
from tests.app.harness import E6, E24, NEAR, USDC, LiveBot, eventually, live_bot

TOKEN = "page-test-token-0123456789"
CONTROL = {"metrics.listen": "127.0.0.1:0"}


def page_url(bot: LiveBot, token: str = TOKEN) -> str:
    assert bot.app.control is not None
    return f"{bot.app.control.url}/#token={token}"


async def settle_one_trade(bot: LiveBot) -> None:
    """The user sells 10 wNEAR for USDC; wait until the store holds the fill."""
    user = bot.new_user({NEAR: 10**30})
    (offer,) = await bot.quote(NEAR, USDC, exact_in=10 * E24)
    await bot.take(user, offer)
    store = bot.app.store
    assert store is not None
    await eventually(lambda: len(store.fills_since()) == 1, "the fill in the store")


async def test_the_status_page_shows_the_bot_in_a_real_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_chromium()
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    async with live_bot(tmp_path, overrides=CONTROL) as bot:
        await settle_one_trade(bot)
        bot.app.operator.pause("ETH/USDC", "checking the page")
        status = bot.app.operator.status()
        assert status["recent_fills"][0]["amount_in"] == str(10 * E24)

        dom = Dom(await dump_dom(page_url(bot), tmp_path / "profile-dom"))
        png = await screenshot(page_url(bot), tmp_path / "status.png", tmp_path / "profile-png")

    assert dom.body.get("data-status") == "ok", dom.get("error")
    assert dom.get("mode") == "LIVE" and dom.get("state") == "RUNNING"
    assert dom.get("connection") == "connected"
    assert "paper-section" in dom.hidden  # a live bot has no paper book

    pairs = {row["pair"]: row for row in dom.rows("pairs")}
    assert set(pairs) == {"wNEAR/USDC", "ETH/USDC"}, pairs
    near, eth = pairs["wNEAR/USDC"], pairs["ETH/USDC"]
    assert (near["state"], near["fills_24h"], near["open_quotes"]) == ("RUNNING", "1", "0")
    assert near["strategy"] == "spread" and near["paused"] == "–"
    # 10 wNEAR at 3 USD for 29.925 USDC: the spread's 25 bp, 0.075 USD of realized edge.
    assert near["realized_pnl_usd_24h"] == "0.075"
    assert (eth["state"], eth["fills_24h"]) == ("PAUSED", "0")
    assert eth["paused"] == "operator: checking the page"

    (fill,) = dom.rows("fills")
    assert fill["pair"] == "wNEAR → USDC"
    assert (fill["amount_in"], fill["amount_out"]) == ("10 wNEAR", "29.925 USDC")
    assert fill["realized_pnl_usd"] == "0.075"

    inventory = {row["token"]: row for row in dom.rows("inventory")}
    assert set(inventory) == {"USDC", "wNEAR", "ETH"}
    # 20,000 USDC - 29.925 paid out - the 1,000 USDC floor; 5,000 + 10 wNEAR - 100 floor.
    assert inventory["USDC"]["free"] == "18,970.075 USDC"
    assert inventory["wNEAR"]["free"] == "4,910 wNEAR"
    assert inventory["ETH"]["reserved"] == "0 ETH"

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(str(png))
    assert pixels.shape[:2] == (900, 1280)
    colours = {tuple(p) for p in pixels[::9, ::8, :3].reshape(-1, 3).tolist()}
    assert len(colours) > 20, "the screenshot is (nearly) blank"


async def test_a_wrong_token_shows_the_token_form_and_no_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_chromium()
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    async with live_bot(tmp_path, overrides=CONTROL) as bot:
        dom = Dom(await dump_dom(page_url(bot, "wrong-token"), tmp_path / "profile"))
    assert dom.body.get("data-status") == "login"
    assert dom.get("error") == "The token was refused."
    assert dom.rows("pairs") == [] and "content" in dom.hidden


async def test_the_last_reconciliation_is_rows_in_whole_units_not_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24: a mismatch read ``MISMATCH {"nep141:usdc.sandbox":"-7000000"}``; now one row
    per asset with its symbol and the gap in whole tokens."""
    require_chromium()
    monkeypatch.setenv("SOLVER_CONTROL_TOKEN", TOKEN)
    errors = ["PAUSED: reconciliation", "ALERT: reconciliation"]
    async with live_bot(tmp_path, overrides=CONTROL, allowed_errors=errors) as bot:
        bot.sandbox.ledger.balances[bot.app.account][USDC] -= 7 * E6 + E6 // 4
        report = bot.app.view.reconciliation

        def mismatched() -> bool:
            return report.report is not None and not report.report["ok"]

        await eventually(mismatched, "the mismatch", 5)
        bot.overstated.clear()  # the harness saw the theft before the bot did, rightly
        dom = Dom(await dump_dom(page_url(bot), tmp_path / "profile"))

    assert dom.body.get("data-status") == "ok", dom.get("error")
    assert dom.rows("reconciliation-table") == [{"token": "USDC", "gap": "-7.25 USDC"}]
    text = dom.get("reconciliation")
    assert "MISMATCH" in text and "{" not in text and "nep141:" not in text, text
