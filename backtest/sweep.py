"""Parameter sweeps: many configurations of one stream, in parallel, ranked by an objective.

This module is the public face of the sweep; the parts live beside it:
:mod:`backtest.sweep_spec` (the sweep file and its candidates), :mod:`backtest.sweep_segments`
(walk-forward windows), :mod:`backtest.sweep_tasks` (a replay per task, the executors),
:mod:`backtest.sweep_run` (planning and running), :mod:`backtest.sweep_tpe` (the Optuna search),
:mod:`backtest.sweep_result` (ranking, walk-forward figures), :mod:`backtest.sweep_outputs` and
:mod:`backtest.sweep_html` (the files).

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

Every (candidate, time segment) pair is one task, :func:`run_task`: a module-level function that
opens the stream from disk itself (the stream is never pickled), replays it with the
candidate's configuration (:class:`backtest.engine.Replay`) and returns a few figures. The same
function runs in a local process pool (``spawn``) or on a dask.distributed cluster. Results are
collected by (candidate, segment) and ranked afterwards, so the leaderboard does not depend on
the executor, the number of workers or the order in which tasks finish.

Walk-forward: the stream's time span is cut into consecutive windows. Each split tunes on a
train part (the best candidate by the objective there) and scores that candidate on the test
part that follows; in-sample against out-of-sample figures show how much of the in-sample
ranking was luck. With walk-forward the winner is the candidate with the best mean
out-of-sample objective; without, the best on the full stream. Each segment is replayed on
its own, from the configured starting balances, with the latest price of every token before
the segment carried into it.
"""

from __future__ import annotations

from backtest.sweep_html import heatmap_keys as heatmap_keys_for
from backtest.sweep_html import render_sweep_html
from backtest.sweep_outputs import leaderboard_csv, summary_json, write_outputs
from backtest.sweep_result import SplitResult, SweepResult, spearman
from backtest.sweep_run import plan, plan_segments, run_sweep, tasks_for
from backtest.sweep_segments import FULL, Segment, Split, stream_span, walk_forward_splits, window
from backtest.sweep_spec import (
    BACKTEST_PREFIX,
    MAX_CANDIDATES,
    Candidate,
    ObjectiveSpec,
    RandomKey,
    RandomSpec,
    SweepError,
    SweepSpec,
    TpeSpec,
    WalkForwardSpec,
    build_candidate,
    build_candidates,
    expand,
    load_sweep,
    split_overrides,
    validate_sweep,
)
from backtest.sweep_tasks import (
    METRICS,
    DaskRunner,
    LocalRunner,
    SweepTask,
    TaskResult,
    make_runner,
    run_dask,
    run_local,
    run_task,
)

__all__ = [
    "BACKTEST_PREFIX",
    "FULL",
    "MAX_CANDIDATES",
    "METRICS",
    "Candidate",
    "DaskRunner",
    "LocalRunner",
    "ObjectiveSpec",
    "RandomKey",
    "RandomSpec",
    "Segment",
    "Split",
    "SplitResult",
    "SweepError",
    "SweepResult",
    "SweepSpec",
    "SweepTask",
    "TaskResult",
    "TpeSpec",
    "WalkForwardSpec",
    "build_candidate",
    "build_candidates",
    "expand",
    "heatmap_keys_for",
    "leaderboard_csv",
    "load_sweep",
    "make_runner",
    "plan",
    "plan_segments",
    "render_sweep_html",
    "run_dask",
    "run_local",
    "run_sweep",
    "run_task",
    "spearman",
    "split_overrides",
    "stream_span",
    "summary_json",
    "tasks_for",
    "validate_sweep",
    "walk_forward_splits",
    "window",
    "write_outputs",
]
