"""The rebalancer's planning, pure (docs/rebalance.md; the runner is
:mod:`solver.rebalance.rebalancer`).

:func:`plan_rebalance` looks at the confirmed balances, free inventory and
reference prices, and returns a :class:`Plan`, a :class:`Hold` (something is out of band but
must wait, and why) or ``None`` (everything is in band). A balance above its band's ``max`` is
sold down to ``target`` for ``counter_asset``; one below ``min`` is bought back up to
``target`` with it. One rebalance moves at most ``max_swap_usd`` (at reference prices) and never
more than the free inventory (floors and open quotes stay untouched); two start at least
``min_interval_s`` apart, one at a time, and only once a balance snapshot newer than the last
one's end has arrived. When several assets are out of band, the largest deviation in USD goes
first. :func:`check_quote` is the last look before money moves: the quote must echo the request,
name a deposit address, and lose at most ``max_cost_bps`` against reference prices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, Context, Decimal, localcontext
from typing import Any, Literal

from solver.config import BandSpec, RebalanceSpec
from solver.protocol.swap import (
    DepositType,
    QuoteRequest,
    QuoteResponse,
    RecipientType,
    RefundType,
    SwapType,
)

_DECIMAL = Context(prec=80, rounding=ROUND_FLOOR)
QUOTE_MARGIN_S = 10.0
"""A quote that goes inactive sooner than this is not paid."""


def usd_of(amount: int, price: float, decimals: int) -> Decimal:
    """The USD value of ``amount`` (smallest unit) at ``price`` USD per whole unit."""
    with localcontext(_DECIMAL):
        return Decimal(amount) * Decimal(repr(price)) / Decimal(10) ** decimals


def units_of(usd: Decimal | float, price: float, decimals: int) -> int:
    """How many smallest units ``usd`` buys at ``price``, rounded down."""
    with localcontext(_DECIMAL):
        value = Decimal(repr(usd)) if isinstance(usd, float) else usd
        return int((value * Decimal(10) ** decimals / Decimal(repr(price))).to_integral_value())


@dataclass(frozen=True, slots=True)
class Band:
    """A band in the smallest unit: ``low <= target <= high``."""

    low: int
    high: int
    target: int


def resolve_band(spec: BandSpec, price: float | None, decimals: int) -> Band | None:
    """The band in the smallest unit; ``None`` for a USD band without a price."""
    if not spec.in_usd:
        assert spec.min is not None and spec.max is not None and spec.target is not None
        return Band(spec.min, spec.max, spec.target)
    if price is None:
        return None
    assert spec.min_usd is not None and spec.max_usd is not None and spec.target_usd is not None
    return Band(
        units_of(spec.min_usd, price, decimals),
        units_of(spec.max_usd, price, decimals),
        units_of(spec.target_usd, price, decimals),
    )


@dataclass(frozen=True, slots=True)
class Inputs:
    """Everything the planner reads, as of ``now``."""

    now: datetime
    balances: Mapping[str, int]
    balances_at: datetime | None
    free: Mapping[str, int]
    prices: Mapping[str, float]
    decimals: Mapping[str, int]
    last_started_at: datetime | None = None
    last_finished_at: datetime | None = None
    in_flight: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """One swap to make: ``amount_in`` of ``asset_in`` for ``asset_out``."""

    asset: str
    side: Literal["sell", "buy"]
    asset_in: str
    asset_out: str
    amount_in: int
    balance: int
    band: Band
    usd_in: Decimal
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "asset": self.asset,
            "side": self.side,
            "asset_in": self.asset_in,
            "asset_out": self.asset_out,
            "amount_in": str(self.amount_in),
            "balance": str(self.balance),
            "band": {
                "min": str(self.band.low),
                "max": str(self.band.high),
                "target": str(self.band.target),
            },
            "usd_in": str(self.usd_in.quantize(Decimal("0.01"))),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Hold:
    """Something is out of band, but no rebalance starts now; ``reason`` says why."""

    reason: str


def plan_rebalance(
    spec: RebalanceSpec, inputs: Inputs, *, balance_max_age_s: float
) -> Plan | Hold | None:
    """The next rebalance to make, a reason to wait, or ``None`` when every band holds."""
    if inputs.in_flight:
        return Hold("a rebalance is in flight")
    if inputs.balances_at is None:
        return Hold("no balances yet")
    if (inputs.now - inputs.balances_at).total_seconds() > balance_max_age_s:
        return Hold("balances are stale")
    if inputs.last_finished_at is not None and inputs.balances_at <= inputs.last_finished_at:
        return Hold("waiting for a balance snapshot taken after the last rebalance")
    counter = spec.counter_asset
    if counter is None:
        return Hold("no counter_asset")

    candidates: list[tuple[Decimal, str, int, Band]] = []
    holds: list[str] = []
    for asset, band_spec in spec.bands.items():
        price = inputs.prices.get(asset)
        decimals = inputs.decimals[asset]
        band = resolve_band(band_spec, price, decimals)
        if band is None:
            holds.append(f"no price for {asset}")
            continue
        balance = inputs.balances.get(asset, 0)
        if band.low <= balance <= band.high:
            continue
        if price is None:
            holds.append(f"{asset} is out of band but has no price to size the swap")
            continue
        deviation = usd_of(abs(balance - band.target), price, decimals)
        candidates.append((deviation, asset, balance, band))
    if not candidates:
        return Hold("; ".join(holds)) if holds else None

    if inputs.last_started_at is not None:
        next_at = inputs.last_started_at + timedelta(seconds=spec.min_interval_s)
        if inputs.now < next_at:
            return Hold(f"min_interval_s: the next rebalance may start at {next_at:%H:%M:%S} UTC")
    counter_price = inputs.prices.get(counter)
    if counter_price is None:
        return Hold(f"no price for the counter asset {counter}")

    reasons: list[str] = []
    for _, asset, balance, band in sorted(candidates, key=lambda c: c[0], reverse=True):
        plan = _size(spec, inputs, asset, balance, band, counter, counter_price)
        if isinstance(plan, Plan):
            return plan
        reasons.append(plan.reason)
    return Hold("; ".join(reasons))


def _size(
    spec: RebalanceSpec,
    inputs: Inputs,
    asset: str,
    balance: int,
    band: Band,
    counter: str,
    counter_price: float,
) -> Plan | Hold:
    price = inputs.prices[asset]
    decimals = inputs.decimals[asset]
    counter_decimals = inputs.decimals[counter]
    if balance > band.high:
        want = balance - band.target
        cap = units_of(spec.max_swap_usd, price, decimals)
        free = inputs.free.get(asset, 0)
        amount = min(want, cap, free)
        if amount <= 0:
            return Hold(f"{asset} is above its band but none of it is free to sell")
        why = f"{asset} balance {balance} above max {band.high}: sell toward target {band.target}"
        return Plan(
            asset,
            "sell",
            asset,
            counter,
            amount,
            balance,
            band,
            usd_of(amount, price, decimals),
            why,
        )
    want_usd = usd_of(band.target - balance, price, decimals)
    spend_usd = min(want_usd, Decimal(repr(spec.max_swap_usd)))
    free = inputs.free.get(counter, 0)
    amount = min(units_of(spend_usd, counter_price, counter_decimals), free)
    if amount <= 0:
        return Hold(f"{asset} is below its band but no {counter} is free to buy it with")
    why = f"{asset} balance {balance} below min {band.low}: buy toward target {band.target}"
    usd_in = usd_of(amount, counter_price, counter_decimals)
    return Plan(asset, "buy", counter, asset, amount, balance, band, usd_in, why)


def swap_request(
    asset_in: str, asset_out: str, amount_in: int, account: str, spec: RebalanceSpec, now: datetime
) -> QuoteRequest:
    """The swap API request of a rebalance: exact input, deposit by ``transfer`` inside the
    verifier, output and any refund to ``account`` inside it too (``INTENTS`` everywhere)."""
    return QuoteRequest(
        dry=False,
        swap_type=SwapType.EXACT_INPUT,
        slippage_tolerance=spec.slippage_bps,
        origin_asset=asset_in,
        deposit_type=DepositType.INTENTS,
        destination_asset=asset_out,
        amount=amount_in,
        refund_to=account,
        refund_type=RefundType.INTENTS,
        recipient=account,
        recipient_type=RecipientType.INTENTS,
        deadline=now + timedelta(seconds=spec.swap_deadline_s),
    )


_ECHOED = (
    "dry",
    "swap_type",
    "origin_asset",
    "destination_asset",
    "amount",
    "deposit_type",
    "refund_to",
    "refund_type",
    "recipient",
    "recipient_type",
)


def check_quote(
    request: QuoteRequest,
    response: QuoteResponse,
    *,
    prices: Mapping[str, float],
    decimals: Mapping[str, int],
    max_cost_bps: int,
    now: datetime,
) -> str | None:
    """Why the quote must not be paid, or ``None`` when it may be."""
    echo = response.quote_request
    for name in _ECHOED:
        if getattr(echo, name) != getattr(request, name):
            return f"the quote answers another request ({name} differs)"
    quote = response.quote
    if not quote.deposit_address:
        return "the quote has no deposit address"
    if quote.amount_in is not None and quote.amount_in != request.amount:
        return f"the quote's amountIn {quote.amount_in} is not the requested {request.amount}"
    if not quote.amount_out:
        return "the quote has no amountOut"
    for moment in (quote.time_when_inactive, quote.deadline):
        if moment is not None and moment <= now + timedelta(seconds=QUOTE_MARGIN_S):
            return "the quote expires too soon to pay its deposit"
    price_in = prices.get(request.origin_asset)
    price_out = prices.get(request.destination_asset)
    if price_in is None or price_out is None:
        return "no reference price to judge the quote"
    value_in = usd_of(request.amount, price_in, decimals[request.origin_asset])
    value_out = usd_of(quote.amount_out, price_out, decimals[request.destination_asset])
    floor = value_in * (1 - Decimal(max_cost_bps) / 10_000)
    if value_out < floor:
        cost = (1 - value_out / value_in) * 10_000 if value_in else Decimal(0)
        return f"the quote costs {cost:.0f} bps at reference prices, more than {max_cost_bps}"
    return None
