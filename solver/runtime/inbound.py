"""What reaches the live bot between its timers, made desk events: the bus websocket's frames
(a request — the hot path —, a quote's status, the relay's reply to an answer, the connection
going up or down), the signer process's word about itself and the rebalancer's settled flows.

Apart from the bot so the quote path reads as what it is — one call from the websocket's
receiver into the executor — and so what the callbacks may touch is written in one place: they
decide nothing, the desk does (DESIGN "The shape").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from solver.core import events as ev
from solver.core.actions import Action, Alert
from solver.core.clock import Micros, from_micros
from solver.io.bus_state import CONNECTED

if TYPE_CHECKING:
    from solver.core.market import QuoteRequest
    from solver.io.alert_policy import BusWatch
    from solver.io.store.sqlite_store import Store
    from solver.protocol.bus import QuoteStatusEvent
    from solver.runtime.executor import Executor

log = logging.getLogger("solver.bot")


class Inbound:
    """The callbacks the websocket client, the signer and the rebalancer are built with.

    :attr:`executor` is handed over once the executor is built: the websocket client needs
    these callbacks to be built, and the executor needs the client to send its answers."""

    executor: Executor

    def __init__(
        self,
        clock: Callable[[], Micros],
        *,
        store: Store | None,
        sample_requests: bool,
        bus_watch: BusWatch,
        bus_url: str,
    ) -> None:
        self.clock = clock
        self.store = store
        self.sample_requests = sample_requests
        """``storage.sample_requests``: the store keeps a sample of the requests."""
        self.bus_watch = bus_watch
        self.bus_url = bus_url

    def on_quote(self, request: QuoteRequest) -> None:
        """The hot path, synchronous: one desk decision, then sign, journal and queue."""
        now = self.clock()
        action = self.executor.request(request, now)
        if self.sample_requests:
            self._sample(request, action, now)

    def on_quotes(self, requests: list[QuoteRequest]) -> int:
        """The quotes of one read of the socket, in stages (:meth:`Executor.request_many`);
        returns how many failed unexpectedly (logged there, counted by the bus client)."""
        now = self.clock()
        results = self.executor.request_many(requests, now)
        failed = 0
        for request, action in zip(requests, results, strict=True):
            if action is None:
                failed += 1
            elif self.sample_requests:
                self._sample(request, action, now)
        return failed

    def _sample(self, request: QuoteRequest, action: Action, now: Micros) -> None:
        """A sample, not a record the bot needs: written with the group commit in a
        savepoint; one the store refuses is counted and said there, never lost silently and
        never costing the quote (``SqliteJournal.extra_failed``)."""
        store = self.store
        if store is None:
            return
        reason = getattr(action, "reason", None)
        store.record_request(request, "skipped" if reason else "quoted", now, reason)

    def on_quote_status(self, event: QuoteStatusEvent) -> None:
        self.executor.feed(ev.QuoteStatusSeen(event.quote_hash, event.intent_hash, event.tx_hash))

    def on_response(self, quote_id: str, ok: bool, reason: str | None) -> None:
        """The relay's reply to an answer. An ``OK`` (every answer's) changes nothing on the
        desk — the bus client counts it (``responses_ok``) — so only a refusal is fed: 0.6 µs
        an answer less (issue 29)."""
        if not ok:
            self.executor.feed(ev.RelayReplied(quote_id, ok, reason))

    def on_ws_state(self, state: str) -> None:
        connected = state == CONNECTED
        now = self.clock()
        self.executor.feed(ev.ConnectionRestored() if connected else ev.ConnectionLost(), now)
        watch = self.bus_watch
        wall = from_micros(now)
        alerts = watch.up(wall) if connected else watch.down(wall, f"bus websocket {self.bus_url}")
        if alerts:
            self.executor.carry_out(list(alerts), now)
        log.info("bus connection: %s (%s)", state, self.bus_url)

    def on_signer_alert(self, kind: str, detail: str, resolved: bool) -> None:
        """The signer process went away, came back, or is too slow (an alert, logged)."""
        self.executor.carry_out([Alert(kind, detail, resolved)], self.clock())

    def on_own_flow(
        self, key: str, asset_in: str, amount_in: int, asset_out: str, outflow: int
    ) -> None:
        """A rebalance's flow settled: the desk's inventory follows it."""
        self.executor.feed(ev.OwnFlowSettled(key, asset_in, amount_in, asset_out, outflow))
