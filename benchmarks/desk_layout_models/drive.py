"""What every desk layout is driven with and must end in (issue 29, ``benchmarks.desk_layout``).

A model takes the replay's quotes and ticks as events (:data:`Event`) through one interface
(:class:`Desk`); :func:`drive` is the loop, kept in this module so the opcode count can leave
its own bytecode out (every model runs the same loop). :class:`EndState` is what the layouts
are compared by: the same quotes open and reserved, the same totals and counters, and the same
rows of lost quotes in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Event = tuple[Any, ...]
"""``("t", now)``: a tick (the snapshot's release, then the lifecycle's); or
``("q", quote_id, asset_in, asset_out, amount_in, amount_out, fee, lead, now, salt,
quote_hash, nonce)``: a request decided at ``now``, answered and signed if quoted. The assets
are what the model indexes by (names, or small ints for ``slots``)."""


@dataclass(frozen=True)
class EndState:
    """A desk's state after a run, in asset names whatever the model keeps inside."""

    open: list[str]
    held: list[str]
    reserved: dict[str, int]
    open_outflow: dict[str, int]
    open_inflow: dict[str, int]
    pairs: dict[tuple[str, str], tuple[int, int, int]]
    """(asset_in, asset_out) -> requests, quotes, lost; pairs with a count only."""
    lost: int
    rows: list[tuple[object, ...]]
    """The lost quotes' rows, in the order they were lost."""


class Desk(Protocol):
    """The interface :func:`drive` calls; a model's quote handle is its own (a record, a
    slot), false when the request is not quoted."""

    def decide(
        self,
        quote_id: str,
        asset_in: Any,
        asset_out: Any,
        amount_in: int,
        amount_out: int,
        fee: int,
        lead: int,
        now: int,
        salt: bytes,
    ) -> Any: ...

    def answer(self, quote: Any) -> object: ...

    def signed(self, quote: Any, quote_hash: str, nonce: bytes, now: int) -> None: ...

    def tick(self, now: int) -> None: ...

    def apply_lost(self, quote_ids: tuple[str, ...], at: int, reason: str) -> None: ...

    def end_state(self) -> EndState: ...


def drive(desk: Desk, events: Sequence[Event]) -> None:
    """Every event through ``desk``: a quoted request is answered and signed at once."""
    decide, answer, signed, tick = desk.decide, desk.answer, desk.signed, desk.tick
    for event in events:
        if event[0] == "q":
            (
                _,
                quote_id,
                asset_in,
                asset_out,
                amount_in,
                amount_out,
                fee,
                lead,
                now,
                salt,
                quote_hash,
                nonce,
            ) = event
            quote = decide(
                quote_id, asset_in, asset_out, amount_in, amount_out, fee, lead, now, salt
            )
            if quote:
                answer(quote)
                signed(quote, quote_hash, nonce, now)
        else:
            tick(event[1])
