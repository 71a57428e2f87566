"""A rebalance as the desk holds it and the journal carries it (docs/rebalance.md; issue 22).

Each step of a rebalance is a desk fact (:class:`~solver.core.facts.RebalanceStepped`) carrying
the whole :class:`RebalanceRecord` after the step: everything a new process needs to take the
rebalance up where it stopped (the plan, the quote as received, the signed deposit with its
nonce and deadline, the swap's last status). The ``rebalances`` table is projected from these
facts, so the record's document here is the table's row, column for column
(:func:`record_doc`): times as the store writes them (ISO, UTC, microseconds), amounts as
decimal strings, the nonce as hex, the JSON columns as JSON. The same shape lets migration 10
carry an older store's unfinished rows into the journal with SQL alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class RebalanceState(StrEnum):
    PLANNED = "PLANNED"
    QUOTED = "QUOTED"
    DEPOSIT_SENT = "DEPOSIT_SENT"
    DEPOSITED = "DEPOSITED"
    SUBMITTED = "SUBMITTED"
    SUCCESS = "SUCCESS"
    REFUNDED = "REFUNDED"
    FAILED = "FAILED"
    ABANDONED = "ABANDONED"


TERMINAL = frozenset(
    {
        RebalanceState.SUCCESS,
        RebalanceState.REFUNDED,
        RebalanceState.FAILED,
        RebalanceState.ABANDONED,
    }
)


@dataclass(frozen=True, slots=True)
class RebalanceRecord:
    """One rebalance (:mod:`solver.rebalance.rebalancer` runs its states): the plan, the quote
    exactly as received (with the service's signature), the signed deposit ``transfer``, the
    last swap status. ``finished_at`` is set once the state is terminal."""

    id: str
    created_at: datetime
    updated_at: datetime
    state: str
    asset: str  # the asset whose band was left
    asset_in: str  # the swap's origin asset (paid into the deposit address)
    asset_out: str
    amount_in: int
    plan: Mapping[str, Any]
    reason: str | None = None
    quote_request: Mapping[str, Any] | None = None
    quote_response: Mapping[str, Any] | None = None
    quote_signature: str | None = None
    deposit_address: str | None = None
    deposit_memo: str | None = None
    amount_out: int | None = None
    min_amount_out: int | None = None
    deposit_intent_hash: str | None = None
    deposit_signed: Mapping[str, Any] | None = None
    deposit_nonce: bytes | None = None
    deposit_deadline: datetime | None = None
    deposit_tx_hash: str | None = None
    swap_status: str | None = None
    status_response: Mapping[str, Any] | None = None
    finished_at: datetime | None = None

    @property
    def route(self) -> str:
        """The route it swaps, as the desk's pause scopes name routes."""
        return f"{self.asset_in}->{self.asset_out}"


FIELDS = tuple(f.name for f in fields(RebalanceRecord))
"""The record's fields, which are the ``rebalances`` table's columns, in order."""
_TIMES = frozenset({"created_at", "updated_at", "deposit_deadline", "finished_at"})
_INTS = frozenset({"amount_in", "amount_out", "min_amount_out"})


def iso(moment: datetime) -> str:
    """A time as the store writes it (:func:`solver.io.store.schema.ts`)."""
    if moment.tzinfo is None:
        raise ValueError("a rebalance takes timezone-aware datetimes only")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def record_doc(record: RebalanceRecord) -> dict[str, Any]:
    """``record`` as a JSON-able document keyed by column (the journal's and the table's)."""
    doc: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(record, name)
        if value is None:
            doc[name] = None
        elif name in _TIMES:
            doc[name] = iso(value)
        elif name in _INTS:
            doc[name] = str(value)
        elif name == "deposit_nonce":
            doc[name] = value.hex()
        elif isinstance(value, Mapping):
            doc[name] = dict(value)
        else:
            doc[name] = value
    return doc


def record_from_doc(doc: Mapping[str, Any]) -> RebalanceRecord:
    """The record :func:`record_doc` wrote (ValueError, KeyError or TypeError if malformed)."""
    values: dict[str, Any] = {}
    for name in FIELDS:
        raw = doc.get(name)
        if raw is None:
            values[name] = None
        elif name in _TIMES:
            values[name] = datetime.fromisoformat(raw)
        elif name in _INTS:
            values[name] = int(raw)
        elif name == "deposit_nonce":
            values[name] = bytes.fromhex(raw)
        else:
            values[name] = raw
    for required in FIELDS[:9]:
        if values[required] is None:
            raise ValueError(f"rebalance record without {required!r}")
    return RebalanceRecord(**values)
