"""Reconciliation and the kill switch, pure (DESIGN "Inventory and risk", "Settlement").

**Reconciliation.** Between two balance snapshots, every open quote either executes in full or
not at all, so the on-chain balance of an asset must lie in ``[expected − Σ possible outflows,
expected + Σ possible inflows]`` of the quotes still open, where ``expected`` is the last
snapshot plus the diffs of our own settlements since. Anything outside that range is a
*mismatch* nobody explained (a manual withdrawal, a bug, a compromised key): beyond the
configured tolerance it is an alert and, by default, a halt of quoting.

**Kill switch.** Each breach — daily loss, drawdown from peak PnL, reconciliation mismatch,
data stale for too long — moves the bot to PAUSED with the reason: quotes stop, settlement
continues. Only an operator (``solver resume``) clears it. The daily loss and the drawdown
have a limit in USD and, optionally, one in percent of the starting equity (the PnL baseline:
equity when PnL marking began, moved by accepted deposits and withdrawals); the tighter applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass

from solver.core.inventory import Reservation


def open_flow_totals(open_quotes: Iterable[Reservation]) -> tuple[dict[str, int], dict[str, int]]:
    """Per asset, the outflows and inflows the open quotes could still cause."""
    outflow: dict[str, int] = {}
    inflow: dict[str, int] = {}
    for quote in open_quotes:
        outflow[quote.asset_out] = outflow.get(quote.asset_out, 0) + quote.amount_out
        inflow[quote.asset_in] = inflow.get(quote.asset_in, 0) + quote.amount_in
    return outflow, inflow


def flow_totals(
    open_quotes: Iterable[Reservation], totals: tuple[Mapping[str, int], Mapping[str, int]]
) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`open_flow_totals` of ``open_quotes`` plus ``totals`` (outflow, inflow per asset,
    kept incrementally by the quote book). Most snapshots have no open quote outside the book
    to add (an empty list): then the totals are copied, not walked (issue 29: once per
    snapshot, twice)."""
    if isinstance(open_quotes, Sized) and not len(open_quotes):
        return dict(totals[0]), dict(totals[1])
    outflow, inflow = open_flow_totals(open_quotes)
    for asset, amount in totals[0].items():
        outflow[asset] = outflow.get(asset, 0) + amount
    for asset, amount in totals[1].items():
        inflow[asset] = inflow.get(asset, 0) + amount
    return outflow, inflow


def mismatches(
    expected: Mapping[str, int], actual: Mapping[str, int], open_quotes: Iterable[Reservation]
) -> dict[str, int]:
    """Per asset, how far ``actual`` lies outside what open quotes can explain (0 = fine)."""
    outflow, inflow = open_flow_totals(open_quotes)
    return mismatches_from_totals(expected, actual, outflow, inflow)


def mismatches_from_totals(
    expected: Mapping[str, int],
    actual: Mapping[str, int],
    outflow: Mapping[str, int],
    inflow: Mapping[str, int],
) -> dict[str, int]:
    """:func:`mismatches` from per-asset totals (kept incrementally by the quote book)."""
    result: dict[str, int] = {}
    for asset, value in actual.items():
        base = expected.get(asset)
        if base is None:
            continue
        low, high = base - outflow.get(asset, 0), base + inflow.get(asset, 0)
        result[asset] = value - high if value > high else value - low if value < low else 0
    return result


@dataclass(frozen=True)
class RiskLimits:
    max_daily_loss_usd: float
    max_drawdown_usd: float
    max_mismatch: Mapping[str, int]
    halt_on_mismatch: bool = True
    max_stale_s: float = 120.0
    max_daily_loss_pct: float | None = None
    """Percent (0..100] of the starting equity; None: the USD limit alone."""
    max_drawdown_pct: float | None = None
    """Percent (0..100] of the starting equity; None: the USD limit alone."""


