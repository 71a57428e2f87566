"""Synthetic quote streams: realistic flow for backtests, deterministic for a seed.

The shape (``docs/backtest.md`` "Synthetic streams"):

- **Arrivals**: a Markov-modulated Poisson process. The flow alternates between a *calm* and a
  *burst* state with exponential durations (means ``calm_mean_s`` and ``burst_mean_s``); the
  burst rate is ``burst_factor`` times the calm rate, and the calm rate is set so that the
  long-run average is ``rate_per_s``. Inside a state, gaps are exponential.
- **Requests**: a pair by weight, a direction by a fair coin, exact-out with probability
  ``exact_out_share``, a size in USD drawn lognormal (``size_usd_median``, ``size_usd_sigma``)
  and converted to the fixed side's smallest units with ``Decimal`` at the current reference
  price (a float cannot hold a 24-decimal amount).
- **Prices**: one geometric Brownian motion per token (:class:`sandbox.prices.PriceProcess`,
  the sandbox's own, with each token's ``volatility_annual``), stepped every
  ``price_interval_s``, with a ``price`` event per token per step.
- **Competition**: with probability ``competitor_share`` a request gets a ``competitor`` event
  right after it (same timestamp): the best competing answer, priced at the reference rate
  minus an edge in bps drawn ``Normal(competitor_edge_bps + competitor_edge_bps_per_decade *
  log10(size / median), competitor_edge_sd_bps)`` — larger trades are quoted wider, and a
  negative draw is a competitor pricing better than the reference.

Determinism: every draw comes from numpy Generators seeded from ``(seed, stream name)``
(:func:`sandbox.prices.seeded_rng`), one per concern (arrivals, flow, competition, prices),
consumed in blocks of a fixed size; timestamps are whole milliseconds from ``start``; gzip is
written without a name or mtime. The same arguments give a byte-identical file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from pathlib import Path
from typing import Any, Final

import numpy as np

from backtest.events import (
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StreamEvent,
    TokenInfo,
)
from backtest.stream import PathLike, StreamWriter
from sandbox.config import TokenSpec
from sandbox.prices import PriceProcess, format_usd, seeded_rng, usd_to_amount
from solver.core.market import QuoteRequest
from solver.protocol.amounts import U128_MAX

DEFAULT_START: Final = datetime(2025, 1, 1, tzinfo=UTC)
DEFAULT_TOKENS: Final[Mapping[str, TokenSpec]] = {
    "nep141:usdc.sandbox": TokenSpec(symbol="USDC", decimals=6, usd=1.0, volatility_annual=0.0),
    "nep141:wrap.sandbox": TokenSpec(symbol="wNEAR", decimals=24, usd=3.0, volatility_annual=0.9),
    "nep141:eth.sandbox": TokenSpec(symbol="ETH", decimals=18, usd=3000.0, volatility_annual=0.7),
}
"""The tokens of ``config/sandbox.yaml``: used when no token file is given."""

_BLOCK = 4096
_CTX = Context(prec=80)
_BPS = Decimal(10_000)


@dataclass(frozen=True)
class SynthParams:
    """Every knob of the generator, with its default. See the module docstring."""

    rate_per_s: float = 5.0
    """Long-run average of quote requests per second (calm and burst together)."""
    burst_factor: float = 6.0
    """Arrival rate in a burst, as a multiple of the calm rate (1: no bursts)."""
    calm_mean_s: float = 300.0
    burst_mean_s: float = 20.0
    size_usd_median: float = 50.0
    size_usd_sigma: float = 1.0
    exact_out_share: float = 0.3
    min_deadline_ms: int = 60_000
    price_interval_s: float = 1.0
    competitor_share: float = 0.85
    """Share of requests with a ``competitor`` event (the rest: no competing answer known)."""
    competitor_edge_bps: float = 8.0
    """Mean edge of the best competitor against the reference price at the median size."""
    competitor_edge_sd_bps: float = 6.0
    competitor_edge_bps_per_decade: float = 2.0
    """Extra edge per tenfold size above the median (less below it)."""
    partner_id: str | None = "synth"

    def check(self) -> None:
        """Raise ``ValueError`` naming the first parameter out of range."""
        positive = {
            "rate_per_s": self.rate_per_s,
            "calm_mean_s": self.calm_mean_s,
            "burst_mean_s": self.burst_mean_s,
            "size_usd_median": self.size_usd_median,
            "price_interval_s": self.price_interval_s,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive, got {value}")
        if not (math.isfinite(self.burst_factor) and self.burst_factor >= 1):
            raise ValueError("burst_factor must be >= 1")
        if not 0 <= self.size_usd_sigma <= 5:
            raise ValueError("size_usd_sigma must be in 0..5")
        for name in ("exact_out_share", "competitor_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in 0..1")
        if not 0 <= self.min_deadline_ms <= 86_400_000:
            raise ValueError("min_deadline_ms must be in 0..86400000")
        if not (math.isfinite(self.competitor_edge_sd_bps) and self.competitor_edge_sd_bps >= 0):
            raise ValueError("competitor_edge_sd_bps must be >= 0")
        for name in ("competitor_edge_bps", "competitor_edge_bps_per_decade"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")

    @property
    def calm_rate(self) -> float:
        """The calm-state rate that makes the long-run average ``rate_per_s``."""
        calm_share = self.calm_mean_s / (self.calm_mean_s + self.burst_mean_s)
        return self.rate_per_s / (calm_share + self.burst_factor * (1 - calm_share))


@dataclass
class SynthSummary:
    """What one run produced."""

    path: Path | None = None
    duration_s: float = 0.0
    requests: int = 0
    exact_out: int = 0
    prices: int = 0
    competitors: int = 0
    bursts: int = 0
    burst_time_s: float = 0.0
    requests_by_pair: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    @property
    def events(self) -> int:
        return self.requests + self.prices + self.competitors

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path) if self.path else None,
            "duration_s": self.duration_s,
            "events": self.events,
            "requests": self.requests,
            "exact_out": self.exact_out,
            "prices": self.prices,
            "competitors": self.competitors,
            "bursts": self.bursts,
            "burst_time_s": round(self.burst_time_s, 3),
            "requests_by_pair": dict(self.requests_by_pair),
            "bytes": self.bytes,
        }


class _Draws:
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


def resolve_pairs(text: str, tokens: Mapping[str, TokenSpec]) -> list[tuple[str, str, float]]:
    """``"wNEAR/USDC,ETH/USDC:0.5"`` → ``[(base, quote, weight), ...]`` of asset ids.

    Each side is a token symbol (case-insensitive) or an asset id of ``tokens``; ``:W`` sets
    a weight (default 1). Raises ``ValueError`` naming what is wrong.
    """
    by_symbol: dict[str, str] = {}
    for asset, spec in tokens.items():
        by_symbol.setdefault(spec.symbol.lower(), asset)

    def asset_of(name: str) -> str:
        name = name.strip()
        if name in tokens:
            return name
        asset = by_symbol.get(name.lower())
        if asset is None:
            known = ", ".join(sorted(spec.symbol for spec in tokens.values()))
            raise ValueError(f"unknown token {name!r} (known: {known})")
        return asset

    pairs: list[tuple[str, str, float]] = []
    for raw_item in text.split(","):
        item = raw_item.strip()
        if not item:
            continue
        body, sep, weight_text = item.rpartition(":") if _has_weight(item) else (item, "", "")
        weight = 1.0
        if sep:
            try:
                weight = float(weight_text)
            except ValueError:
                raise ValueError(f"pair {item!r}: weight {weight_text!r} is not a number") from None
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"pair {item!r}: the weight must be positive")
        base_name, slash, quote_name = body.partition("/")
        if not slash:
            raise ValueError(f"pair {item!r} must be BASE/QUOTE (like wNEAR/USDC)")
        base, quote = asset_of(base_name), asset_of(quote_name)
        if base == quote:
            raise ValueError(f"pair {item!r} names the same token twice")
        pairs.append((base, quote, weight))
    if not pairs:
        raise ValueError("no pairs given")
    return pairs


def _has_weight(item: str) -> bool:
    """``X/Y:2`` has a weight; ``nep141:a.near/nep141:b.near`` does not (colons of ids)."""
    tail = item.rpartition(":")[2]
    return "/" not in tail and tail.replace(".", "", 1).strip().isdigit()


def header_for(tokens: Mapping[str, TokenSpec], *, start: datetime, source: str) -> Header:
    return Header(
        created=start,
        source=source,
        tokens={
            asset: TokenInfo(symbol=spec.symbol, decimals=spec.decimals)
            for asset, spec in tokens.items()
        },
    )


def generate(
    *,
    pairs: Sequence[tuple[str, str] | tuple[str, str, float]],
    duration_s: float,
    seed: int,
    tokens: Mapping[str, TokenSpec] | None = None,
    params: SynthParams | None = None,
    start: datetime = DEFAULT_START,
    summary: SynthSummary | None = None,
    progress: Callable[[float], None] | None = None,
    **knobs: Any,
) -> Iterator[StreamEvent]:
    """The events of a synthetic stream, in time order, lazily (memory stays flat).

    ``pairs`` are ``(base, quote)`` or ``(base, quote, weight)`` asset ids of ``tokens``
    (default :data:`DEFAULT_TOKENS`); both directions are traded. The knobs are a
    :class:`SynthParams` (``params``) and/or its fields as keywords (``rate_per_s=10``), which
    override it. ``summary`` is filled as events are produced; ``progress(seconds_done)`` is
    called every few thousand events. Parameters are checked at the call (``ValueError``).
    """
    tokens = dict(tokens or DEFAULT_TOKENS)
    params = replace(params or SynthParams(), **knobs)
    params.check()
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError("duration_s must be positive")
    if start.utcoffset() is None:
        raise ValueError("start must be timezone-aware")
    resolved = [(p[0], p[1], float(p[2]) if len(p) > 2 else 1.0) for p in pairs]
    if not resolved:
        raise ValueError("no pairs given")
    for base, quote, weight in resolved:
        if base not in tokens or quote not in tokens:
            raise ValueError(f"pair {base}/{quote}: both assets must be in tokens")
        if base == quote:
            raise ValueError(f"pair {base}/{quote}: base and quote must differ")
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"pair {base}/{quote}: the weight must be positive")
    total_weight = sum(w for _, _, w in resolved)
    cumulative: list[float] = []
    running = 0.0
    for _, _, weight in resolved:
        running += weight / total_weight
        cumulative.append(running)
    summary = summary if summary is not None else SynthSummary()
    summary.duration_s = duration_s
    return _events(resolved, cumulative, duration_s, seed, tokens, params, start, summary, progress)


def _events(
    pairs: list[tuple[str, str, float]],
    cumulative: list[float],
    duration_s: float,
    seed: int,
    tokens: dict[str, TokenSpec],
    params: SynthParams,
    start: datetime,
    summary: SynthSummary,
    progress: Callable[[float], None] | None,
) -> Iterator[StreamEvent]:
    arrivals = _Draws(seeded_rng(seed, "synth.arrivals"))
    flow = _Draws(seeded_rng(seed, "synth.flow"))
    rivals = _Draws(seeded_rng(seed, "synth.competitors"))
    process = PriceProcess(tokens, seed=seed, clock=lambda: start)
    assets = process.assets
    decimals = {asset: tokens[asset].decimals for asset in assets}
    calm_rate = params.calm_rate
    rates = (calm_rate, calm_rate * params.burst_factor)
    state_means = (params.calm_mean_s, params.burst_mean_s)
    bursts_on = params.burst_factor > 1
    state = 0  # 0 calm, 1 burst
    state_end = state_means[0] * arrivals.exponential() if bursts_on else math.inf
    next_arrival = arrivals.exponential() / rates[0]
    interval = params.price_interval_s
    tick = 0
    next_tick = 0.0
    log_median = math.log(params.size_usd_median)
    sigma = params.size_usd_sigma
    usd_text: dict[str, str] = {}
    usd_dec: dict[str, Decimal] = {}
    produced = 0
    seq = 0
    burst_started = 0.0

    def stamp(t: float) -> datetime:
        return start + timedelta(milliseconds=math.floor(t * 1000))

    while True:
        t = min(next_tick, next_arrival, state_end)
        if t >= duration_s:
            break
        if t == next_tick:
            if tick:
                process.step(interval)
            ts = stamp(t)
            for asset in assets:
                text = format_usd(process.usd(asset))
                usd_text[asset] = text
                usd_dec[asset] = Decimal(text)
                summary.prices += 1
                yield PriceEvent(ts, asset, text)
            tick += 1
            next_tick = tick * interval
            produced += len(assets)
        elif t == state_end:
            if state == 1:
                summary.burst_time_s += t - burst_started
            state = 1 - state
            if state == 1:
                summary.bursts += 1
                burst_started = t
            state_end = t + state_means[state] * arrivals.exponential()
            # Memoryless: the next arrival is redrawn at the new state's rate.
            next_arrival = t + arrivals.exponential() / rates[state]
            continue
        else:
            next_arrival = t + arrivals.exponential() / rates[state]
            seq += 1
            ts = stamp(t)
            request, competitor = _request(
                seq, seed, ts, pairs, cumulative, flow, rivals, params, log_median, sigma,
                usd_text, usd_dec, decimals,
            )  # fmt: skip
            summary.requests += 1
            summary.exact_out += not request.request.exact_in
            asked = request.request
            key = f"{tokens[asked.asset_in].symbol}/{tokens[asked.asset_out].symbol}"
            summary.requests_by_pair[key] = summary.requests_by_pair.get(key, 0) + 1
            yield request
            produced += 1
            if competitor is not None:
                summary.competitors += 1
                yield competitor
                produced += 1
        if progress is not None and produced >= 4096:
            produced = 0
            progress(t)
    if state == 1:
        summary.burst_time_s += duration_s - burst_started
    if progress is not None:
        progress(duration_s)


def _request(
    seq: int,
    seed: int,
    ts: datetime,
    pairs: list[tuple[str, str, float]],
    cumulative: list[float],
    flow: _Draws,
    rivals: _Draws,
    params: SynthParams,
    log_median: float,
    sigma: float,
    usd_text: dict[str, str],
    usd_dec: dict[str, Decimal],
    decimals: dict[str, int],
) -> tuple[RequestEvent, CompetitorEvent | None]:
    pick = flow.uniform()
    index = next((i for i, c in enumerate(cumulative) if pick < c), len(pairs) - 1)
    base, quote, _ = pairs[index]
    asset_in, asset_out = (base, quote) if flow.uniform() < 0.5 else (quote, base)
    exact_in = flow.uniform() >= params.exact_out_share
    size_usd = math.exp(log_median + sigma * flow.normal())
    fixed = asset_in if exact_in else asset_out
    amount = max(1, usd_to_amount(f"{size_usd:.6f}", usd_text[fixed], decimals[fixed]))
    amount = min(amount, U128_MAX)
    quote_id = f"synth-{seed}-{seq:09d}"
    request = RequestEvent(
        ts,
        QuoteRequest(
            quote_id,
            asset_in,
            asset_out,
            exact_in,
            amount,
            params.min_deadline_ms,
            params.partner_id,
        ),
    )
    # Competition: drawn for every request (present or not) so the flow stays aligned.
    present = rivals.uniform() < params.competitor_share
    edge_bps = (
        params.competitor_edge_bps
        + params.competitor_edge_bps_per_decade * math.log10(size_usd / params.size_usd_median)
        + params.competitor_edge_sd_bps * rivals.normal()
    )
    if not present:
        return request, None
    edge = Decimal(f"{edge_bps:.4f}") / _BPS
    # Whole units of asset_out per whole unit of asset_in, at the reference prices.
    rate = _CTX.divide(usd_dec[asset_in], usd_dec[asset_out])
    scale_in, scale_out = Decimal(10) ** decimals[asset_in], Decimal(10) ** decimals[asset_out]
    if exact_in:
        fair_out = _CTX.multiply(_CTX.divide(Decimal(amount), scale_in) * rate, scale_out)
        best = _CTX.multiply(fair_out, 1 - edge).to_integral_value(rounding=ROUND_FLOOR)
    else:
        fair_in = _CTX.multiply(_CTX.divide(Decimal(amount), scale_out) / rate, scale_in)
        best = _CTX.multiply(fair_in, 1 + edge).to_integral_value(rounding=ROUND_CEILING)
    best_amount = min(max(int(best), 1), U128_MAX)
    return request, CompetitorEvent(ts, quote_id, best_amount)


def synthesize(
    out: PathLike,
    *,
    pairs: Sequence[tuple[str, str] | tuple[str, str, float]],
    duration_s: float,
    seed: int,
    tokens: Mapping[str, TokenSpec] | None = None,
    params: SynthParams | None = None,
    start: datetime = DEFAULT_START,
    source: str | None = None,
    progress: Callable[[float], None] | None = None,
    **knobs: Any,
) -> SynthSummary:
    """Write a synthetic stream to ``out`` (gzip when it ends with ``.gz``); see :func:`generate`
    (``knobs``: :class:`SynthParams` fields as keywords, e.g. ``rate_per_s=10``).

    The same arguments give a byte-identical file.
    """
    tokens = dict(tokens or DEFAULT_TOKENS)
    params = replace(params or SynthParams(), **knobs)
    summary = SynthSummary(path=Path(out))
    events = generate(
        pairs=pairs,
        duration_s=duration_s,
        seed=seed,
        tokens=tokens,
        params=params,
        start=start,
        summary=summary,
        progress=progress,
    )
    if source is None:
        source = f"synth seed={seed} rate={params.rate_per_s:g}/s duration={duration_s:g}s"
    with StreamWriter(out, header_for(tokens, start=start, source=source)) as writer:
        writer.write_all(events)
    summary.bytes = writer.bytes_written
    return summary
