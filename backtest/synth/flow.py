"""One synthetic request and its competition, and the price path the informed users see.

Split from :mod:`backtest.synth.generate` (which owns the clock and the event order). The models are
documented in ``docs/backtest.md`` "Synthetic streams" and "Informed flow":

- **Direction**: a fair coin, except for an informed request (probability ``informed_share``),
  which buys the side whose reference price relative to the other is higher
  ``informed_horizon_s`` later: the user sells what is about to fall and buys what is about to
  rise, so the solver that fills them is marked out at a loss (adverse selection). The path is
  the same GBM as without informed flow: :class:`PricePath` only computes it ahead. A pair
  that does not move over the horizon (two stable tokens) falls back to the coin.
- **Competition**: the best competing answer's edge against the reference, in bps, drawn
  ``normal`` or ``logistic`` with mean ``competitor_edge_bps + per_decade * log10(size /
  median)`` and sd ``competitor_edge_sd_bps``.

Every concern draws from its own generator (flow, competition, informed), and each request
consumes the same number of draws from each whatever the outcome, so turning one knob never
reshuffles the others: ``informed_share = 0`` gives the stream of a generator without informed
flow, byte for byte.
"""

from __future__ import annotations

import math
from collections import deque
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal

import numpy as np

from backtest.stream.events import CompetitorEvent, RequestEvent
from backtest.synth.params import SynthParams
from sandbox.prices import PriceProcess, format_usd, usd_to_amount
from solver.core.market import QuoteRequest
from solver.protocol.amounts import U128_MAX

_BLOCK = 4096
_CTX = Context(prec=80)
_BPS = Decimal(10_000)
_LOGISTIC_SCALE = math.sqrt(3) / math.pi  # logistic scale per unit of sd


