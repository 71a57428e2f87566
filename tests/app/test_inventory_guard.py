"""A quote that would exceed free inventory is never signed, even with 50 concurrent requests
for the whole balance (issue 4, item 2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from solver.core.quoting import INSUFFICIENT_INVENTORY, STRATEGY_NO_QUOTE
from tests.app.harness import E6, E18, E24, ETH, FLOORS, NEAR, USDC, eventually, live_bot

FREE_USDC = 3_000 * E6
REQUESTS = 50


@pytest.mark.parametrize(
    ("strategy", "reasons"),
    [
        # The built-in checks free inventory itself and declines: "strategy_no_quote".
        ("spread", {STRATEGY_NO_QUOTE, INSUFFICIENT_INVENTORY}),
        # A strategy that never looks at inventory: the pipeline's own guard refuses.
        ("tests.app.strategies:Greedy", {INSUFFICIENT_INVENTORY}),
    ],
)
async def test_concurrent_requests_for_the_whole_balance_get_at_most_one_offer(
    tmp_path: Path, strategy: str, reasons: set[str]
) -> None:
    balances = {USDC: FLOORS[USDC] + FREE_USDC, NEAR: 1_000 * E24, ETH: E18}
    overrides = {"pairs.0.strategy": strategy, "pairs.0.params": {}}
    async with live_bot(tmp_path, balances=balances, overrides=overrides) as bot:
        app = bot.app
        assert app.desk.inventory.free(USDC) == FREE_USDC
        # 1,000 wNEAR = 3,000 USD: amount_out is 2,992.5 USDC, ~the whole free balance.
        answers = await asyncio.gather(
            *(bot.quote(NEAR, USDC, exact_in=1_000 * E24) for _ in range(REQUESTS))
        )
        offers = [offer for answer in answers for offer in answer]
        assert len(offers) == 1, offers
        (offer,) = offers
        assert FREE_USDC * 99 // 100 < int(offer["amount_out"]) <= FREE_USDC

        stats = app.desk.stats
        await eventually(lambda: stats.requests == REQUESTS, "every request to be decided")
        assert app.executor.outbox.sent == 1 and stats.shadow_quotes == 0
        assert sum(stats.skipped.values()) == REQUESTS - 1
        assert set(stats.skipped) <= reasons, stats.skipped
        if reasons == {INSUFFICIENT_INVENTORY}:
            assert stats.skipped[INSUFFICIENT_INVENTORY] == REQUESTS - 1
        assert bot.sandbox.bus.stats.quote_answers_ok == 1

        # The one open reservation fits inside what the ledger holds above the floor.
        reservations = list(app.desk.inventory.reservations.values())
        assert [r.asset_out for r in reservations] == [USDC]
        reserved = sum(r.amount_out for r in reservations)
        assert reserved == app.desk.inventory.reserved[USDC] == int(offer["amount_out"])
        assert reserved <= bot.balances()[USDC] - FLOORS[USDC]
        assert app.desk.inventory.free(USDC) == FREE_USDC - reserved
