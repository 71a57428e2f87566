"""One fill of a replay as ``fills.csv`` writes it: :class:`FillRecord`.

The relay (:mod:`backtest.ports`) makes one per settlement, the measurements
(:mod:`backtest.measure.measurements`) add its markouts as the desk reports them and hand it to
the sink once its last horizon has passed; kept apart so those three and the report share the
record without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["FillRecord"]


@dataclass(slots=True)
class FillRecord:
    quote_id: str
    requested_at: datetime
    settled_at: datetime
    asset_in: str
    asset_out: str
    exact_in: bool
    amount_in: int
    amount_out: int
    fee: int
    price_in: float
    price_out: float
    edge_bps: float
    realized_usd: float
    markouts: dict[int, float] = field(default_factory=dict)
    done_us: int = 0
    """When its last markout is due (µs since the epoch): after the tick at that time, done."""
    observed: bool = True
    """Whether its request's competitor was observed (else the competition was modelled)."""
    informed: bool = False
    """Whether the stream labelled its request informed (synth's ``informed`` events)."""
