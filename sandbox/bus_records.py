"""What the message bus keeps and counts, and the error its methods answer with (spec 3.2, 4.7).

Split out of :mod:`sandbox.bus` so that the bus (the quote auction), its publishing
(:mod:`sandbox.bus_publish`) and its settlement (:mod:`sandbox.settlement`) share these records
without importing one another; tests read them through ``sandbox.bus``'s tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from solver.protocol import bus as wire

MAX_RECORDS = 200_000
"""Each table of the bus (quotes, intents, closed quote ids, arrivals) keeps at most this many,
dropping the oldest."""


class BusRpcError(Exception):
    """A JSON-RPC error answer: ``code`` and a human reason."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class AnswerArrival:
    """One ``quote_response`` as it reached the bus, accepted or not: which connection sent it,
    when (monotonic), for which quote, and its signature (what identifies the signed answer).
    Lets a test judge from the relay's side who answered when (issue 27: two instances of one
    account, one answering at a time)."""

    conn_id: str
    at: float
    quote_id: str | None
    signature: str | None


@dataclass
class QuoteRecord:
    quote_hash: str
    conn_id: str
    signed_data: dict[str, Any]
    asset_in: str
    asset_out: str
    amount_in: int
    amount_out: int
    expiration: datetime
    used: bool = False


@dataclass
class IntentRecord:
    intent_hash: str
    status: wire.IntentStatus
    quote_hashes: list[str]
    tx_hash: str | None = None
    reason: str | None = None


@dataclass
class BusStats:
    quote_requests: int = 0
    quote_answers_ok: int = 0
    quote_answers_rejected: dict[str, int] = field(default_factory=dict)
    published: int = 0
    publish_failed: dict[str, int] = field(default_factory=dict)
    settled: int = 0
    settlement_failed: dict[str, int] = field(default_factory=dict)
    quote_status_sent: int = 0
    quote_status_undeliverable: int = 0
    quote_status_dropped: int = 0

    def count(self, table: dict[str, int], reason: str) -> None:
        key = reason.split(":", maxsplit=1)[0][:60]
        table[key] = table.get(key, 0) + 1
