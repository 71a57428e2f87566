"""The live desk rebuilt from the journal: at start (the latest snapshot, then every fact after
it), and, on PostgreSQL, kept following what the active instance commits while this one
stands by for the lease (docs/operations.md, "Two instances").

Apart from the bot because it is the one place outside the executor that changes the desk
(``desk.apply``, ``restore``: tests/test_desk_boundary.py allows it here), and only before the
desk answers anything.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING

from solver.core.desk import Desk
from solver.core.desk_snapshot import restore
from solver.core.view import DeskView
from solver.io.control import create_control_app, serve_control
from solver.io.metrics import Metrics
from solver.io.store.sqlite_store import Store, StoreError
from solver.runtime.lease_keeper import LeaseKeeper
from solver.runtime.standby import StandbyTarget

if TYPE_CHECKING:
    from solver.io.store.pg.store import PgStore

log = logging.getLogger("solver.bot")


def recover(desk: Desk, view: DeskView, store: Store | None) -> int:
    """Rebuild ``desk`` from the journal: the latest snapshot, then every fact after it.
    Returns the number of facts applied."""
    if store is None:
        return 0
    doc, facts = store.journal.load()
    if doc is not None:
        try:
            restore(desk, doc)
        except ValueError as exc:
            raise StoreError(f"the store {store.path}: {exc}") from None
    for fact in facts:
        desk.apply(fact)
    if doc is not None or facts:
        log.info(
            "desk rebuilt from the journal: %d open quotes, %d facts after the snapshot, "
            "pauses: %s",
            len(view.open_quotes),
            len(facts),
            view.pauses.as_dict() or "none",
        )
    return len(facts)


def follow(desk: Desk, store: PgStore) -> int:
    """A standby's desk takes what the active committed since the last call (PostgreSQL
    only); how many facts."""
    applied = 0
    while facts := store.journal.tail():  # type: ignore[attr-defined]
        for fact in facts:
            desk.apply(fact)
        applied += len(facts)
    return applied


async def stand_by(
    keeper: LeaseKeeper,
    desk: Desk,
    view: DeskView,
    store: PgStore,
    metrics: Metrics,
    listen: str | None,
    stop: asyncio.Event,
) -> bool:
    """A standby until the lease is ours (True) or ``stop`` is set (False): the desk as the
    journal has it now, then followed; no bus, nothing decided. Its metrics, health (503) and
    status are served on ``listen`` meanwhile (standby.py); the active's own control API
    takes the address."""
    recover(desk, view, store)
    served = None
    if listen:
        app = create_control_app(StandbyTarget(keeper, view), metrics)
        served = await serve_control(app, listen)
    try:
        taken = await keeper.take(stop, functools.partial(follow, desk, store))
    finally:
        if served is not None:
            await served.stop()
    if taken:
        log.warning(
            "active for %s (epoch %s): the desk holds %d open quotes from the journal",
            keeper.lease.account,
            keeper.lease.epoch,
            len(view.open_quotes),
        )
    return taken
