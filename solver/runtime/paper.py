"""Paper trading: what shadow mode's answers would have earned (docs/paper-trading.md).

In shadow mode the desk decides every quote as live and returns a
:class:`~solver.core.actions.ShadowQuote` instead of signing it; nothing leaves the process, so
nobody takes it and no competitor's answer is seen. :class:`PaperBook` takes each one at the
moment it is decided, with the reference prices of that moment, and asks the backtest's models
whether a user would have taken it (the same code a replay uses, so paper and backtest cannot
drift):

1. the **taker** (:class:`backtest.takers.TakerModel`): the user refuses an answer charging
   more than their limit against the reference price;
2. the **competition** (:mod:`backtest.fills`): ``logistic`` wins with a probability of the
   edge given to the user, ``always`` wins whenever the taker accepts;
3. the **paper inventory**: an answer paying out more than the paper balance above its floor
   is not filled (the real desk quotes from the real inventory, which paper fills never move).

A paper fill settles at once: the paper balances move by ``+amount_in`` / ``-(amount_out +
fee)`` and its **realized** edge is value in minus value out at the reference prices of the
fill (:meth:`solver.core.pnl.PnlBook.value`, as the desk values real fills).

The books are apart from the desk's: the paper balances are the desk's confirmed balances (the
real ones, which shadow mode never trades) plus the paper flows, so a deposit made meanwhile
shows in both. The **marked** paper PnL is what the paper flows are worth now: the sum over
assets of flow x current reference price, i.e. realized edge plus the revaluation of what the
fills left us holding. Nothing here is journaled: a restart starts a fresh paper book.

Dependency direction (DESIGN "Packages"): the runtime uses :mod:`backtest.fills` and
:mod:`backtest.takers`, which are pure (numpy, pydantic settings, ``solver.core``) and import
neither the runtime nor the sandbox; ``tests/runtime/test_paper.py`` checks that they stay so.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backtest.fills import FillModel, edge_bps, make_fill_model
from backtest.settings import FillSpec
from solver.config.shadow import ShadowSpec
from solver.core.clock import Micros, iso_micros
from solver.core.lifecycle import Quote
from solver.core.pnl import FillValue, PnlBook

LOST_INVENTORY = "paper_inventory"
"""Why a paper answer was not filled although a user took it: the paper balance is short."""

Price = Callable[[str], float | None]


@dataclass(frozen=True, slots=True)
class PaperFill:
    at: Micros
    quote_id: str
    asset_in: str
    amount_in: int
    asset_out: str
    amount_out: int
    fee: int
    edge_bps: float
    realized_usd: float

    def doc(self) -> dict[str, Any]:
        """The shape of the status's ``recent_fills`` rows (amounts as strings)."""
        return {
            "at": iso_micros(self.at),
            "quote_id": self.quote_id,
            "asset_in": self.asset_in,
            "amount_in": str(self.amount_in),
            "asset_out": self.asset_out,
            "amount_out": str(self.amount_out),
            "fee": str(self.fee),
            "realized_pnl_usd": self.realized_usd,
            "edge_bps": round(self.edge_bps, 2),
        }


def fill_spec(spec: ShadowSpec) -> FillSpec:
    """The backtest's :class:`FillSpec` of the ``shadow.fill`` section (same field names)."""
    return FillSpec.model_validate(spec.fill.model_dump())


