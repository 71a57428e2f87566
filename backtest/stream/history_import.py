"""Past swaps from the history API as a recorded quote stream (spec 2.7, 4.3; DESIGN "Backtest").

Each transaction record (2.7) becomes, at its ``createdAt``:

- a ``price`` event per side whose USD value is known: ``amountInUsd`` per whole
  ``amountIn`` (the origin asset) and ``amountOutUsd`` per whole ``amountOut`` (the
  destination asset), the prices the swap implied;
- a ``quote_request`` for ``amountIn`` of the origin asset into the destination asset, exact
  input (the record does not say which side the user fixed; the deposit is what it shows), with
  the ``min_deadline_ms`` given (the record has none) and ``quote_id`` ``history:<depositAddress>``
  (``:<depositMemo>`` when there is one);
- for a ``SUCCESS`` with an output, a ``competitor`` event: the output the user got is the best
  answer the market gave that request (net of the service's fees).

Records are put in time order (the cursor walks newest first). Token decimals come from the
configuration when given, else from the record itself (``amountIn`` / ``amountInFormatted`` is a
power of ten); a record whose token decimals cannot be known, or whose input is zero, is skipped
and counted. Pure: the walking over the API is the caller's (``solver backtest import-history``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation

from backtest.stream.events import (
    CompetitorEvent,
    PriceEvent,
    RequestEvent,
    StreamEvent,
    TokenInfo,
)
from backtest.stream.format import usd_text
from solver.core.market import QuoteRequest
from solver.protocol.history import HistoryStatus, TransactionRecord
from solver.protocol.ids import asset_contract

DEFAULT_MIN_DEADLINE_MS = 60_000
_PRICE = Context(prec=12)
"""Implied prices keep 12 significant digits (the USD figures carry about that many)."""
_RATIO = Context(prec=60)


def infer_decimals(amount: int, formatted: str) -> int | None:
    """The token's decimals if ``amount`` (smallest unit) is ``formatted`` (whole units) times a
    power of ten, to six significant digits (``…Formatted`` may be rounded); else ``None``."""
    try:
        whole = Decimal(formatted)
    except InvalidOperation:
        return None
    if amount <= 0 or whole <= 0:
        return None
    ratio = _RATIO.divide(Decimal(amount), whole)
    decimals = int(_RATIO.log10(ratio).to_integral_value())
    if not 0 <= decimals <= 38:
        return None
    if abs(_RATIO.divide(ratio, Decimal(10) ** decimals) - 1) > Decimal("1e-6"):
        return None
    return decimals


def implied_price(amount: int, decimals: int, usd: str) -> str | None:
    """USD per whole unit, as a decimal string, or ``None`` when it is not positive."""
    try:
        value = Decimal(usd)
    except InvalidOperation:
        return None
    if amount <= 0 or not value > 0:
        return None
    price = _PRICE.divide(value * Decimal(10) ** decimals, Decimal(amount))
    text = format(price.normalize(_PRICE), "f")
    try:
        return usd_text(text)
    except ValueError:
        return None


def default_symbol(asset: str) -> str:
    """``nep141:usdc.sandbox`` → ``usdc``: a readable stand-in when no config names it."""
    return asset_contract(asset).split(".")[0][:32] or asset[:32]


def quote_id_of(record: TransactionRecord) -> str:
    memo = record.deposit_memo
    return f"history:{record.deposit_address}" + (f":{memo}" if memo else "")


@dataclass
class HistoryImport:
    """Events built from records, and what was skipped and why."""

    tokens: dict[str, TokenInfo] = field(default_factory=dict)
    events: list[tuple[int, StreamEvent]] = field(default_factory=list)
    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def sorted_events(self) -> list[StreamEvent]:
        """In time order; events of one record stay in the order they were made."""
        return [event for _, event in sorted(self.events, key=lambda e: (e[1].ts, e[0]))]


def _token(
    result: HistoryImport,
    known: Mapping[str, TokenInfo],
    asset: str,
    amount: int,
    formatted: str,
) -> TokenInfo | None:
    info = result.tokens.get(asset) or known.get(asset)
    if info is None:
        decimals = infer_decimals(amount, formatted)
        if decimals is None:
            return None
        info = TokenInfo(default_symbol(asset), decimals)
    result.tokens.setdefault(asset, info)
    return info


def add_record(
    result: HistoryImport,
    record: TransactionRecord,
    *,
    known: Mapping[str, TokenInfo],
    min_deadline_ms: int = DEFAULT_MIN_DEADLINE_MS,
) -> None:
    """Turn one record into events (module docstring); skipped records are counted."""
    result.records += 1
    if record.amount_in <= 0:
        result.skipped["zero input"] += 1
        return
    if record.origin_asset == record.destination_asset:
        result.skipped["same asset in and out"] += 1
        return
    token_in = _token(
        result, known, record.origin_asset, record.amount_in, record.amount_in_formatted
    )
    token_out = _token(
        result, known, record.destination_asset, record.amount_out, record.amount_out_formatted
    )
    if token_in is None or token_out is None:
        result.skipped["unknown token decimals"] += 1
        return
    ts = record.created_at
    order = len(result.events)
    quote_id = quote_id_of(record)
    made: list[StreamEvent] = []
    for asset, amount, info, usd in (
        (record.origin_asset, record.amount_in, token_in, record.amount_in_usd),
        (record.destination_asset, record.amount_out, token_out, record.amount_out_usd),
    ):
        price = implied_price(amount, info.decimals, usd)
        if price is not None:
            made.append(PriceEvent(ts, asset, price))
    request = QuoteRequest(
        quote_id,
        record.origin_asset,
        record.destination_asset,
        exact_in=True,
        amount=record.amount_in,
        min_deadline_ms=min_deadline_ms,
    )
    made.append(RequestEvent(ts, request))
    if record.status is HistoryStatus.SUCCESS and record.amount_out > 0:
        made.append(CompetitorEvent(ts, quote_id, record.amount_out))
    result.events.extend((order + i, event) for i, event in enumerate(made))


def import_records(
    records: Iterable[TransactionRecord],
    *,
    known: Mapping[str, TokenInfo] | None = None,
    min_deadline_ms: int = DEFAULT_MIN_DEADLINE_MS,
) -> HistoryImport:
    """All of ``records`` as one :class:`HistoryImport`."""
    result = HistoryImport()
    for record in records:
        add_record(result, record, known=known or {}, min_deadline_ms=min_deadline_ms)
    return result
