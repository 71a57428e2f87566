"""Shadow mode beside the live desk (docs/paper-trading.md): the paper book that decides
whether a simulated user takes each quote the desk decided but never signed or sent, its
metrics, and the summary line that says SHADOW.

Apart from the bot because none of it exists in a live run: the bot holds one
:class:`ShadowMode` in shadow mode and None otherwise, and the paper book's inventory and PnL
stay apart from the real ones.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from solver.io.paper_metrics import PaperMetrics, PaperSnapshot
from solver.runtime.paper import PaperBook

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from solver.config import BotConfig
    from solver.core.clock import Micros
    from solver.core.lifecycle import Quote
    from solver.core.view import DeskView

log = logging.getLogger("solver.bot")


class ShadowMode:
    """The paper book (:attr:`book`) and its metrics, fed the desk's shadow quotes."""

    def __init__(
        self, config: BotConfig, view: DeskView, registry: CollectorRegistry, tokens: list[str]
    ) -> None:
        self.config = config
        self.view = view
        self.tokens = tokens
        self.book = PaperBook(
            config.shadow,
            {a: t.decimals for a, t in config.tokens.items()},
            floors=view.inventory.floors,
        )
        self.metrics = PaperMetrics(registry)

    def on_quote(self, quote: Quote, now: Micros) -> None:
        """The executor's shadow port: whether a simulated user takes ``quote``."""
        view = self.view
        fill = self.book.on_quote(quote, now, view.price, view.inventory.confirmed)
        if fill is not None and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "SHADOW paper fill %s: in %d %s, out %d %s, edge %.1f bps, realized %.4f USD",
                fill.quote_id, fill.amount_in, fill.asset_in, fill.amount_out, fill.asset_out,
                fill.edge_bps, fill.realized_usd,
            )  # fmt: skip

    def refresh_metrics(self) -> None:
        """The paper book's gauges and counters, with the upkeep's other gauges."""
        paper, view = self.book, self.view
        self.metrics.refresh(
            PaperSnapshot(
                fills=paper.fills,
                lost=dict(paper.lost),
                pnl_marked_usd=paper.marked_usd(view.price),
                pnl_realized_usd=paper.realized_usd,
                inventory=paper.balances(self.tokens, view.inventory.confirmed),
                decimals=dict(view.decimals),
            )
        )

    def summary(self, desk_summary: str) -> str:
        """Shadow mode says so on every summary line, with the paper book beside the counts."""
        return f"SHADOW {desk_summary} {self.book.summary(self.view.price)}"

    def say_started(self) -> None:
        log.warning(
            "SHADOW mode: quotes are decided but never signed or sent; a paper book "
            "simulates fills (%s model) apart from the real inventory and PnL",
            self.config.shadow.fill.model,
        )
