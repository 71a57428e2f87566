"""``solver record``: record a live (or sandbox) bus into a quote stream (``docs/backtest.md``).

The recorder connects to the bus like a solver (:class:`~solver.io.bus_ws.BusWsClient`, the
bot's own client: same reconnects, same validation of events) but never answers, so it needs
no signing key. It writes:

- ``quote_request`` for every ``quote`` event whose two assets are in the configuration's
  ``tokens`` (others are counted in ``unknown_asset``: the stream's header must give the
  decimals of every asset it names);
- ``quote_status`` for every status event (a bus sends them only for the subscriber's own
  quotes, so a recorder normally gets none; they are kept in case a relay broadcasts them);
- ``price`` for every token with a fresh reference price, every ``price_interval_ms``, polled
  from the configuration's ``prices.sources`` (:class:`~solver.io.price_feeds.PriceFeeds`);
- optionally ``competitor``: for a share of requests (sampled by a hash of the ``quote_id``) the
  recorder asks the bus's ``quote`` method the same question and writes the best answer
  (``amount_out`` for exact-in, ``amount_in`` for exact-out). The bus fans that probe out to
  every solver — the recorder sees it too, recognises it as its own and does not record it.
  Probes are real requests to the network: keep the share small on a live bus.

Events reach the file through :class:`~backtest.stream.record_queue.RecordQueue` (the bus
loop never waits on the disk); the counters are :class:`~backtest.stream.record_stats.RecordStats`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx

from backtest.stream.events import (
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    TokenInfo,
)
from backtest.stream.format import PathLike, StreamError, usd_text
from backtest.stream.record_queue import DEFAULT_QUEUE_SIZE, RecordQueue
from backtest.stream.record_stats import RecordStats
from backtest.stream.write import StreamWriter
from solver.config import BotConfig
from solver.core.clock import micros
from solver.core.market import QuoteRequest
from solver.core.state import MarketState
from solver.errors import SolverError
from solver.io.bus_rpc import BusRpcClient
from solver.io.bus_ws import BusWsClient
from solver.io.price_feeds import PriceFeeds, into
from solver.protocol.bus import QuoteStatusEvent

log = logging.getLogger("backtest.stream.record")

_ProbeKey = tuple[str, str, bool, int, int]


def utc_now() -> datetime:
    return datetime.now(UTC)


def sampled(quote_id: str, share: float) -> bool:
    """Whether ``quote_id`` is in the sampled ``share`` (by hash: stable across runs)."""
    if share <= 0:
        return False
    if share >= 1:
        return True
    digest = hashlib.blake2b(quote_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < share * (1 << 64)


def header_from_config(
    config: BotConfig, created: datetime, source: str, competitor_share: float | None = None
) -> Header:
    return Header(
        competitor_share=competitor_share,
        created=created,
        source=source,
        tokens={
            asset: TokenInfo(symbol=spec.symbol, decimals=spec.decimals)
            for asset, spec in config.tokens.items()
        },
    )


class Recorder:
    """Records the bus described by ``config`` into ``out`` until ``stop`` or the duration."""

    def __init__(
        self,
        config: BotConfig,
        out: PathLike,
        *,
        price_interval_ms: int = 1000,
        competitor_share: float = 0.0,
        rotate_bytes: int | None = None,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        max_probes: int = 8,
        flush_every_s: float = 1.0,
        progress_every_s: float = 5.0,
        on_progress: Callable[[RecordStats], None] | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if price_interval_ms <= 0:
            raise ValueError("price_interval_ms must be positive")
        if not 0 <= competitor_share <= 1:
            raise ValueError("competitor_share must be in 0..1")
        if queue_size <= 0 or max_probes < 0:
            raise ValueError("queue_size must be positive and max_probes non-negative")
        self.config = config
        self.out = Path(out)
        self.price_interval_s = price_interval_ms / 1000
        self.competitor_share = competitor_share
        self.rotate_bytes = rotate_bytes
        self.max_probes = max_probes
        self.progress_every_s = progress_every_s
        self.on_progress = on_progress
        self.clock = clock
        self.tokens = frozenset(config.tokens)
        self.stats = RecordStats()
        self.paths: list[Path] = []
        self._queue = RecordQueue(queue_size, self.stats, flush_every_s)
        self._probing: dict[_ProbeKey, int] = {}
        self._probe_tasks: set[asyncio.Task[None]] = set()
        self._bus_rpc: BusRpcClient | None = None

    # ------------------------------------------------------------------ bus callbacks

    def on_quote(self, request: QuoteRequest) -> None:
        asset_in, asset_out = request.asset_in, request.asset_out
        if asset_in not in self.tokens or asset_out not in self.tokens:
            self.stats.unknown_asset += 1
            return
        key: _ProbeKey = (
            asset_in,
            asset_out,
            request.exact_in,
            request.amount,
            request.min_deadline_ms,
        )
        if self._probing.get(key):
            self._probing[key] -= 1
            self.stats.own_probes += 1
            return
        if self._queue.put(RequestEvent(self.clock(), request)):
            self.stats.requests += 1
        if self._bus_rpc is not None and sampled(request.quote_id, self.competitor_share):
            if len(self._probe_tasks) >= self.max_probes:
                self.stats.probes_skipped += 1
                return
            task = asyncio.get_running_loop().create_task(self._probe(request, key))
            self._probe_tasks.add(task)
            task.add_done_callback(self._probe_tasks.discard)

    def on_quote_status(self, event: QuoteStatusEvent) -> None:
        status = StatusEvent(self.clock(), event.quote_hash, event.intent_hash, event.tx_hash)
        if self._queue.put(status):
            self.stats.statuses += 1

    def _on_state(self, state: str) -> None:
        self.stats.connected = state == "connected"

    # ------------------------------------------------------------------ competitor probes

    async def _probe(self, request: QuoteRequest, key: _ProbeKey) -> None:
        """Ask the bus the same question; record the best answer as the competitor."""
        bus = self._bus_rpc
        assert bus is not None
        side = "exact_amount_in" if request.exact_in else "exact_amount_out"
        params = {
            "core_asset_identifier_in": request.asset_in,
            "core_asset_identifier_out": request.asset_out,
            side: str(request.amount),
            "min_deadline_ms": request.min_deadline_ms,
        }
        self.stats.probes += 1
        self._probing[key] = self._probing.get(key, 0) + 1
        try:
            offers = await bus.quote(params)
        except SolverError as exc:
            self.stats.probes_failed += 1
            log.debug("competitor probe failed: %s", exc)
            return
        finally:
            # Normally consumed already: the bus fans the probe out before it answers.
            left = self._probing.get(key, 0) - 1
            if left > 0:
                self._probing[key] = left
            else:
                self._probing.pop(key, None)
        matching = [
            o
            for o in offers
            if o.core_asset_identifier_in == request.asset_in
            and o.core_asset_identifier_out == request.asset_out
        ]
        if not matching:
            self.stats.probes_empty += 1
            return
        if request.exact_in:
            best = max(o.amount_out for o in matching)
        else:
            best = min(o.amount_in for o in matching)
        if self._queue.put(CompetitorEvent(self.clock(), request.quote_id, best)):
            self.stats.competitors += 1

    # ------------------------------------------------------------------ prices

    async def _poll_prices(self, feeds: PriceFeeds) -> None:
        polls = []
        for source in self.config.prices.sources:
            if source.kind == "static":
                feeds.poll_static(dict(source.prices))
            elif source.kind == "sandbox":
                polls.append(feeds.poll_sandbox(str(source.url)))
            elif source.kind == "http_json":
                polls.append(
                    feeds.poll_http_json(
                        str(source.url), source.asset, source.json_path, source.headers_env
                    )
                )
            else:
                polls.append(self._poll_bus_quote(feeds, source.asset, source.quote_asset,
                                                  source.probe_amount))  # fmt: skip
        if polls:
            await asyncio.gather(*polls)

    async def _poll_bus_quote(
        self, feeds: PriceFeeds, asset: str, quote_asset: str, probe_amount: int
    ) -> None:
        key: _ProbeKey = (asset, quote_asset, True, probe_amount, 60_000)
        self._probing[key] = self._probing.get(key, 0) + 1
        try:
            await feeds.poll_bus_quote(asset, quote_asset, probe_amount)
        finally:
            left = self._probing.get(key, 0) - 1
            if left > 0:
                self._probing[key] = left
            else:
                self._probing.pop(key, None)

    async def _price_loop(self, feeds: PriceFeeds, state: MarketState) -> None:
        loop = asyncio.get_running_loop()
        max_age_s = self.config.prices.max_age_ms / 1000
        next_at = loop.time()
        while True:
            await self._poll_prices(feeds)
            now = self.clock()
            for asset in sorted(self.tokens):
                price = state.prices.get(asset)
                if price is None or price.age_s(now) > max_age_s:
                    continue
                try:
                    text = usd_text(price.usd)
                except ValueError:
                    continue
                if self._queue.put(PriceEvent(now, asset, text)):
                    self.stats.prices += 1
            next_at += self.price_interval_s
            delay = next_at - loop.time()
            if delay < 0:  # fell behind (slow source): skip the missed ticks
                next_at = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    async def _progress_loop(self, started: float) -> None:
        if self.on_progress is None or self.progress_every_s <= 0:
            return
        while True:
            await asyncio.sleep(self.progress_every_s)
            self.stats.elapsed_s = time.monotonic() - started
            self.on_progress(self.stats)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event, *, duration_s: float | None = None) -> RecordStats:
        """Record until ``stop`` is set or ``duration_s`` has passed; flush, close, return.

        Raises :class:`~solver.errors.SolverError` on a fatal bus error (bad URL,
        unauthorized) and :class:`~backtest.stream.format.StreamError` when the file cannot be
        written; what was recorded until then is flushed and closed either way.
        """
        config = self.config
        started = time.monotonic()
        source = f"record {config.bus.ws_url}"
        header = header_from_config(config, self.clock(), source, self.competitor_share)
        try:
            writer = await asyncio.to_thread(
                StreamWriter, self.out, header, rotate_bytes=self.rotate_bytes
            )
        except OSError as exc:
            raise StreamError(f"cannot write {self.out}: {exc.strerror}") from None
        self.paths = writer.paths
        api_key = os.environ.get(config.bus.api_key_env) if config.bus.api_key_env else None
        http = httpx.AsyncClient(timeout=config.chain.timeout_ms / 1000)
        bus_rpc = BusRpcClient(
            str(config.bus.rpc_url),
            api_key=api_key,
            asset_field_prefix=config.bus.asset_field_prefix,
            client=http,
        )
        self._bus_rpc = bus_rpc if self.competitor_share > 0 else None
        state = MarketState(
            decimals={a: t.decimals for a, t in config.tokens.items()},
            history_size=config.prices.history_size,
        )
        feeds = PriceFeeds(
            state,
            into(state),
            lambda: micros(self.clock()),
            client=http,
            bus=bus_rpc,
            assets=self.tokens,
        )
        ws = BusWsClient(
            str(config.bus.ws_url),
            on_quote=self.on_quote,
            on_quote_status=self.on_quote_status,
            on_state=self._on_state,
            api_key=api_key,
            asset_field_prefix=config.bus.asset_field_prefix,
            backoff_initial_s=config.bus.reconnect_initial_ms / 1000,
            backoff_max_s=config.bus.reconnect_max_ms / 1000,
            max_frame_bytes=config.bus.max_frame_bytes,
        )
        ws_stop = asyncio.Event()
        drain = asyncio.create_task(self._queue.drain(writer))
        ws_task = asyncio.create_task(ws.run(ws_stop))
        helpers = [
            asyncio.create_task(self._price_loop(feeds, state)),
            asyncio.create_task(self._progress_loop(started)),
        ]
        stop_wait = asyncio.create_task(stop.wait())
        error: BaseException | None = None
        try:
            await asyncio.wait(
                {stop_wait, ws_task, drain},
                timeout=duration_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            stop_wait.cancel()
            ws_stop.set()
            for task in helpers:
                task.cancel()
            # The bus client first: until it has stopped, a frame it still delivers may start
            # a probe, which the cancelling below must see (one started after it once
            # answered after the end marker: counted, never written).
            results = await asyncio.gather(ws_task, *helpers, return_exceptions=True)
            for task in self._probe_tasks:
                task.cancel()
            await asyncio.gather(*list(self._probe_tasks), return_exceptions=True)
            ws_error = results[0]
            if isinstance(ws_error, BaseException) and not isinstance(
                ws_error, asyncio.CancelledError
            ):
                error = ws_error
            await self._queue.end(drain)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(drain, return_exceptions=True)
            drain_error = drain.exception() if drain.done() and not drain.cancelled() else None
            try:
                await asyncio.to_thread(writer.close)
            except OSError as exc:
                drain_error = drain_error or exc
            self.stats.written = writer.events_written
            self.stats.bytes = writer.bytes_written
            self.stats.files = len(writer.paths)
            await http.aclose()
            self.stats.elapsed_s = time.monotonic() - started
            self.stats.connected = False
        if drain_error is not None:
            if isinstance(drain_error, OSError):
                raise StreamError(f"cannot write {self.out}: {drain_error.strerror}")
            raise drain_error
        if error is not None:
            raise error
        return self.stats
