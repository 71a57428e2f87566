"""An Optuna TPE search: candidates proposed by a Tree-structured Parzen Estimator from the
results of the candidates before them, instead of a fixed grid or random samples.

The space is ``tpe.space`` (ranges and choices, as ``random.space``) and every grid key as a
choice among its values. Trials are asked ``tpe.batch`` at a time; each batch's tasks (every
segment of every trial) run on the sweep's executor; the trials are told their value in trial
order once the batch is done. So the search depends on the seed and the batch only — not on the
executor, the number of workers or the order in which tasks finish — and the same file gives the
same candidates on any machine.

What TPE maximises is chosen so the search never sees the data the winner is chosen on: with
walk-forward, the mean **train** objective over the splits (the winner is then chosen on the
test windows, :meth:`~backtest.sweep.result.SweepResult.score`); without, the full-stream
objective. A trial whose configuration is invalid or whose replay failed is told as failed.

Floats keep ``digits`` significant digits (as random samples do); TPE is told the value it
proposed, the replay uses the rounded one (a difference below the digits kept).
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from backtest.sweep.result import SweepResult
from backtest.sweep.spec import RandomKey, SweepError, build_candidate
from backtest.sweep.tasks import Runner, TaskResult


def tpe_space(result: SweepResult) -> dict[str, RandomKey]:
    spec = result.spec
    assert spec.tpe is not None
    space = {key: RandomKey(choices=values) for key, values in spec.grid.items()}
    space.update(spec.tpe.space)
    return space


def suggest(trial: Any, key: str, dim: RandomKey) -> Any:
    """One value of ``key`` from the trial (choices by index: values may be any YAML)."""
    if dim.choices is not None:
        index = trial.suggest_categorical(key, list(range(len(dim.choices))))
        return dim.choices[index]
    assert dim.low is not None and dim.high is not None
    if dim.integer:
        return int(trial.suggest_int(key, math.ceil(dim.low), math.floor(dim.high), log=dim.log))
    value = float(trial.suggest_float(key, dim.low, dim.high, log=dim.log))
    return min(max(float(f"{value:.{dim.digits}g}"), dim.low), dim.high)


def _optuna() -> Any:
    try:
        optuna = importlib.import_module("optuna")
    except ImportError:
        raise SweepError("the TPE search needs optuna: pip install 'optuna>=4,<6'") from None
    optuna.logging.set_verbosity(logging.WARNING)
    return optuna


def trial_value(result: SweepResult, candidate: int) -> float | None:
    """What the search maximises: the mean train objective with walk-forward, else the
    full-stream objective (None: failed)."""
    if result.splits:
        return result.mean_over(candidate, test=False)
    return result.objective(candidate)


def run_tpe(
    result: SweepResult,
    base_config: Mapping[str, Any],
    base_settings: Mapping[str, Any],
    runner: Runner,
    collect: Callable[[TaskResult], None],
) -> None:
    """Run the search, adding each trial to ``result.candidates`` (trial n is candidate n)."""
    from backtest.sweep.run import tasks_for

    spec = result.spec.tpe
    assert spec is not None
    optuna = _optuna()
    sampler = optuna.samplers.TPESampler(seed=spec.seed, n_startup_trials=spec.startup_trials)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = tpe_space(result)
    while len(result.candidates) < spec.trials:
        trials = [study.ask() for _ in range(min(spec.batch, spec.trials - len(result.candidates)))]
        batch = []
        for trial in trials:
            overrides = {key: suggest(trial, key, dim) for key, dim in space.items()}
            candidate = build_candidate(
                len(result.candidates), overrides, base_config, base_settings
            )
            result.candidates.append(candidate)
            batch.append(candidate)
        runner.run(tasks_for(batch, result.segments, result.stream), collect)
        for trial, candidate in zip(trials, batch, strict=True):
            value = None if result.error(candidate) else trial_value(result, candidate.index)
            if value is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, value)
    if not any(c.error is None for c in result.candidates):
        first = result.candidates[0].error if result.candidates else "no candidates"
        raise SweepError(f"no valid candidate: {first}")
