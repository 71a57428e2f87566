"""Under simulated taker flow the ledger moves by exactly the diffs of the bot's quotes that
settled, the bot hears of every one, and it never believes it holds more than the chain."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sandbox.config import PairSpec, TakersSpec
from sandbox.takers import TakerPopulation
from solver.core.lifecycle import QuoteState
from solver.protocol.bus import IntentStatus
from tests.app.harness import ETH, NEAR, SOLVER_WAIT_MS, TOKENS, USDC, eventually, live_bot

TAKES = 12  # the flow runs until this many takes were published, however long that is


async def test_taker_flow_settles_exactly_the_signed_diffs(tmp_path: Path) -> None:
    async with live_bot(tmp_path) as bot:
        app, sandbox = bot.app, bot.sandbox
        takers = TakerPopulation(
            TakersSpec(
                count=4,
                requests_per_s=12,
                size_usd_median=40,
                tolerance_bps=60,  # the bot's 25 bp spread is inside it
                wait_ms=SOLVER_WAIT_MS,  # the relay ends it when the bot answered
                pairs=[PairSpec(base=NEAR, quote=USDC), PairSpec(base=ETH, quote=USDC)],
            ),
            dict(sandbox.config.tokens),
            sandbox.chain,
            sandbox.prices,
            sandbox.urls()["relay_rpc"],
            seed=11,
        )
        takers.fund()
        start = bot.balances()
        stop_takers = asyncio.Event()
        flow = asyncio.create_task(takers.run(stop_takers))
        await eventually(lambda: takers.stats.published_ok >= TAKES, "the takes", 60)
        stop_takers.set()
        await asyncio.wait_for(flow, 10)

        bus = sandbox.bus
        await eventually(
            lambda: (
                all(r.status is not IntentStatus.PENDING for r in bus.intents.values())
                and all(r.status is not IntentStatus.TX_BROADCASTED for r in bus.intents.values())
            ),
            "every published intent to finish",
        )
        settled = {
            quote_hash
            for record in bus.intents.values()
            if record.status is IntentStatus.SETTLED
            for quote_hash in record.quote_hashes
        }
        # (A publish cancelled by the takers' stop may still settle: hence <=.)
        assert TAKES <= takers.stats.published_ok <= len(settled), takers.stats.as_dict()
        assert takers.stats.publish_failed == {} and bus.stats.settlement_failed == {}

        # The ledger moved by exactly the diffs the bot signed in the settled quotes.
        moved = dict.fromkeys(TOKENS, 0)
        for quote_hash in settled:
            record = bus.quotes[quote_hash]
            moved[record.asset_in] += record.amount_in
            moved[record.asset_out] -= record.amount_out
        end = bot.balances()
        assert {a: end[a] - start[a] for a in TOKENS} == moved

        # The bot heard of every one of them (quote_status, then get_status: SETTLED).
        await eventually(
            lambda: app.desk.stats.outcomes["SETTLED"] == len(settled), "the bot's settlements"
        )
        assert {t.quote_hash for t in bot.transitions if t.new is QuoteState.SETTLED} == settled
        assert app.desk.stats.outcomes["FAILED"] == 0
        mark = app.clock()
        await eventually(
            lambda: (
                app.desk.inventory.confirmed_at is not None
                and app.desk.inventory.confirmed_at > mark
            ),
            "a balance refresh",
        )
        assert app.desk.inventory.confirmed == end
