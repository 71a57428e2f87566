"""The bot's quote path inside this process, no socket: the desk and the executor alone.

A real :class:`~solver.runtime.bot.LiveBot` (its desk, executor, journal and bus client) whose
websocket is a stand-in that records when each answer frame is handed over. Each request is
``bot.ws.handle_frame(event)`` → the desk decides → the executor signs, appends to the journal,
commits once per loop turn and sends → the answer frame; then the relay's ``OK`` reply is fed
back. The market inputs the scheduled jobs would fetch are fed as desk events
(``SaltSeen``, ``PriceSeen``, ``BalancesSeen``), and ``desk.tick`` runs every 20 ms as the
bot's ticker does, so deadlines expire as they would live. Logging at INFO goes to a file.

It separates the bot's own cost from the transport (``desk_executor_only``), gives a fallback
profile without py-spy (``cprofile_desk_executor``) and watches the event loop: a 1 ms timer's
lateness is the longest time the loop could not run anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import logging
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson

from benchmarks.common import summarize
from benchmarks.quote_path_driver import ETH, NEAR, USDC
from benchmarks.quote_path_systems import bot_config, fresh_store, funding
from solver.core import events as ev
from solver.core.clock import Micros, now_micros
from solver.protocol.keys import SecretKey
from solver.runtime.bot import LiveBot
from solver.runtime.upkeep import TICK_S

PRICES = {USDC: 1.0, NEAR: 3.0, ETH: 3000.0}
WARM_UP = 2000


class GcWatch:
    """Counts the garbage collector's passes per generation and times them (gc.callbacks):
    a full (generation 2) pass walks every tracked object, the open book included."""

    def __init__(self) -> None:
        self.durations: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.durations[info["generation"]].append((time.perf_counter() - self._started) * 1e3)

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {
            f"gen{g}": {
                "count": len(d),
                "total_ms": round(sum(d), 1),
                "max_ms": round(max(d), 2) if d else 0.0,
            }
            for g, d in self.durations.items()
        }


class LagWatch:
    """A task that asks for a 1 ms sleep over and over and records how late it woke: the
    longest lateness is the longest stretch the loop spent in one callback (a stall)."""

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            self.late_ms.append((time.perf_counter() - asked) * 1e3 - 1.0)

    def __enter__(self) -> LagWatch:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


class _FakeSocket:
    """Stands in for the bot's websocket: records when each frame was handed over."""

    def __init__(self) -> None:
        self.last_ns = 0
        self.frames = 0

    def corked(self) -> contextlib.AbstractContextManager[None]:  # as QuoteLink's
        return contextlib.nullcontext()

    def send_text_now(self, frame: bytes) -> None:  # as QuoteLink's
        self.last_ns = time.perf_counter_ns()
        self.frames += 1


def _feed_inputs(bot: LiveBot, now: int) -> None:
    """What the bot's scheduled jobs would do: fresh salt, prices and balances."""
    feed = bot.executor.feed
    feed(ev.SaltSeen(bytes(4), now), now)
    for asset, usd in PRICES.items():
        feed(ev.PriceSeen(asset, usd, now), now)
    feed(ev.BalancesSeen(funding(PRICES), now), now)


def _bot(store: Path, clock: Callable[[], Micros] = now_micros) -> LiveBot:
    key = SecretKey.generate()
    info = {
        "verifier_contract": "intents.sandbox",
        "relay_rpc": "http://127.0.0.1:9/rpc",
        "chain_rpc": "http://127.0.0.1:9/",
        "prices": "http://127.0.0.1:9/prices",
    }
    account = key.public_key.implicit_account_id()
    config = bot_config(info, "ws://127.0.0.1:9/ws", account, fresh_store(store), 0)
    bot = LiveBot(config, key, clock=clock)
    # Private seams of the ws client, used only here: a connected socket and a subscription.
    bot.ws._ws = cast(Any, _FakeSocket())
    bot.ws._subs["quote-sub"] = "quote"
    return bot


