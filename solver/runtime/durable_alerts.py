"""Alerts across restarts, and a bot that died unseen (issue 24; docs/operations.md).

The live driver hands this the notifier, the spool beside the store and what it reads; it
does four things the notifier cannot do alone, because they need the desk:

- at start, take the previous run's incidents back (:meth:`DurableAlerts.start`), say when
  that run ended without a clean stop (``unclean_restart``: its mark was never cleared), and
  hand an open bus outage to the bus watch, whose reconnection resolves it;
- once the desk is rebuilt and the inputs fetched, tell each incident the previous run left
  open its state now (:meth:`DurableAlerts.settle`): a reminder while its pause (or its
  reconciliation gap) still holds, its recovery when it does not. A ``store_error`` that
  the previous run could not journal goes into the store's ``alerts`` table here;
- keep the spool's mark fresh (:meth:`DurableAlerts.beat`, beside the driver's
  ``solver_heartbeat_timestamp_seconds`` gauge that ``SolverHeartbeatStale`` watches): the next
  start reads it to say when this run was last alive;
- at a clean stop, clear the mark (:meth:`DurableAlerts.stop`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from datetime import datetime

from solver.core.pauses import STORE_ERROR
from solver.core.view import DeskView
from solver.errors import SolverError
from solver.io.alert_policy import BUS_DISCONNECTED, IncidentState, OutageWatch
from solver.io.alert_spool import HEARTBEAT_EVERY_S, AlertSpool, RunMark
from solver.io.notify import Notifier
from solver.io.store.sqlite_store import Store

__all__ = ["UNCLEAN_RESTART", "DurableAlerts"]

log = logging.getLogger("solver.notify")
UNCLEAN_RESTART = "unclean_restart"
RECONCILIATION = "reconciliation"


class DurableAlerts:
    def __init__(
        self,
        notifier: Notifier,
        spool: AlertSpool,
        *,
        view: DeskView,
        store: Store | None,
        bus_watch: OutageWatch,
    ) -> None:
        self.notifier = notifier
        self.spool = spool
        self.view = view
        self.store = store
        self.bus_watch = bus_watch
        self._store_errors: list[IncidentState] = []
        self._written_at: datetime | None = None

    def start(self, now: datetime) -> None:
        previous, states = self.spool.load()
        notifier = self.notifier
        notifier.spool = self.spool
        notifier.restore(states)
        for state in states:
            if state.kind == BUS_DISCONNECTED and state.open:
                # The watch resolves it when the websocket is subscribed again.
                self.bus_watch.down_since = state.opened_at or state.since
                self.bus_watch.raised = True
                notifier.restored.remove((state.kind, state.key))
        self._store_errors = [s for s in states if s.kind == STORE_ERROR]
        if previous is not None:
            started = previous.started_at.isoformat(timespec="seconds")
            alive = previous.heartbeat_at.isoformat(timespec="seconds")
            detail = (
                f"the previous run (pid {previous.pid}, started {started}) stopped without a "
                f"clean shutdown; last seen alive at {alive}"
            )
            log.error("unclean restart: %s", detail)
            notifier.announce(UNCLEAN_RESTART, detail, now)
        self.spool.running = RunMark(os.getpid(), now, now)
        self._written_at = now
        notifier.save()

    def holds(self, kind: str, key: str) -> bool:
        """Whether the condition of an incident still holds on the rebuilt desk."""
        view = self.view
        if any(pause.kind == kind for pause in view.pauses):
            return True
        return kind == RECONCILIATION and bool(view.reconciliation.unresolved)

    def settle(self, now: datetime) -> None:
        """After the desk is rebuilt and its inputs fetched: see the module doc."""
        if self.store is not None:
            for state in self._store_errors:
                resolved = None if self.holds(state.kind, state.key) else now
                opened = state.opened_at or state.since
                try:
                    if self.store.record_alert(state.kind, state.detail, opened, resolved):
                        log.warning("alerts: %s of %s recorded from the spool", state.kind, opened)
                except SolverError as exc:
                    log.warning("alerts: %s not recorded in the store: %s", state.kind, exc)
        self._store_errors = []
        self.notifier.settle(self.holds, now)

    def beat(self, now: datetime) -> None:
        """The spool's mark says ``now`` (written every HEARTBEAT_EVERY_S)."""
        mark, written = self.spool.running, self._written_at
        if mark is None or written is None:
            return
        if (now - written).total_seconds() >= HEARTBEAT_EVERY_S:
            self._written_at = now
            self.spool.running = replace(mark, heartbeat_at=now)
            self.spool.save()

    def stop(self) -> None:
        """A clean stop: the next start is not an unclean one."""
        self.spool.running = None
        self.notifier.save()
