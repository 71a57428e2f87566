"""Events of a recorded quote stream (format version 1), as plain frozen dataclasses.

The stream is JSON Lines (optionally gzip), one event per line, in time order; the first line is
the header. These types are what the reader yields and the writer takes; the JSON shapes are in
``docs/backtest.md``:

- header: ``{"v": 1, "kind": "header", "created": ISO, "source": str, "tokens": {asset: {"symbol",
  "decimals"}}}``
- ``quote_request``: ``{"v": 1, "ts", "kind", "data": {quote_id, core_asset_identifier_in,
  core_asset_identifier_out, exact_amount_in | exact_amount_out, min_deadline_ms}, "meta":
  {partner_id?}}``
- ``price``: ``{"data": {"asset", "usd": decimal-string}}`` — reference price of one whole unit
- ``competitor``: ``{"data": {"quote_id", "best_amount": amount-string}}`` — the best competing
  answer (amount_out for exact-in, amount_in for exact-out)
- ``quote_status``: ``{"data": {quote_hash, intent_hash, tx_hash}}``
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from solver.core.market import QuoteRequest

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class TokenInfo:
    symbol: str
    decimals: int


@dataclass(frozen=True, slots=True)
class Header:
    created: datetime
    source: str
    tokens: dict[str, TokenInfo]
    competitor_share: float | None = None
    """How competition was observed: the share of requests whose best competing answer the
    source asked for (the recorder's ``--competitor-share``, 0 without ``--competitors``;
    synth's ``competitor_share``); None when the source did not say. A replay computes the
    coverage it actually got, per pair; this says whether any was sought (issue 25)."""


@dataclass(frozen=True, slots=True)
class RequestEvent:
    ts: datetime
    request: QuoteRequest  # min_deadline_ms, exact side, amounts as ints


@dataclass(frozen=True, slots=True)
class PriceEvent:
    ts: datetime
    asset: str
    usd: str  # decimal string, kept exact; converted to float only for pricing


@dataclass(frozen=True, slots=True)
class CompetitorEvent:
    ts: datetime
    quote_id: str
    best_amount: int


@dataclass(frozen=True, slots=True)
class InformedEvent:
    """A label, not an observation: the request ``quote_id`` was informed (its direction follows
    the coming price move). Only a generator knows this (synth writes it after the request);
    the replay splits markouts by it (issue 25). Readers before it skip the kind."""

    ts: datetime
    quote_id: str


@dataclass(frozen=True, slots=True)
class StatusEvent:
    ts: datetime
    quote_hash: str
    intent_hash: str
    tx_hash: str | None


StreamEvent = RequestEvent | PriceEvent | CompetitorEvent | StatusEvent | InformedEvent
