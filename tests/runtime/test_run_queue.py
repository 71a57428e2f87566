"""The thread's wait for a core (``RunQueueWait``): a core taken by another process shows as
wait; a thread that sleeps or has its core to itself does not wait (issue 29: a late tick is
told as the machine's or the bot's)."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from solver.runtime.run_queue import SCHEDSTAT, RunQueueWait

needs_schedstat = pytest.mark.skipif(
    not Path(SCHEDSTAT).exists() or not hasattr(os, "sched_setaffinity"),
    reason="no /proc/thread-self/schedstat or sched_setaffinity (not Linux)",
)


def _spin(until: float) -> None:
    while time.monotonic() < until:
        pass


def _hog(started: Any, until: float) -> None:
    started.set()
    _spin(until)


@needs_schedstat
def test_a_core_shared_with_a_busy_process_shows_as_wait() -> None:
    """This thread and a busy process pinned to one core: the thread spins 0.4 s of wall time
    and waits for the core a good part of it (the scheduler shares it)."""
    cpu = min(os.sched_getaffinity(0))
    before_affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    hog = context.Process(target=_hog, args=(started, time.monotonic() + 30.0), daemon=True)
    hog.start()
    try:
        assert hog.pid is not None
        os.sched_setaffinity(hog.pid, {cpu})
        assert started.wait(20), "the busy process did not start"
        wait = RunQueueWait()
        start = wait.waited_s()
        _spin(time.monotonic() + 0.4)
        waited = wait.waited_s() - start
        wait.close()
    finally:
        hog.kill()
        hog.join(5)
        os.sched_setaffinity(0, before_affinity)
    assert waited >= 0.08, f"waited {waited:.3f} s for a core shared with a spinning process"


@needs_schedstat
def test_a_sleeping_thread_does_not_wait_for_a_core() -> None:
    wait = RunQueueWait()
    start = wait.waited_s()
    time.sleep(0.2)  # off the CPU, not runnable: no wait for a core
    waited = wait.waited_s() - start
    wait.close()
    assert 0.0 <= waited < 0.05, waited


def test_without_the_file_the_wait_reads_as_nothing(tmp_path: Path) -> None:
    """Elsewhere than Linux the lateness counts as held, all of it."""
    wait = RunQueueWait(str(tmp_path / "missing"))
    assert wait.waited_s() == 0.0
    wait.close()
    garbage = tmp_path / "garbage"
    garbage.write_text("not numbers\n")
    wait = RunQueueWait(str(garbage))
    assert wait.waited_s() == 0.0
    wait.close()
