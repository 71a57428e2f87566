"""The quote pipeline: request → pair and size filters → strategy → limits and inventory →
:class:`Quote` or :class:`Skip` with a reason (DESIGN "The quote path"; protocol-notes 6).

Pure: the time comes in as ``now``; the only other input is the cached state. Every request
ends in exactly one outcome with a reason. A strategy that raises, returns nonsense or overruns
its budget means "no quote" with a logged reason; it never kills the loop. The returned quote
has already reserved its outflow, so no quote can be signed that free inventory cannot pay.

Per pair (:class:`Route`): the price guard (``max_giveaway_bps``) and the partners it serves
(:class:`PartnerFilter`, on the relay's ``partner_id``). Reference prices come combined from
every source (:mod:`solver.core.state`); an asset whose sources disagree makes its pairs skip
with ``price_divergence``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from solver.core.clock import MILLI, SECOND, Micros, span
from solver.core.inventory import Inventory, Reservation
from solver.core.lifecycle import Quote
from solver.core.limits import TokenBucket
from solver.core.market import MarketView, QuoteRequest, ReferencePrice
from solver.core.pauses import Pauses
from solver.core.state import LiveMarketView, MarketState
from solver.protocol.amounts import I128_MAX
from solver.protocol.values import value


class PricingStrategy(Protocol):
    def quote(self, request: QuoteRequest, market: MarketView) -> int | None: ...


# Skip reasons: stable strings, used as metric labels and in logs.
UNKNOWN_PAIR = "unknown_pair"
PAIR_DISABLED = "pair_disabled"
PAUSED = "paused"
PARTNER_NOT_ALLOWED = "partner_not_allowed"
DEADLINE_TOO_LONG = "min_deadline_too_long"
NO_SALT = "no_salt"
STALE_BALANCES = "stale_balances"
PRICE_DIVERGENCE = "price_divergence"
NO_PRICE = "no_price"
STALE_PRICE = "stale_price"
BELOW_MIN_SIZE = "below_min_size"
ABOVE_MAX_SIZE = "above_max_size"
STRATEGY_ERROR = "strategy_error"
STRATEGY_NO_QUOTE = "strategy_no_quote"
STRATEGY_BAD_AMOUNT = "strategy_bad_amount"
STRATEGY_SLOW = "strategy_slow"
PRICE_GUARD = "price_guard"
EXPOSURE_LIMIT = "exposure_limit"
PER_TOKEN_LIMIT = "per_token_limit"
RATE_LIMITED = "rate_limited"
INSUFFICIENT_INVENTORY = "insufficient_inventory"
DUPLICATE_QUOTE_ID = "duplicate_quote_id"


@value
class Skip:
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PartnerFilter:
    """Which relay partners (``partner_id`` of the request's metadata) a pair serves.

    ``allow``: only these (None: anyone); ``deny``: never these. A request without a partner
    id passes only when there is no allow list."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()

    def admits(self, partner_id: str | None) -> bool:
        if partner_id is None:
            return self.allow is None
        if partner_id in self.deny:
            return False
        return self.allow is None or partner_id in self.allow


@dataclass(frozen=True, slots=True)
class Route:
    """One direction of a configured pair."""

    asset_in: str
    asset_out: str
    strategy: PricingStrategy
    min_notional_usd: float = 0.0
    max_notional_usd: float = float("inf")
    enabled: bool = True
    max_giveaway_bps: float = 300.0
    """Price guard: refuse quotes giving away more than this vs the reference prices."""
    partners: PartnerFilter | None = None
    """None: every partner (and requests without one)."""

    @property
    def key(self) -> str:
        return f"{self.asset_in}->{self.asset_out}"


@dataclass(frozen=True)
class PipelineSettings:
    deadline_margin_ms: int = 5_000
    max_min_deadline_ms: int = 120_000
    balance_max_age_s: float = 15.0
    price_max_age_s: float = 10.0
    salt_max_age_s: float = 120.0
    strategy_budget_ms: float = 5.0
    max_price_divergence_bps: float | None = 200.0  # sources of one asset further apart: skip
    max_open_exposure_usd: float = 50_000.0
    max_open_per_token: Mapping[str, int] = field(default_factory=dict)
    max_quotes_per_s: float = 200.0


class _Pair:
    """What one pair's decisions read, worked out once per route (:meth:`QuotePipeline.set_route`
    builds a new one) and once per price update: the route's fields,
    the pause scope's text, the assets' units (None when the decimals are unknown), the price
    guard's factor and the per-token limit of the asset paid out, then the two reference prices
    as of :attr:`MarketState.version` (each the same value the decision read by asset before;
    issue 29: one object's fields instead of ~10 lookups by asset a request)."""

    __slots__ = (
        "at", "detail", "enabled", "guard", "key", "limit", "max_usd", "min_usd", "partners",
        "price_in", "price_out", "quote", "route", "unit_in", "unit_out", "usd_in", "usd_out",
        "version",
    )  # fmt: skip

    def __init__(self, route: Route, unit: Mapping[str, float], settings: PipelineSettings):
        self.route = route
        self.key = route.key
        self.enabled = route.enabled
        self.partners = route.partners
        self.min_usd, self.max_usd = route.min_notional_usd, route.max_notional_usd
        self.quote = route.strategy.quote
        self.unit_in, self.unit_out = unit.get(route.asset_in), unit.get(route.asset_out)
        self.guard = 1 + route.max_giveaway_bps / 10_000
        self.limit = settings.max_open_per_token.get(route.asset_out)
        self.version = -1  # no prices read yet: refresh() before use
        self.detail: str | None = None
        self.price_in: ReferencePrice | None = None
        self.price_out: ReferencePrice | None = None
        self.at: Micros = 0
        self.usd_in = self.usd_out = 0.0

    def refresh(self, state: MarketState) -> None:
        """The prices as of ``state.version``: the divergence detail of either asset (the
        input's first), the two prices (None: missing), the older one's time and the USD of
        each."""
        self.version = state.version
        asset_in, asset_out = self.route.asset_in, self.route.asset_out
        divergent = state.divergent
        self.detail = divergent.get(asset_in) or divergent.get(asset_out) if divergent else None
        prices = state.prices
        price_in, price_out = prices.get(asset_in), prices.get(asset_out)
        self.price_in, self.price_out = price_in, price_out
        if price_in is not None and price_out is not None:
            at_in, at_out = state.price_at[asset_in], state.price_at[asset_out]
            self.at = at_in if at_in <= at_out else at_out
            self.usd_in, self.usd_out = price_in.usd, price_out.usd


class QuotePipeline:
    def __init__(
        self,
        settings: PipelineSettings,
        routes: Mapping[tuple[str, str], Route],
        inventory: Inventory,
        state: MarketState,
        pauses: Pauses,
        *,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self._routes = dict(routes)
        self.routes: Mapping[tuple[str, str], Route] = MappingProxyType(self._routes)
        """The configured routes, read-only: :meth:`set_route` changes one with its slot."""
        self.inventory = inventory
        self.state = state
        self.pauses = pauses
        self._pause_scopes = pauses.by_scope  # read per request: no call while none holds
        self.timer = timer
        # The freshness and divergence rules of prices are the pipeline's: the state combines
        # its sources by them when a price arrives (not per request).
        state.price_max_age_s = settings.price_max_age_s
        state.max_divergence_bps = settings.max_price_divergence_bps
        rate = settings.max_quotes_per_s
        self.bucket = TokenBucket(rate, max(1.0, rate))
        # 10**decimals as floats, once: USD notionals are estimates for limits, never amounts.
        self._unit = {asset: 10.0**dec for asset, dec in state.decimals.items()}
        self._pairs = {pair: _Pair(route, self._unit, settings) for pair, route in routes.items()}
        """Per configured pair, what its decisions read (:class:`_Pair`): built with its route,
        so a decision finds both in one lookup (issue 29)."""
        self._marks: dict[str, tuple[float, float]] = {}
        self._marks_version = -1  # none worked out yet
        self._view = LiveMarketView(state, inventory, 0, settings.deadline_margin_ms)
        """The strategies' view, its time set per decision (one object, not one a request)."""
        self._leads: dict[int, Micros] = {}
        """``min_deadline_ms`` -> the µs from decision to the quote's deadline."""
        # The age limits in µs, once (the checks compare integers: :mod:`solver.core.clock`).
        self._salt_max_us = span(settings.salt_max_age_s)
        self._balance_max_us = span(settings.balance_max_age_s)
        self._price_max_us = span(settings.price_max_age_s)

    def decide(self, request: QuoteRequest, now: Micros) -> Quote | Skip:
        s = self.settings
        asset_in, asset_out, amount = request.asset_in, request.asset_out, request.amount
        slot = self._pairs.get((asset_in, asset_out))
        if slot is None:
            return Skip(UNKNOWN_PAIR, f"{asset_in}->{asset_out}")
        if not slot.enabled:
            return Skip(PAIR_DISABLED)
        if self._pause_scopes:  # Pauses.reason is None while no pause holds
            paused = self.pauses.reason(slot.key)
            if paused:
                return Skip(PAUSED, paused)
        partners = slot.partners
        if partners is not None and not partners.admits(request.partner_id):
            return Skip(PARTNER_NOT_ALLOWED, request.partner_id or "no partner_id")
        if amount > I128_MAX:
            return Skip(ABOVE_MAX_SIZE, "amount does not fit a token_diff delta (i128)")
        if request.min_deadline_ms > s.max_min_deadline_ms:
            return Skip(
                DEADLINE_TOO_LONG, f"{request.min_deadline_ms} ms > {s.max_min_deadline_ms} ms"
            )
        state = self.state
        salt_at = state.salt_at
        if state.salt is None or salt_at is None:
            return Skip(NO_SALT)
        if now - salt_at > self._salt_max_us:
            return Skip(NO_SALT, "salt is stale")
        inventory = self.inventory
        balances_at = inventory.confirmed_at
        if balances_at is None:
            return Skip(STALE_BALANCES, "no balance snapshot")
        if now - balances_at > self._balance_max_us:
            return Skip(STALE_BALANCES, f"{(now - balances_at) / SECOND:.1f}s old")
        if slot.version != state.version:
            slot.refresh(state)
        if slot.detail is not None:
            return Skip(PRICE_DIVERGENCE, slot.detail)
        if slot.price_in is None or slot.price_out is None:
            return Skip(NO_PRICE)
        if now - slot.at > self._price_max_us:  # the older price's age
            return Skip(STALE_PRICE)
        unit_in, unit_out = slot.unit_in, slot.unit_out
        if unit_in is None or unit_out is None:  # no decimals: raise as the lookup always did
            unit_in, unit_out = self._unit[asset_in], self._unit[asset_out]
        usd_in, usd_out = slot.usd_in, slot.usd_out
        exact_in = request.exact_in
        fixed_usd = amount * usd_in / unit_in if exact_in else amount * usd_out / unit_out
        if fixed_usd < slot.min_usd:
            return Skip(BELOW_MIN_SIZE, f"{fixed_usd:.2f} USD")
        if fixed_usd > slot.max_usd:
            return Skip(ABOVE_MAX_SIZE, f"{fixed_usd:.2f} USD")

        view = self._view
        view.now_us, view.fee_pips = now, state.fee_pips
        timer = self.timer
        started = timer()
        try:
            other = slot.quote(request, view)
        except Exception as exc:  # user code is guarded (STYLE 5)
            return Skip(STRATEGY_ERROR, f"{type(exc).__name__}: {str(exc)[:200]}")
        elapsed_ms = (timer() - started) * 1000
        if elapsed_ms > s.strategy_budget_ms:
            return Skip(STRATEGY_SLOW, f"{elapsed_ms:.1f} ms")
        if other is None:
            return Skip(STRATEGY_NO_QUOTE)
        # Both sides become token_diff deltas, so they must fit i128 (protocol-notes 2).
        if type(other) is not int and (isinstance(other, bool) or not isinstance(other, int)):
            return Skip(STRATEGY_BAD_AMOUNT, repr(other)[:80])
        if not 0 < other <= I128_MAX:
            return Skip(STRATEGY_BAD_AMOUNT, repr(other)[:80])
        amount_in, amount_out = (amount, other) if exact_in else (other, amount)

        value_in = amount_in * usd_in / unit_in
        value_out = amount_out * usd_out / unit_out
        if value_out > value_in * slot.guard:
            return Skip(PRICE_GUARD, f"gives {value_out:.2f} USD for {value_in:.2f} USD")
        fee = -(-amount_out * state.fee_pips // 1_000_000)
        outflow = amount_out + fee
        reserved = inventory.reserved
        limit = slot.limit
        if limit is not None and reserved.get(asset_out, 0) + outflow > limit:
            return Skip(PER_TOKEN_LIMIT)
        # open_exposure_usd(), inline: the same terms summed in the same order (same bits),
        # each asset's price and unit read in one lookup (:meth:`_marks`).
        marks = self._marks if self._marks_version == state.version else self._marks_of(state)
        exposure = 0.0
        for asset, held in reserved.items():
            mark = marks.get(asset)
            if mark is not None:
                exposure += held * mark[0] / mark[1]
        if exposure + value_out > s.max_open_exposure_usd:
            return Skip(EXPOSURE_LIMIT)
        # inventory.free(asset_out), inline: the same integers (one call less a quote).
        free = (
            inventory.confirmed.get(asset_out, 0)
            - reserved.get(asset_out, 0)
            - inventory.floors.get(asset_out, 0)
        )
        free = free if free > 0 else 0
        if outflow > free:
            return Skip(INSUFFICIENT_INVENTORY)
        if not self.bucket.take(now / SECOND):
            return Skip(RATE_LIMITED)
        ms = request.min_deadline_ms
        lead = self._leads.get(ms)
        if lead is None:  # a handful of values in practice: built once each (issue 29)
            if len(self._leads) >= 1024:
                self._leads.clear()
            lead = self._leads[ms] = (ms + s.deadline_margin_ms) * MILLI
        deadline = now + lead
        if not inventory.reserve_within(
            Reservation(request.quote_id, asset_out, outflow, asset_in, amount_in, deadline), free
        ):
            return Skip(INSUFFICIENT_INVENTORY, "duplicate quote_id or inventory changed")
        # The answer's one record, from here to the book, and the action that signs it under
        # the salt checked above (issue 29: :class:`Quote`).
        return Quote(
            request.quote_id, asset_in, asset_out, amount_in, amount_out, fee, deadline, exact_in,
            request.partner_id, state.salt,
        )  # fmt: skip

    def set_route(self, pair: tuple[str, str], route: Route | None) -> None:
        """Configure ``pair``'s route (None: none, its requests skip as ``unknown_pair``); its
        slot is rebuilt with it, so no decision reads a replaced route's."""
        if route is None:
            self._routes.pop(pair, None)
            self._pairs.pop(pair, None)
        else:
            self._routes[pair] = route
            self._pairs[pair] = _Pair(route, self._unit, self.settings)

    def _marks_of(self, state: MarketState) -> dict[str, tuple[float, float]]:
        """Per priced asset, its USD price and its unit (1.0 when the decimals are unknown):
        the two factors of its exposure term, as :meth:`open_exposure_usd` reads them, worked
        out once per :attr:`MarketState.version` (issue 29: one lookup an asset, not two)."""
        unit = self._unit
        self._marks = {
            asset: (ref.usd, unit.get(asset, 1.0)) for asset, ref in state.prices.items()
        }
        self._marks_version = state.version
        return self._marks

    def open_exposure_usd(self) -> float:
        """What the open reservations are worth at reference prices (the exposure limit's
        measure, and the status page's)."""
        total = 0.0
        prices, unit = self.state.prices, self._unit
        for asset, amount in self.inventory.reserved.items():
            price = prices.get(asset)
            if price is not None:
                total += amount * price.usd / unit.get(asset, 1.0)
        return total