def _ended(bot: LiveBot) -> int:
    """Requests finished without an answer (skipped, or not sent)."""
    return int(sum(bot.desk.stats.skipped.values()) + bot.executor.outbox.send_failed)


async def _drive(
    bot: LiveBot, templates: list[dict[str, Any]], n: int, tag: str
) -> tuple[list[int], float]:
    """``n`` requests one after the other; per request, event in → answer frame out (ns)."""
    fake = cast(_FakeSocket, bot.ws._ws)
    per_call: list[int] = []
    started = time.perf_counter()
    next_tick = started
    for i in range(n):
        if i % 500 == 0:
            _feed_inputs(bot, now_micros())  # never stale, however slow the machine
        if time.perf_counter() >= next_tick:  # the bot's ticker: deadlines, polls, PnL
            next_tick += TICK_S
            bot.executor.tick(now_micros())
        data = {"quote_id": f"{tag}-{i}", **templates[i % len(templates)]}
        raw = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "method": "event",
                "params": {"subscription": "quote-sub", "data": data, "metadata": {}},
            }
        )
        frames, ended = fake.frames, _ended(bot)
        t0 = time.perf_counter_ns()
        bot.ws.handle_frame(raw)
        for _ in range(100):  # let the loop run until the answer is handed over or skipped
            await asyncio.sleep(0)
            if fake.frames > frames or _ended(bot) > ended:
                break
        if fake.frames > frames:  # a skip sends nothing
            per_call.append(fake.last_ns - t0)
        bot.ws.handle_frame(b'{"jsonrpc":"2.0","id":%d,"result":"OK"}' % bot.ws._next_id)
    return per_call, time.perf_counter() - started


def _started(store: Path) -> LiveBot:
    bot = _bot(store)
    bot.executor.feed(ev.ConnectionRestored())  # connected before every quote: LOST needs no RPC
    _feed_inputs(bot, now_micros())
    return bot


def _catch_up(bot: LiveBot) -> dict[str, Any]:
    """The query tables catch up on the whole run at once (nothing projected them meanwhile, as
    after a burst at saturation): the projection's CPU in all and per answer."""
    store = bot.store
    assert store is not None
    entries, answers = store.unprojected(), bot.executor.outbox.sent
    lost = bot.desk.stats.outcomes.get("LOST", 0)
    started = time.process_time()
    store.project()
    cpu_s = time.process_time() - started
    return {
        "entries": entries,
        "answers": answers,
        "lost": lost,
        "cpu_ms": round(cpu_s * 1e3, 1),
        "us_per_answer": round(cpu_s / max(1, answers) * 1e6, 1),
    }


async def _close(bot: LiveBot) -> None:
    await bot.drain()
    await bot.http.aclose()
    if bot.store is not None:
        bot.store.close()


async def desk_executor_only(
    templates: list[dict[str, Any]], n: int, scratch: Path
) -> dict[str, Any]:
    """The bot's in-process quote path timed per request, with the loop's lateness and the
    garbage collector watched."""
    handler = logging.FileHandler(scratch / "desk-executor.log")
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    bot = _started(scratch / "desk-executor.sqlite")
    try:
        await _drive(bot, templates, WARM_UP, "warm")
        signed_before = bot.executor.outbox.sent
        with GcWatch() as collections, LagWatch() as lag:
            per_call, wall = await _drive(bot, templates, n, "run")
        signed = bot.executor.outbox.sent - signed_before
        projection = _catch_up(bot)
        result = {
            "requests": n,
            "signed": signed,
            "skipped_incl_warm_up": dict(bot.desk.stats.skipped),
            "outcomes": dict(bot.desk.stats.outcomes),
            "per_quote_us": summarize([x / 1000 for x in per_call]),
            "throughput_per_s_one_core": round(signed / wall),
            "loop_lateness_ms": summarize(lag.late_ms),
            "garbage_collections": collections.summary(),
            "open_quotes_at_end": len(bot.desk.book.quotes),
            "projection": projection,
            "note": "handle_frame -> desk -> sign -> journal append + commit -> answer frame, "
            "and the OK reply; desk.tick every 20 ms; no socket",
        }
    finally:
        await _close(bot)
        root.removeHandler(handler)
        root.setLevel(old_level)
    return result


