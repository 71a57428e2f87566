"""The live bot: the desk driven by sockets, RPC answers and timers (DESIGN "The shape").

:class:`LiveBot` wires the desk (:func:`solver.runtime.wiring.build_desk`), the journal (the SQLite
store), the bus websocket and JSON-RPC clients, the ledger RPC client, price feeds, metrics and
the control API. It does nothing the desk should decide: frames become events, timers become
``desk.tick(now)``, and the :class:`~solver.runtime.executor.Executor` carries out what comes
back. The wall clock is read in one place: ``clock`` (injected, so tests and the demo can share
it).

Start: the desk is rebuilt from the journal (the latest snapshot, then every fact after it), the
cached inputs are fetched once, then quoting starts. Stop (SIGTERM): quoting stops at once; the
journal already holds every open quote, so nothing waits for them to settle (``grace_s`` may
ask for a wait); a snapshot is written and the store closed, well within Docker's 10 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from solver.config import BotConfig
from solver.core import events as ev
from solver.core.actions import Alert
from solver.core.clock import SECOND, Micros, from_micros, now_micros
from solver.core.desk import Desk
from solver.core.desk_snapshot import restore
from solver.core.market import QuoteRequest
from solver.core.quoting import Quote
from solver.core.view import DeskView
from solver.errors import ConfigError, SolverError
from solver.io.alert_policy import BusWatch
from solver.io.alert_spool import AlertSpool, spool_path
from solver.io.bus_rpc import BusRpcClient
from solver.io.bus_ws import BusWsClient
from solver.io.bus_ws_receive import CONNECTED
from solver.io.control import ControlServer, StoreRoutes, create_control_app, serve_control
from solver.io.desk_ports import (
    BusStatusSource,
    LedgerNonceOracle,
    LoggedAlerts,
    RunningLoop,
    Tasks,
)
from solver.io.ledger_client import LedgerClient
from solver.io.metrics import Metrics
from solver.io.notify import Notifier
from solver.io.paper_metrics import PaperMetrics, PaperSnapshot
from solver.io.price_feeds import PriceFeeds
from solver.io.store.pg.lease import FencedError
from solver.io.store.pg.store import PgStore
from solver.io.store.sqlite_store import Store, StoreError
from solver.io.swap_client import SwapApiClient
from solver.protocol.bus import QuoteStatusEvent
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceSequence, QuoteNonces
from solver.rebalance.rebalancer import Rebalancer
from solver.runtime.durable_alerts import DurableAlerts
from solver.runtime.executor import Executor
from solver.runtime.lease_keeper import LEASE_LOST, LeaseKeeper
from solver.runtime.operator import Operator, OperatorPorts
from solver.runtime.paper import PaperBook
from solver.runtime.ports import MessageSigner, Ports, Refresh
from solver.runtime.signing import message_signer, quote_signer
from solver.runtime.standby import StandbyTarget
from solver.runtime.start_checks import KEY_NOT_REGISTERED, signing_key_problem
from solver.runtime.upkeep import Upkeep, UpkeepPorts
from solver.runtime.wiring import build_desk
from solver.signer.client import RemoteQuoteSigner

log = logging.getLogger("solver.bot")
NOTIFIER_CLOSE_S = 2.0
"""At stop, queued alert messages get this long to go out (within Docker's 10 s)."""
LEDGER_JOBS = frozenset({"salt", "balances", "fee"})
"""Jobs that read the ledger node: one succeeding after a failure means it is back."""


class LiveBot:
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
        self._ledger_failing = False
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
            if isinstance(self.store, PgStore)
            else None
        )
        # Shadow mode's paper book: simulated fills, inventory and PnL apart from the real ones.
        self.paper = (
            PaperBook(
                config.shadow,
                {a: t.decimals for a, t in config.tokens.items()},
                floors=self.view.inventory.floors,
            )
            if shadow
            else None
        )
        self.paper_metrics = PaperMetrics(self.metrics.registry) if shadow else None
        api_key = os.environ.get(config.bus.api_key_env) if config.bus.api_key_env else None
        self.http = httpx.AsyncClient(timeout=config.chain.timeout_ms / 1000)
        self.ledger = LedgerClient(
            str(config.chain.rpc_url),
            config.verifier_contract,
            client=self.http,
            timeout_s=config.chain.timeout_ms / 1000,
        )
        self.bus_rpc = BusRpcClient(
            str(config.bus.rpc_url),
            api_key=api_key,
            asset_field_prefix=config.bus.asset_field_prefix,
            client=self.http,
        )
        self.ws = BusWsClient(
            str(config.bus.ws_url),
            on_quote=self._on_quote,
            on_quote_status=self._on_quote_status,
            on_response=self._on_response,
            on_state=self._on_ws_state,
            api_key=api_key,
            asset_field_prefix=config.bus.asset_field_prefix,
            backoff_initial_s=config.bus.reconnect_initial_ms / 1000,
            backoff_max_s=config.bus.reconnect_max_ms / 1000,
            max_frame_bytes=config.bus.max_frame_bytes,
            compression=config.bus.compression,
        )
        self._balance_now = asyncio.Event()
        # Alerts reach a person (docs/operations.md): the desk's, and bus outages beyond
        # alerts.bus_down_after_s. Built before anything starts: a required destination that
        # is missing stops the start here.
        self.notifier = Notifier.from_config(config.alerts, clock=self.wall)
        self.bus_watch = BusWatch(config.alerts.bus_down_after_s)
        # Incidents outlive the process in a spool beside the store (issue 24); a bot without
        # a store (shadow mode) keeps them in memory.
        self.durable = (
            DurableAlerts(
                self.notifier,
                AlertSpool(spool_path(self.store.path)),
                view=self.view,
                store=self.store,
                bus_watch=self.bus_watch,
            )
            if self.store is not None
            else None
        )
        self.tasks = Tasks()
        self.signer = quote_signer(config, key, self._signer_alert)
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
                salt=Refresh(self._refresh_salt_soon),
                alerts=LoggedAlerts(self.notifier),
                metrics=self.metrics,
                loop=RunningLoop(),
                clock=clock,
                shadow=self._on_shadow_quote if shadow else None,
            ),
        )
        self.sample_requests = self.store is not None and config.storage.sample_requests > 0
        self.feeds = PriceFeeds(
            self.view,
            self.executor.feed,  # prices are desk events, with their source
            clock,
            client=self.http,
            bus=self.bus_rpc,
            own_quote_hashes=lambda: self.view.quote_hashes,
            assets=self.tokens,
        )
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self.control: ControlServer | None = None
        self.job_errors: dict[str, int] = {}
        self._jobs: set[asyncio.Task[Any]] = set()
        self._jobs_running = 0
        self._stopping = False
        self.operator = Operator(
            OperatorPorts(
                account=self.account,
                shadow=shadow,
                view=self.view,
                tokens=config.tokens,
                pairs=config.pairs,
                assets=self.tokens,
                store=self.store,
                paper=self.paper,
                executor=self.executor,
                bus=self.ws,
                notifier=self.notifier,
                metrics=self.metrics,
                refresh_balances=self.refresh_balances,
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
        self.rebalancer = (
            self._rebalancer(message_signer(config, key)) if config.rebalance.enabled else None
        )
        if isinstance(self.store, PgStore) and self.lease_keeper is not None:
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

    def _signer_alert(self, kind: str, detail: str, resolved: bool) -> None:
        """The signer process went away, came back, or is too slow (an alert, logged)."""
        self.executor.carry_out([Alert(kind, detail, resolved)], self.clock())

    def _rebalancer(self, key: SecretKey | MessageSigner) -> Rebalancer:
        """The rebalancer (docs/rebalance.md); dry in shadow mode, whatever the config says."""
        spec = self.config.swap_api
        assert spec is not None  # the config requires swap_api when rebalance.enabled
        swap = SwapApiClient.from_env(
            str(spec.base_url), spec.token_env, client=self.http, timeout_s=spec.timeout_ms / 1000
        )
        return Rebalancer(
            self.config.rebalance,
            account=self.account,
            key=key,
            swap=swap,
            bus=self.bus_rpc,
            ledger=self.ledger,
            store=self.store,
            desk=self.view,
            feed=self.executor.feed,
            durable=lambda: self.executor.durable,
            clock=self.wall,
            balance_max_age_s=self.config.chain.balance_max_age_ms / 1000,
            nonce_layout=self.config.nonce.layout,
            dry_run=True if self.shadow else None,
            on_flow=self._own_flow,
            on_balance_change=self._balance_now.set,
        )

    # ------------------------------------------------------------------ bus callbacks

    def _on_quote(self, request: QuoteRequest) -> None:
        """The hot path, synchronous: one desk decision, then sign, journal and queue."""
        now = self.clock()
        actions = self.executor.request(request, now)
        if self.sample_requests and self.store is not None:
            # A sample, not a record the bot needs: written with the group commit in a
            # savepoint; one the store refuses is counted and said there, never lost silently
            # and never costing the quote (``SqliteJournal.extra_failed``).
            first = actions[0] if actions else None
            reason = getattr(first, "reason", None)
            self.store.record_request(request, "skipped" if reason else "quoted", now, reason)

    def _on_shadow_quote(self, quote: Quote, now: Micros) -> None:
        """Shadow mode: the paper book decides whether a simulated user takes ``quote``."""
        assert self.paper is not None
        view = self.view
        fill = self.paper.on_quote(quote, now, view.price, view.inventory.confirmed)
        if fill is not None and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "SHADOW paper fill %s: in %d %s, out %d %s, edge %.1f bps, realized %.4f USD",
                fill.quote_id, fill.amount_in, fill.asset_in, fill.amount_out, fill.asset_out,
                fill.edge_bps, fill.realized_usd,
            )  # fmt: skip

    def _refresh_gauges(self) -> None:
        """The upkeep's gauges: the operator's, then the paper book's."""
        self.operator.refresh_metrics()
        self.refresh_paper_metrics()
        now = self.clock()
        self.metrics.heartbeat(now / SECOND)  # SolverHeartbeatStale; shadow mode too
        if self.lease_keeper is not None:
            self.lease_keeper.export()
        if self.durable is not None:
            self.durable.beat(from_micros(now))

    def refresh_paper_metrics(self) -> None:
        if self.paper is None or self.paper_metrics is None:
            return
        paper, view = self.paper, self.view
        self.paper_metrics.refresh(
            PaperSnapshot(
                fills=paper.fills,
                lost=dict(paper.lost),
                pnl_marked_usd=paper.marked_usd(view.price),
                pnl_realized_usd=paper.realized_usd,
                inventory=paper.balances(self.tokens, view.inventory.confirmed),
                decimals=dict(view.decimals),
            )
        )

    def _on_quote_status(self, event: QuoteStatusEvent) -> None:
        self.executor.feed(ev.QuoteStatusSeen(event.quote_hash, event.intent_hash, event.tx_hash))

    def _on_response(self, quote_id: str, ok: bool, reason: str | None) -> None:
        self.executor.feed(ev.RelayReplied(quote_id, ok, reason))

    def _on_ws_state(self, state: str) -> None:
        connected = state == CONNECTED
        now = self.clock()
        self.executor.feed(ev.ConnectionRestored() if connected else ev.ConnectionLost(), now)
        watch = self.bus_watch
        wall = from_micros(now)
        alerts = watch.up(wall) if connected else watch.down(wall, f"bus websocket {self.ws.url}")
        if alerts:
            self.executor.carry_out(list(alerts), now)
        log.info("bus connection: %s (%s)", state, self.ws.url)

    def _own_flow(
        self, key: str, asset_in: str, amount_in: int, asset_out: str, outflow: int
    ) -> None:
        self.executor.feed(ev.OwnFlowSettled(key, asset_in, amount_in, asset_out, outflow))

    # ------------------------------------------------------------------ jobs

    async def _guard(self, name: str, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except SolverError as exc:
            self.job_errors[name] = self.job_errors.get(name, 0) + 1
            log.warning("%s failed: %s", name, exc)
            if name in LEDGER_JOBS:
                self._ledger_failing = True
            return
        if name in LEDGER_JOBS and self._ledger_failing:
            # The ledger is back: the salt went stale meanwhile, and waiting for its timer
            # (salt_refresh_ms) skipped every request as no_salt (issue 24). Ask now.
            self._ledger_failing = False
            if name != "salt":
                log.info("ledger back (%s answered): refreshing the salt now", name)
                self._refresh_salt_soon()

    async def refresh_salt(self) -> None:
        async def job() -> None:
            observed = self.clock()
            self.executor.feed(ev.SaltSeen(await self.ledger.current_salt(), observed))

        await self._guard("salt", job)

    def _refresh_salt_soon(self) -> None:
        task = asyncio.get_running_loop().create_task(self.refresh_salt())
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def refresh_balances(self) -> None:
        async def job() -> None:
            observed = self.clock()  # before the request: the snapshot includes all up to now
            values = await self.ledger.mt_batch_balance_of(self.account, self.tokens)
            rebalancer = self.rebalancer
            self.executor.feed(
                ev.BalancesSeen(
                    dict(zip(self.tokens, values, strict=True)),
                    observed,
                    tuple(rebalancer.open_flows()) if rebalancer is not None else (),
                    rebalancer.settling() if rebalancer is not None else False,
                )
            )

        await self._guard("balances", job)

    async def refresh_fee(self) -> None:
        async def job() -> None:
            self.executor.feed(ev.FeeSeen(await self.ledger.fee()))

        await self._guard("fee", job)

    async def rebalance(self) -> None:
        assert self.rebalancer is not None
        await self._guard("rebalance", self.rebalancer.tick)

    async def _balance_trigger(self, stop: asyncio.Event) -> None:
        """A settlement asks for a fresh snapshot at once, not at the next period."""
        while not stop.is_set():
            await self._balance_now.wait()
            self._balance_now.clear()
            if not stop.is_set():
                await self.refresh_balances()

    def _tracked(self, fn: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """A scheduled job whose runs are counted, so a stop can let the runs in flight end;
        one cut short by the stop ends quietly (the next start asks again)."""

        @functools.wraps(fn)
        async def job(*args: object) -> None:
            self._jobs_running += 1
            try:
                await fn(*args)
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
            finally:
                self._jobs_running -= 1

        return job

    def summary(self) -> str:
        if self.paper is None:
            return self.operator.summary()
        # Shadow mode says so on every summary line, with the paper book beside the counts.
        return f"SHADOW {self.operator.summary()} {self.paper.summary(self.view.price)}"

    def _schedule(self) -> None:
        c = self.config

        def add(fn: Callable[..., Awaitable[None]], seconds: float, *args: Any) -> None:
            self.scheduler.add_job(
                self._tracked(fn),
                "interval",
                seconds=seconds,
                args=list(args),
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,
            )

        add(self.refresh_salt, c.chain.salt_refresh_ms / 1000)
        add(self.refresh_balances, c.chain.balance_refresh_ms / 1000)
        add(self.refresh_fee, 60)
        for index, source in enumerate(c.prices.sources):
            name = source.label(index)  # several sources of one asset: combined (median)
            if source.kind == "static":
                add(_coro(self.feeds.poll_static), 1, dict(source.prices), name)
            elif source.kind == "sandbox":
                add(self.feeds.poll_sandbox, source.refresh_ms / 1000, str(source.url), name)
            elif source.kind == "http_json":
                add(
                    self.feeds.poll_http_json,
                    source.refresh_ms / 1000,
                    str(source.url),
                    source.asset,
                    source.json_path,
                    source.headers_env,
                    name,
                )
            else:
                add(
                    self.feeds.poll_bus_quote,
                    source.refresh_ms / 1000,
                    source.asset,
                    source.quote_asset,
                    source.probe_amount,
                    name,
                )
        if self.rebalancer is not None:
            add(self.rebalance, c.rebalance.tick_s)
        if c.log.summary_every_s:
            add(_coro(lambda: log.info("summary %s", self.summary())), c.log.summary_every_s)

    # ------------------------------------------------------------------ lifecycle

    def recover(self) -> int:
        """Rebuild the desk from the journal: the latest snapshot, then every fact after it.
        Returns the number of facts applied."""
        if self.store is None:
            return 0
        doc, facts = self.store.journal.load()
        if doc is not None:
            try:
                restore(self.desk, doc)
            except ValueError as exc:
                raise StoreError(f"the store {self.store.path}: {exc}") from None
        for fact in facts:
            self.desk.apply(fact)
        if doc is not None or facts:
            log.info(
                "desk rebuilt from the journal: %d open quotes, %d facts after the snapshot, "
                "pauses: %s",
                len(self.view.open_quotes),
                len(facts),
                self.view.pauses.as_dict() or "none",
            )
        return len(facts)

    def _follow(self) -> int:
        """A standby's desk takes what the active committed since the last call (PostgreSQL
        only); how many facts."""
        assert isinstance(self.store, PgStore)
        applied = 0
        while facts := self.store.journal.tail():  # type: ignore[attr-defined]
            for fact in facts:
                self.desk.apply(fact)
            applied += len(facts)
        return applied

    async def warm_up(self) -> None:
        """Fetch every cached input once before answering anything."""
        await asyncio.gather(self.refresh_salt(), self.refresh_balances(), self.refresh_fee())
        for index, source in enumerate(self.config.prices.sources):
            name = source.label(index)
            if source.kind == "static":
                self.feeds.poll_static(dict(source.prices), name)
            elif source.kind == "sandbox":
                await self.feeds.poll_sandbox(str(source.url), name)
            elif source.kind == "http_json":
                await self.feeds.poll_http_json(
                    str(source.url), source.asset, source.json_path, source.headers_env, name
                )

    async def run(self, stop: asyncio.Event, *, grace_s: float = 0.0) -> None:
        """Quote until ``stop`` is set, then stop quoting and return (``grace_s``: first let
        open quotes settle for at most that long; the journal makes it unnecessary)."""
        self.notifier.start()  # alerts raised from here on are delivered
        self._stop_event = stop
        keeper = self.lease_keeper
        if keeper is not None:  # a standby until the lease is ours: no bus, nothing decided
            self.recover()  # the desk as the journal has it now, then followed (lease_keeper)
            standby = await self._serve_standby(keeper)
            try:
                taken = await keeper.take(stop, self._follow)
            finally:
                if standby is not None:  # the active's own control API takes the address
                    await standby.stop()
            if not taken:
                await self._stop_standby()
                return
            self._keeper_task = asyncio.create_task(keeper.run(stop))
            log.warning(
                "active for %s (epoch %s): the desk holds %d open quotes from the journal",
                self.account,
                keeper.lease.epoch,
                len(self.view.open_quotes),
            )
        if self.durable is not None:
            self.durable.start(self.wall())  # the previous run's incidents, before any new
        if keeper is None:
            self.recover()
        if self.shadow:
            log.warning(
                "SHADOW mode: quotes are decided but never signed or sent; a paper book "
                "simulates fills (%s model) apart from the real inventory and PnL",
                self.config.shadow.fill.model,
            )
        self.operator.sync_pair_metrics(baseline=True)
        if isinstance(self.signer, RemoteQuoteSigner):
            await self.signer.start()  # until it answers: quotes skip with signer_down
            self.public_key = self.signer.public_key  # the signer's hello says which key
        await self._check_signing_key()
        await self.warm_up()
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
        if self.config.metrics.listen:
            store = self.store
            routes = (
                StoreRoutes(store, {a: t.decimals for a, t in self.config.tokens.items()})
                if store is not None
                else None
            )
            app = create_control_app(self.operator, self.metrics, store=routes)
            self.control = await serve_control(app, self.config.metrics.listen)
            if store is not None:  # where `solver history` finds the bot that holds the store
                store.note_control(self.control.url)
        self._schedule()
        self.scheduler.start()
        self.upkeep.start()  # last: what was built so far is frozen for the collector
        inner = asyncio.Event()
        tasks = [
            asyncio.create_task(self.ws.run(inner)),
            asyncio.create_task(self._balance_trigger(inner)),
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

    async def _serve_standby(self, keeper: LeaseKeeper) -> ControlServer | None:
        """A standby's metrics, health (503) and status on ``metrics.listen`` (standby.py)."""
        if not self.config.metrics.listen:
            return None
        app = create_control_app(StandbyTarget(keeper, self.view), self.metrics)
        return await serve_control(app, self.config.metrics.listen)

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
        self._stopping = True
        self._balance_now.set()
        # No new runs; the ones in flight may end (at most a second), then are cut short.
        self.scheduler.pause()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 1.0
        while self._jobs_running and loop.time() < give_up:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        self.scheduler.shutdown(wait=False)
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
        for job in list(self._jobs):
            job.cancel()
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


def open_store(config: BotConfig) -> Store:
    """The store the config names: PostgreSQL (``storage.url``) or SQLite (the default)."""
    spec = config.storage
    if spec.url is not None:
        return PgStore(
            spec.url,
            password_env=spec.password_env,
            account=config.account.id,
            lease_s=spec.lease_s,
            local_path=spec.path,
            sample_requests=spec.sample_requests,
            lost_quote_sample_rate=spec.lost_quote_sample_rate,
        )
    return Store(
        spec.path,
        sample_requests=spec.sample_requests,
        lost_quote_sample_rate=spec.lost_quote_sample_rate,
        synchronous=spec.synchronous,
        account=config.account.id,
    )


def _coro(fn: Callable[..., object]) -> Callable[..., Awaitable[None]]:
    """A plain function as a coroutine job: apscheduler runs plain functions in a worker
    thread, but the desk and the store belong to the event loop's thread."""

    @functools.wraps(fn)
    async def job(*args: object) -> None:
        fn(*args)

    return job
