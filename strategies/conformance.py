"""A conformance kit any strategy can run on itself (STYLE 6, DESIGN "The quote path").

The core guards strategy calls, but a guard only turns a bad answer into a skipped request; a
*plausible* bad answer — one unit too generous, a quote beyond inventory, a different price for
the same input — would be signed and could settle. ``check`` drives a strategy through many
requests over realistic markets (``strategies.scenarios``) and reports every broken promise:

============================  ==============================================================
``raised``                    quote / reference_amount / stated_edge_bps raised
``nondeterministic``          two calls with equal input gave different answers
``bad_type``                  the quote is not an int (a float, a bool, a numpy scalar, …)
``out_of_range``              the quote is an int outside ``[1, 2**128 - 1]``
``exceeds_inventory``         the solver's outflow plus protocol fee exceeds ``free(asset_out)``
                              (exact-in: ``amount_out``; exact-out: the requested amount —
                              None is expected there)
``edge_violated``             better for the user than ``reference_amount`` and
                              ``stated_edge_bps`` allow: exact-in ``out > ref * (1 - e)``,
                              exact-out ``in < ref * (1 + e)``; compared exactly, so the only
                              rounding slack is the one in the solver's favour
``bad_edge``                  ``stated_edge_bps`` is not a finite number below 10000
``no_quotes``                 never quoted exact-in (or exact-out) in any scenario
============================  ==============================================================

Sizes cover 1 unit, one whole token, about $1000, the free balance and one more, 2**64,
2**128 - 1 and seeded random log-uniform amounts, in both directions for every ordered pair.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from fractions import Fraction
from typing import TypeVar

from solver.core.market import MarketView, QuoteRequest, StaticMarket
from strategies.base import Strategy
from strategies.pricing import BPS, U128_MAX, fresh_price, gross_outflow, token_decimals
from strategies.scenarios import Scenario, default_scenarios

__all__ = ["Check", "ConformanceReport", "Failure", "Scenario", "check", "default_scenarios"]


T = TypeVar("T")


class Check(StrEnum):
    """The name of each property the kit verifies (module doc)."""

    RAISED = "raised"
    NONDETERMINISTIC = "nondeterministic"
    BAD_TYPE = "bad_type"
    OUT_OF_RANGE = "out_of_range"
    EXCEEDS_INVENTORY = "exceeds_inventory"
    EDGE_VIOLATED = "edge_violated"
    BAD_EDGE = "bad_edge"
    NO_QUOTES = "no_quotes"


@dataclass(frozen=True, slots=True)
class Failure:
    """One broken promise, with the scenario and request that exposed it."""

    check: Check
    scenario: str
    request: QuoteRequest | None
    detail: str

    def __str__(self) -> str:
        where = self.scenario
        if self.request is not None:
            r = self.request
            kind = "exact-in" if r.exact_in else "exact-out"
            where += f" {r.asset_in}->{r.asset_out} {kind} {r.amount}"
        return f"{self.check}: {where}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ConformanceReport:
    """What ``check`` found. ``ok`` is True when ``failures`` is empty."""

    strategy: str
    requests: int
    quotes: int
    edge_unchecked: int
    failures: tuple[Failure, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failed_checks(self) -> frozenset[Check]:
        return frozenset(f.check for f in self.failures)

    def summary(self) -> str:
        """One line of counts, then the first example of each failed check."""
        head = (
            f"{self.strategy}: {self.requests} requests, {self.quotes} quotes, "
            f"{self.edge_unchecked} without reference, {len(self.failures)} failures"
        )
        counts = Counter(f.check for f in self.failures)
        lines = [head]
        for name, count in sorted(counts.items()):
            example = next(f for f in self.failures if f.check == name)
            lines.append(f"  {name} x{count}, e.g. {example}")
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise AssertionError with the summary unless every check passed (for test suites)."""
        if self.failures:
            raise AssertionError(self.summary())


def _call(fn: Callable[[], T]) -> tuple[T | None, Exception | None]:
    try:
        return fn(), None
    except Exception as exc:  # the point of the kit is to catch whatever a plugin raises
        return None, exc


def _same(a: object, b: object) -> bool:
    try:
        return type(a) is type(b) and (bool(a == b) or repr(a) == repr(b))
    except Exception:
        return repr(a) == repr(b)


def _sizes(scenario: Scenario, fixed: str, out: str, rng: random.Random) -> list[int]:
    """Request amounts for one pair and direction (module doc)."""
    market = scenario.market
    sizes = {1, 2**64, U128_MAX, market.free(out), market.free(out) + 1, market.free(fixed)}
    decimals = token_decimals(market, fixed)
    if decimals is not None:
        sizes.add(10**decimals)
        price = fresh_price(market, fixed, None)
        if price is not None:
            sizes.add(int(1000 / price * 10**decimals))
    sizes.update(min(U128_MAX, int(10 ** rng.uniform(0, 38.5))) for _ in range(3))
    return sorted(s for s in sizes if 1 <= s <= U128_MAX)


def _requests(scenario: Scenario, rng: random.Random) -> Iterable[QuoteRequest]:
    for asset_in in scenario.assets:
        for asset_out in scenario.assets:
            if asset_in == asset_out:
                continue
            for exact_in in (True, False):
                fixed = asset_in if exact_in else asset_out
                for i, amount in enumerate(_sizes(scenario, fixed, asset_out, rng)):
                    yield QuoteRequest(
                        quote_id=f"{scenario.name}-{asset_in}-{asset_out}-{exact_in}-{i}",
                        asset_in=asset_in,
                        asset_out=asset_out,
                        exact_in=exact_in,
                        amount=amount,
                        min_deadline_ms=60_000,
                    )


