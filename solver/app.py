"""Wires core + io + the scheduler into the running bot (DESIGN "Packages").

Scheduled jobs (apscheduler) keep the cached inputs of the quote path fresh — salt, balances,
fee, reference prices — and drive settlement: ``get_status`` polls of won quotes with backoff,
``is_nonce_used`` checks of quotes past their deadline, and the periodic summary line. The
wall clock is read in one place: ``clock`` (injected, so tests and the demo can share it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from solver.config import BotConfig
from solver.core.inventory import Inventory
from solver.core.quoting import PipelineSettings, QuotePipeline, Route
from solver.core.risk import GLOBAL, RiskLimits
from solver.core.settlement import QuoteState, Transition
from solver.core.state import MarketState
from solver.engine import Engine, Journal
from solver.errors import SolverError
from solver.io.bus_rpc import BusRpcClient
from solver.io.bus_ws import CONNECTED, BusWsClient
from solver.io.control import ControlServer, create_control_app, serve_control
from solver.io.ledger_client import LedgerClient
from solver.io.metrics import Metrics
from solver.io.price_feeds import PriceFeeds
from solver.io.store import Store
from solver.io.swap_client import SwapApiClient
from solver.operations import Operations
from solver.protocol.bus import IntentStatus, QuoteRequestEvent, QuoteStatusEvent
from solver.protocol.keys import SecretKey
from solver.protocol.quote_signing import QuoteSigner
from solver.rebalance import Rebalancer
from strategies.registry import load_strategy

log = logging.getLogger("solver.app")
DEADLINE_GRACE = timedelta(seconds=2)
NONCE_CHECKS_AT_ONCE = 32
NONCE_CHECKS_PER_TICK = 256


def utc_now() -> datetime:
    """The one wall-clock read of the live bot."""
    return datetime.now(UTC)


def build_routes(config: BotConfig) -> dict[tuple[str, str], Route]:
    routes: dict[tuple[str, str], Route] = {}
    for pair in config.pairs:
        strategy = load_strategy(pair.strategy, pair.params)
        directions = {
            "both": [(pair.base, pair.quote), (pair.quote, pair.base)],
            "buy_base": [(pair.base, pair.quote)],
            "sell_base": [(pair.quote, pair.base)],
        }[pair.directions]
        for asset_in, asset_out in directions:
            routes[(asset_in, asset_out)] = Route(
                asset_in,
                asset_out,
                strategy,
                pair.min_notional_usd,
                pair.max_notional_usd,
                pair.enabled,
            )
    return routes


def pipeline_settings(config: BotConfig) -> PipelineSettings:
    return PipelineSettings(
        deadline_margin_ms=config.quote.deadline_margin_ms,
        max_min_deadline_ms=config.quote.max_min_deadline_ms,
        response_budget_ms=config.quote.response_budget_ms,
        balance_max_age_s=config.chain.balance_max_age_ms / 1000,
        price_max_age_s=config.prices.max_age_ms / 1000,
        salt_max_age_s=config.chain.salt_max_age_s,
        max_open_exposure_usd=config.risk.max_open_exposure_usd,
        max_open_per_token=dict(config.risk.max_open_per_token),
        max_quotes_per_s=config.risk.max_quotes_per_s,
    )


def _on_loop(fn: Callable[..., object]) -> Callable[..., Awaitable[None]]:
    """A plain function as a coroutine job. apscheduler's asyncio executor runs plain functions
    in a worker thread, but the bot's state and its SQLite connection belong to the event
    loop's thread: every job must run on the loop."""

    async def job(*args: object) -> None:
        fn(*args)

    return job


@dataclass
class _Poll:
    next_at: float
    delay_s: float


