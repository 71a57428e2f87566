"""Each kind of stream line checked field by field: the reasons a malformed line is reported
with (:mod:`backtest.stream.read`, whose hot loop checks the common request and competitor
lines inline and calls these for everything else).

A parser takes the line's time (µs), its ``data`` object and the header's tokens, and returns
the record (:mod:`backtest.stream.records`) or raises :class:`Malformed` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

from backtest.stream.format import (
    MAX_QUOTE_ID_LEN,
    USD_RE,
    Malformed,
    text_field,
    u128_field,
)
from backtest.stream.records import REC_COMPETITOR, REC_INFORMED, REC_PRICE, REC_STATUS, Record


def partner_of(meta: Any) -> str | None:
    """The relay's partner from a request line's ``meta`` (absent: None)."""
    if meta is None:
        return None
    if type(meta) is not dict:
        raise Malformed("meta must be an object")
    partner = meta.get("partner_id")
    if partner is not None and type(partner) is not str:
        raise Malformed("meta.partner_id must be a string")
    return partner


def asset(data: Mapping[str, Any], name: str, tokens: Container[str]) -> str:
    value = data.get(name)
    if value is None:
        raise Malformed(f"missing {name}")
    if type(value) is not str:
        raise Malformed(f"{name} must be a string")
    if value not in tokens:
        raise Malformed(f"unknown asset {value[:80]} ({name} is not in the header's tokens)")
    return value


def price(t_us: int, data: dict[str, Any], tokens: Container[str]) -> Record:
    asset_id = asset(data, "asset", tokens)
    usd = data.get("usd")
    if usd is None:
        raise Malformed("missing usd")
    if type(usd) is not str:
        raise Malformed(
            "usd must be a decimal string, got a JSON number"
            if type(usd) in (int, float)
            else "usd must be a decimal string"
        )
    if len(usd) > 64 or not USD_RE.fullmatch(usd) or not any(c in "123456789" for c in usd):
        raise Malformed(f"usd {usd[:40]!r} is not a positive decimal string")
    return (REC_PRICE, t_us, asset_id, usd)


def competitor(t_us: int, data: dict[str, Any], tokens: Container[str] = ()) -> Record:
    quote_id = text_field(data, "quote_id", max_len=MAX_QUOTE_ID_LEN)
    if data.get("best_amount") is None:
        raise Malformed("missing best_amount")
    return (REC_COMPETITOR, t_us, quote_id, u128_field(data["best_amount"], "best_amount"))


def informed(t_us: int, data: dict[str, Any], tokens: Container[str] = ()) -> Record:
    return (REC_INFORMED, t_us, text_field(data, "quote_id", max_len=MAX_QUOTE_ID_LEN))


def status(t_us: int, data: dict[str, Any], tokens: Container[str] = ()) -> Record:
    quote_hash = text_field(data, "quote_hash")
    intent_hash = text_field(data, "intent_hash")
    tx_hash = data.get("tx_hash")
    if tx_hash is not None and type(tx_hash) is not str:
        raise Malformed("tx_hash must be a string or null")
    return (REC_STATUS, t_us, quote_hash, intent_hash, tx_hash)


Parser = Callable[[int, dict[str, Any], Container[str]], Record]
PARSERS: dict[int, Parser] = {
    REC_PRICE: price,
    REC_COMPETITOR: competitor,
    REC_STATUS: status,
    REC_INFORMED: informed,
}