class _Run:
    """Mutable tallies of one ``check`` call."""

    def __init__(self, strategy: Strategy, edge: Fraction | None) -> None:
        self.strategy = strategy
        self.edge = edge
        self.failures: list[Failure] = []
        self.requests = self.quotes = self.edge_unchecked = 0
        self.quoted = {True: False, False: False}

    def fail(self, check: Check, scenario: str, request: QuoteRequest | None, detail: str) -> None:
        self.failures.append(Failure(check, scenario, request, detail))

    def one(self, name: str, market: MarketView, request: QuoteRequest) -> None:
        self.requests += 1
        first, exc = _call(lambda: self.strategy.quote(request, market))
        if exc is not None:
            self.fail(Check.RAISED, name, request, f"quote raised {exc!r}")
            return
        if first is not None:
            self.quoted[request.exact_in] = True
        second, exc = _call(lambda: self.strategy.quote(request, market))
        if exc is not None or not _same(first, second):
            again = f"raised {exc!r}" if exc is not None else repr(second)
            self.fail(Check.NONDETERMINISTIC, name, request, f"{first!r} then {again}")
            return
        if first is None:
            return
        if isinstance(first, bool) or not isinstance(first, int):
            self.fail(Check.BAD_TYPE, name, request, f"returned {type(first).__name__} {first!r}")
            return
        if not 1 <= first <= U128_MAX:
            self.fail(Check.OUT_OF_RANGE, name, request, f"returned {first}")
            return
        self.quotes += 1
        self._inventory(name, market, request, first)
        self._edge(name, market, request, first)

    def _inventory(self, name: str, market: MarketView, request: QuoteRequest, got: int) -> None:
        given = got if request.exact_in else request.amount
        gross = gross_outflow(given, market.fee_pips)
        free = market.free(request.asset_out)
        if gross > free:
            self.fail(
                Check.EXCEEDS_INVENTORY,
                name,
                request,
                f"outflow {given} + fee = {gross} > free {free} (quoted {got})",
            )

    def _edge(self, name: str, market: MarketView, request: QuoteRequest, got: int) -> None:
        if self.edge is None:
            return
        ref, exc = _call(lambda: self.strategy.reference_amount(request, market))
        if exc is not None:
            self.fail(Check.RAISED, name, request, f"reference_amount raised {exc!r}")
            return
        if ref is None:
            self.edge_unchecked += 1
            return
        try:
            if isinstance(ref, bool) or not isinstance(ref, (int, float, Fraction, Decimal)):
                raise TypeError(type(ref).__name__)
            reference = Fraction(ref)
        except (TypeError, ValueError, OverflowError):
            self.fail(Check.BAD_TYPE, name, request, f"reference_amount returned {ref!r}")
            return
        if request.exact_in and got > reference * (1 - self.edge):
            bound = reference * (1 - self.edge)
            self.fail(Check.EDGE_VIOLATED, name, request, f"amount_out {got} > {float(bound):.6g}")
        elif not request.exact_in and got < reference * (1 + self.edge):
            bound = reference * (1 + self.edge)
            self.fail(Check.EDGE_VIOLATED, name, request, f"amount_in {got} < {float(bound):.6g}")


def _stated_edge(strategy: Strategy, run_fail: Callable[[Check, str], None]) -> Fraction | None:
    raw, exc = _call(strategy.stated_edge_bps)
    if exc is not None:
        run_fail(Check.RAISED, f"stated_edge_bps raised {exc!r}")
        return None
    if (
        isinstance(raw, bool)
        or not isinstance(raw, (int, float))
        or not math.isfinite(raw)
        or raw >= BPS
    ):
        run_fail(Check.BAD_EDGE, f"stated_edge_bps returned {raw!r}")
        return None
    return Fraction(raw) / BPS


def check(
    strategy: Strategy,
    *,
    markets: Sequence[Scenario | StaticMarket] | None = None,
    seed: int = 0,
    require_quotes: bool = True,
) -> ConformanceReport:
    """Run every check on ``strategy`` and report; never raises for a misbehaving strategy.

    ``markets`` defaults to :func:`strategies.scenarios.default_scenarios` (``seed``); a bare
    StaticMarket is wrapped with its ``token_decimals`` keys as the assets. ``seed`` also fixes
    the random request sizes. With ``require_quotes`` a strategy that never quotes one
    direction fails ``no_quotes`` — "always None" passes everything else vacuously.
    """
    scenarios = [
        m if isinstance(m, Scenario) else Scenario.of(f"market{i}", m)
        for i, m in enumerate(default_scenarios(seed) if markets is None else markets)
    ]
    early: list[Failure] = []
    edge = _stated_edge(strategy, lambda c, d: early.append(Failure(c, "-", None, d)))
    run = _Run(strategy, edge)
    run.failures.extend(early)
    rng = random.Random(seed)
    for scenario in scenarios:
        for request in _requests(scenario, rng):
            run.one(scenario.name, scenario.market, request)
    if require_quotes:
        for exact_in, label in ((True, "exact-in"), (False, "exact-out")):
            if not run.quoted[exact_in]:
                run.fail(Check.NO_QUOTES, "*", None, f"never quoted {label}")
    return ConformanceReport(
        strategy=type(strategy).name,
        requests=run.requests,
        quotes=run.quotes,
        edge_unchecked=run.edge_unchecked,
        failures=tuple(run.failures),
    )
