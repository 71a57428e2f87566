"""The live bot's timed reads: the ledger's salt, balances and fee, the price sources, the
rebalancer's tick and the summary line, each on its period (apscheduler), fetched once before
the first answer, and stopped with the bot.

Apart from the bot because none of it is on the quote path: what each read learns reaches the
desk as its usual event (``SaltSeen``, ``BalancesSeen``, ``FeeSeen``, prices through
:class:`~solver.io.price_feeds.PriceFeeds`) through the executor's ``feed``. A read that fails
is counted (:attr:`Jobs.errors`) and logged, never raised: the desk's staleness checks decide
what a missing input means. The jobs are given :class:`JobPorts` rather than the bot (issue 22,
"Reaching in").
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from solver.core import events as ev
from solver.errors import SolverError

if TYPE_CHECKING:
    from solver.config import BotConfig
    from solver.core.clock import Micros
    from solver.io.ledger_client import LedgerClient
    from solver.io.price_feeds import PriceFeeds
    from solver.rebalance.rebalancer import Rebalancer

log = logging.getLogger("solver.bot")
LEDGER_JOBS = frozenset({"salt", "balances", "fee"})
"""Jobs that read the ledger node: one succeeding after a failure means it is back."""


@dataclass(frozen=True)
class JobPorts:
    """Everything the :class:`Jobs` use."""

    config: BotConfig
    """The periods (``chain``, ``prices``, ``rebalance``, ``log``) and the price sources."""
    feed: Callable[[ev.Event], object]
    """The executor's door for what the reads learn."""
    ledger: LedgerClient
    account: str
    tokens: list[str]
    """The assets whose balances are read, in the order the ledger is asked."""
    feeds: PriceFeeds
    rebalancer: Rebalancer | None
    balance_now: asyncio.Event
    """Set by a settlement (the executor, the rebalancer): the balances are read at once."""
    summary: Callable[[], str]
    """The summary line, logged every ``log.summary_every_s``."""
    clock: Callable[[], Micros]


class Jobs:
    """The bot's scheduled reads. :meth:`start` schedules them, :meth:`balance_trigger` is one
    of the bot's tasks, :meth:`stop` then :meth:`cancel_pending` end them."""

    def __init__(self, ports: JobPorts) -> None:
        self.ports = ports
        self.scheduler = AsyncIOScheduler(timezone=UTC)
        self.errors: dict[str, int] = {}
        """Failed runs by job name (``balances``, ``salt``, ...)."""
        self._ledger_failing = False
        self._pending: set[asyncio.Task[Any]] = set()
        self._running = 0
        self._stopping = False

    async def _guard(self, name: str, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except SolverError as exc:
            self.errors[name] = self.errors.get(name, 0) + 1
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
                self.refresh_salt_soon()

    async def refresh_salt(self) -> None:
        ports = self.ports

        async def job() -> None:
            observed = ports.clock()
            ports.feed(ev.SaltSeen(await ports.ledger.current_salt(), observed))

        await self._guard("salt", job)

    def refresh_salt_soon(self) -> None:
        """The salt read now rather than at its next period (the executor asks, and a ledger
        that came back)."""
        task = asyncio.get_running_loop().create_task(self.refresh_salt())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def refresh_balances(self) -> None:
        ports = self.ports

        async def job() -> None:
            observed = ports.clock()  # before the request: the snapshot includes all up to now
            values = await ports.ledger.mt_batch_balance_of(ports.account, ports.tokens)
            rebalancer = ports.rebalancer
            ports.feed(
                ev.BalancesSeen(
                    dict(zip(ports.tokens, values, strict=True)),
                    observed,
                    tuple(rebalancer.open_flows()) if rebalancer is not None else (),
                    rebalancer.settling() if rebalancer is not None else False,
                )
            )

        await self._guard("balances", job)

    async def refresh_fee(self) -> None:
        ports = self.ports

        async def job() -> None:
            ports.feed(ev.FeeSeen(await ports.ledger.fee()))

        await self._guard("fee", job)

    async def rebalance(self) -> None:
        assert self.ports.rebalancer is not None
        await self._guard("rebalance", self.ports.rebalancer.tick)

    async def balance_trigger(self, stop: asyncio.Event) -> None:
        """A settlement asks for a fresh snapshot at once, not at the next period."""
        balance_now = self.ports.balance_now
        while not stop.is_set():
            await balance_now.wait()
            balance_now.clear()
            if not stop.is_set():
                await self.refresh_balances()

    async def warm_up(self) -> None:
        """Fetch every cached input once before answering anything."""
        await asyncio.gather(self.refresh_salt(), self.refresh_balances(), self.refresh_fee())
        feeds = self.ports.feeds
        for index, source in enumerate(self.ports.config.prices.sources):
            name = source.label(index)
            if source.kind == "static":
                feeds.poll_static(dict(source.prices), name)
            elif source.kind == "sandbox":
                await feeds.poll_sandbox(str(source.url), name)
            elif source.kind == "http_json":
                await feeds.poll_http_json(
                    str(source.url), source.asset, source.json_path, source.headers_env, name
                )

    def _tracked(self, fn: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """A scheduled job whose runs are counted, so a stop can let the runs in flight end;
        one cut short by the stop ends quietly (the next start asks again)."""

        @functools.wraps(fn)
        async def job(*args: object) -> None:
            self._running += 1
            try:
                await fn(*args)
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
            finally:
                self._running -= 1

        return job

    def start(self) -> None:
        """Every job on its period, from now on."""
        c = self.ports.config
        feeds = self.ports.feeds

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
                add(_coro(feeds.poll_static), 1, dict(source.prices), name)
            elif source.kind == "sandbox":
                add(feeds.poll_sandbox, source.refresh_ms / 1000, str(source.url), name)
            elif source.kind == "http_json":
                add(
                    feeds.poll_http_json,
                    source.refresh_ms / 1000,
                    str(source.url),
                    source.asset,
                    source.json_path,
                    source.headers_env,
                    name,
                )
            else:
                add(
                    feeds.poll_bus_quote,
                    source.refresh_ms / 1000,
                    source.asset,
                    source.quote_asset,
                    source.probe_amount,
                    name,
                )
        if self.ports.rebalancer is not None:
            add(self.rebalance, c.rebalance.tick_s)
        if c.log.summary_every_s:
            summary = self.ports.summary
            add(_coro(lambda: log.info("summary %s", summary())), c.log.summary_every_s)
        self.scheduler.start()

    async def stop(self) -> None:
        """No new runs; the ones in flight may end (at most a second), then are cut short."""
        self._stopping = True
        self.ports.balance_now.set()
        self.scheduler.pause()
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 1.0
        while self._running and loop.time() < give_up:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        self.scheduler.shutdown(wait=False)

    def cancel_pending(self) -> None:
        """The salt reads asked for outside the schedule, still in flight, are cut short."""
        for task in list(self._pending):
            task.cancel()


def _coro(fn: Callable[..., object]) -> Callable[..., Awaitable[None]]:
    """A plain function as a coroutine job: apscheduler runs plain functions in a worker
    thread, but the desk and the store belong to the event loop's thread."""

    @functools.wraps(fn)
    async def job(*args: object) -> None:
        fn(*args)

    return job
