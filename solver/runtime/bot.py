"""The live bot: the desk driven by sockets, RPC answers and timers (DESIGN "The shape").

:class:`LiveBot` wires the desk (:func:`solver.runtime.wiring.build_desk`), the journal (the SQLite
store), the bus websocket and JSON-RPC clients, the ledger RPC client, price feeds, metrics and
the control API (each built in :mod:`~solver.runtime.bot_parts`), and runs them in their order.
It does nothing the desk should decide: frames become events (:mod:`~solver.runtime.inbound`),
timers become events and ``desk.tick(now)`` (:mod:`~solver.runtime.jobs`,
:mod:`~solver.runtime.upkeep`), and the :class:`~solver.runtime.executor.Executor` carries out
what comes back. The wall clock is read in one place: ``clock`` (injected, so tests and the demo
can share it).

Start: the desk is rebuilt from the journal (the latest snapshot, then every fact after it), the
cached inputs are fetched once, then quoting starts. Stop (SIGTERM): quoting stops at once; the
journal already holds every open quote, so nothing waits for them to settle (``grace_s`` may
ask for a wait); a snapshot is written and the store closed, well within Docker's 10 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from solver.config import BotConfig
from solver.core import events as ev
from solver.core.clock import SECOND, Micros, from_micros, now_micros
from solver.core.desk import Desk
from solver.core.view import DeskView
from solver.errors import ConfigError, SolverError
from solver.io.alert_policy import BusWatch
from solver.io.control import ControlServer
from solver.io.desk_ports import (
    BusStatusSource,
    LedgerNonceOracle,
    LoggedAlerts,
    RunningLoop,
    Tasks,
)
from solver.io.metrics import Metrics
from solver.io.notify import Notifier
from solver.io.price_feeds import PriceFeeds
from solver.io.store.pg import is_pg
from solver.io.store.schema import FencedError
from solver.io.store.sqlite_store import Store
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, QuoteNonces
from solver.runtime.bot_parts import (
    build_rebalancer,
    bus_api_key,
    bus_ws_client,
    durable_alerts,
    open_store,
    rpc_clients,
    serve_operator_api,
)
from solver.runtime.executor import Executor
from solver.runtime.inbound import Inbound
from solver.runtime.jobs import JobPorts, Jobs
from solver.runtime.lease_keeper import LEASE_LOST, LeaseKeeper
from solver.runtime.operator import Operator, OperatorPorts
from solver.runtime.ports import Ports, Refresh
from solver.runtime.recovery import recover, stand_by
from solver.runtime.signing import message_signer, quote_signer
from solver.runtime.start_checks import KEY_NOT_REGISTERED, signing_key_problem
from solver.runtime.upkeep import Upkeep, UpkeepPorts
from solver.runtime.wiring import build_desk
from solver.signer.client import RemoteQuoteSigner

if TYPE_CHECKING:
    from solver.runtime.shadow_mode import ShadowMode

log = logging.getLogger("solver.bot")
NOTIFIER_CLOSE_S = 2.0
"""At stop, queued alert messages get this long to go out (within Docker's 10 s)."""


class LiveBot:
    """The desk driven live: its parts, each handed what it uses (the constructor), and a
    run's order (:meth:`run`: start, quote until stopped, stop)."""

    def __init__(
        self,
        config: BotConfig,
        key: SecretKey | None,
        *,
        clock: Callable[[], Micros] = now_micros,
        shadow: bool = False,
        store: Store | None = None,
        use_store: bool = True,
    ) -> None:
        self.config = config
        self.shadow = shadow
        self.clock = clock
        self.account = config.account.id
        # The public part only: it may be logged (remote signer: its hello says it, at start).
        self.public_key: str | None = key.public_key.to_text() if key is not None else None
        self.tokens = sorted(config.tokens)
        # Shadow mode signs nothing, so it writes no journal: it must never touch a live store.
        self.store = store or (open_store(config) if use_store and not shadow else None)
        self.fenced = False
        """The lease was lost: the run ended at once (the CLI exits with ``EXIT_FENCED``)."""
        self._stop_event: asyncio.Event | None = None
        self._keeper_task: asyncio.Task[None] | None = None
        self.desk: Desk = build_desk(config, shadow=shadow)
        self.view = DeskView(self.desk)  # what everyone but the executor reads
        self.metrics = Metrics(
            pairs=[(pair.base, pair.quote) for pair in config.pairs],
            symbols={asset: token.symbol for asset, token in config.tokens.items()},
        )
        # PostgreSQL: one active instance per account, under a lease (lease_keeper.py).
        self.lease_keeper = (
            LeaseKeeper(self.store, self._lease_lost, self.metrics.registry)
            if is_pg(self.store)
            else None
        )
        # Shadow mode's paper book: simulated fills, inventory and PnL apart from the real ones.
        # Imported here: its fill model brings the backtester and numpy, ~0.7 s of a start
        # that a bot trading for real never uses (docs/testing.md, "The time budget").
        self.shadow_mode: ShadowMode | None = None
        if shadow:
            from solver.runtime.shadow_mode import ShadowMode

            self.shadow_mode = ShadowMode(config, self.view, self.metrics.registry, self.tokens)
        api_key = bus_api_key(config)
        self.http, self.ledger, self.bus_rpc = rpc_clients(config, api_key)
        self.bus_watch = BusWatch(config.alerts.bus_down_after_s)
        self.inbound = Inbound(
            clock,
            store=self.store,
            sample_requests=self.store is not None and config.storage.sample_requests > 0,
            bus_watch=self.bus_watch,
            bus_url=str(config.bus.ws_url),
        )
        self.ws = bus_ws_client(config, api_key, self.inbound)
        self._balance_now = asyncio.Event()
        # Alerts reach a person (docs/operations.md): the desk's, and bus outages beyond
        # alerts.bus_down_after_s. Built before anything starts: a required destination that
        # is missing stops the start here.
        self.notifier = Notifier.from_config(config.alerts, clock=self.wall)
        self.durable = durable_alerts(self.notifier, self.store, self.view, self.bus_watch)
        self.tasks = Tasks()
        self.signer = quote_signer(config, key, self.inbound.on_signer_alert)
        self.executor = Executor(
            self.desk,
            Ports(
                signer=self.signer,
                nonces=QuoteNonces(
                    config.nonce.layout,
                    NonceSequence(self.store.claim_nonce_prefix(self.wall()))
                    if self.store is not None
                    else NonceSequence.unregistered(),
                ),
                journal=self.store.journal if self.store is not None else None,
                sender=self.ws,
                statuses=BusStatusSource(self.bus_rpc, self.tasks),
                nonce_oracle=LedgerNonceOracle(self.ledger, self.account, self.tasks),
                balances=Refresh(self._balance_now.set),
                # The jobs are built after the executor: their step is looked up when asked.
                salt=Refresh(lambda: self.jobs.refresh_salt_soon()),  # noqa: PLW0108
                alerts=LoggedAlerts(self.notifier),
                metrics=self.metrics,
                loop=RunningLoop(),
                clock=clock,
                shadow=self.shadow_mode.on_quote if self.shadow_mode is not None else None,
            ),
        )
        self.inbound.executor = self.executor
        self.feeds = PriceFeeds(
            self.view,
            self.executor.feed,  # prices are desk events, with their source
            clock,
            client=self.http,
            bus=self.bus_rpc,
            own_quote_hashes=lambda: self.view.quote_hashes,
            assets=self.tokens,
        )
        self.rebalancer = (
            build_rebalancer(
                config,
                message_signer(config, key),
                shadow=shadow,
                http=self.http,
                bus=self.bus_rpc,
                ledger=self.ledger,
                store=self.store,
                view=self.view,
                executor=self.executor,
                wall=self.wall,
                on_flow=self.inbound.on_own_flow,
                on_balance_change=self._balance_now.set,
            )
            if config.rebalance.enabled
            else None
        )
        self.jobs = Jobs(
            JobPorts(
                config=config,
                feed=self.executor.feed,
                ledger=self.ledger,
                account=self.account,
                tokens=self.tokens,
                feeds=self.feeds,
                rebalancer=self.rebalancer,
                balance_now=self._balance_now,
                summary=self.summary,
                clock=clock,
            )
        )
        self.control: ControlServer | None = None
        self.operator = Operator(
            OperatorPorts(
                account=self.account,
                shadow=shadow,
                view=self.view,
                tokens=config.tokens,
                pairs=config.pairs,
                assets=self.tokens,
                store=self.store,
                paper=self.shadow_mode.book if self.shadow_mode is not None else None,
                executor=self.executor,
                bus=self.ws,
                notifier=self.notifier,
                metrics=self.metrics,
                refresh_balances=self.jobs.refresh_balances,
                clock=clock,
            )
        )
        self.upkeep = Upkeep(
            UpkeepPorts(
                view=self.view,
                executor=self.executor,
                store=self.store,
                retain_days=config.storage.retain_days,
                bus_watch=self.bus_watch,
                refresh_gauges=self._refresh_gauges,
                observe_loop_lag=self.metrics.observe_loop_lag,
                clock=clock,
            )
        )
        if is_pg(self.store) and self.lease_keeper is not None:
            self.store.journal.on_fenced = self.lease_keeper.fenced  # type: ignore[attr-defined]

    def wall(self) -> datetime:
        """The clock as a ``datetime``, for the edges that speak it: alerts, the rebalancer's
        plans, the store's people-facing rows (:mod:`solver.core.clock`)."""
        return from_micros(self.clock())

    def _lease_lost(self, exc: FencedError) -> None:
        """Fenced out: nothing more is committed, so nothing is sent (the journal refuses every
        commit from now on); say it and end the run."""
        self.fenced = True
        self.notifier.notify(LEASE_LOST, f"{exc}; this instance stopped quoting and exits")
        if self._stop_event is not None:
            self._stop_event.set()

    def _refresh_gauges(self) -> None:
        """The upkeep's gauges: the operator's, then the paper book's."""
        self.operator.refresh_metrics()
        if self.shadow_mode is not None:
            self.shadow_mode.refresh_metrics()
        now = self.clock()
        self.metrics.heartbeat(now / SECOND)  # SolverHeartbeatStale; shadow mode too
        if self.lease_keeper is not None:
            self.lease_keeper.export()
        if self.durable is not None:
            self.durable.beat(from_micros(now))

    def summary(self) -> str:
        if self.shadow_mode is None:
            return self.operator.summary()
        return self.shadow_mode.summary(self.operator.summary())

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event, *, grace_s: float = 0.0) -> None:
        """Quote until ``stop`` is set, then stop quoting and return (``grace_s``: first let
        open quotes settle for at most that long; the journal makes it unnecessary)."""
        self.notifier.start()  # alerts raised from here on are delivered
        self._stop_event = stop
        keeper = self.lease_keeper
        if keeper is not None:  # a standby until the lease is ours: no bus, nothing decided
            assert is_pg(self.store)  # a lease is PostgreSQL's
            listen = self.config.metrics.listen
            if not await stand_by(
                keeper, self.desk, self.view, self.store, self.metrics, listen, stop
            ):
                await self._stop_standby()
                return
            self._keeper_task = asyncio.create_task(keeper.run(stop))
        if self.durable is not None:
            self.durable.start(self.wall())  # the previous run's incidents, before any new
        if keeper is None:
            recover(self.desk, self.view, self.store)
        if self.shadow_mode is not None:
            self.shadow_mode.say_started()
        self.operator.sync_pair_metrics(baseline=True)
        if isinstance(self.signer, RemoteQuoteSigner):
            await self.signer.start()  # until it answers: quotes skip with signer_down
            self.public_key = self.signer.public_key  # the signer's hello says which key
        await self._check_signing_key()
        await self.jobs.warm_up()
        if self.durable is not None:
            self.durable.settle(self.wall())  # the desk and its inputs say what still holds
        if self.rebalancer is not None:
            await self.rebalancer.resume()
        elif self.view.rebalances:
            log.warning(
                "the journal holds unfinished rebalances but rebalance.enabled is false: they "
                "are not followed (see solver swap status)"
            )
        self.metrics.heartbeat(self.clock() / SECOND)  # alive from the first scrape on
        self.control = await serve_operator_api(
            self.config, self.operator, self.metrics, self.store
        )
        self.jobs.start()
        self.upkeep.start()  # last: what was built so far is frozen for the collector
        inner = asyncio.Event()
        tasks = [
            asyncio.create_task(self.ws.run(inner)),
            asyncio.create_task(self.jobs.balance_trigger(inner)),
            asyncio.create_task(self.upkeep.run(inner)),
        ]
        try:
            await stop.wait()
            self.executor.feed(ev.ShutdownStarted())
            loop = asyncio.get_running_loop()
            give_up = loop.time() + grace_s
            while self.view.open_quotes and loop.time() < give_up:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        finally:
            await self._stop(inner, tasks)

    async def _stop_standby(self) -> None:
        """Stopped before the lease was ours: nothing was started but the store and alerts."""
        await self.http.aclose()
        if self.store is not None:
            self.store.close()
        await self.notifier.aclose(NOTIFIER_CLOSE_S)
        log.info("stopped as a standby")

    async def _check_signing_key(self) -> None:
        """Refuse to start when the account does not hold the key (start_checks.py): the
        alert is delivered (within NOTIFIER_CLOSE_S), what was opened is closed, and the
        ConfigError ends the process with exit code 2."""
        if self.public_key is None:  # a remote signer not reached yet: quotes skip meanwhile
            log.warning("the signer is not reachable yet: the signing key is not checked")
            return
        problem = await signing_key_problem(self.ledger, self.account, self.public_key)
        if problem is None:
            return
        if self.shadow:  # signs nothing: worth a word, not a refusal
            log.warning("SHADOW: %s", problem)
            return
        log.error("refusing to quote: %s", problem)
        self.notifier.notify(KEY_NOT_REGISTERED, problem)
        await self.notifier.aclose(NOTIFIER_CLOSE_S)
        if self.durable is not None:
            self.durable.stop()  # a refusal is a clean stop, not a crash
        await self.http.aclose()
        if self.store is not None:
            self.store.close()
        raise ConfigError(problem)

    async def drain(self) -> None:
        """Until every queued answer has been committed and sent, and every question the
        ports asked is answered."""
        while not self.executor.idle or self.tasks:
            if self.tasks:
                await self.tasks.drain()
            else:
                await asyncio.sleep(0)

    async def _stop(self, inner: asyncio.Event, tasks: list[asyncio.Task[Any]]) -> None:
        self.upkeep.stop()
        inner.set()
        await self.jobs.stop()  # the runs in flight may end (at most a second)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, SolverError, TimeoutError):
                await asyncio.wait_for(task, 3)
        if self._keeper_task is not None:  # refreshing until the last commit is made
            self._keeper_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper_task
        # Reads in flight (polls, checks, refreshes) are cut short: the journal keeps what is
        # open, and the next start asks again.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), 1.0)
        self.jobs.cancel_pending()
        if isinstance(self.signer, RemoteQuoteSigner):
            await self.signer.close()
        await self.http.aclose()
        if self.control is not None:
            await self.control.stop()
        if self.store is not None:
            self.upkeep.close(self.clock())
            self.store.close()  # PostgreSQL: the lease is released last, for a standby
        await self.notifier.aclose(NOTIFIER_CLOSE_S)
        if self.durable is not None:
            self.durable.stop()  # what was not delivered stays in the spool, untold
        log.info("stopped: %s", self.summary())
