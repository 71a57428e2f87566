"""What a replay settles before its first record: the stream's header against the config, the
first price of each token that may be held (read ahead), the starting balances, and the cyclic
collector's pace for the run.

Each is done once per replay, off the per-record loop of :mod:`backtest.engine`, and needs only
what it is handed.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence, Set
from decimal import Decimal

from backtest.stream.events import Header
from backtest.stream.records import REC_PRICE, Record
from solver.errors import ConfigError

__all__ = ["GC_YOUNG", "check_header", "collector_paced", "lookahead", "starting_balances"]

GC_YOUNG = 10_000
"""Tracked allocations between two passes of the cyclic collector during a replay."""


def check_header(header: Header, decimals: dict[str, int]) -> None:
    """Refuse a stream whose decimals for a token differ from the config's."""
    for asset, info in header.tokens.items():
        ours = decimals.get(asset)
        if ours is not None and ours != info.decimals:
            raise ConfigError(
                f"{asset}: the stream says {info.decimals} decimals, the config {ours}"
            )


def lookahead(
    it: Iterator[Sequence[Record]], need: set[str], limit: int
) -> tuple[list[Record], dict[str, float]]:
    """Read ahead until every token in ``need`` has a price; at most ``limit`` records
    are looked at. The records read (whole batches, at least one record unless the stream
    is empty) and the first price of each token. The desk hears these prices only at
    their time."""
    buffered: list[Record] = []
    first: dict[str, float] = {}
    seen = 0
    while need and seen < limit:
        batch = next(it, None)
        if batch is None:
            break
        buffered.extend(batch)
        for rec in batch:
            if not need or seen >= limit:
                break
            seen += 1
            if rec[0] == REC_PRICE and rec[2] not in first:
                usd = float(rec[3])
                if usd > 0:
                    first[rec[2]] = usd
                    need.discard(rec[2])
    while not buffered:
        batch = next(it, None)
        if batch is None:
            break
        buffered.extend(batch)
    return buffered, first


def starting_balances(
    tokens: Sequence[str],
    explicit: dict[str, int],
    traded: Set[str],
    prices: dict[str, float],
    starting_usd: float,
    decimals: dict[str, int],
) -> dict[str, int]:
    """Each token's starting balance: the one given, else (a traded token with a price)
    ``starting_usd`` worth at its first price, else nothing."""
    balances: dict[str, int] = {}
    for asset in tokens:
        if asset in explicit:
            balances[asset] = explicit[asset]
        elif asset in traded and asset in prices:
            usd = Decimal(repr(starting_usd))
            whole = usd / Decimal(repr(prices[asset]))
            balances[asset] = int(whole.scaleb(decimals[asset]))
        else:
            balances[asset] = 0
    return balances


@contextlib.contextmanager
def collector_paced() -> Iterator[None]:
    """The cyclic collector's youngest generation at :data:`GC_YOUNG` objects for the replay
    (then as it was). A replay leaves a couple of tracked objects per request alive for a
    while (open quotes, pending outcomes), so at CPython's 700 the collector walked the young
    ones ~270 times per 100k requests and promoted them into costly older passes: 4.5 % of
    the CPU. Cycles are rare here (refcounting frees the rest), so memory stays flat."""
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG), *older)
    try:
        yield
    finally:
        gc.set_threshold(young, *older)
