"""``solver backtest sweep``: many configurations of one stream, in parallel, ranked.

``solver backtest sweep STREAM --config BOT.yaml --grid SWEEP.yaml --out DIR`` expands the sweep
file (:mod:`backtest.sweep.run`: a grid and/or random samples over dotted config keys, or an Optuna
TPE search with ``--search tpe``; an objective; optional walk-forward splits, whose test
windows choose the winner), replays every candidate on every time segment in ``--workers``
processes (``--executor local``) or on a dask.distributed cluster (``--executor dask``, a local
one unless ``--scheduler ADDRESS``), and writes into ``--out``: ``leaderboard.csv`` (best
first), ``sweep.json`` (the winner, walk-forward in-sample against out-of-sample),
``best_config.yaml`` and ``best_backtest.yaml`` (the winner as files ``solver backtest run``
and ``solver run`` take), ``sweep.html`` (the candidates compared: a table and a heatmap over
two swept keys, ``--heatmap``) and ``timing.json``. A progress bar goes to stderr on a terminal; one
JSON line with the winner and the verdict goes to stdout. When no candidate's score is above
zero (:mod:`backtest.sweep.verdict`) it says "no winner", writes no ``best_config.yaml`` (unless
``--write-best-anyway``) and exits 3.

Registered through :func:`solver.cli.backtest.streams.add_backtest_command`; heavy imports stay
inside
the handler so ``solver --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solver.cli import EXIT_OK, print_json, warn
from solver.cli.backtest.streams import Group, add_backtest_command
from solver.errors import ConfigError

if TYPE_CHECKING:
    from backtest.sweep.tasks import TaskResult


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def register_sweep(group: Group) -> None:
    parser = add_backtest_command(
        group,
        "sweep",
        help="replay many configurations of one stream in parallel and rank them",
        description=(
            "Expand a sweep file (grid and/or random samples over dotted keys of the bot YAML, "
            "or of the backtest settings with a 'backtest.' prefix; an objective; optional "
            "walk-forward splits), replay every candidate on the stream in parallel, and write "
            "leaderboard.csv, sweep.json, sweep.html, best_config.yaml, best_backtest.yaml and "
            "timing.json "
            "into --out, with a verdict (winner, inconclusive, no winner). Exits 3 when no "
            "candidate's score is above zero (with the default objective: none beats holding "
            "the starting inventory), and then writes no best_config.yaml unless "
            "--write-best-anyway. The format is in docs/backtest.md (Sweeps)."
        ),
    )
    parser.add_argument(
        "stream", metavar="STREAM", help="stream file (JSON Lines, optionally gzip)"
    )
    parser.add_argument("--config", required=True, help="the base bot YAML")
    parser.add_argument("--grid", required=True, metavar="SWEEP.yaml", help="the sweep file")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--backtest-config", metavar="FILE", help="the base backtest settings (backtest.yaml)"
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="parallel replays (default: the number of CPUs)",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="local: a process pool on this machine (default); dask: a dask.distributed "
        "cluster (a local one of --workers processes, or --scheduler)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --executor dask: connect to this scheduler (tcp://host:8786); its workers "
        "must have this project installed and read STREAM at the same path",
    )
    parser.add_argument(
        "--search",
        choices=("grid", "random", "tpe"),
        help="grid: only the file's grid; random: the grid with the random samples; tpe: an "
        "Optuna TPE search over the same space (the file's tpe block, or its random block: "
        "samples as trials, its seed). Default: as the file says",
    )
    parser.add_argument(
        "--trials", type=_positive_int, metavar="N", help="with --search tpe: how many trials"
    )
    parser.add_argument(
        "--heatmap",
        metavar="KEY,KEY",
        help="the two swept keys of sweep.html's heatmap (default: the first two that vary)",
    )
    parser.add_argument(
        "--write-best-anyway",
        action="store_true",
        help="write best_config.yaml even when the verdict is 'no winner' (no candidate beat "
        "zero, which with the default objective is holding the starting inventory)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=cmd_sweep)


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[tuple[Callable[[int], None], Callable[[Any], None]]]:
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield (lambda total: None), (lambda result: None)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[line]}"),
        console=console,
    ) as bar:
        task = bar.add_task("sweep", total=None, line="")
        failed = 0

        def start(total: int) -> None:
            bar.update(task, total=total)

        def done(result: TaskResult) -> None:
            nonlocal failed
            failed += result.error is not None
            bar.update(task, advance=1, line=f"failed {failed}" if failed else "")

        yield start, done


def cmd_sweep(args: argparse.Namespace) -> int:
    from backtest.sweep.outputs import write_outputs
    from backtest.sweep.run import run_sweep
    from backtest.sweep.spec import load_sweep

    spec = load_sweep(args.grid).searched(args.search, args.trials)
    heatmap = args.heatmap.split(",") if args.heatmap else None
    if heatmap is not None and (len(heatmap) != 2 or not set(heatmap) <= set(spec.keys)):
        raise ConfigError(f"--heatmap needs two swept keys, of: {', '.join(spec.keys)}")
    base_config = _read_mapping(args.config)
    base_settings = _read_mapping(args.backtest_config) if args.backtest_config else {}
    if args.scheduler and args.executor != "dask":
        raise ConfigError("--scheduler needs --executor dask")
    workers = args.workers or os.cpu_count() or 1
    started = time.perf_counter()
    with _progress_bar(not args.no_progress) as (on_start, on_result):
        result = run_sweep(
            spec,
            args.stream,
            base_config,
            base_settings,
            executor=args.executor,
            workers=workers,
            scheduler=args.scheduler,
            on_start=on_start,
            on_result=on_result,
        )
    from backtest.sweep.verdict import EXIT_NO_WINNER, judge

    verdict = judge(result)
    out = Path(args.out)
    paths = write_outputs(
        result,
        out,
        config_source=args.config,
        settings_source=args.backtest_config,
        heatmap=heatmap,
        verdict=verdict,
        write_best_anyway=args.write_best_anyway,
    )
    best = result.best()
    failed = [c.index for c in result.candidates if result.error(c) is not None]
    if failed:
        warn(f"{len(failed)} of {len(result.candidates)} candidates failed or were invalid")
    # The first row is the leader; it is the best only when the verdict names a winner.
    leader = (
        None
        if best is None
        else {
            "candidate": best.index,
            "chosen_on": result.chosen_on,
            "objective": result.objective(best.index),
            "out_of_sample_mean": result.mean_over(best.index, test=True),
            "overrides": best.overrides,
        }
    )
    print_json(
        {
            "out": str(out),
            "candidates": len(result.candidates),
            "tasks": len(result.results),
            "failed": len(failed),
            "best": None if verdict.verdict == "no_winner" else leader,
            "leader": leader,
            "verdict": verdict.verdict,
            "reason": verdict.reason,
            "interval": verdict.interval,
            "elapsed_s": round(time.perf_counter() - started, 3),
            "files": {name: str(path) for name, path in paths.items()},
        }
    )
    for message in verdict.warnings:
        warn(message)
    if verdict.verdict == "no_winner":
        written = (
            "best_config.yaml written anyway (--write-best-anyway)"
            if args.write_best_anyway
            else "no best_config.yaml written"
        )
        warn(f"no winner: {verdict.reason}; {written}")
        return EXIT_NO_WINNER
    if verdict.verdict == "inconclusive":
        warn(f"inconclusive: {verdict.reason}")
    return EXIT_OK


def _read_mapping(path: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping (the base bot config, the backtest settings)."""
    from solver.config import parse_yaml

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from None
    data = parse_yaml(text, str(file))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: (top level): must be a mapping of keys")
    return data
