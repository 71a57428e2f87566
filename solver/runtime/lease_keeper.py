"""The lease's side of the live bot: waiting as a standby, refreshing while active, and stopping
at once when the lease is lost (docs/operations.md, "Two instances").

A standby (an instance started while another holds the account's lease) opens no bus
connection, signs nothing and decides nothing: it rebuilds its desk from the journal at start,
then, a few times per lease period, applies what the active committed since and tries to take
the lease. When it does, the old active can commit nothing more (its commits are fenced by the
epoch), so one last read brings its desk to the fence: it holds every open quote and reservation
of the old active. Then it starts as any bot does, with no replay left to wait for.

The active refreshes every third of the lease. A refresh that fails (the database does not
answer) is tried again every :data:`RETRY_S`; meanwhile the lease's own deadline
(:meth:`~solver.io.store.pg.lease.Lease.check`) stops every commit, and so every answer, before
the lease can have expired in the database. A refresh the database refuses, or a commit fenced
out, ends the run: the bot says so (a CRITICAL line, the ``lease_lost`` alert) and exits with
:data:`EXIT_FENCED`, for its service manager to start it again as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge

from solver.io.store.schema import FencedError, StoreError

if TYPE_CHECKING:
    from solver.io.store.pg.store import PgStore

log = logging.getLogger("solver.lease")

EXIT_FENCED = 75
"""The exit code of an instance fenced out of its lease (``EX_TEMPFAIL``: start it again, it
comes back as a standby)."""
RETRY_S = 0.2
"""A failed refresh is tried again this soon."""
LEASE_LOST = "lease_lost"
ROLES = ("standby", "active", "fenced", "stopped")


class LeaseKeeper:
    def __init__(
        self,
        store: PgStore,
        on_lost: Callable[[FencedError], None],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.store = store
        self.lease = store.lease
        self._on_lost = on_lost
        self.lost: FencedError | None = None
        self._role = Gauge(
            "solver_lease_role",
            "1 for this instance's role on the shared journal (standby, active, fenced, stopped).",
            ["role"],
            registry=registry,
        )
        self._since = Gauge(
            "solver_lease_role_since_seconds",
            "Unix time this instance took its current role.",
            registry=registry,
        )
        self.export()

    def export(self) -> None:
        """The role gauges (the bot's gauge refresh calls this)."""
        for role in ROLES:
            self._role.labels(role=role).set(1 if role == self.lease.role else 0)
        self._since.set(self.lease.role_since)

    def status(self) -> dict[str, object]:
        """The role and since when (``solver status``, ``/control/status``)."""
        lease = self.lease
        return {
            "role": lease.role,
            "since": datetime.fromtimestamp(lease.role_since, UTC).isoformat(),
            "epoch": lease.epoch,
            "holder": lease.holder,
            "lease_s": lease.duration_s,
        }

    async def take(self, stop: asyncio.Event, follow: Callable[[], int]) -> bool:
        """Wait as a standby until this instance holds the lease (True) or ``stop`` is set;
        meanwhile ``follow`` applies what the active commits to this instance's desk (and once
        more after the taking: up to the fence, nothing can come after)."""
        every = min(0.5, self.lease.duration_s / 4)
        said: object = None
        while not stop.is_set():
            wait = every
            try:
                if self.store.try_take_lease():
                    caught_up = follow()
                    log.warning(
                        "active: %d facts of the old active applied at the fence", caught_up
                    )
                    return True
                follow()
                holder = self.store.lease_holder()
                who = None if holder is None else (holder.holder, holder.epoch)
                if holder is not None:  # try again just after it expires, not up to 0.5 s late
                    wait = min(every, max(0.02, holder.left_s + 0.01))
                if who != said:
                    said = who
                    log.warning(
                        "standby for %s: the lease is held by %s (epoch %s); no bus, no quotes",
                        self.lease.account,
                        who[0] if who else "nobody",
                        who[1] if who else "-",
                    )
            except StoreError as exc:
                log.warning("standby: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh the lease until ``stop``; a lost lease calls ``on_lost`` and returns."""
        lease = self.lease
        while not stop.is_set():
            wait = lease.refresh_every_s
            try:
                self.store.refresh_lease()
            except FencedError as exc:
                self.fenced(exc)
                return
            except StoreError as exc:
                left = lease.valid_until - time.monotonic()
                log.error("lease not refreshed (%.1f s left before quoting stops): %s", left, exc)
                if left <= 0:  # said as every fenced-out stop is ("fenced out of the lease")
                    try:
                        lease.lose(f"the lease could not be refreshed in time: {exc}")
                    except FencedError as lost:
                        self.fenced(lost)
                    return
                wait = RETRY_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    def fenced(self, exc: FencedError) -> None:
        """Told once (by the refresh or by a fenced commit): stop."""
        if self.lost is not None:
            return
        self.lost = exc
        log.critical("%s: stopping (exit code %d)", exc, EXIT_FENCED)
        self._on_lost(exc)
