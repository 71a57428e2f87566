"""``storage.retain_days`` in a running bot: the quotes of a month ago that never became a
trade leave its store while it goes on quoting, and the trade of a month ago stays."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from solver.core import facts as f
from solver.core.clock import MINUTE, micros
from solver.core.lifecycle import QuoteState
from solver.io.store.sqlite_store import Store
from tests.app.harness import E24, NEAR, USDC, eventually, live_bot
from tests.io.store_helpers import append_quotes, move, signed_quote


def _quote_ids(path: Path, running: Store | None = None) -> set[str]:
    """The store's quotes: through the running bot's own connection while it holds the store
    (alone, issue 24), else from the file."""
    if running is not None:
        return {row[0] for row in running._conn.execute("SELECT quote_id FROM quotes")}
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute("SELECT quote_id FROM quotes")}


async def test_a_running_bot_forgets_old_quotes_never_traded_and_keeps_quoting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "solver.sqlite"  # the harness's store
    old = datetime.now(UTC) - timedelta(days=40)
    quotes = [signed_quote(f"old-{i}", at=old) for i in range(300)]
    with Store(path) as store:  # a month of history from an earlier run
        append_quotes(store, *quotes, won := signed_quote("old-trade", at=old))
        store.journal.append(
            f.QuotesLost(tuple(q[0].quote_id for q in quotes), micros(old) + MINUTE, "x")
        )
        move(store, "old-trade", QuoteState.WON, old, intent_hash="i-old")
        move(store, "old-trade", QuoteState.SETTLED, old, intent_hash="i-old")
        store.project()
    assert len(_quote_ids(path)) == 301 and won[0].quote_id == "old-trade"

    async with live_bot(tmp_path) as bot:
        running = bot.app.store
        await eventually(
            lambda: _quote_ids(path, running) == {"old-trade"}, "the old lost quotes to go"
        )
        assert len(await bot.quote(NEAR, USDC, exact_in=E24)) == 1  # quoting all along
        assert running is not None
        await eventually(lambda: _open_counted(running) == 1, "the new quote in the store")
        # The month-old quotes stay counted (quote_counts is not forgotten): the totals of that
        # month are what they were, the trade's row included.
        (totals,) = running.pair_totals(old - timedelta(days=1))
        assert (totals.quotes, totals.won, totals.settled) == (302, 1, 1)


def _open_counted(store: Store) -> int:
    """Open quotes counted (the bot's own one has a row only once it is won, or if sampled)."""
    sql = "SELECT COALESCE(SUM(n), 0) FROM quote_counts WHERE state = 'OPEN'"
    return int(store._conn.execute(sql).fetchone()[0])
