"""How long a thread waited for a core: the machine's part of a late wake-up.

Linux keeps, per thread, the time it was runnable but not running (``/proc/thread-self/
schedstat``: on-CPU ns, run-queue wait ns, timeslices). The ticker reads it around each sleep
so that ``solver_loop_lag_seconds`` (how late a tick woke) comes with what is left of the
lateness once the thread's wait for a core is taken out (``solver_loop_lag_held_seconds``):
a stall of the bot's own (work, or a blocking call on the loop) stays in it, a core taken by
another process on a shared machine does not (issue 29 asked for no tick late by more than
5 ms *inside the bot*). The wait is counted over the whole sleep, not only past its due time,
so what remains is the bot's hold at least, never more than the lateness.

Elsewhere (no procfs, another kernel) the wait reads as 0: every lateness counts as held.
"""

from __future__ import annotations

import os

SCHEDSTAT = "/proc/thread-self/schedstat"


class RunQueueWait:
    """The calling thread's run-queue wait in seconds, read as often as asked (~1.4 µs a read:
    one ``pread`` on a file kept open). Made and read on the same thread: the file names the
    thread that opened it."""

    def __init__(self, path: str = SCHEDSTAT) -> None:
        self._fd: int | None
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def waited_s(self) -> float:
        """Seconds this thread has waited for a core since it started (0.0 when unknown)."""
        fd = self._fd
        if fd is None:
            return 0.0
        try:
            fields = os.pread(fd, 128, 0).split()
            return int(fields[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