READ_SIZE = 8
"""Requests a read of the socket brings in :func:`reads_in_stages` (under load, the relay's
frames arrive together)."""
READS_REPEATS = 3


async def reads_in_stages(templates: list[dict[str, Any]], n: int, scratch: Path) -> dict[str, Any]:
    """CPU µs a request for ``n`` requests handed over :data:`READ_SIZE` at a time, one by one
    and as the link hands a read (``read_begin`` … ``read_end``: decided, signed and recorded
    stage by stage, ``Executor.request_many``), interleaved :data:`READS_REPEATS` times, each
    on a fresh bot; the loop turns once a read (the group commit), ``desk.tick`` every 20 ms."""
    runs: dict[str, list[float]] = {"one_by_one": [], "in_stages": []}
    for repeat in range(READS_REPEATS):
        for mode, cpu_us in runs.items():
            bot = _started(scratch / f"reads-{mode}-{repeat}.sqlite")
            try:
                await _reads(bot, templates, WARM_UP, "warm", mode == "in_stages")
                cpu = time.process_time()
                await _reads(bot, templates, n, "run", mode == "in_stages")
                cpu_us.append((time.process_time() - cpu) / n * 1e6)
            finally:
                await _close(bot)
    one, staged = (sorted(v)[len(v) // 2] for v in runs.values())
    return {
        "read_size": READ_SIZE,
        "requests": n,
        "cpu_us_per_request": {k: [round(x, 1) for x in v] for k, v in runs.items()},
        "median_one_by_one": round(one, 1),
        "median_in_stages": round(staged, 1),
        "ratio": round(staged / one, 3),
    }


async def _reads(
    bot: LiveBot, templates: list[dict[str, Any]], n: int, tag: str, bracketed: bool
) -> None:
    receiver = bot.ws.receiver
    next_tick = time.perf_counter()
    for i in range(n):
        if i % 500 == 0:
            _feed_inputs(bot, now_micros())
        if i % READ_SIZE == 0:
            if time.perf_counter() >= next_tick:
                next_tick += TICK_S
                bot.executor.tick(now_micros())
            if bracketed:
                receiver.read_begin()
        data = {"quote_id": f"{tag}-{i}", **templates[i % len(templates)]}
        params = {"subscription": "quote-sub", "data": data, "metadata": {}}
        bot.ws.handle_frame(orjson.dumps({"jsonrpc": "2.0", "method": "event", "params": params}))
        if i % READ_SIZE == READ_SIZE - 1:
            if bracketed:
                receiver.read_end()
            await asyncio.sleep(0)  # the group commit and the answers


async def cprofile_desk_executor(
    templates: list[dict[str, Any]], n: int, scratch: Path
) -> dict[str, Any]:
    """Fallback profile (no py-spy): cProfile of the in-process path, top functions by self time."""
    bot = _started(scratch / "desk-executor-cprofile.sqlite")
    try:
        await _drive(bot, templates, WARM_UP // 2, "warm")
        profiler = cProfile.Profile()
        profiler.enable()
        await _drive(bot, templates, n, "prof")
        profiler.disable()
    finally:
        await _close(bot)
    st = pstats.Stats(profiler)
    stats = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:25]
    return {
        "tool": "cProfile (in-process desk/executor path, no socket)",
        "top_self": [
            {
                "function": f"{name} ({Path(file).name}:{line})",
                "pct_of_busy": round(100 * v[2] / total, 1),
            }
            for (file, line, name), v in rows
        ],
    }
