"""The desk as everyone but the executor sees it: read only (DESIGN "The shape").

The operator and status, the upkeep, the metrics, the CLI and the demo read the desk through a
:class:`DeskView`; only the :class:`~solver.runtime.executor.Executor` feeds it events (and the
driver's start rebuilds it from the journal). Each part is typed by a protocol of its reading
methods and read-only properties, so ``mypy --strict`` refuses a call that would change desk
state or an assignment to it through the view; ``tests/test_layering.py`` also refuses, on the
source, any assignment to desk state outside ``solver/core``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from solver.core.clock import Micros
from solver.core.desk import DeskStats
from solver.core.desk_snapshot import Captured, capture
from solver.core.inventory import Reservation
from solver.core.lifecycle import Quote
from solver.core.market import ReferencePrice
from solver.core.pauses import Pause
from solver.core.readable import Readable
from solver.core.rebalance_record import RebalanceRecord

if TYPE_CHECKING:
    from solver.core.desk import Desk


class InventoryReading(Protocol):
    @property
    def confirmed(self) -> Mapping[str, int]: ...

    @property
    def confirmed_at(self) -> Micros | None: ...

    @property
    def reserved(self) -> Mapping[str, int]: ...

    @property
    def reservations(self) -> Mapping[str, Reservation]: ...

    @property
    def floors(self) -> Mapping[str, int]: ...

    def free(self, asset: str) -> int: ...


class PausesReading(Protocol):
    def reason(self, scope: str) -> str | None: ...

    def globally_paused(self) -> bool: ...

    def as_dict(self) -> dict[str, str]: ...

    def __iter__(self) -> Iterator[Pause]: ...

    def __bool__(self) -> bool: ...


class PnlReading(Protocol):
    @property
    def pnl(self) -> float | None: ...

    @property
    def realized_usd(self) -> float: ...

    @property
    def start_equity(self) -> float | None: ...

    def drawdown_usd(self) -> float: ...

    def daily_loss_usd(self) -> float: ...

    def mean_markouts(self) -> dict[int, float]: ...


class ReconciliationReading(Protocol):
    @property
    def report(self) -> Mapping[str, object] | None: ...

    @property
    def found(self) -> Mapping[str, int]: ...

    @property
    def unresolved(self) -> Mapping[str, int]: ...


class PairsReading(Protocol):
    def label(self, asset_in: str, asset_out: str) -> str | None: ...

    def outcome_totals(self) -> dict[tuple[str, str], int]: ...


class DeskView:
    """Read-only access to one desk; cheap to make, always current (it holds no copy)."""

    __slots__ = ("_desk",)

    def __init__(self, desk: Desk) -> None:
        self._desk = desk

    @property
    def open_quotes(self) -> Mapping[str, Quote]:
        """The quotes not final yet, by quote_id."""
        return self._desk.book.quotes

    @property
    def quote_hashes(self) -> Collection[str]:
        """The hashes of the open quotes (a bus price probe leaves our own answers out)."""
        return self._desk.book.by_hash.keys()

    @property
    def rebalances(self) -> Mapping[str, RebalanceRecord]:
        """The rebalances not finished yet, by id (each a frozen record: the latest step)."""
        return self._desk.rebalancing.open

    @property
    def inventory(self) -> InventoryReading:
        return self._desk.inventory

    @property
    def pauses(self) -> PausesReading:
        return self._desk.pauses

    @property
    def pnl(self) -> PnlReading:
        return self._desk.pnl

    @property
    def reconciliation(self) -> ReconciliationReading:
        return self._desk.balances

    @property
    def pairs(self) -> PairsReading:
        return self._desk.pair_book

    @property
    def stats(self) -> DeskStats:
        """The desk's counters (a record the desk owns: read them, never change them)."""
        return self._desk.stats

    @property
    def decimals(self) -> Mapping[str, int]:
        return self._desk.state.decimals

    @property
    def salt(self) -> bytes | None:
        return self._desk.state.salt

    @property
    def readable(self) -> Readable:
        return self._desk.readable

    @property
    def reference_prices(self) -> Mapping[str, ReferencePrice]:
        """The combined reference price of each asset, with when it was observed (live)."""
        return self._desk.state.prices

    def prices(self) -> dict[str, float]:
        """Every asset's reference price in USD (a copy)."""
        return {asset: ref.usd for asset, ref in self._desk.state.prices.items()}

    def open_exposure_usd(self) -> float:
        """What the open reservations are worth at reference prices (the exposure limit's
        own measure)."""
        return self._desk.pipeline.open_exposure_usd()

    def price(self, asset: str) -> float | None:
        """The asset's reference price in USD, combined from every source (None: none yet)."""
        return self._desk.price(asset)

    def capture(self) -> Captured:
        """The desk's snapshot with its long lists still values
        (:func:`~solver.core.desk_snapshot.capture`): a driver makes the document of it in
        slices (:mod:`solver.runtime.snapshot_slices`)."""
        return capture(self._desk)

    def scopes(self, pair: str | None) -> list[str]:
        """The pause scopes of ``BASE/QUOTE`` (``*`` for None); LookupError for a pair the
        bot does not trade."""
        return self._desk.risk.scopes(pair)
