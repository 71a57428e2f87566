"""Running a sweep: plan the candidates, segments and tasks, run them, collect the results.

The parts live beside this module: :mod:`backtest.sweep.spec` (the sweep file and its
candidates), :mod:`backtest.sweep.segments` (walk-forward windows), :mod:`backtest.sweep.tasks`
(a replay per task, the executors), :mod:`backtest.sweep.tpe` (the Optuna search),
:mod:`backtest.sweep.result` (ranking, walk-forward figures), :mod:`backtest.sweep.outputs` and
:mod:`backtest.sweep.html` (the files).

``solver backtest sweep`` (``docs/backtest.md``, "Sweeps") reads a sweep file::

    grid:                                   # every combination (cartesian product)
      pairs.0.params.spread_bps: [10, 20, 30]
      backtest.fill.model: [competitor, always]
    random:                                 # samples drawn from a space (numpy, seeded);
                                            # or tpe: {trials: 40, seed: 1, space: {...}}
      samples: 20
      seed: 1
      space:
        risk.max_open_exposure_usd: {low: 1000, high: 100000, log: true}
        pairs.1.params.spread_bps: {low: 5, high: 50}
        pairs.1.strategy: {choices: [spread, amm]}
    objective: {kind: pnl_minus_inventory_risk, risk_weight: 0.1}
    walk_forward: {splits: 3}               # or {train_fraction: 0.7}; optional

Keys are dotted paths of the bot YAML (:func:`solver.config.apply_overrides`: list indexes are
digits, keys holding dots go in brackets); keys starting with ``backtest.`` set the backtest
settings (:mod:`backtest.settings`) instead. With both ``grid`` and ``random`` every random
sample is combined with every grid point.

Every (candidate, time segment) pair is one task, :func:`backtest.sweep.tasks.run_task`: a
module-level function that opens the stream from disk itself (the stream is never pickled),
replays it with the candidate's configuration (:class:`backtest.engine.Replay`) and returns a
few figures. The same function runs in a local process pool (``spawn``) or on a dask.distributed
cluster. Results are collected by (candidate, segment) and ranked afterwards, so the leaderboard
does not depend on the executor, the number of workers or the order in which tasks finish.

Walk-forward: the stream's time span is cut into consecutive windows. Each split tunes on a
train part (the best candidate by the objective there) and scores that candidate on the test
part that follows; in-sample against out-of-sample figures show how much of the in-sample
ranking was luck. With walk-forward the winner is the candidate with the best mean
out-of-sample objective; without, the best on the full stream. Each segment is replayed on
its own, from the configured starting balances, with the latest price of every token before
the segment carried into it.

A grid or random sweep knows every candidate up front and submits every task at once (longest
segments first, so the last tasks are short). A TPE search (:mod:`backtest.sweep.tpe`) asks
Optuna for a batch of candidates at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from backtest.stream.read import read_stream
from backtest.sweep.result import SweepResult
from backtest.sweep.segments import FULL, Segment, Split, stream_span, walk_forward_splits
from backtest.sweep.spec import Candidate, ExecutorName, SweepError, SweepSpec, build_candidates
from backtest.sweep.tasks import SweepTask, TaskResult, make_runner


def plan_segments(
    spec: SweepSpec, stream: str | Path
) -> tuple[list[Segment], list[Split], tuple[int, int] | None]:
    """The full stream, then every train and test window of the walk-forward (once each)."""
    span = stream_span(stream)
    segments = [FULL]
    splits: list[Split] = []
    if spec.walk_forward is not None and span is not None:
        splits = walk_forward_splits(spec.walk_forward, *span)
        for split in splits:
            for segment in (split.train, split.test):
                if segment not in segments:
                    segments.append(segment)
    return segments, splits, span


def tasks_for(
    candidates: list[Candidate], segments: list[Segment], stream: str | Path
) -> list[SweepTask]:
    """A task per valid candidate and segment, longest segments first (the last are short)."""

    def length(segment: Segment) -> int:
        if segment.start_us is None or segment.end_us is None:
            return 2**62
        return segment.end_us - segment.start_us

    order = sorted(range(len(segments)), key=lambda s: (-length(segments[s]), s))
    return [
        SweepTask(
            c.index, s, str(stream), segments[s].start_us, segments[s].end_us, c.config, c.settings
        )
        for s in order
        for c in candidates
        if c.error is None
    ]


def plan(
    spec: SweepSpec,
    stream: str | Path,
    base_config: Mapping[str, Any],
    base_settings: Mapping[str, Any],
) -> tuple[list[Candidate], list[Segment], list[Split], list[SweepTask], tuple[int, int] | None]:
    """Candidates, segments, splits and the tasks to run, for a grid or random sweep."""
    candidates = build_candidates(spec, base_config, base_settings)
    if not any(c.error is None for c in candidates):
        first = candidates[0].error if candidates else "no candidates"
        raise SweepError(f"no valid candidate: {first}")
    segments, splits, span = plan_segments(spec, stream)
    return candidates, segments, splits, tasks_for(candidates, segments, stream), span


def run_sweep(
    spec: SweepSpec,
    stream: str | Path,
    base_config: Mapping[str, Any],
    base_settings: Mapping[str, Any] | None = None,
    *,
    executor: ExecutorName = "local",
    workers: int = 1,
    scheduler: str | None = None,
    dask_processes: bool = True,
    on_start: Callable[[int], None] | None = None,
    on_result: Callable[[TaskResult], None] | None = None,
) -> SweepResult:
    """Plan and run a sweep; ``on_start(total tasks)`` and ``on_result`` report progress (a
    TPE search reports its total up front: trials × segments)."""
    if workers < 1:
        raise SweepError("workers must be at least 1")
    with read_stream(stream):
        pass  # an unreadable stream or a bad header fails here, before any worker starts
    base_settings = base_settings or {}
    started = time.perf_counter()
    if spec.tpe is not None:
        segments, splits, span = plan_segments(spec, stream)
        result = SweepResult(spec, str(stream), [], segments, splits, {}, span)
        tasks_total = spec.tpe.trials * len(segments)
    else:
        candidates, segments, splits, tasks, span = plan(spec, stream, base_config, base_settings)
        result = SweepResult(spec, str(stream), candidates, segments, splits, {}, span)
        tasks_total = len(tasks)

    def collect(task_result: TaskResult) -> None:
        result.results[(task_result.candidate, task_result.segment)] = task_result
        if on_result is not None:
            on_result(task_result)

    if on_start is not None:
        on_start(tasks_total)
    with make_runner(executor, workers, scheduler=scheduler, processes=dask_processes) as runner:
        if spec.tpe is not None:
            from backtest.sweep.tpe import run_tpe

            run_tpe(result, base_config, base_settings, runner, collect)
            tasks = tasks_for(result.candidates, segments, stream)
        else:
            runner.run(tasks, collect)
    missing = len(tasks) - len(result.results)
    if missing:
        raise SweepError(f"{missing} tasks returned no result")
    result.elapsed_s = time.perf_counter() - started
    result.executor, result.workers = executor, workers
    return result
