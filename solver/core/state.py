"""Cached market state the quote path reads: reference prices with history, fee, salt.

The desk writes it from events (salt, prices, fee); the quote path only reads it, so a slow
or failing remote makes inputs *stale* — and the pair skip with a reason — instead of
blocking the loop.

**Several price sources per asset** (DESIGN "The quote path"). Each source's latest
observation of an asset is kept under the source's name (``prices.sources[i].name``, else
``sources.i``). When one arrives, the asset's reference price is recomputed once — never per
request — from the *fresh* observations, those at most ``price_max_age_s`` older than the
newest one:

- the price is their median (the mean of the two middle ones for an even count), stamped with
  the time of the *oldest* of them, so it goes stale as soon as one of its inputs would; a
  source that stops is left out at the next arrival from another one;
- when they disagree by more than ``max_divergence_bps`` (``max / min − 1``), the asset has no
  usable price: it is listed in :attr:`MarketState.divergent` with the detail, pairs using it
  skip (``price_divergence``), and :attr:`MarketState.prices` keeps the last price the
  sources agreed on (so PnL marks on it while it ages; a divergence lasting longer than
  ``risk.max_stale_s`` trips the kill switch as stale data).

With one source an asset's price is that source's latest observation, exactly as before.
:attr:`MarketState.prices` and :attr:`MarketState.history` hold the combined price: that is
what strategies, limits and PnL read.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from solver.core.clock import SECOND, Micros, from_micros, micros, span
from solver.core.inventory import Inventory
from solver.core.market import ReferencePrice, decimals_ok

BPS = 10_000

_Rate = tuple[ReferencePrice, ReferencePrice, tuple[int, int] | None, Micros]
"""The two prices a rate was worked out from, the rate (None: unusable whatever the time) and
the older of the two prices' times in µs (the one an age limit finds stale first)."""


@dataclass
class MarketState:
    decimals: Mapping[str, int]
    history_size: int = 512
    prices: dict[str, ReferencePrice] = field(default_factory=dict)
    """The combined price of each asset, as strategies read it (:class:`ReferencePrice`, with
    a ``datetime``: the strategy API is an edge, :mod:`solver.core.clock`)."""
    price_at: dict[str, Micros] = field(default_factory=dict)
    """The combined price's time in µs: what the desk's age checks read."""
    history: dict[str, deque[tuple[datetime, float]]] = field(default_factory=dict)
    fee_pips: int = 0
    salt: bytes | None = None
    salt_at: Micros | None = None
    price_max_age_s: float = 10.0
    """Observations older than this, relative to the newest of the asset, are left out."""
    max_divergence_bps: float | None = 200.0
    """Fresh sources of one asset further apart than this: no usable price (None: no check)."""
    observations: dict[str, dict[str, tuple[float, Micros]]] = field(default_factory=dict)
    """Per asset, the latest observation of each source (by source name): USD and µs."""
    divergent: dict[str, str] = field(default_factory=dict)
    """Assets whose fresh sources disagree, with the detail (the skip's)."""
    version: int = field(default=0, compare=False)
    """Counts the changes of :attr:`prices`, :attr:`price_at` and :attr:`divergent` (made
    only by :meth:`set_price`): what the quote pipeline read of them per pair stays valid while
    it is the same (issue 29)."""
    rates: dict[tuple[str, str], _Rate] = field(default_factory=dict, compare=False, repr=False)
    """Per ``(from, to)``, the conversion rate worked out from the two price objects it holds
    (:meth:`LiveMarketView.exact_conversion_rate`): valid while both are still the current ones, so
    it is worked out once per price update, not per request."""

    def set_price(self, asset: str, usd: float, observed: Micros, source: str = "") -> None:
        """A source's observation at ``observed`` µs (a price arrival: not on the quote path,
        so the strategies' ``datetime`` is built here, once)."""
        if not usd > 0:
            return
        seen = self.observations.get(asset)
        if seen is None:
            seen = self.observations[asset] = {}
        current = seen.get(source)
        if current is not None and current[1] > observed:
            return
        seen[source] = (usd, observed)
        self.version += 1
        stamp = at = observed
        if len(seen) > 1:
            combined = self._combine(asset, seen)
            if combined is None:
                return
            usd, at, stamp = combined
        self.prices[asset] = ReferencePrice(usd, from_micros(at))
        self.price_at[asset] = at
        series = self.history.get(asset)
        if series is None:
            series = self.history[asset] = deque(maxlen=self.history_size)
        series.append((from_micros(stamp), usd))

    def _combine(
        self, asset: str, seen: Mapping[str, tuple[float, Micros]]
    ) -> tuple[float, Micros, Micros] | None:
        """The median of the fresh observations, the oldest and the newest time of them, or
        None (divergent)."""
        newest = max(at for _, at in seen.values())
        horizon = newest - span(self.price_max_age_s)
        fresh = sorted(((usd, name, at) for name, (usd, at) in seen.items() if at >= horizon))
        low, high = fresh[0][0], fresh[-1][0]
        limit = self.max_divergence_bps
        if limit is not None and high > low * (1 + limit / BPS):
            listed = ", ".join(f"{name or '-'}={usd:.6g}" for usd, name, _ in fresh)
            spread = (high / low - 1) * BPS
            self.divergent[asset] = f"sources disagree by {spread:.0f} bps > {limit:g}: {listed}"
            return None
        self.divergent.pop(asset, None)
        values = [usd for usd, _, _ in fresh]
        usd = statistics.median(values)
        oldest = min(at for _, _, at in fresh)
        return usd, oldest, newest

    def price(self, asset: str) -> float | None:
        """The asset's combined reference price in USD (None: none yet)."""
        ref = self.prices.get(asset)
        return ref.usd if ref is not None else None

    def set_salt(self, salt: bytes, observed: Micros) -> None:
        self.salt, self.salt_at = salt, observed