class Draws:
    """Buffered draws from one Generator: blocks of a fixed size keep runs reproducible."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._uniform: list[float] = []
        self._normal: list[float] = []
        self._exponential: list[float] = []

    def uniform(self) -> float:
        if not self._uniform:
            self._uniform = self._rng.random(_BLOCK).tolist()
            self._uniform.reverse()
        return self._uniform.pop()

    def normal(self) -> float:
        if not self._normal:
            self._normal = self._rng.standard_normal(_BLOCK).tolist()
            self._normal.reverse()
        return self._normal.pop()

    def exponential(self) -> float:
        """A standard exponential (mean 1)."""
        if not self._exponential:
            self._exponential = self._rng.standard_exponential(_BLOCK).tolist()
            self._exponential.reverse()
        return self._exponential.pop()


class PricePath:
    """The written reference prices of tick ``i`` (at ``i * interval``), computed on demand and
    kept from the oldest tick still needed: the informed users look ahead, the stream does not.

    Tick 0 is the process's initial prices; each later tick is one ``step(interval)``, in
    order, so the path is the one the generator would produce without looking ahead.
    """

    def __init__(self, process: PriceProcess, interval_s: float) -> None:
        self._process = process
        self._interval = interval_s
        self._assets = process.assets
        self._ticks: deque[dict[str, str]] = deque()
        self._first = 0  # index of _ticks[0]

    def at(self, i: int) -> dict[str, str]:
        """``{asset: usd text}`` at tick ``i`` (not before the oldest tick kept)."""
        if i < self._first:
            raise IndexError(f"tick {i} was released")
        while self._first + len(self._ticks) <= i:
            if self._first + len(self._ticks) > 0:
                self._process.step(self._interval)
            process = self._process
            self._ticks.append({a: format_usd(process.usd(a)) for a in self._assets})
        return self._ticks[i - self._first]

    def release_before(self, i: int) -> None:
        while self._ticks and self._first < i:
            self._ticks.popleft()
            self._first += 1

    def __len__(self) -> int:
        return len(self._ticks)


class RequestMaker:
    """Draws one request (and its competitor answer, if any) at a time, in arrival order."""

    def __init__(
        self,
        seed: int,
        pairs: list[tuple[str, str, float]],
        cumulative: list[float],
        params: SynthParams,
        decimals: dict[str, int],
        path: PricePath,
        *,
        flow: Draws,
        rivals: Draws,
        informed: Draws,
    ) -> None:
        self.seed, self.pairs, self.cumulative = seed, pairs, cumulative
        self.params, self.decimals, self.path = params, decimals, path
        self.flow, self.rivals, self.informed = flow, rivals, informed
        self.log_median = math.log(params.size_usd_median)
        self.ahead = max(1, math.ceil(params.informed_horizon_s / params.price_interval_s - 1e-9))

    def make(
        self,
        seq: int,
        ts: datetime,
        tick: int,
        usd_text: dict[str, str],
        usd_dec: dict[str, Decimal],
    ) -> tuple[RequestEvent, CompetitorEvent | None, bool]:
        """The request ``seq`` at ``ts`` (prices of the current ``tick``), its competitor event
        and whether it was informed."""
        params, flow = self.params, self.flow
        pick = flow.uniform()
        index = next((i for i, c in enumerate(self.cumulative) if pick < c), len(self.pairs) - 1)
        base, quote, _ = self.pairs[index]
        sells_base = flow.uniform() < 0.5
        informed = self.informed.uniform() < params.informed_share
        if informed:
            future = self.path.at(tick + self.ahead)
            move = math.log(float(future[base]) / float(future[quote])) - math.log(
                float(usd_text[base]) / float(usd_text[quote])
            )
            if move != 0:
                sells_base = move < 0  # sell what falls, buy what rises
            else:
                informed = False
        asset_in, asset_out = (base, quote) if sells_base else (quote, base)
        exact_in = flow.uniform() >= params.exact_out_share
        size_usd = math.exp(self.log_median + params.size_usd_sigma * flow.normal())
        fixed = asset_in if exact_in else asset_out
        amount = max(1, usd_to_amount(f"{size_usd:.6f}", usd_text[fixed], self.decimals[fixed]))
        amount = min(amount, U128_MAX)
        quote_id = f"synth-{self.seed}-{seq:09d}"
        request = RequestEvent(
            ts,
            QuoteRequest(
                quote_id, asset_in, asset_out, exact_in, amount, params.min_deadline_ms,
                params.partner_id,
            ),
        )  # fmt: skip
        competitor = self._competitor(request, size_usd, usd_dec)
        return request, competitor, informed

    def _competitor(
        self, event: RequestEvent, size_usd: float, usd_dec: dict[str, Decimal]
    ) -> CompetitorEvent | None:
        # Drawn for every request (present or not) so the flow stays aligned.
        params, rivals = self.params, self.rivals
        present = rivals.uniform() < params.competitor_share
        mean = params.competitor_edge_bps + params.competitor_edge_bps_per_decade * math.log10(
            size_usd / params.size_usd_median
        )
        sd = params.competitor_edge_sd_bps
        if params.competitor_edge_dist == "logistic":
            u = min(max(rivals.uniform(), 1e-12), 1 - 1e-12)
            edge_bps = mean + sd * _LOGISTIC_SCALE * math.log(u / (1 - u))
        else:
            edge_bps = mean + sd * rivals.normal()
        if not present:
            return None
        request = event.request
        asset_in, asset_out, amount = request.asset_in, request.asset_out, request.amount
        edge = Decimal(f"{edge_bps:.4f}") / _BPS
        # Whole units of asset_out per whole unit of asset_in, at the reference prices.
        rate = _CTX.divide(usd_dec[asset_in], usd_dec[asset_out])
        scale_in = Decimal(10) ** self.decimals[asset_in]
        scale_out = Decimal(10) ** self.decimals[asset_out]
        if request.exact_in:
            fair_out = _CTX.multiply(_CTX.divide(Decimal(amount), scale_in) * rate, scale_out)
            best = _CTX.multiply(fair_out, 1 - edge).to_integral_value(rounding=ROUND_FLOOR)
        else:
            fair_in = _CTX.multiply(_CTX.divide(Decimal(amount), scale_out) / rate, scale_in)
            best = _CTX.multiply(fair_in, 1 + edge).to_integral_value(rounding=ROUND_CEILING)
        best_amount = min(max(int(best), 1), U128_MAX)
        return CompetitorEvent(event.ts, request.quote_id, best_amount)
