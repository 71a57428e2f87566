"""``solver backtest …`` and ``solver record``: quote streams for backtests (``docs/backtest.md``).

``solver backtest`` is a group. :func:`backtest_group` creates it or finds it again, so any
module can add subcommands to it; here each subcommand is one function in
:data:`BACKTEST_COMMANDS` (``(group) -> None``) calling :func:`add_backtest_command`, so a new
one (``run``, ``calibrate``, ``sweep``) is one function and one line there. ``solver record``
is top level: it talks to a live bus, it does not backtest anything.

Everything heavy (numpy, the sandbox price process, the bus clients) is imported inside the
handlers, so ``solver --help`` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias

from solver.cli import CliParser, print_json
from solver.errors import ConfigError

Group: TypeAlias = "argparse._SubParsersAction[Any]"


def add_backtest_command(
    group: Group, name: str, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """Add ``solver backtest <name>`` to ``group``; the caller adds arguments and a handler
    (``parser.set_defaults(handler=fn)``, ``fn(args) -> exit code``)."""
    parser: argparse.ArgumentParser = group.add_parser(
        name, help=help, description=description or help
    )
    return parser


def backtest_group(subparsers: Group) -> Group:
    """The ``backtest`` group's subparsers: created on first use, found again after that (so
    other modules of :data:`solver.cli.COMMAND_MODULES` can add subcommands in any order)."""
    backtest = subparsers.choices.get("backtest")
    if backtest is None:
        backtest = subparsers.add_parser(
            "backtest",
            help="backtesting: synthetic and recorded quote streams, replays",
            description=(
                "Tools for backtests on quote streams (JSON Lines, optionally gzip; the format "
                "is in docs/backtest.md). Record a live bus with 'solver record'."
            ),
        )
    for action in backtest._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: Group = action
            return found
    group: Group = backtest.add_subparsers(
        title="backtest commands", dest="backtest_command", metavar="COMMAND",
        parser_class=CliParser,
    )  # fmt: skip
    group.required = True
    return group


def register(subparsers: Group) -> None:
    group = backtest_group(subparsers)
    for add in BACKTEST_COMMANDS:
        add(group)
    _register_record(subparsers)


# ------------------------------------------------------------------------------ backtest synth


def _register_synth(group: Group) -> None:
    parser = add_backtest_command(
        group,
        "synth",
        help="write a realistic synthetic quote stream (deterministic for a seed)",
        description=(
            "Write a synthetic stream: Poisson arrivals with bursts, lognormal sizes in USD, "
            "GBM reference prices per token, a share of informed requests, competitor answers "
            "around the reference price. "
            "The same arguments give a byte-identical file. Prints a JSON summary."
        ),
    )
    parser.add_argument("--out", required=True, help="output file (.jsonl, or .jsonl.gz: gzip)")
    parser.add_argument(
        "--pairs",
        required=True,
        help="pairs as BASE/QUOTE[:WEIGHT], comma-separated, by symbol or asset id "
        "(e.g. wNEAR/USDC,ETH/USDC)",
    )
    parser.add_argument("--duration", type=float, required=True, metavar="S", help="seconds")
    parser.add_argument("--seed", type=int, required=True, help="random seed")
    parser.add_argument(
        "--rate", type=float, default=5.0, help="average requests per second (default 5)"
    )
    parser.add_argument(
        "--tokens-from",
        metavar="FILE",
        help="sandbox YAML whose tokens (symbol, decimals, usd, volatility_annual) to use "
        "(default: USDC, wNEAR, ETH as in config/sandbox.yaml)",
    )
    parser.add_argument("--burst-factor", type=float, default=6.0, help="burst rate / calm rate")
    parser.add_argument("--calm-mean", type=float, default=300.0, metavar="S")
    parser.add_argument("--burst-mean", type=float, default=20.0, metavar="S")
    parser.add_argument("--size-median-usd", type=float, default=50.0)
    parser.add_argument("--size-sigma", type=float, default=1.0, help="sigma of log size")
    parser.add_argument("--exact-out-share", type=float, default=0.3)
    parser.add_argument("--min-deadline-ms", type=int, default=60_000)
    parser.add_argument("--price-interval-ms", type=int, default=1000)
    parser.add_argument("--competitor-share", type=float, default=0.85)
    parser.add_argument("--competitor-edge-bps", type=float, default=8.0)
    parser.add_argument("--competitor-edge-sd-bps", type=float, default=6.0)
    parser.add_argument(
        "--competitor-edge-bps-per-decade",
        type=float,
        default=2.0,
        help="extra competitor edge per tenfold size above the median (default 2; 0: the "
        "competition does not depend on size)",
    )
    parser.add_argument(
        "--competitor-edge-dist",
        choices=("normal", "logistic"),
        default="normal",
        help="shape of the competitor's edge; logistic: wins follow the logistic fill model "
        "exactly (a stream to check calibration on)",
    )
    parser.add_argument(
        "--informed-share",
        type=float,
        default=0.1,
        help="share of requests whose direction follows the price --informed-horizon-s ahead "
        "(adverse selection; default 0.1)",
    )
    parser.add_argument(
        "--informed-horizon-s", type=float, default=60.0, metavar="S", help="default 60"
    )
    parser.add_argument("--start", help="ISO time of the first event (default 2025-01-01T00:00Z)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_synth)


def run_synth(args: argparse.Namespace) -> int:
    from backtest.synth.generate import (
        DEFAULT_START,
        DEFAULT_TOKENS,
        SynthParams,
        resolve_pairs,
        synthesize,
    )

    tokens = DEFAULT_TOKENS
    if args.tokens_from:
        from sandbox.config import load_sandbox_config

        tokens = load_sandbox_config(args.tokens_from).tokens
    start = DEFAULT_START
    if args.start:
        start = _parse_start(args.start)
    if args.price_interval_ms <= 0:
        raise ConfigError("--price-interval-ms must be positive")
    params = SynthParams(
        rate_per_s=args.rate,
        burst_factor=args.burst_factor,
        calm_mean_s=args.calm_mean,
        burst_mean_s=args.burst_mean,
        size_usd_median=args.size_median_usd,
        size_usd_sigma=args.size_sigma,
        exact_out_share=args.exact_out_share,
        min_deadline_ms=args.min_deadline_ms,
        price_interval_s=args.price_interval_ms / 1000,
        competitor_share=args.competitor_share,
        competitor_edge_bps=args.competitor_edge_bps,
        competitor_edge_sd_bps=args.competitor_edge_sd_bps,
        competitor_edge_bps_per_decade=args.competitor_edge_bps_per_decade,
        competitor_edge_dist=args.competitor_edge_dist,
        informed_share=args.informed_share,
        informed_horizon_s=args.informed_horizon_s,
    )
    try:
        pairs = resolve_pairs(args.pairs, tokens)
        params.check()
        if not args.duration > 0:
            raise ValueError("--duration must be positive")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    with _ProgressBar(args.duration, quiet=args.quiet) as advance:
        try:
            summary = synthesize(
                args.out,
                pairs=pairs,
                duration_s=args.duration,
                seed=args.seed,
                tokens=tokens,
                params=params,
                start=start,
                progress=advance,
            )
        except OSError as exc:
            raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
    print_json(summary.as_dict())
    return 0


def _parse_start(text: str) -> datetime:
    from backtest.stream.format import parse_ts

    try:
        return parse_ts(text)
    except ValueError as exc:
        raise ConfigError(f"--start: {exc}") from None


class _ProgressBar:
    """A rich progress bar over simulated seconds on stderr (nothing when quiet)."""

    def __init__(self, total: float, *, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[[float], None]:
        if self.quiet:
            return lambda done: None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("synth"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.total:.0f} s simulated"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("synth", total=self.total)
        return self.advance

    def advance(self, done: float) -> None:
        self._progress.update(self._task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _register_sweep(group: Group) -> None:
    from solver.cli.backtest.sweep import register_sweep  # imports this module: not at the top

    register_sweep(group)


def _register_compare(group: Group) -> None:
    from solver.cli.backtest.compare import register_compare  # imports this module

    register_compare(group)


BACKTEST_COMMANDS: tuple[Callable[[Group], None], ...] = (
    _register_synth,
    _register_sweep,
    _register_compare,
)
"""Functions that each add one ``solver backtest`` subcommand (via :func:`add_backtest_command`).
Add ``run``, ``calibrate``, ``sweep``, ``compare`` here."""


# ------------------------------------------------------------------------------ record


def _register_record(subparsers: Group) -> None:
    parser = subparsers.add_parser(
        "record",
        help="record a live (or sandbox) bus into a quote stream for backtests",
        description=(
            "Listen on the bus of a bot config (no signing key needed: it never answers) and "
            "write quote requests, statuses, reference prices and optionally sampled competitor "
            "offers as a quote stream (docs/backtest.md). Runs until Ctrl-C, SIGTERM or "
            "--duration, then flushes and closes the file and prints a JSON summary."
        ),
    )
    parser.add_argument("--config", required=True, help="bot YAML (bus, tokens, prices)")
    parser.add_argument("--out", required=True, help="output file (.jsonl, or .jsonl.gz: gzip)")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    parser.add_argument(
        "--price-interval-ms",
        type=int,
        default=1000,
        help="how often reference prices are polled and written (default 1000)",
    )
    parser.add_argument(
        "--competitors",
        action="store_true",
        help="also sample competitor offers through the bus's quote method (real requests!)",
    )
    parser.add_argument(
        "--competitor-share",
        type=float,
        default=0.1,
        help="share of requests probed with --competitors (default 0.1)",
    )
    parser.add_argument(
        "--rotate-mb",
        type=float,
        default=100.0,
        help="start PATH.1, PATH.2, ... past this size in MB on disk (0: never; default 100)",
    )
    parser.add_argument(
        "--progress-every", type=float, default=5.0, metavar="S", help="progress line period"
    )
    parser.set_defaults(handler=run_record)


def run_record(args: argparse.Namespace) -> int:
    from backtest.stream.record import Recorder
    from backtest.stream.record_stats import RecordStats
    from solver.config import load_bot_config
    from solver.io.logsetup import setup_logging

    config = load_bot_config(args.config)
    if args.duration is not None and not args.duration > 0:
        raise ConfigError("--duration must be positive")
    if args.price_interval_ms <= 0:
        raise ConfigError("--price-interval-ms must be positive")
    if not 0 < args.competitor_share <= 1:
        raise ConfigError("--competitor-share must be in (0, 1]")
    if args.rotate_mb < 0:
        raise ConfigError("--rotate-mb must be >= 0")
    setup_logging(config.log.level, config.log.format)
    rotate = int(args.rotate_mb * 1_000_000) or None

    def progress(stats: RecordStats) -> None:
        sys.stderr.write(stats.line() + "\n")
        sys.stderr.flush()

    recorder = Recorder(
        config,
        Path(args.out),
        price_interval_ms=args.price_interval_ms,
        competitor_share=args.competitor_share if args.competitors else 0.0,
        rotate_bytes=rotate,
        progress_every_s=args.progress_every,
        on_progress=progress,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Not in the main thread (tests) there are no signal handlers: --duration ends it.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)
        await recorder.run(stop, duration_s=args.duration)

    asyncio.run(main())
    stats = recorder.stats
    sys.stderr.write(stats.line() + "\n")
    print_json(
        {**stats.as_dict(), "paths": [str(path) for path in recorder.paths]},
    )
    return 0
