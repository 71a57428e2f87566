"""Quotes accepted, won, settled on the ledger by exactly the signed diffs (issue 4, item 1),
and a salt rotation mid-run followed (item 4)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from solver.core.lifecycle import QuoteState
from solver.protocol.intents import TokenDiff
from solver.protocol.nonce import parse_nonce
from solver.protocol.signing import parse_signed, verify_signed
from tests.app.harness import E18, E24, ETH, NEAR, TOKENS, USDC, LiveBot, eventually, live_bot


def signed_diff(bot: LiveBot, quote_hash: str) -> tuple[dict[str, int], bytes]:
    """The token_diff the bot signed for ``quote_hash`` (as the bus stored it) and its nonce."""
    record = bot.sandbox.bus.quotes[quote_hash]
    verified = verify_signed(parse_signed(record.signed_data))
    (intent,) = verified.message.intents
    assert isinstance(intent, TokenDiff)
    return dict(intent.diff), verified.nonce


def settled(bot: LiveBot) -> int:
    return bot.app.desk.stats.outcomes["SETTLED"]


async def trade(bot: LiveBot, asset_in: str, asset_out: str, **amount: int) -> dict[str, Any]:
    """Ask, check the offer is the bot's, publish the mirror and wait until the bot's book says
    SETTLED. Returns the offer."""
    user = bot.new_user({asset_in: 10**30})
    done = settled(bot)
    offers = await bot.quote(asset_in, asset_out, **amount)
    assert len(offers) == 1, bot.diagnosis()
    (offer,) = offers
    quote = bot.app.desk.book.find_hash(offer["quote_hash"])
    assert quote is not None and quote.state is QuoteState.OPEN
    assert (quote.amount_in, quote.amount_out) == (
        int(offer["amount_in"]),
        int(offer["amount_out"]),
    )
    await bot.take(user, offer)
    await eventually(lambda: settled(bot) == done + 1, "the bot's book to show SETTLED")
    assert bot.app.desk.book.get(quote.quote_id) is None  # terminal quotes leave the book
    return offer


@pytest.mark.parametrize("fee_pips", [0, 250])
async def test_won_quotes_settle_and_balances_move_by_exactly_the_signed_diffs(
    tmp_path: Path, fee_pips: int
) -> None:
    async with live_bot(tmp_path, fee_pips=fee_pips) as bot:
        app = bot.app
        assert app.desk.state.fee_pips == fee_pips
        start = bot.balances()
        diffs: list[dict[str, int]] = []
        # Exact-in: the user sells 10 wNEAR for USDC; exact-out: the user buys 0.01 ETH.
        for asset_in, asset_out, amount in (
            (NEAR, USDC, {"exact_in": 10 * E24}),
            (USDC, ETH, {"exact_out": E18 // 100}),
        ):
            before = bot.balances()
            offer = await trade(bot, asset_in, asset_out, **amount)
            diff, _ = signed_diff(bot, offer["quote_hash"])
            amount_in, amount_out = int(offer["amount_in"]), int(offer["amount_out"])
            assert diff == {asset_in: amount_in, asset_out: -amount_out}
            after = bot.balances()
            assert after[asset_in] - before[asset_in] == amount_in
            assert after[asset_out] - before[asset_out] == -amount_out - fee(amount_out, fee_pips)
            diffs.append(diff)
        # The spread strategy at 25 bp on constant prices: 10 wNEAR = 30 USD -> 29.925 USDC
        # gross (fee included), 0.01 ETH = 30 USD -> a bit over 30.075 USDC (rounded up).
        assert -diffs[0][USDC] + fee(-diffs[0][USDC], fee_pips) <= 29_925_000
        assert diffs[1][USDC] >= 30_075_188
        end = bot.balances()
        for asset in TOKENS:
            fees = sum(fee(-d[asset], fee_pips) for d in diffs if d.get(asset, 0) < 0)
            assert end[asset] - start[asset] == sum(d.get(asset, 0) for d in diffs) - fees

        # After the next balance refresh the engine's confirmed balances are the ledger's.
        mark = app.clock()
        await eventually(
            lambda: (
                app.desk.inventory.confirmed_at is not None
                and app.desk.inventory.confirmed_at > mark
            ),
            "a balance refresh",
        )
        assert app.desk.inventory.confirmed == end
        assert app.desk.inventory.reserved == {}
        stats = app.desk.stats
        assert (stats.outcomes["WON"], stats.outcomes["SETTLED"]) == (2, 2)
        assert app.executor.outbox.sent == 2 and stats.rejected == 0 and app.jobs.errors == {}
        # WON on quote_status, SETTLING if a poll saw TX_BROADCASTED, then SETTLED.
        path = [t.new for t in bot.transitions if t.new is not QuoteState.SETTLING]
        assert path == [QuoteState.WON, QuoteState.SETTLED] * 2


def fee(amount_out: int, fee_pips: int) -> int:
    return -(-amount_out * fee_pips // 1_000_000)


async def test_salt_rotation_mid_run_is_followed(tmp_path: Path) -> None:
    async with live_bot(tmp_path, overrides={"chain.salt_refresh_ms": 300}) as bot:
        ledger, app = bot.sandbox.ledger, bot.app
        old = ledger.current_salt()
        offer = await trade(bot, NEAR, USDC, exact_in=2 * E24)
        assert parse_nonce(signed_diff(bot, offer["quote_hash"])[1]).salt.hex() == old

        new = ledger.rotate_salt()
        ledger.invalidate_salts([old])
        await eventually(lambda: app.desk.state.salt == bytes.fromhex(new), "the salt job")
        for _ in range(3):
            offer = await trade(bot, NEAR, USDC, exact_in=2 * E24)
            assert parse_nonce(signed_diff(bot, offer["quote_hash"])[1]).salt.hex() == new
        assert bot.sandbox.bus.stats.quote_answers_rejected == {}
        assert app.desk.stats.outcomes["SETTLED"] == 4


async def test_an_answer_refused_for_invalid_salt_refetches_the_salt_at_once(
    tmp_path: Path,
) -> None:
    """With the periodic salt job far away, the relay's "invalid salt" refusal itself makes the
    bot re-read the salt; the next request is answered and settles."""
    far = {"chain.salt_refresh_ms": 60_000, "chain.salt_max_age_ms": None}  # age: 2 x refresh
    async with live_bot(tmp_path, overrides=far) as bot:
        ledger, app = bot.sandbox.ledger, bot.app
        old = ledger.current_salt()
        new = ledger.rotate_salt()
        ledger.invalidate_salts([old])
        # Signed under the old salt. The relay refuses the answer and waits on for another, so
        # the request runs on while the refusal is followed.
        refused = asyncio.create_task(bot.quote(NEAR, USDC, exact_in=2 * E24))
        await eventually(lambda: app.desk.stats.outcomes["REJECTED"] == 1, "the refusal")
        assert bot.sandbox.bus.stats.quote_answers_rejected == {"simulation failed": 1}
        await eventually(lambda: app.desk.state.salt == bytes.fromhex(new), "the salt re-read")
        offer = await trade(bot, NEAR, USDC, exact_in=2 * E24)
        assert parse_nonce(signed_diff(bot, offer["quote_hash"])[1]).salt.hex() == new
        assert app.desk.inventory.reserved == {}  # the refused quote's reservation was released
        assert app.desk.stats.outcomes["SETTLED"] == 1
        assert await refused == []