_SCALES: dict[int, int] = {}


def _rate(
    decimals: Mapping[str, int],
    from_asset: str,
    to_asset: str,
    ref_from: ReferencePrice,
    ref_to: ReferencePrice,
) -> _Rate:
    """``strategies.pricing.conversion_rate``'s checks and rate except the age (which depends
    on the time), in its terms: every failing check means None there too."""
    usd_from, usd_to = ref_from.usd, ref_to.usd
    if not (0.0 < usd_from < math.inf and 0.0 < usd_to < math.inf):
        return ref_from, ref_to, None, 0
    try:
        d_from, d_to = decimals[from_asset], decimals[to_asset]
    except (KeyError, LookupError, ValueError):
        return ref_from, ref_to, None, 0
    if not decimals_ok(d_from, d_to):
        return ref_from, ref_to, None, 0
    from_n, from_d = usd_from.as_integer_ratio()
    to_n, to_d = usd_to.as_integer_ratio()
    rate = from_n * to_d * _scale(d_to), from_d * to_n * _scale(d_from)
    at_from, at_to = micros(ref_from.observed_at), micros(ref_to.observed_at)
    return ref_from, ref_to, rate, at_from if at_from <= at_to else at_to


def _scale(decimals: int) -> int:
    cached = _SCALES.get(decimals)
    if cached is None:
        cached = _SCALES[decimals] = int(10**decimals)
    return cached


class LiveMarketView:
    """The :class:`~solver.core.market.MarketView` strategies get for a decision: the quote
    pipeline keeps one and sets :attr:`now_us` and :attr:`fee_pips` per decision (issue 29: no
    view built per request). Like the state it reads, it shows the decision under way: a
    strategy reads it during its ``quote`` call, not after."""

    __slots__ = ("_inventory", "_now", "_state", "deadline_margin_ms", "fee_pips", "now_us")

    def __init__(
        self,
        state: MarketState,
        inventory: Inventory,
        now: Micros,
        deadline_margin_ms: int = 0,
    ) -> None:
        self._state, self._inventory, self.now_us = state, inventory, now
        self._now: tuple[Micros, datetime] | None = None
        self.deadline_margin_ms = deadline_margin_ms
        self.fee_pips = state.fee_pips
        """The state's, as of the decision (set with :attr:`now_us`): an attribute, not a
        property read per quote."""

    @property
    def now(self) -> datetime:
        """The decision's time as the strategy API gives it: built when first read for the
        current :attr:`now_us`."""
        now, moment = self.now_us, self._now
        if moment is None or moment[0] != now:
            moment = self._now = (now, from_micros(now))
        return moment[1]

    def free(self, asset: str) -> int:
        """``Inventory.free``, inline: the same integers, one call less a quote."""
        inventory = self._inventory
        value = (
            inventory.confirmed.get(asset, 0)
            - inventory.reserved.get(asset, 0)
            - inventory.floors.get(asset, 0)
        )
        return value if value > 0 else 0

    def price(self, asset: str) -> ReferencePrice | None:
        return self._state.prices.get(asset)

    def decimals(self, asset: str) -> int:
        return self._state.decimals[asset]

    def price_history(self, asset: str) -> list[tuple[datetime, float]]:
        return list(self._state.history.get(asset, ()))

    def exact_conversion_rate(
        self, from_asset: str, to_asset: str, max_age_s: float | None
    ) -> tuple[int, int] | None:
        """``strategies.pricing.conversion_rate(self, ...)``, the same result (that function
        asks a view that has this method instead of working it out): the rate is
        worked out once per price update (:attr:`MarketState.rates`), and the prices' ages are
        read in µs, ``(now - at) / SECOND``, which is exactly the ``timedelta.total_seconds()``
        of the ``datetime`` difference it replaces (integer µs over 10**6, correctly rounded
        both ways). That age grows with the time's distance, so either price is too old exactly
        when the older one is: one comparison, the same answer (issue 29). The token decimals
        are fixed for a state's life (the pipeline's units too).
        """
        state = self._state
        prices = state.prices
        ref_from = prices.get(from_asset)
        ref_to = prices.get(to_asset)
        if ref_from is None or ref_to is None:
            return None
        key = (from_asset, to_asset)
        entry = state.rates.get(key)
        if entry is None or entry[0] is not ref_from or entry[1] is not ref_to:
            entry = state.rates[key] = _rate(state.decimals, from_asset, to_asset, ref_from, ref_to)
        _, _, rate, oldest = entry
        if (
            rate is not None
            and max_age_s is not None
            and (self.now_us - oldest) / SECOND > max_age_s
        ):
            return None
        return rate
