"""Rows of the store as JSON-ready records: what ``solver history`` prints as CSV and JSON, and
what the bot's control API sends it while the bot holds the store (issue 24). One shape for
both ways in, so reading through the bot and reading the file give the same output. Amounts
stay strings of smallest units; USD sums are exact decimal strings."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from solver.core.clock import iso_micros
from solver.core.lifecycle import Quote
from solver.io.store.schema import Fill
from solver.io.store.totals import PairTotals


def quote_record(q: Quote, weight: float | None = None) -> dict[str, Any]:
    """``weight``: how many quotes of its state the row stands for (lost quotes are sampled,
    issue 29); None leaves it out."""
    record: dict[str, Any] = {
        "created_at": iso_micros(q.created_at),
        "quote_id": q.quote_id,
        "state": q.state.value,
        "asset_in": q.asset_in,
        "amount_in": str(q.amount_in),
        "asset_out": q.asset_out,
        "amount_out": str(q.amount_out),
        "fee": str(q.fee),
        "deadline": iso_micros(q.deadline),
        "quote_hash": q.quote_hash,
        "intent_hash": q.intent_hash,
        "tx_hash": q.tx_hash,
        "reason": q.reason,
    }
    if weight is not None:
        record["weight"] = weight
    return record


def fill_record(f: Fill) -> dict[str, Any]:
    def text(value: object) -> str | None:
        return None if value is None else str(value)

    return {
        "at": f.at.isoformat(),
        "quote_id": f.quote_id,
        "asset_in": f.asset_in,
        "amount_in": str(f.amount_in),
        "asset_out": f.asset_out,
        "amount_out": str(f.amount_out),
        "fee": str(f.fee),
        "price_in_usd": text(f.price_in_usd),
        "price_out_usd": text(f.price_out_usd),
        "realized_pnl_usd": text(f.realized_pnl_usd),
        "markouts": dict(f.markouts),
        "quote_hash": f.quote_hash,
        "intent_hash": f.intent_hash,
        "tx_hash": f.tx_hash,
    }


def totals_doc(row: PairTotals) -> dict[str, Any]:
    """A :class:`PairTotals` as JSON (read back by :func:`totals_from_doc`)."""
    return {
        "assets": list(row.assets),
        "quotes": row.quotes,
        "won": row.won,
        "settled": row.settled,
        "fills": row.fills,
        "received": {a: str(v) for a, v in row.received.items()},
        "paid": {a: str(v) for a, v in row.paid.items()},
        "volume_usd": None if row.volume_usd is None else str(row.volume_usd),
        "realized_pnl_usd": str(row.realized_pnl_usd),
    }


def totals_from_doc(doc: dict[str, Any]) -> PairTotals:
    a, b = doc["assets"]
    volume = doc.get("volume_usd")
    return PairTotals(
        (str(a), str(b)),
        quotes=int(doc["quotes"]),
        won=int(doc["won"]),
        settled=int(doc["settled"]),
        fills=int(doc["fills"]),
        received={str(k): int(v) for k, v in doc["received"].items()},
        paid={str(k): int(v) for k, v in doc["paid"].items()},
        volume_usd=None if volume is None else Decimal(str(volume)),
        realized_pnl_usd=Decimal(str(doc["realized_pnl_usd"])),
    )
