"""Fill and latency models: which of our answers win (DESIGN "Backtest").

A recorded stream says what was asked, at what reference prices, and (when recorded) how good the
best competing answer was; it cannot say whether *our* answer would have been taken. A fill
model decides that, in two steps:

1. **The taker** (:class:`backtest.takers.TakerModel`, ``fill.taker``): the user takes no answer
   that charges them more than their limit against the reference price, whatever the
   competition. Lost with reason ``taker_limit``. Every model applies it, so "nobody else
   answered" never means "any price is taken".
2. **The competition**, by model:

- ``always``: every answer in time within the taker's limit wins. An upper bound on volume.
- ``competitor``: win when strictly better for the user than the recorded best competing answer
  (exact-in: our ``amount_out > best_amount``; exact-out: our ``amount_in < best_amount``).
  A request without a competitor event is one whose competition was not observed, not one
  nobody answered: by default it races a competitor drawn from the observed ones
  (:mod:`backtest.unobserved`, ``fill.unobserved``), lost ``competitor_model`` when that one is
  better; ``exclude`` loses it (``unobserved``); ``uncontested`` wins it if the taker accepts.
- ``logistic``: win with probability ``1 / (1 + exp(-(a + b * edge_bps)))``, where ``edge_bps`` is
  what the user gains against the reference price (negative when we charge a spread). ``a`` and
  ``b`` come from ``solver backtest calibrate`` (:mod:`backtest.calibration.calibrate`). The draws
  come from a numpy ``Generator`` seeded with ``--seed``, one per answer in request order (drawn
  even when the taker refuses, so the taker's settings never shift other answers' draws), so a
  run is reproducible.

The latency model sets when our answer is ready (``request ts + latency``); an answer later than
the bus wait (``bus.wait_ms``) loses whatever the fill model says.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from itertools import repeat
from operator import mul
from typing import Protocol

import numpy as np

from backtest.settings import FillSpec, LatencySpec, RaceSpec, UnobservedSpec
from backtest.stream.records import ms_to_us
from backtest.takers import TakerModel
from backtest.unobserved import CompetitionModel, Race
from solver.core.lifecycle import Quote

# Why a quote lost (summary ``lost`` keys).
LOST_COMPETITOR = "competitor"
LOST_MODEL = "model"
LOST_LATE = "late"
LOST_TAKER = "taker_limit"
LOST_MODELLED = "competitor_model"
"""Beaten by a competitor drawn for a request whose competition was not observed."""
LOST_UNOBSERVED = "unobserved"
"""``fill.unobserved.mode: exclude``: a request whose competition was not observed."""
LOST_NO_MODEL = "unobserved_no_model"
"""Nothing to draw a competitor from yet (no observation, no prior)."""
LOST_RACE = "competitor_faster"
"""An answer equal to the competitor's, which answered first (``fill.race``)."""

_BLOCK = 4096
_WHOLE_MAX = float(2**52)
"""Latencies (ms) below this are turned into µs by column: their whole part is exact in a
float and in an int64, and so is ``whole * 1000``."""


class _Uniforms:
    """Uniform draws in blocks (a per-call numpy draw costs ~1 µs); same sequence either way."""

    __slots__ = ("_buffer", "_index", "_rng")

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._buffer: list[float] = []
        self._index = 0

    def next(self) -> float:
        if self._index >= len(self._buffer):
            self._buffer = self._rng.random(_BLOCK).tolist()
            self._index = 0
        value = self._buffer[self._index]
        self._index += 1
        return value


def seeded(seed: int, stream: int) -> np.random.Generator:
    """An independent generator per purpose (``stream``), all derived from one seed."""
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(stream,)))


def edge_bps(
    amount_in: int, value_in_per_unit: float, amount_out: int, value_out_per_unit: float
) -> float:
    """What the user gains against the reference, in basis points of what the user pays.

    ``value_*_per_unit`` is the USD value of one smallest unit (price / 10**decimals). Negative:
    the user gets less than the reference value of what they pay (we charge).
    """
    paid = amount_in * value_in_per_unit
    if paid <= 0:
        return 0.0
    return (amount_out * value_out_per_unit / paid - 1.0) * 10_000.0


class FillModel(Protocol):
    name: str
    takers: TakerModel

    def decide(
        self,
        quote: Quote,
        best_amount: int | None,
        edge_bps: float,
        notional_usd: float = 0.0,
        t_us: int = 0,
        latency_ms: float = 0.0,
    ) -> str | None:
        """None when the quote wins, else why it lost (``LOST_*``).

        ``best_amount`` is the recorded best competing answer (None: none recorded),
        ``edge_bps`` the user's gain against the reference (:func:`edge_bps`) at decision time,
        ``notional_usd`` and ``t_us`` (the request's time) place it for the competition model,
        ``latency_ms`` is how long our answer took (a tie goes to whoever answered first).
        """
        ...


