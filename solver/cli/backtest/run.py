"""``solver backtest run`` and ``solver backtest calibrate``: replay a stream, fit a fill model.

``run`` replays a recorded stream (:mod:`backtest.stream.read`) through the live quote pipeline of
the
bot YAML (``--config``) with the settings of ``--backtest-config`` (:mod:`backtest.settings`;
``--fill-model``, ``--seed`` and ``--sign`` override it), and writes into ``--out``:
``summary.json`` and ``fills.csv`` (byte-identical between identical runs), ``timing.json``
(wall-clock figures) and ``report.html`` (tables and plots). A progress bar goes to stderr on a
terminal; one JSON line with the headline figures goes to stdout, with ``halted`` (when and why
the kill switch stopped quoting, or null) and ``paused`` (requests skipped because of it); a
halted replay also says so in one line on stderr. ``--no-kill-switch`` replays without it.

``calibrate`` fits the ``logistic`` fill model (:mod:`backtest.calibration.calibrate`) from a store
(``--db``) or from a stream replayed with the ``competitor`` model, and writes the parameters as a
``--backtest-config`` file (``--out``, YAML or ``.json``) and a fit plot (``--plot``, by default
``--out`` with ``.png``). It refuses (exit 2, nothing written but the plot) data that cannot
identify the model: too few wins or losses, an edge that does not vary, separated data, or a fit
in which a better price wins less.

The subcommands join the ``backtest`` group through
:func:`solver.cli.backtest.streams.backtest_group`
(which finds the group or creates it), so module order in ``COMMAND_MODULES`` does not matter.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from solver.cli import EXIT_OK, note, print_json, warn
from solver.cli.backtest.streams import backtest_group
from solver.cli.config import add_set_argument, describe_overrides, overrides_of
from solver.config import load_bot_config
from solver.errors import ConfigError

FILL_MODELS = ("always", "competitor", "logistic")
EXIT_TRUNCATED = 4
"""``backtest run``: the stream ended early (a gzip cut short, a last line cut short). The
outputs are written, from what was read; ``--allow-truncated`` exits 0 instead."""


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = backtest_group(subparsers)
    run = group.add_parser(
        "run",
        help="replay a stream through the bot's pipeline and report",
        description=(
            "Replay a recorded quote stream through the live quote pipeline of the bot YAML on a "
            "simulated clock; a fill model decides which answers win, the sandbox ledger settles "
            "them. Writes summary.json, fills.csv, timing.json and report.html into --out."
        ),
    )
    run.add_argument("stream", metavar="STREAM", help="stream file (JSON Lines, optionally gzip)")
    run.add_argument("--config", required=True, help="bot YAML (see config/default.yaml)")
    add_set_argument(run)
    run.add_argument("--out", required=True, metavar="DIR", help="output directory")
    run.add_argument(
        "--backtest-config",
        metavar="FILE",
        help="backtest-only settings: balances, settlement delay, latency, fill model, fee "
        "(see backtest/settings.py; the output of 'backtest calibrate' is one)",
    )
    run.add_argument(
        "--fill-model", choices=FILL_MODELS, help="which answers win (default: competitor)"
    )
    run.add_argument("--seed", type=_non_negative_int, metavar="N", help="random seed (0)")
    run.add_argument(
        "--sign",
        action="store_true",
        help="sign every quote and settle through every verifier check (slower)",
    )
    run.add_argument(
        "--no-kill-switch",
        action="store_true",
        help="replay without the desk's PnL and stale-data kill switch (kill_switch: false), "
        "to see what a strategy does after the point where live it would have been halted",
    )
    run.add_argument(
        "--strict", action="store_true", help="stop at the first malformed stream line"
    )
    run.add_argument(
        "--allow-truncated",
        action="store_true",
        help=f"a stream that ends early (a cut gzip, a last line cut short) exits 0, not "
        f"{EXIT_TRUNCATED}",
    )
    run.add_argument(
        "--prefetch",
        action="store_true",
        help="read and parse the stream in a second process (faster with a free core; "
        "the same results)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(handler=cmd_run)

    calibrate = group.add_parser(
        "calibrate",
        help="fit the logistic fill model from a store or a stream",
        description=(
            "Fit P(win) = 1 / (1 + exp(-(a + b * edge_bps))) by maximum likelihood, from the "
            "bot's store (--db: its quotes and outcomes) or from a stream replayed with the "
            "competitor model (STREAM --config). Writes a --backtest-config file and a plot of "
            "the win rate by edge bucket against the fitted curve; prints the fit with 95 % "
            "intervals. Refuses (exit 2) data that cannot identify the model."
        ),
    )
    calibrate.add_argument("stream", metavar="STREAM", nargs="?", help="stream to replay")
    calibrate.add_argument("--db", metavar="STORE", help="the bot's SQLite store")
    calibrate.add_argument(
        "--config", help="bot YAML: the pipeline for STREAM; token decimals for --db"
    )
    calibrate.add_argument(
        "--prices", metavar="STREAM", help="with --db: reference prices from this stream"
    )
    calibrate.add_argument("--backtest-config", metavar="FILE", help="settings for STREAM")
    calibrate.add_argument(
        "--max-gap-s",
        type=float,
        default=300.0,
        metavar="S",
        help="with --db: the farthest a reference price may be from the quote (300)",
    )
    calibrate.add_argument(
        "--out", required=True, metavar="FILE", help="where to write a,b (YAML, or .json)"
    )
    calibrate.add_argument(
        "--plot", metavar="FILE", help="the fit plot (PNG; default: --out with .png)"
    )
    calibrate.add_argument(
        "--min-wins", type=_non_negative_int, default=20, metavar="N",
        help="refuse with fewer won quotes (20)",
    )  # fmt: skip
    calibrate.add_argument(
        "--min-losses", type=_non_negative_int, default=20, metavar="N",
        help="refuse with fewer lost quotes (20)",
    )  # fmt: skip
    calibrate.add_argument(
        "--min-edge-sd-bps", type=float, default=1.0, metavar="BPS",
        help="refuse when the edge varies less than this, sd in bps (1.0): a constant spread "
        "cannot identify the slope",
    )  # fmt: skip
    calibrate.set_defaults(handler=cmd_calibrate)


# ------------------------------------------------------------------------------ run


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[Any], None] | None]:
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    started = time.perf_counter()
    with Progress(
        SpinnerColumn(),
        TextColumn("replay"),
        TextColumn("{task.fields[line]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("replay", total=None, line="")

        def update(p: Any) -> None:
            rate = p.requests / max(1e-9, time.perf_counter() - started)
            line = (
                f"{p.events:,} events  {p.requests:,} requests  {p.quoted:,} quoted  "
                f"{p.won:,} won  {rate:,.0f} req/s"
            )
            bar.update(task, line=line)

        yield update


def cmd_run(args: argparse.Namespace) -> int:
    from backtest.engine import Replay
    from backtest.report import trust
    from backtest.report.outputs import FillsCsv, summary, write_json, write_report, write_series
    from backtest.report.tables import config_block, halted_note
    from backtest.settings import load_settings
    from backtest.stream.prefetch import PrefetchReader
    from backtest.stream.read import read_stream

    overrides = overrides_of(args)
    config = load_bot_config(args.config, overrides=overrides or None)
    if overrides:  # said once, on stderr (stdout is the JSON result); nothing to say without
        note(f"backtest of {args.stream} with {args.config}, {describe_overrides(overrides)}")
    settings = load_settings(
        args.backtest_config,
        fill_model=args.fill_model,
        seed=args.seed,
        sign=True if args.sign else None,
        kill_switch=False if args.no_kill_switch else None,
    )
    out = Path(args.out)
    # A bad stream fails before any output.
    reader: Any = (
        PrefetchReader(args.stream, strict=args.strict)
        if args.prefetch
        else read_stream(args.stream, strict=args.strict)
    )
    with reader:
        try:
            out.mkdir(parents=True, exist_ok=True)
            fills_file = (out / "fills.csv").open("w", encoding="utf-8", newline="")
        except OSError as exc:
            raise ConfigError(f"cannot write into {out}: {exc.strerror}") from None
        with fills_file, _progress_bar(not args.no_progress) as progress:
            sink = FillsCsv(fills_file)
            replay = Replay(config, settings, on_fill=sink, progress=progress)
            started_cpu, started = time.process_time(), time.perf_counter()
            if args.prefetch:
                result = replay.run_records(reader, reader.header)
            else:
                result = replay.run(reader, reader.header)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    stats = reader.stats
    figures = summary(
        result,
        fill_model=settings.fill.model,
        seed=settings.seed,
        hedge_cost_bps=settings.hedge_cost_bps,
    )
    figures["stream"] = {
        "file": Path(args.stream).name,
        "lines": stats.lines,
        "malformed_lines": stats.malformed_total,
        "malformed": [list(item) for item in stats.malformed],
        "truncated": stats.truncated,
        "unknown_kinds": stats.unknown_kinds,
    }
    figures["config"] = config_block(config, settings)
    write_json(out / "summary.json", figures)
    write_series(out, result)
    tracker = result.measures
    write_json(
        out / "timing.json",
        {
            "elapsed_s": round(elapsed, 3),
            "cpu_s": round(cpu, 3),
            "requests": tracker.requests,
            "requests_per_s": round(tracker.requests / elapsed, 1) if elapsed > 0 else None,
            "events_per_s": round(stats.total_events / elapsed, 1) if elapsed > 0 else None,
            "signing": settings.sign,
            "prefetch": bool(args.prefetch),
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
    )
    symbols = {asset: token.symbol for asset, token in config.tokens.items()}
    write_report(
        out / "report.html", result, figures, symbols, title=f"Backtest: {Path(args.stream).name}"
    )
    for message in trust.warnings(figures):
        warn(message)
    halted = halted_note(figures)
    if halted is not None:
        warn(f"replay {halted}")
    print_json(
        {
            "out": str(out),
            "requests": figures["requests"],
            "quoted": figures["quoted"],
            "won": figures["won"],
            "pnl_usd": figures["pnl_usd"],
            "hold_pnl_usd": figures["hold_pnl_usd"],
            "pnl_over_hold_usd": figures["pnl_over_hold_usd"],
            "max_drawdown_usd": figures["max_drawdown_usd"],
            "halted": figures["halted"],
            "paused": figures["skips"].get("paused", 0),
            "requests_per_s": round(tracker.requests / elapsed, 1) if elapsed > 0 else None,
        }
    )
    if stats.truncated and not args.allow_truncated:
        warn(f"exit {EXIT_TRUNCATED}: the stream ended early (--allow-truncated to accept it)")
        return EXIT_TRUNCATED
    return EXIT_OK


# ------------------------------------------------------------------------------ calibrate


def cmd_calibrate(args: argparse.Namespace) -> int:
    from backtest.calibration.calibrate import (
        observations_from_replay,
        observations_from_store,
        write_fit,
    )
    from backtest.settings import load_settings
    from backtest.stream.events import PriceEvent
    from backtest.stream.read import read_stream

    if (args.db is None) == (args.stream is None):
        raise ConfigError("give either --db STORE or a STREAM to replay (with --config)")
    if args.db is not None:
        decimals: dict[str, int] = {}
        if args.config:
            config = load_bot_config(args.config)
            decimals.update({a: t.decimals for a, t in config.tokens.items()})
        prices: list[PriceEvent] = []
        if args.prices:
            with read_stream(args.prices) as reader:
                decimals.update({a: t.decimals for a, t in reader.header.tokens.items()})
                prices = [e for e in reader if isinstance(e, PriceEvent)]
        if not decimals:
            raise ConfigError("token decimals are needed: give --config or --prices")
        obs = observations_from_store(args.db, decimals, prices, max_gap_s=args.max_gap_s)
        source = f"store {args.db}"
    else:
        if not args.config:
            raise ConfigError("replaying a STREAM needs the bot YAML: --config FILE")
        config = load_bot_config(args.config)
        settings = load_settings(args.backtest_config)
        with read_stream(args.stream) as reader:
            obs = observations_from_replay(reader, reader.header, config, settings)
        source = f"stream {args.stream}"
    from backtest.calibration.calibrate import Criteria, calibration_summary
    from backtest.calibration.plot import plot_calibration

    criteria = Criteria(args.min_wins, args.min_losses, args.min_edge_sd_bps)
    calibration = obs.calibrate(criteria)
    plot = Path(args.plot) if args.plot else Path(args.out).with_suffix(".png")
    title = f"Calibration: {' '.join(source.split())}"
    if calibration.edges.size:
        plot_calibration(plot, calibration, title)
    if calibration.refusals:
        where = f"\n(the data are plotted in {plot})" if calibration.edges.size else ""
        try:
            calibration.require()
        except ConfigError as exc:
            raise type(exc)(f"{exc}{where}") from None
    fit = calibration.require()
    path = write_fit(args.out, fit, source, obs.fitted)
    for message in calibration.warnings:
        warn(message)
    report = {
        "out": str(path),
        "plot": str(plot),
        "fitted": obs.fitted,
        **calibration_summary(calibration),
    }
    report["skipped"] = dict(sorted(obs.skipped.items()))
    print_json(report)
    return EXIT_OK
