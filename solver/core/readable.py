"""Numbers for people (issue 14): whole units with symbols in log lines, the summary, and the
desk's alerts and pause reasons.

The store, the journal and every JSON export keep the smallest units; only what a person reads
goes through here (:func:`solver.protocol.amounts.format_units`, exact).
"""

from __future__ import annotations

from collections.abc import Mapping

from solver.core.facts import FillPrices
from solver.core.lifecycle import Quote
from solver.protocol.amounts import format_units


class Readable:
    """Formats amounts of the configured tokens; an unknown asset keeps its id and raw units."""

    def __init__(self, symbols: Mapping[str, str], decimals: Mapping[str, int]) -> None:
        self.symbols = dict(symbols)
        self.decimals = dict(decimals)

    def symbol(self, asset: str) -> str:
        return self.symbols.get(asset, asset)

    def amount(self, asset: str, amount: int) -> str:
        decimals = self.decimals.get(asset)
        if decimals is None:
            return f"{amount} {asset}"
        return format_units(amount, decimals, self.symbols.get(asset, asset))

    def fill(self, quote: Quote, prices: FillPrices | None, pair: str | None) -> str:
        """``fill wNEAR/USDC: got 100 USDC, paid 33.25 wNEAR (fee 0.01 wNEAR), edge +0.25
        USD; quote q1 intent … tx …``"""
        edge = f"{prices.realized_usd:+,.4f} USD" if prices is not None else "unknown (no price)"
        fee = f" (fee {self.amount(quote.asset_out, quote.fee)})" if quote.fee else ""
        where = pair or f"{self.symbol(quote.asset_in)}->{self.symbol(quote.asset_out)}"
        return (
            f"fill {where}: got {self.amount(quote.asset_in, quote.amount_in)}, "
            f"paid {self.amount(quote.asset_out, quote.amount_out)}{fee}, edge {edge}; "
            f"quote {quote.quote_id} intent {quote.intent_hash or '-'} tx {quote.tx_hash or '-'}"
        )