class AlwaysFill:
    name = "always"

    def __init__(self, takers: TakerModel | None = None) -> None:
        self.takers = takers if takers is not None else TakerModel()

    def decide(
        self,
        quote: Quote,
        best_amount: int | None,
        edge_bps: float,
        notional_usd: float = 0.0,
        t_us: int = 0,
        latency_ms: float = 0.0,
    ) -> str | None:
        return None if self.takers.accepts(quote.quote_id, edge_bps) else LOST_TAKER


class CompetitorFill:
    name = "competitor"

    def __init__(
        self,
        takers: TakerModel | None = None,
        unobserved: UnobservedSpec | None = None,
        race: RaceSpec | None = None,
    ) -> None:
        self.takers = takers if takers is not None else TakerModel()
        spec = unobserved if unobserved is not None else UnobservedSpec()
        self.unobserved = spec.mode
        seed = self.takers.seed
        self.competition = CompetitionModel(spec, seed) if spec.mode == "model" else None
        self.race = Race(race if race is not None else RaceSpec(), seed)
        self._accepts = self.takers.accepts

    def decide(
        self,
        quote: Quote,
        best_amount: int | None,
        edge_bps: float,
        notional_usd: float = 0.0,
        t_us: int = 0,
        latency_ms: float = 0.0,
    ) -> str | None:
        competition = self.competition
        if best_amount is None:
            if not self._accepts(quote.quote_id, edge_bps):
                return LOST_TAKER
            if competition is None:
                return LOST_UNOBSERVED if self.unobserved == "exclude" else None
            drawn = competition.draw(
                quote.quote_id, quote.asset_in, quote.asset_out, notional_usd, t_us
            )
            if drawn is None:
                return LOST_NO_MODEL
            return None if edge_bps > drawn else LOST_MODELLED
        exact_in = quote.exact_in
        ours = quote.amount_out if exact_in else quote.amount_in
        if competition is not None:  # observed, whatever the taker says of our answer
            # competitor_edge_bps, inline (once per observed answer): the same operations
            ratio = best_amount / ours if exact_in else ours / best_amount
            competition.observe(
                quote.asset_in,
                quote.asset_out,
                notional_usd,
                t_us,
                ((1.0 + edge_bps / 10_000.0) * ratio - 1.0) * 10_000.0,
            )
        if not self._accepts(quote.quote_id, edge_bps):
            return LOST_TAKER
        if ours == best_amount:  # a tie: the relay's user takes the first of equal answers
            return None if self.race.first(quote.quote_id, latency_ms) else LOST_RACE
        if exact_in:
            return None if ours > best_amount else LOST_COMPETITOR
        return None if ours < best_amount else LOST_COMPETITOR


class LogisticFill:
    name = "logistic"

    def __init__(
        self,
        a: float,
        b: float,
        rng: np.random.Generator,
        takers: TakerModel | None = None,
        *,
        joint: bool = False,
    ) -> None:
        self.a, self.b = a, b
        self.joint = joint
        """The curve is the joint one (a store's): the taker is in it, not applied again."""
        self.takers = takers if takers is not None else TakerModel()
        self._uniforms = _Uniforms(rng)

    def probability(self, edge: float) -> float:
        z = self.a + self.b * edge
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)  # no overflow for very negative z
        return e / (1.0 + e)

    def decide(
        self,
        quote: Quote,
        best_amount: int | None,
        edge_bps: float,
        notional_usd: float = 0.0,
        t_us: int = 0,
        latency_ms: float = 0.0,
    ) -> str | None:
        draw = self._uniforms.next()  # drawn first: one per answer, whatever the taker says
        if not self.joint and not self.takers.accepts(quote.quote_id, edge_bps):
            return LOST_TAKER
        return None if draw < self.probability(edge_bps) else LOST_MODEL


def make_fill_model(spec: FillSpec, seed: int) -> FillModel:
    """The model of ``spec`` with its taker limits (``spec.taker``), all seeded by ``seed``."""
    takers = TakerModel(spec.taker, seed)
    if spec.model == "always":
        return AlwaysFill(takers)
    if spec.model == "competitor":
        return CompetitorFill(takers, spec.unobserved, spec.race)
    return LogisticFill(spec.a, spec.b, seeded(seed, 1), takers, joint=spec.fitted == "joint")


