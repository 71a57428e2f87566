"""The parts of ``/control/status`` the status page needs beyond the counts (issue 14).

:func:`status_extra` returns keys added to :meth:`solver.runtime.operator.Operator.status`'s
document; every one is additive (``solver status`` shows unknown keys raw):

``decimals`` / ``symbols``
    ``{asset: int}`` / ``{asset: str}`` of the configured tokens, so a reader can show the
    smallest-unit strings of ``free``, ``reserved`` and the fills in whole tokens.
``pairs``
    One row per configured pair: ``pair`` (``BASE/QUOTE`` by symbol), ``strategy``, ``state``
    (``RUNNING`` | ``PAUSED`` | ``DISABLED``), ``paused`` (why, or null), ``open_quotes``,
    ``fills_24h`` and ``realized_pnl_usd_24h`` (both directions, from the store), and in shadow
    mode ``paper_fills`` and ``paper_realized_pnl_usd``.
``recent_fills``
    The store's last :data:`RECENT_FILLS` fills, newest first (amounts as strings).
``paper``
    Shadow mode only: the paper book (:meth:`solver.runtime.paper.PaperBook.doc`).
``store_error``
    Only while the store cannot be read: its error. The rest of the status still comes from
    memory (issue 24: a failing store made ``/control/status`` answer HTTP 500); the fills of
    the pair rows are then null (unknown).

They are read from :class:`StatusSources`, not from the bot: the operator's ports
(:class:`~solver.runtime.operator.OperatorPorts`) carry exactly these, so a test builds the
status from a desk, a config and a store without starting a bot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from solver.errors import SolverError
from solver.io.store.pg import is_pg

if TYPE_CHECKING:
    from solver.config import PairSpec, TokenSpec
    from solver.core.view import DeskView
    from solver.io.store.sqlite_store import Store
    from solver.runtime.paper import PaperBook

RECENT_FILLS = 20
_DAY = timedelta(hours=24)


class StatusSources(Protocol):
    """What the extra keys are read from: the desk's view, the configured tokens and pairs,
    the store's fills (None: no store) and shadow mode's paper book (None: live)."""

    @property
    def view(self) -> DeskView: ...

    @property
    def tokens(self) -> Mapping[str, TokenSpec]:
        """``config.tokens``: symbol and decimals by asset id."""

    @property
    def pairs(self) -> Sequence[PairSpec]:
        """``config.pairs``."""

    @property
    def assets(self) -> list[str]:
        """The configured asset ids, sorted (the paper book's rows)."""

    @property
    def store(self) -> Store | None: ...

    @property
    def paper(self) -> PaperBook | None: ...


def status_extra(sources: StatusSources) -> dict[str, Any]:
    view, tokens = sources.view, sources.tokens
    doc: dict[str, Any] = {
        "decimals": {a: t.decimals for a, t in tokens.items()},
        "symbols": {a: t.symbol for a, t in tokens.items()},
    }
    if sources.store is not None:
        if is_pg(sources.store):  # several instances: which one is this (by backend)
            lease = sources.store.lease
            doc["lease"] = {
                "role": lease.role,
                "since": datetime.fromtimestamp(lease.role_since, UTC).isoformat(),
                "epoch": lease.epoch,
                "holder": lease.holder,
                "lease_s": lease.duration_s,
                "store": sources.store.shown,
            }
        try:
            doc["recent_fills"] = recent_fills(sources.store)
        except SolverError as exc:
            doc["store_error"] = str(exc)
    if sources.paper is not None:
        doc["paper"] = sources.paper.doc(sources.assets, view.inventory.confirmed, view.price)
    return doc


def recent_fills(store: Store, limit: int = RECENT_FILLS) -> list[dict[str, Any]]:
    def usd(value: object) -> float | None:
        return None if value is None else float(str(value))

    return [
        {
            "at": f.at.isoformat(),
            "quote_id": f.quote_id,
            "asset_in": f.asset_in,
            "amount_in": str(f.amount_in),
            "asset_out": f.asset_out,
            "amount_out": str(f.amount_out),
            "fee": str(f.fee),
            "realized_pnl_usd": usd(f.realized_pnl_usd),
            "tx_hash": f.tx_hash,
        }
        for f in store.fills_since(None, None, limit)
    ]


def merge_pair_rows(
    pairs: dict[str, dict[str, Any]], sources: StatusSources, now: datetime
) -> None:
    """Add each configured pair's state, strategy, 24 h fills and paper figures to the desk's
    per-pair counters (``Operator.pairs``), keyed the same way (``wNEAR/USDC``)."""
    for row in pair_rows(sources, now):
        label = row.pop("pair")
        pairs.setdefault(label, {}).update(row)


def pair_rows(sources: StatusSources, now: datetime) -> list[dict[str, Any]]:
    view, tokens, store, paper_book = sources.view, sources.tokens, sources.store, sources.paper
    totals: dict[frozenset[str], tuple[int, float]] = {}
    known = True
    if store is not None:
        try:
            for asset_in, asset_out, count, realized in store.fill_totals(now - _DAY):
                _add(totals, frozenset((asset_in, asset_out)), count, realized)
        except SolverError:
            known = False  # status_extra says why (store_error)
    paper: dict[frozenset[str], tuple[int, float]] = {}
    if paper_book is not None:
        for (asset_in, asset_out), (count, realized) in paper_book.by_direction.items():
            _add(paper, frozenset((asset_in, asset_out)), count, realized)
    open_quotes: dict[frozenset[str], int] = {}
    for quote in view.open_quotes.values():
        key = frozenset((quote.asset_in, quote.asset_out))
        open_quotes[key] = open_quotes.get(key, 0) + 1
    rows = []
    for pair in sources.pairs:
        key = frozenset((pair.base, pair.quote))
        paused = view.pauses.reason(f"{pair.base}->{pair.quote}") or view.pauses.reason(
            f"{pair.quote}->{pair.base}"
        )
        state = "DISABLED" if not pair.enabled else "PAUSED" if paused else "RUNNING"
        # Unknown (null) while the store cannot be read.
        fills_24h, realized_24h = totals.get(key, (0, 0.0)) if known else (None, None)
        row: dict[str, Any] = {
            "pair": f"{tokens[pair.base].symbol}/{tokens[pair.quote].symbol}",
            "base": pair.base,
            "quote": pair.quote,
            "strategy": pair.strategy,
            "directions": pair.directions,
            "state": state,
            "paused": paused,
            "open_quotes": open_quotes.get(key, 0),
            "fills_24h": fills_24h,
            "realized_pnl_usd_24h": realized_24h,
        }
        if paper_book is not None:
            row["paper_fills"], row["paper_realized_pnl_usd"] = paper.get(key, (0, 0.0))
        rows.append(row)
    return rows


def _add(
    into: dict[frozenset[str], tuple[int, float]], key: frozenset[str], count: int, usd: float
) -> None:
    old_count, old_usd = into.get(key, (0, 0.0))
    into[key] = (old_count + count, old_usd + usd)
