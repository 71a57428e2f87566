"""The fill line a person reads: whole units with symbols, the edge, and the ids to look up."""

from __future__ import annotations

from datetime import UTC, datetime

from solver.core.clock import micros
from solver.core.facts import FillPrices
from solver.core.lifecycle import Quote
from solver.core.readable import Readable

USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"
T0 = micros(datetime(2026, 1, 2, tzinfo=UTC))


def test_a_fill_line_in_whole_units() -> None:
    readable = Readable({USDC: "USDC", NEAR: "wNEAR"}, {USDC: 6, NEAR: 24})
    quote = Quote(
        "q1", USDC, NEAR, 1_234_500_000, 33_250 * 10**21, 10**21, T0, quote_hash="h1",
        created_at=T0, intent_hash="i1", tx_hash="t1",
    )  # fmt: skip
    line = readable.fill(quote, FillPrices(1.0, 3.0, 0.0123), "wNEAR/USDC")
    assert line == (
        "fill wNEAR/USDC: got 1,234.5 USDC, paid 33.25 wNEAR (fee 0.001 wNEAR), "
        "edge +0.0123 USD; quote q1 intent i1 tx t1"
    )
    unknown = readable.fill(quote, None, None)
    assert unknown.startswith("fill USDC->wNEAR: ") and "edge unknown (no price)" in unknown
    assert readable.amount("nep141:other", 7) == "7 nep141:other"
