"""The cyclic garbage collector at the ticker's pace (issue 11: no event-loop stall over 5 ms).

CPython starts a collection whenever allocations outnumber deallocations by a threshold, at
any point of the quote path, and a generation-1 pass walks every young object: open quotes and
their reservations live a few seconds, long enough to be walked again and again. Measured at
2,000 answers/s: generation-1 passes of 4–5 ms every couple of seconds and full passes of
~30 ms. The bot's own objects rarely form cycles (refcounting frees them), so the collector
only has to catch the odd cycle, and it can do that on a schedule:

- at start, everything built so far is frozen (``gc.freeze``: never walked again) and
  automatic collection is switched off;
- every tick (20 ms) a generation-1 pass walks only what was allocated since the last one
  (tens of objects at 2,000 answers/s: a fraction of a millisecond);
- every :data:`FULL_EVERY_S` a full pass walks what survived (the open book), a few
  milliseconds once a minute instead of at random.

``stop`` gives automatic collection back (the process may go on, as tests and the demo do).
"""

from __future__ import annotations

import gc
import time

FULL_EVERY_S = 60.0


class GcPacer:
    def __init__(self, full_every_s: float = FULL_EVERY_S) -> None:
        self.full_every_s = full_every_s
        self.passes = 0
        self.full_passes = 0
        self._last_full = 0.0
        self._was_enabled = True
        self._running = False

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.collect()
        gc.freeze()
        gc.disable()
        self._last_full = time.monotonic()
        self._running = True

    def tick(self) -> None:
        if not self._running:
            return
        now = time.monotonic()
        if now - self._last_full >= self.full_every_s:
            gc.collect(2)
            self._last_full = now
            self.full_passes += 1
        else:
            gc.collect(1)
        self.passes += 1

    def stop(self) -> None:
        if self._running and self._was_enabled:
            gc.enable()
        self._running = False