class SolverApp:
    def __init__(
        self,
        config: BotConfig,
        key: SecretKey,
        *,
        clock: Callable[[], datetime] = utc_now,
        shadow: bool = False,
        journal: Journal | None = None,
        on_transition: Callable[[Transition], None] | None = None,
        store: Store | None = None,
        use_store: bool = True,
    ) -> None:
        self.config = config
        self.shadow = shadow
        # Shadow mode signs nothing, so it writes no journal: it must never touch a live store.
        self.store = store or (
            Store(
                config.storage.path,
                sample_requests=config.storage.sample_requests,
                synchronous=config.storage.synchronous,
            )
            if use_store and not shadow and journal is None
            else None
        )
        self.metrics = Metrics()
        self.clock = clock
        self.account = config.account.id
        self.tokens = sorted(config.tokens)
        self.state = MarketState(
            decimals={a: t.decimals for a, t in config.tokens.items()},
            history_size=config.prices.history_size,
        )
        self.inventory = Inventory(floors=dict(config.risk.floors))
        self.pipeline = QuotePipeline(
            pipeline_settings(config), build_routes(config), self.inventory, self.state
        )
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
        self.engine = Engine(
            pipeline=self.pipeline,
            signer=QuoteSigner(key, config.account.id, config.verifier_contract),
            sender=self.ws,
            clock=clock,
            nonce_layout=config.nonce.layout,
            journal=journal or self.store,
            shadow=shadow,
            on_transition=self._transition,
            metrics=self.metrics,
            sample_requests=self.store is not None and config.storage.sample_requests > 0,
        )
        self._external_transition = on_transition
        risk = config.risk
        self.ops = Operations(
            self,
            store=self.store,
            metrics=self.metrics,
            limits=RiskLimits(
                risk.max_daily_loss_usd,
                risk.max_drawdown_usd,
                dict(risk.max_reconciliation_mismatch),
                risk.halt_on_mismatch,
                risk.max_stale_s,
            ),
        )
        self.control: ControlServer | None = None
        self._connected_since: datetime | None = None
        self.feeds = PriceFeeds(
            self.state,
            clock,
            client=self.http,
            bus=self.bus_rpc,
            own_quote_hashes=self.engine.book.by_hash.keys,
            assets=self.tokens,
        )
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self._polls: dict[str, _Poll] = {}
        self._balance_now = asyncio.Event()
        self._jobs_running = 0
        self.job_errors: dict[str, int] = {}
        self.rebalancer = self._rebalancer(key) if config.rebalance.enabled else None

    def _rebalancer(self, key: SecretKey) -> Rebalancer:
        """The rebalancer (docs/rebalance.md); dry in shadow mode, whatever the config says."""
        spec = self.config.swap_api
        assert spec is not None  # the config requires swap_api when rebalance.enabled
        swap = SwapApiClient.from_env(
            str(spec.base_url), spec.token_env, client=self.http, timeout_s=spec.timeout_ms / 1000
        )
        rebalancer = Rebalancer(
            self.config.rebalance,
            account=self.account,
            key=key,
            swap=swap,
            bus=self.bus_rpc,
            ledger=self.ledger,
            store=self.store,
            inventory=self.inventory,
            state=self.state,
            clock=self.clock,
            balance_max_age_s=self.config.chain.balance_max_age_ms / 1000,
            nonce_layout=self.config.nonce.layout,
            dry_run=True if self.shadow else None,
            on_flow=self.ops.on_own_flow,
            on_balance_change=self._balance_now.set,
        )
        self.ops.own_moves = rebalancer
        return rebalancer

    # ------------------------------------------------------------------ callbacks from the bus

    def _transition(self, transition: Transition) -> None:
        self.ops.on_transition(transition)
        if self._external_transition is not None:
            self._external_transition(transition)

    def _on_quote(self, event: QuoteRequestEvent, metadata: dict[str, Any]) -> None:
        self.engine.handle_quote(event, metadata)  # synchronous: no task per request

    def _on_quote_status(self, event: QuoteStatusEvent) -> None:
        quote = self.engine.on_quote_status(event)
        if quote is not None:
            self._polls[quote.quote_id] = _Poll(0.0, 0.1)

    def _on_response(self, quote_id: str, ok: bool, reason: str | None) -> None:
        self.engine.on_response(quote_id, ok, reason)
        if not ok and reason and "salt" in reason:
            self.scheduler.add_job(self._tracked(self.refresh_salt))

    def _on_ws_state(self, state: str) -> None:
        # Since when the bus has been connected and subscribed without a break: a quote sent
        # after that moment would have had its quote_status delivered (see check_deadlines).
        self._connected_since = self.clock() if state == CONNECTED else None
        log.info("bus connection: %s", state)

    # ------------------------------------------------------------------ jobs

    def _tracked(self, fn: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """A scheduled job whose runs are counted, so a stop can let the runs in flight finish:
        the scheduler's shutdown cancels them, and logs each one as a job that failed."""

        @functools.wraps(fn)
        async def job(*args: object) -> None:
            self._jobs_running += 1
            try:
                await fn(*args)
            finally:
                self._jobs_running -= 1

        return job

    async def _guard(self, name: str, job: Callable[[], object]) -> None:
        try:
            result = job()
            if asyncio.iscoroutine(result):
                await result
        except SolverError as exc:
            self.job_errors[name] = self.job_errors.get(name, 0) + 1
            log.warning("%s failed: %s", name, exc)

    async def refresh_salt(self) -> None:
        async def job() -> None:
            observed = self.clock()
            self.state.set_salt(await self.ledger.current_salt(), observed)

        await self._guard("salt", job)

    async def refresh_balances(self) -> None:
        async def job() -> None:
            observed = self.clock()  # before the request: the snapshot includes all up to now
            values = await self.ledger.mt_batch_balance_of(self.account, self.tokens)
            actual = dict(zip(self.tokens, values, strict=True))
            self.ops.on_balances(actual, observed)
            self.inventory.set_confirmed(actual, observed)

        await self._guard("balances", job)

    async def refresh_fee(self) -> None:
        async def job() -> None:
            self.state.fee_pips = await self.ledger.fee()

        await self._guard("fee", job)

    async def check_deadlines(self) -> None:
        """OPEN quotes past their deadline: a used nonce means it executed (while we missed the
        status); an unused one means it can never execute now: LOST.

        Checked ``DEADLINE_GRACE`` after the deadline (a transaction included just before it
        must reach finality first), with ``is_nonce_used`` in concurrent chunks. Under a
        backlog larger than ``NONCE_CHECKS_PER_TICK`` (a burst of short-deadline quotes), a
        quote sent while the bus has stayed connected ever since is marked LOST without the
        RPC: its quote_status would have reached us. Should that ever be wrong, the balance
        snapshot shows a move no open quote explains and the reconciliation pauses quoting.
        """
        due = self.engine.book.past_deadline(self.clock() - DEADLINE_GRACE)
        if len(due) > NONCE_CHECKS_PER_TICK and self._connected_since is not None:
            since = self._connected_since
            for quote in [q for q in due if q.created_at >= since]:
                self.engine.mark_lost(quote.quote_id)
            due = [q for q in due if q.created_at < since][:NONCE_CHECKS_PER_TICK]
        for start in range(0, len(due), NONCE_CHECKS_AT_ONCE):
            chunk = due[start : start + NONCE_CHECKS_AT_ONCE]
            results = await asyncio.gather(
                *(self.ledger.is_nonce_used(self.account, q.nonce) for q in chunk),
                return_exceptions=True,
            )
            for quote, used in zip(chunk, results, strict=True):
                if isinstance(used, BaseException):
                    log.warning("is_nonce_used failed: %s", used)
                    return
                if used:
                    self.engine.mark_settled(quote.quote_id, None)
                    self._balance_now.set()
                else:
                    self.engine.mark_lost(quote.quote_id)

    async def poll_settlements(self) -> None:
        """``get_status`` of won quotes, each with its own exponential backoff."""
        loop_now = asyncio.get_running_loop().time()
        for quote_id, poll in list(self._polls.items()):
            quote = self.engine.book.get(quote_id)
            if quote is None or quote.intent_hash is None:
                self._polls.pop(quote_id, None)
                continue
            if poll.next_at > loop_now:
                continue
            try:
                status = await self.bus_rpc.get_status(quote.intent_hash)
            except SolverError as exc:
                log.debug("get_status failed: %s", exc)
                status = None
            poll.delay_s = min(poll.delay_s * 2, 5.0)
            poll.next_at = loop_now + poll.delay_s
            if status is None:
                continue
            tx_hash = status.data.hash if status.data else None
            if status.status is IntentStatus.SETTLED:
                self.engine.mark_settled(quote_id, tx_hash)
                self._polls.pop(quote_id, None)
                self._balance_now.set()
            elif status.status is IntentStatus.TX_BROADCASTED:
                self.engine.mark_settling(quote_id, tx_hash)
            elif status.status is IntentStatus.NOT_FOUND_OR_NOT_VALID and (
                quote.state is QuoteState.SETTLING or quote.deadline < self.clock()
            ):
                self.engine.mark_failed(quote_id, "NOT_FOUND_OR_NOT_VALID")
                self._polls.pop(quote_id, None)
                self._balance_now.set()

    async def rebalance(self) -> None:
        assert self.rebalancer is not None
        await self._guard("rebalance", self.rebalancer.tick)

    async def _balance_trigger(self, stop: asyncio.Event) -> None:
        """A settlement asks for a fresh snapshot at once, not at the next period."""
        while not stop.is_set():
            await self._balance_now.wait()
            self._balance_now.clear()
            await self.refresh_balances()

    def summary(self) -> str:
        s = self.engine.stats
        p50, p99 = s.percentile_us(0.5), s.percentile_us(0.99)
        skipped = ",".join(f"{k}={v}" for k, v in s.skipped.most_common(6)) or "-"
        free = " ".join(
            f"{self.config.tokens[a].symbol}={self.inventory.free(a)}" for a in self.tokens
        )
        return (
            f"requests={s.requests} quoted={s.quoted} skipped[{skipped}] "
            f"outcomes={dict(s.outcomes)} decision_us p50={p50 or 0:.0f} p99={p99 or 0:.0f} "
            f"open={len(self.engine.book.quotes)} connected={self.ws.connected} free: {free}"
        )

    def _schedule(self) -> None:
        c = self.config

        def add(fn: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any) -> None:
            self.scheduler.add_job(self._tracked(fn), *args, **kwargs)

        opts = {"max_instances": 1, "coalesce": True, "misfire_grace_time": None}
        add(self.refresh_salt, "interval", seconds=c.chain.salt_refresh_ms / 1000, **opts)
        add(self.refresh_balances, "interval", seconds=c.chain.balance_refresh_ms / 1000, **opts)
        add(self.refresh_fee, "interval", seconds=60, **opts)
        add(self.check_deadlines, "interval", seconds=1, **opts)
        add(self.poll_settlements, "interval", seconds=0.1, **opts)
        add(_on_loop(self.ops.tick), "interval", seconds=1, **opts)
        for source in c.prices.sources:
            if source.kind == "static":
                add(
                    _on_loop(self.feeds.poll_static),
                    "interval",
                    seconds=1,
                    args=[dict(source.prices)],
                    **opts,
                )
            elif source.kind == "sandbox":
                add(
                    self.feeds.poll_sandbox,
                    "interval",
                    seconds=source.refresh_ms / 1000,
                    args=[str(source.url)],
                    **opts,
                )
            elif source.kind == "http_json":
                add(
                    self.feeds.poll_http_json,
                    "interval",
                    seconds=source.refresh_ms / 1000,
                    args=[str(source.url), source.asset, source.json_path, source.headers_env],
                    **opts,
                )
            else:
                add(
                    self.feeds.poll_bus_quote,
                    "interval",
                    seconds=source.refresh_ms / 1000,
                    args=[source.asset, source.quote_asset, source.probe_amount],
                    **opts,
                )
        if self.rebalancer is not None:
            add(self.rebalance, "interval", seconds=c.rebalance.tick_s, **opts)
        if c.log.summary_every_s:
            add(
                _on_loop(lambda: log.info("summary %s", self.summary())),
                "interval",
                seconds=c.log.summary_every_s,
                **opts,
            )

    # ------------------------------------------------------------------ lifecycle

    async def warm_up(self) -> None:
        """Fetch every cached input once before answering anything."""
        await asyncio.gather(self.refresh_salt(), self.refresh_balances(), self.refresh_fee())
        for source in self.config.prices.sources:
            if source.kind == "static":
                self.feeds.poll_static(dict(source.prices))
            elif source.kind == "sandbox":
                await self.feeds.poll_sandbox(str(source.url))
            elif source.kind == "http_json":
                await self.feeds.poll_http_json(
                    str(source.url), source.asset, source.json_path, source.headers_env
                )

    async def recover(self) -> None:
        """After a restart: rebuild open quotes and their reservations from the store, and
        re-check them before quoting resumes (a quote may have settled while we were down)."""
        if self.store is None:
            return
        quotes = self.store.load_open_quotes()
        if not quotes:
            return
        self.state.paused[GLOBAL] = "recovering open quotes"
        for quote in quotes:
            self.engine.book.add(quote)
        self.inventory.restore(Store.reservations_for(quotes))
        for quote in quotes:
            if quote.intent_hash is not None:
                self._polls[quote.quote_id] = _Poll(0.0, 0.1)
        await self.check_deadlines()
        await self.poll_settlements()
        # The warm-up snapshot was taken before these re-checks: it may or may not include
        # the executions they just found (they happened while the bot was down), so the
        # reconciliation baseline is taken again, after them.
        self.ops.rebaseline()
        await self.refresh_balances()
        log.info("recovered %d open quotes from the store", len(quotes))
        if self.state.paused.get(GLOBAL) == "recovering open quotes":
            del self.state.paused[GLOBAL]

    async def run(self, stop: asyncio.Event, *, shutdown_wait_s: float = 10.0) -> None:
        """Quote until ``stop`` is set; then stop quoting, let open quotes settle or run out
        (at most ``shutdown_wait_s``), flush and return."""
        await self.warm_up()
        await self.recover()
        # Everything built so far lives as long as the process: keep the cyclic GC from
        # re-walking it on every full collection (those pauses land on the quote path).
        gc.collect()
        gc.freeze()
        if self.rebalancer is not None and await self.rebalancer.resume():
            # What resumed rebalances did while the bot was down is found now, and the
            # reconciliation's baseline is taken after it (as recover() does for quotes).
            await self.rebalance()
            self.ops.rebaseline()
            await self.refresh_balances()
        elif self.rebalancer is None and self.store is not None and self.store.open_rebalances():
            log.warning(
                "the store holds unfinished rebalances but rebalance.enabled is false: they "
                "are not followed (see solver swap status)"
            )
        self.ops.tick()
        if self.config.metrics.listen:
            self.control = await serve_control(
                create_control_app(self.ops, self.metrics), self.config.metrics.listen
            )
        self._schedule()
        self.scheduler.start()
        ws_stop = asyncio.Event()
        ws_task = asyncio.create_task(self.ws.run(ws_stop))
        trigger = asyncio.create_task(self._balance_trigger(ws_stop))
        try:
            await stop.wait()
            self.state.paused["*"] = "shutting down"
            loop = asyncio.get_running_loop()
            give_up = loop.time() + shutdown_wait_s
            while self.engine.book.quotes and loop.time() < give_up:  # noqa: ASYNC110 (jobs settle them)
                await asyncio.sleep(0.1)
        finally:
            ws_stop.set()
            self._balance_now.set()
            # No new runs; the ones in flight finish (bounded by the RPC timeout) rather than
            # being cancelled by the shutdown.
            self.scheduler.pause()
            loop = asyncio.get_running_loop()
            give_up = loop.time() + self.config.chain.timeout_ms / 1000 + 1
            while self._jobs_running and loop.time() < give_up:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            self.scheduler.shutdown(wait=False)
            for task in (ws_task, trigger):
                with contextlib.suppress(asyncio.CancelledError, SolverError):
                    await asyncio.wait_for(task, 5)
            await self.http.aclose()
            if self.control is not None:
                await self.control.stop()
            if self.store is not None:
                self.store.close()
            log.info("stopped: %s", self.summary())