class PaperBook:
    """Simulated fills of shadow quotes, with their own inventory and PnL."""

    def __init__(
        self,
        spec: ShadowSpec,
        decimals: Mapping[str, int],
        *,
        floors: Mapping[str, int] | None = None,
        model: FillModel | None = None,
    ) -> None:
        self.spec = spec
        self.decimals = dict(decimals)
        self.floors = dict(floors or {})
        self.model = model if model is not None else make_fill_model(fill_spec(spec), spec.seed)
        self._valuer = PnlBook(self.decimals, ())
        self.flows: Counter[str] = Counter()
        """asset -> paper inflow minus outflow (fees included), smallest units."""
        self.quotes = 0
        self.fills = 0
        self.realized_usd = 0.0
        self.volume_usd = 0.0
        self.lost: Counter[str] = Counter()
        self.recent: deque[PaperFill] = deque(maxlen=spec.recent_fills)
        self.by_direction: dict[tuple[str, str], tuple[int, float]] = {}
        """(asset_in, asset_out) -> (paper fills, their realized USD)."""

    # ------------------------------------------------------------------ deciding

    def on_quote(
        self, quote: Quote, now: Micros, price: Price, confirmed: Mapping[str, int]
    ) -> PaperFill | None:
        """Decide one shadow quote now; the fill (already booked) or None when not taken."""
        self.quotes += 1
        asset_in, asset_out = quote.asset_in, quote.asset_out
        p_in, p_out = price(asset_in), price(asset_out)
        edge = math.nan  # no reference: the user cannot value it, the taker refuses
        if p_in is not None and p_out is not None:
            v_in = p_in / 10.0 ** self.decimals[asset_in]
            v_out = p_out / 10.0 ** self.decimals[asset_out]
            edge = edge_bps(quote.amount_in, v_in, quote.amount_out, v_out)
        lost = self.model.decide(quote, None, edge)
        if lost is not None:
            self.lost[lost] += 1
            return None
        outflow = quote.amount_out + quote.fee
        if self.balance(asset_out, confirmed) - self.floors.get(asset_out, 0) < outflow:
            self.lost[LOST_INVENTORY] += 1
            return None
        assert p_in is not None and p_out is not None  # a NaN edge never passes the taker
        value = FillValue(quote.quote_id, asset_in, quote.amount_in, asset_out, outflow)
        fill = PaperFill(
            now, quote.quote_id, asset_in, quote.amount_in, asset_out, quote.amount_out,
            quote.fee, edge, self._valuer.value(value, p_in, p_out),
        )  # fmt: skip
        self.flows[asset_in] += quote.amount_in
        self.flows[asset_out] -= outflow
        self.fills += 1
        self.realized_usd += fill.realized_usd
        self.volume_usd += quote.amount_in * p_in / 10.0 ** self.decimals[asset_in]
        self.recent.appendleft(fill)
        count, realized = self.by_direction.get((asset_in, asset_out), (0, 0.0))
        self.by_direction[asset_in, asset_out] = (count + 1, realized + fill.realized_usd)
        return fill

    # ------------------------------------------------------------------ reading

    def balance(self, asset: str, confirmed: Mapping[str, int]) -> int:
        """The paper balance: the real confirmed balance plus the paper flows."""
        return confirmed.get(asset, 0) + self.flows.get(asset, 0)

    def balances(self, assets: list[str], confirmed: Mapping[str, int]) -> dict[str, int]:
        return {asset: self.balance(asset, confirmed) for asset in assets}

    def marked_usd(self, price: Price) -> float | None:
        """The paper flows at current reference prices; None while one of them is unpriced."""
        total = 0.0
        for asset, amount in self.flows.items():
            if not amount:
                continue
            p = price(asset)
            if p is None:
                return None
            total += amount * p / 10.0 ** self.decimals[asset]
        return total

    def doc(self, assets: list[str], confirmed: Mapping[str, int], price: Price) -> dict[str, Any]:
        """The status's ``paper`` section (amounts as strings of smallest units)."""
        fill = self.spec.fill
        return {
            "fill_model": fill.model,
            "quotes": self.quotes,
            "fills": self.fills,
            "fill_rate": self.fills / self.quotes if self.quotes else None,
            "lost": dict(self.lost),
            "pnl_usd": self.marked_usd(price),
            "realized_pnl_usd": self.realized_usd,
            "volume_usd": self.volume_usd,
            "balances": {a: str(v) for a, v in self.balances(assets, confirmed).items()},
            "flows": {a: str(v) for a, v in sorted(self.flows.items()) if v},
            "recent_fills": [f.doc() for f in self.recent],
        }

    def summary(self, price: Price) -> str:
        """For the periodic summary log line."""
        marked = self.marked_usd(price)
        shown = "?" if marked is None else f"{marked:.2f}"
        return (
            f"paper: quotes={self.quotes} fills={self.fills} lost={dict(self.lost)} "
            f"pnl_usd={shown} realized_usd={self.realized_usd:.2f}"
        )