def _limit(usd: float, pct: float | None, start_equity: float | None) -> tuple[float, str]:
    """The tighter of ``usd`` and ``pct`` % of a positive starting equity, and how it reads."""
    if pct is not None and start_equity is not None and start_equity > 0:
        share = start_equity * pct / 100
        if share < usd:
            return share, f"{share:.2f} ({pct:g} % of starting equity {start_equity:.2f} USD)"
    return usd, str(usd)


@dataclass(frozen=True, slots=True)
class Breach:
    kind: str  # daily_loss | drawdown | reconciliation | stale_data
    detail: str


def check_pnl(
    limits: RiskLimits, daily_loss: float, drawdown: float, start_equity: float | None = None
) -> list[Breach]:
    """Breaches of the loss limits; ``start_equity`` (USD) scales the percent ones."""
    breaches = []
    daily, daily_text = _limit(limits.max_daily_loss_usd, limits.max_daily_loss_pct, start_equity)
    if daily_loss > daily:
        breaches.append(Breach("daily_loss", f"daily loss {daily_loss:.2f} USD > {daily_text}"))
    peak, peak_text = _limit(limits.max_drawdown_usd, limits.max_drawdown_pct, start_equity)
    if drawdown > peak:
        breaches.append(Breach("drawdown", f"drawdown {drawdown:.2f} USD > {peak_text}"))
    return breaches


def check_mismatch(
    limits: RiskLimits,
    found: Mapping[str, int],
    units: Callable[[str, int], str],
) -> list[Breach]:
    """``units(asset, amount)``: the gap as people read it (whole units with the symbol); the
    smallest units follow in brackets, exact, for the record."""
    breaches = []
    for asset, gap in sorted(found.items()):
        if gap and abs(gap) > limits.max_mismatch.get(asset, 0):
            shown = f"{units(asset, gap)} ({gap} in smallest units)"
            breaches.append(Breach("reconciliation", f"{asset}: on-chain balance off by {shown}"))
    return breaches


def check_stale(
    limits: RiskLimits, balance_age_s: float | None, price_age_s: float | None
) -> list[Breach]:
    worst = max((a for a in (balance_age_s, price_age_s) if a is not None), default=None)
    if worst is not None and worst > limits.max_stale_s:
        return [Breach("stale_data", f"inputs {worst:.0f}s old > {limits.max_stale_s:.0f}s")]
    return []


class Reconciler:
    """Expected balances = first snapshot + the diffs of every own settlement since.

    Never reset from later snapshots (a snapshot may or may not already contain a settlement
    we are about to hear of); a mismatch found is reported once and then absorbed, so only new
    unexplained moves are reported again.
    """

    def __init__(self) -> None:
        self.expected: dict[str, int] | None = None
        self.last: dict[str, int] = {}

    def on_settled(self, asset_in: str, amount_in: int, asset_out: str, outflow: int) -> None:
        if self.expected is not None:
            self.expected[asset_out] = self.expected.get(asset_out, 0) - outflow
            self.expected[asset_in] = self.expected.get(asset_in, 0) + amount_in

    def on_snapshot(
        self,
        actual: Mapping[str, int],
        open_quotes: Iterable[Reservation] = (),
        *,
        totals: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
        absorb: bool = True,
    ) -> dict[str, int]:
        """``totals``: (outflow, inflow) per asset, added to ``open_quotes``'s own, so the
        caller need not list every open quote (the quote book keeps them incrementally).
        ``absorb`` False: the gaps are found but not taken into the expected balances (a
        gap held while its explanation is looked for)."""
        if self.expected is None:
            self.expected = dict(actual)
            self.last = {asset: 0 for asset in actual}
            return dict(self.last)
        if totals is None:
            outflow, inflow = open_flow_totals(open_quotes)
        else:
            outflow, inflow = flow_totals(open_quotes, totals)
        found = mismatches_from_totals(self.expected, actual, outflow, inflow)
        for asset, gap in found.items():
            if gap and absorb:
                self.expected[asset] += gap
        for asset in actual:
            self.expected.setdefault(asset, actual[asset])
        self.last = found
        return found
