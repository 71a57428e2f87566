"""The way from the recorder's bus callbacks to its file (:mod:`backtest.stream.record`).

The bus loop never waits on the disk: callbacks only ``put_nowait`` into a bounded
:class:`asyncio.Queue`; a writer task drains it in batches and writes each batch in a worker
thread (:func:`asyncio.to_thread`). When the queue is full an event is dropped and counted
(``dropped``), never blocked on. Timestamps are taken when an event is queued; the writer keeps
them non-decreasing (a wall-clock step backwards is clamped and counted in ``clamped``).

Its own module (issue 29's split by role, STYLE.md 15): what the recorder hears (callbacks,
probes, prices) is one concern, how it reaches the disk without blocking the bus loop another.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import datetime
from typing import Final

from backtest.stream.events import StreamEvent
from backtest.stream.record_stats import RecordStats
from backtest.stream.write import StreamWriter

DEFAULT_QUEUE_SIZE: Final = 100_000
WRITE_BATCH: Final = 4096
_END: Final = object()


class RecordQueue:
    """The bounded queue of events to write and the writer task's side of it."""

    def __init__(self, size: int, stats: RecordStats, flush_every_s: float) -> None:
        self.stats = stats
        self.flush_every_s = flush_every_s
        self._queue: asyncio.Queue[object] = asyncio.Queue(size)
        self._last_ts: datetime | None = None
        self._last_flush = 0.0
        self._ended = False  # the end marker is queued: nothing more is recorded or counted

    def put(self, event: StreamEvent) -> bool:
        """Queue ``event`` for the file; False (and not counted as recorded) when the queue
        is full (counted as dropped) or the recording has ended: an answer to a probe that
        comes back after the end marker would be counted and never written."""
        if self._ended:
            return False
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.stats.dropped += 1
            return False
        return True

    def _write_batch(self, writer: StreamWriter, batch: list[StreamEvent]) -> None:
        """Runs in a worker thread: the only code touching ``writer`` while recording."""
        last = self._last_ts
        for event in batch:
            if last is not None and event.ts < last:
                event = replace(event, ts=last)  # noqa: PLW2901 - the clamped copy
                self.stats.clamped += 1
            writer.write(event)
            last = event.ts
        self._last_ts = last
        now = time.monotonic()
        if now - self._last_flush >= self.flush_every_s:
            writer.flush()
            self._last_flush = now
        self.stats.written = writer.events_written
        self.stats.bytes = writer.bytes_written
        self.stats.files = len(writer.paths)

    async def drain(self, writer: StreamWriter) -> None:
        queue = self._queue
        while True:
            item = await queue.get()
            batch: list[StreamEvent] = []
            end = False
            while True:
                if item is _END:
                    end = True
                else:
                    batch.append(item)  # type: ignore[arg-type]
                if end or len(batch) >= WRITE_BATCH or queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                await asyncio.to_thread(self._write_batch, writer, batch)
            if end:
                return

    async def end(self, drain: asyncio.Task[None]) -> None:
        """Nothing more is queued or counted; the end marker follows everything queued before
        it, unless the writer task ``drain`` has already stopped."""
        self._ended = True
        if not drain.done():
            await self._queue.put(_END)  # everything queued before it is written