class CompetitorBook:
    """The best competing answer per quote_id, until its quote is decided or ``ttl_us`` passed.

    A ``competitor`` event may come before or after its request; entries nobody asks for (a
    request we skipped) are dropped once older than ``ttl_us``, so memory stays flat.

    An entry counts as gone as soon as an entry ``ttl_us`` newer was added (times only grow);
    it leaves memory at the first :meth:`sweep` (the replay's tick) after the book outgrew
    twice what it held at the last one. So an add is a dict store and the time it came:
    the replay makes it inline, as :meth:`add` does (issue 29: a call per competitor record),
    and the relay reads :attr:`best` as :meth:`pop` does. :attr:`best` is one dict for the
    book's life (swept in place), so both bind it once.
    """

    def __init__(self, ttl_us: int) -> None:
        self.ttl_us = ttl_us
        self.best: dict[str, tuple[int, int]] = {}
        """quote_id -> (best amount, seen at µs)."""
        self.newest_us = -(2**62)
        """When the newest entry was added: entries seen before ``newest_us - ttl_us`` are gone."""
        self._sweep_at = _SWEEP_MIN

    def __len__(self) -> int:
        """Entries not expired (a count over all held: for reports and tests)."""
        horizon = self.newest_us - self.ttl_us
        return sum(1 for _, seen in self.best.values() if seen >= horizon)

    def add(self, quote_id: str, best_amount: int, t_us: int) -> None:
        self.best[quote_id] = (best_amount, t_us)
        self.newest_us = t_us

    def pop(self, quote_id: str) -> int | None:
        entry = self.best.pop(quote_id, None)
        if entry is None or entry[1] < self.newest_us - self.ttl_us:
            return None
        return entry[0]

    def sweep(self) -> None:
        """Forget the expired entries once the book holds more than twice what it kept at the
        last sweep (the replay's tick: what is held is bounded by a tick's records and the
        entries still live)."""
        best = self.best
        if len(best) > self._sweep_at:
            horizon = self.newest_us - self.ttl_us
            for quote_id in [q for q, entry in best.items() if entry[1] < horizon]:
                del best[quote_id]
            self._sweep_at = max(_SWEEP_MIN, 2 * len(best))


_SWEEP_MIN = 4096


class LatencyModel:
    """Milliseconds from a request to our answer at the bus; one draw per request, in order.

    :meth:`sample` gives the next draw; :meth:`draws` the same draws with each one's whole
    microseconds (as ``timedelta(milliseconds=...)`` rounds them), made a block at a time. Use
    one or the other on a model.
    """

    def __init__(self, spec: LatencySpec, seed: int) -> None:
        self.spec = spec
        self._fixed = spec.ms if spec.kind == "fixed" else None
        self._rng = seeded(seed, 2)
        self._draws = self.draws()

    def sample(self) -> float:
        return next(self._draws)[0]

    def draws(self) -> Iterator[tuple[float, int]]:
        """``(ms, µs)`` for each request, endless."""
        fixed = self._fixed
        if fixed is not None:
            return itertools.repeat((fixed, ms_to_us(fixed)))
        return itertools.chain.from_iterable(self._blocks())

    def _blocks(self) -> Iterator[Iterator[tuple[float, int]]]:
        """Blocks of draws as a ``zip`` of two columns: it hands out one tuple, reused once the
        caller let go of it (issue 29: a block of 4,096 tuples alive at once was a pass of the
        cyclic collector in every few blocks, and costlier ones as the tuples aged)."""
        median, sigma, exp = repeat(self.spec.median_ms), repeat(self.spec.sigma), math.exp
        while True:
            # median * exp(sigma * z) for each z, in C (issue 29: a Python loop's 16 bytecodes
            # a request): the same products, in the same order
            z = self._rng.standard_normal(_BLOCK).tolist()
            ms = list(map(mul, median, map(exp, map(mul, sigma, z))))
            column = np.array(ms)
            if column.max() < _WHOLE_MAX:  # not for a NaN: then one at a time
                # ms_to_us by column, the same operations: int() truncates as astype does, the
                # fraction is the same float subtraction and product, round() and rint both
                # round half to even (issue 29: a fifth of the Python loop's time)
                whole = column.astype(np.int64)
                fraction = np.rint((column - whole) * 1000.0).astype(np.int64)
                us: list[int] = (whole * 1000 + fraction).tolist()
            else:
                us = [(w := int(x)) * 1000 + round((x - w) * 1000) for x in ms]
            yield zip(ms, us, strict=True)
