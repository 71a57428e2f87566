"""Sweep tasks and the executors that run them.

A task is one replay: a candidate's configuration on one time segment, :func:`run_task`, a
module-level function that opens the stream from disk itself (the stream is never pickled) and
returns a few figures. The same function runs in a local process pool (``spawn``) or on a
dask.distributed cluster; a :class:`Runner` keeps its pool or cluster for several batches of
tasks (a TPE search submits one batch per round of trials).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
import multiprocessing
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from backtest.engine import Replay
from backtest.replay_result import ReplayResult
from backtest.report.tables import usd
from backtest.settings import validate_settings
from backtest.stream.read import read_stream
from backtest.sweep.segments import Segment, window_batches
from backtest.sweep.spec import SweepError
from solver.config import validate_bot_config
from solver.errors import SolverError

METRICS: tuple[str, ...] = (
    "pnl_usd",
    "hold_pnl_usd",
    "pnl_over_hold_usd",
    "inventory_risk_usd",
    "max_drawdown_usd",
    "realized_pnl_usd",
    "volume_usd",
    "fees_paid_usd",
    "requests",
    "quoted",
    "won",
    "win_rate",
)
"""The figures of each task, taken from :func:`backtest.report.outputs.summary` (same rounding)."""
BLOCKS = 24
"""Each task's PnL over hold is also cut into this many equal time blocks of its segment: the
units the verdict's bootstrap resamples (:mod:`backtest.sweep.verdict`)."""


@dataclass(frozen=True)
class SweepTask:
    """One replay: a candidate's configuration on one segment of the stream (small: the
    stream itself is read from ``stream`` by whoever runs the task)."""

    candidate: int
    segment: int
    stream: str
    start_us: int | None
    end_us: int | None
    config: dict[str, Any]
    settings: dict[str, Any]


@dataclass(frozen=True)
class TaskResult:
    candidate: int
    segment: int
    metrics: dict[str, float]
    halted: str | None = None
    error: str | None = None
    elapsed_s: float = 0.0
    blocks: tuple[float, ...] = ()
    """PnL over hold gained in each of :data:`BLOCKS` equal time blocks of the segment (USD)."""


def run_task(task: SweepTask) -> TaskResult:
    """Replay one task (in a worker process, a dask worker, or here). Never raises for a
    problem of the task itself: that is returned as ``error``."""
    from backtest.report.outputs import summary

    started = time.perf_counter()
    try:
        config = validate_bot_config(task.config, source=f"candidate {task.candidate}")
        settings = validate_settings(task.settings, f"candidate {task.candidate} (backtest)")
        replay = Replay(config, settings)
        with read_stream(task.stream) as reader:
            segment = Segment(task.start_us, task.end_us)
            result = replay.run_records(window_batches(reader.batches(), segment), reader.header)
        figures = summary(result, fill_model=settings.fill.model, seed=settings.seed)
        blocks = pnl_over_hold_blocks(result, task.start_us, task.end_us)
    except (SolverError, ValueError) as exc:
        return TaskResult(
            task.candidate,
            task.segment,
            {},
            error=f"{type(exc).__name__}: {str(exc)[:500]}",
            elapsed_s=time.perf_counter() - started,
        )
    halted = figures["halted"]
    return TaskResult(
        task.candidate,
        task.segment,
        {name: figures[name] for name in METRICS},
        halted=None if halted is None else str(halted["reason"]),
        elapsed_s=time.perf_counter() - started,
        blocks=blocks,
    )


def pnl_over_hold_blocks(
    result: ReplayResult, start_us: int | None, end_us: int | None, blocks: int = BLOCKS
) -> tuple[float, ...]:
    """The PnL over hold gained in each of ``blocks`` equal time blocks of the segment (the
    stream's first to last event when a bound is open), read from the desk's series at its
    ticks: the same edges for every candidate of a segment, so blocks line up across them."""
    m = result.measures
    points = m.pnl_series.series()
    if not points or m.first_ts is None or m.last_ts is None:
        return (0.0,) * blocks
    t0 = start_us / 1e6 if start_us is not None else m.first_ts.timestamp()
    t1 = end_us / 1e6 if end_us is not None else m.last_ts.timestamp()
    edges = [t0 + (t1 - t0) * (i + 1) / blocks for i in range(blocks)]
    edges[-1] = max(t1, points[-1][0])  # the last block reaches the final tick
    out, before, k = [], 0.0, 0
    for edge in edges:
        while k < len(points) and points[k][0] <= edge:
            k += 1
        value = points[k - 1][1][0] - points[k - 1][1][3] if k else 0.0
        out.append(usd(value - before))
        before = value
    return tuple(out)


# ------------------------------------------------------------------------------ executors


OnResult = Callable[[TaskResult], None]


class Runner(Protocol):
    """Runs batches of tasks, reporting each result as it comes; keeps its workers between
    batches until :meth:`close`."""

    def run(self, tasks: Sequence[SweepTask], on_result: OnResult) -> None: ...

    def close(self) -> None: ...


class LocalRunner:
    """``workers`` processes (``spawn``: nothing inherited but the task), started at the first
    batch and kept for the next ones."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def run(self, tasks: Sequence[SweepTask], on_result: OnResult) -> None:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers, mp_context=context
            )
        try:
            futures = [self._pool.submit(run_task, task) for task in tasks]
            for future in concurrent.futures.as_completed(futures):
                on_result(future.result())
        except concurrent.futures.process.BrokenProcessPool as exc:
            raise SweepError(f"a worker process died: {exc}") from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class DaskRunner:
    """The same tasks on a dask.distributed cluster: the one at ``scheduler`` (its workers
    must import this project and read the stream at the same path), else a LocalCluster of
    ``workers`` single-threaded worker processes (threads with ``processes=False``)."""

    def __init__(self, workers: int, scheduler: str | None = None, processes: bool = True) -> None:
        try:
            self._distributed: Any = importlib.import_module("dask.distributed")
        except ImportError:
            raise SweepError(
                "the dask executor needs dask.distributed: pip install 'dask[distributed]'"
            ) from None
        self._cluster: Any = None
        if scheduler is None:
            self._cluster = self._distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=processes,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self._client = self._distributed.Client(self._cluster)
        else:
            self._client = self._distributed.Client(scheduler)

    def run(self, tasks: Sequence[SweepTask], on_result: OnResult) -> None:
        futures = self._client.map(run_task, list(tasks), pure=False)
        for _future, result in self._distributed.as_completed(futures, with_results=True):
            on_result(result)

    def close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


@contextmanager
def make_runner(
    executor: str, workers: int, *, scheduler: str | None = None, processes: bool = True
) -> Iterator[Runner]:
    runner: Runner = (
        DaskRunner(workers, scheduler, processes) if executor == "dask" else LocalRunner(workers)
    )
    try:
        yield runner
    finally:
        runner.close()


def run_local(tasks: Sequence[SweepTask], workers: int, on_result: OnResult) -> None:
    with make_runner("local", workers) as runner:
        runner.run(tasks, on_result)


def run_dask(
    tasks: Sequence[SweepTask],
    workers: int,
    on_result: OnResult,
    *,
    scheduler: str | None = None,
    processes: bool = True,
) -> None:
    with make_runner("dask", workers, scheduler=scheduler, processes=processes) as runner:
        runner.run(tasks, on_result)
