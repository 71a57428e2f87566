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
- **Informed flow**: a share ``informed_share`` of requests take the direction that the
  reference price ``informed_horizon_s`` ahead rewards (:mod:`backtest.synth.flow`), so fills
  are marked out at a loss on average, as informed flow is live.
- **Competition**: with probability ``competitor_share`` a request gets a ``competitor`` event
  right after it (same timestamp): the best competing answer, priced at the reference rate
  minus an edge in bps drawn ``Normal`` (or ``Logistic``: ``competitor_edge_dist``) with mean
  ``competitor_edge_bps + competitor_edge_bps_per_decade * log10(size / median)`` and sd
  ``competitor_edge_sd_bps`` — larger trades are quoted wider, and a negative draw is a
  competitor pricing better than the reference.

Determinism: every draw comes from numpy Generators seeded from ``(seed, stream name)``
(:func:`sandbox.prices.seeded_rng`), one per concern (arrivals, flow, competition, informed,
prices), consumed in blocks of a fixed size; timestamps are whole milliseconds from ``start``;
gzip is written without a name or mtime. The same arguments give a byte-identical file.

The knobs are :class:`~backtest.synth.params.SynthParams` (re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from backtest.stream.events import Header, InformedEvent, PriceEvent, StreamEvent, TokenInfo
from backtest.stream.format import PathLike
from backtest.stream.write import StreamWriter
from backtest.synth.flow import Draws, PricePath, RequestMaker
from backtest.synth.params import SynthParams, SynthSummary
from sandbox.config import TokenSpec
from sandbox.prices import PriceProcess, seeded_rng

__all__ = [
    "DEFAULT_START",
    "DEFAULT_TOKENS",
    "SynthParams",
    "SynthSummary",
    "generate",
    "header_for",
    "resolve_pairs",
    "synthesize",
]

DEFAULT_START: Final = datetime(2025, 1, 1, tzinfo=UTC)
DEFAULT_TOKENS: Final[Mapping[str, TokenSpec]] = {
    "nep141:usdc.sandbox": TokenSpec(symbol="USDC", decimals=6, usd=1.0, volatility_annual=0.0),
    "nep141:wrap.sandbox": TokenSpec(symbol="wNEAR", decimals=24, usd=3.0, volatility_annual=0.9),
    "nep141:eth.sandbox": TokenSpec(symbol="ETH", decimals=18, usd=3000.0, volatility_annual=0.7),
}
"""The tokens of ``config/sandbox.yaml``: used when no token file is given."""


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


def header_for(
    tokens: Mapping[str, TokenSpec],
    *,
    start: datetime,
    source: str,
    competitor_share: float | None = None,
) -> Header:
    return Header(
        competitor_share=competitor_share,
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
    arrivals = Draws(seeded_rng(seed, "synth.arrivals"))
    process = PriceProcess(tokens, seed=seed, clock=lambda: start)
    assets = process.assets
    interval = params.price_interval_s
    path = PricePath(process, interval)
    maker = RequestMaker(
        seed, pairs, cumulative, params, {asset: tokens[asset].decimals for asset in assets}, path,
        flow=Draws(seeded_rng(seed, "synth.flow")),
        rivals=Draws(seeded_rng(seed, "synth.competitors")),
        informed=Draws(seeded_rng(seed, "synth.informed")),
    )  # fmt: skip
    calm_rate = params.calm_rate
    rates = (calm_rate, calm_rate * params.burst_factor)
    state_means = (params.calm_mean_s, params.burst_mean_s)
    bursts_on = params.burst_factor > 1
    state = 0  # 0 calm, 1 burst
    state_end = state_means[0] * arrivals.exponential() if bursts_on else math.inf
    next_arrival = arrivals.exponential() / rates[0]
    tick = 0
    next_tick = 0.0
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
            ts = stamp(t)
            path.release_before(tick)
            for asset, text in path.at(tick).items():
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
            request, competitor, informed = maker.make(seq, ts, tick - 1, usd_text, usd_dec)
            summary.requests += 1
            summary.informed += informed
            summary.exact_out += not request.request.exact_in
            asked = request.request
            key = f"{tokens[asked.asset_in].symbol}/{tokens[asked.asset_out].symbol}"
            summary.requests_by_pair[key] = summary.requests_by_pair.get(key, 0) + 1
            yield request
            produced += 1
            if informed:  # a label for the replay's markouts (docs/backtest.md)
                yield InformedEvent(ts, request.request.quote_id)
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
    with StreamWriter(
        out,
        header_for(tokens, start=start, source=source, competitor_share=params.competitor_share),
    ) as writer:
        writer.write_all(events)
    summary.bytes = writer.bytes_written
    return summary
