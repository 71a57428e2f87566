"""What an answer costs the live bot, split into its parts, on a simulated clock (issue 29).

The real :class:`~solver.runtime.bot.LiveBot` (desk, executor, SQLite journal, bus client with
a stand-in socket, as :mod:`benchmarks.quote_path_inprocess`), driven with a clock this module
moves: ``N`` requests at ``RATE`` a second in reads of 8, the ticker's ``desk.tick`` and its
collector pass every 20 ms, a projection every 250 ms, then the *after-work* of the burst:
ticks until every quote has expired, and the query tables caught up. Printed: CPU µs per
answer in all and by part (``request``, ``tick``, ``project``, ``end_expiry``,
``end_project``).

The after-work is what ``quote_path`` counts in its CPU per answer once the answers have left.
Because the clock is simulated, the work is the same run after run: it can be counted by
``PYTHONHASHSEED=0 valgrind --tool=callgrind python -m benchmarks.after_work 3000`` on a noisy
machine, and timed in interleaved pairs against another tree (``PYTHONPATH=<tree>``). It found
the deadline buckets' cost at saturation (``solver/core/deadlines.py``, docs/performance.md).

Usage: ``python -m benchmarks.after_work [N] [RATE]`` (default 20,000 at 13,000/s).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks.quote_path_driver import request_templates
from benchmarks.quote_path_inprocess import PRICES, READ_SIZE, _bot, _close, _feed_inputs
from solver.core import events as ev
from solver.core.clock import Micros
from solver.runtime.bot import LiveBot
from solver.runtime.gc_pacer import GcPacer

TICK_US = 20_000
PROJECT_EVERY_US = 250_000
START_US = 1_800_000_000_000_000


class SimulatedClock:
    """The bot's one clock read, moved by the driver."""

    def __init__(self) -> None:
        self.now: Micros = START_US

    def __call__(self) -> Micros:
        return self.now


async def _burst(
    bot: LiveBot, clock: SimulatedClock, gc: GcPacer, n: int, rate: float, parts: dict[str, float]
) -> None:
    """``n`` requests at ``rate``, the ticker and the projection at their paces."""
    assert bot.store is not None
    templates = request_templates(PRICES)
    step, receiver, executor = int(1e6 / rate), bot.ws.receiver, bot.executor
    next_tick, next_projection = clock.now + TICK_US, clock.now + PROJECT_EVERY_US
    for i in range(n):
        clock.now += step
        if i % 500 == 0:
            _feed_inputs(bot, clock.now)  # fresh inputs, as the jobs keep them
        if i % READ_SIZE == 0:
            if clock.now >= next_tick:
                next_tick += TICK_US
                started = time.process_time()
                executor.tick(clock.now)
                gc.tick()
                parts["tick"] += time.process_time() - started
            if clock.now >= next_projection:
                next_projection += PROJECT_EVERY_US
                started = time.process_time()
                bot.store.project()
                parts["project"] += time.process_time() - started
            receiver.read_begin()
        data = {"quote_id": f"q{clock.now}-{i}", **templates[i % len(templates)]}
        params = {"subscription": "quote-sub", "data": data, "metadata": {}}
        frame = orjson.dumps({"jsonrpc": "2.0", "method": "event", "params": params})
        started = time.process_time()
        bot.ws.handle_frame(frame)
        if i % READ_SIZE == READ_SIZE - 1:
            receiver.read_end()
            await asyncio.sleep(0)  # the group commit and the answers
        parts["request"] += time.process_time() - started


async def _after_work(bot: LiveBot, clock: SimulatedClock, gc: GcPacer) -> float:
    """Ticks until the book is empty: the burst's expiry (CPU seconds)."""
    started = time.process_time()
    while bot.desk.book.quotes:
        clock.now += TICK_US
        bot.executor.tick(clock.now)
        gc.tick()
        await asyncio.sleep(0)
    return time.process_time() - started


async def measure(n: int, rate: float) -> dict[str, float]:
    """CPU µs per answer, in all and by part, for a burst of ``n`` after a warm-up."""
    clock = SimulatedClock()
    gc = GcPacer()
    with tempfile.TemporaryDirectory() as scratch:
        bot = _bot(Path(scratch) / "bot.sqlite", clock)
        assert bot.store is not None
        gc.start()
        try:
            bot.executor.feed(ev.ConnectionRestored(), clock.now)  # LOST needs no RPC
            _feed_inputs(bot, clock.now)
            warm = dict.fromkeys(("request", "tick", "project"), 0.0)
            await _burst(bot, clock, gc, 2000, rate, warm)
            await _after_work(bot, clock, gc)
            bot.store.project()
            sent = bot.executor.outbox.sent
            parts = dict.fromkeys(("request", "tick", "project"), 0.0)
            started = time.process_time()
            await _burst(bot, clock, gc, n, rate, parts)
            parts["end_expiry"] = await _after_work(bot, clock, gc)
            begun = time.process_time()
            bot.store.project()
            parts["end_project"] = time.process_time() - begun
            total = time.process_time() - started
            answers = max(1, bot.executor.outbox.sent - sent)
        finally:
            gc.stop()
            await _close(bot)
    out = {"answers": float(answers), "all": total / answers * 1e6}
    out.update({name: cpu / answers * 1e6 for name, cpu in parts.items()})
    return out


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 20_000
    rate = float(argv[1]) if len(argv) > 1 else 13_000.0
    got = asyncio.run(measure(n, rate))
    answers = int(got.pop("answers"))
    print(f"{answers:,} answers: " + ", ".join(f"{k} {v:.1f} µs" for k, v in got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
