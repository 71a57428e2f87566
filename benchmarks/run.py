"""Entry point of ``make bench``: ``python -m benchmarks.run [--only NAME] [--quick]``.

Each benchmark writes ``<name>.json`` (every figure), ``<name>.md`` (a short summary) and PNG
plots into the results folder (default: ``benchmarks/``); scratch files (configs, child logs,
raw profiles) go to ``<results>/scratch.tmp/``, which git ignores. Exit status 0 when every
benchmark ran, 1 when one failed to run; a missed performance target is reported in the
results, not in the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from benchmarks import chaos, failover, pg_fence, quote_path, replay, sandbox_load, soak
from benchmarks.common import RESULTS_DIR, Progress, wait_for_quiet

NAMES = ("quote_path", "sandbox_load", "replay")  # the default set (make bench)
OPT_IN = ("soak", "chaos", "failover", "pg_fence")  # long, or needing PostgreSQL: --only


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Run the benchmarks and write JSON, markdown and PNG results.",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=NAMES + OPT_IN,
        help="run only this benchmark (repeatable; default: all but the opt-in soak)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short smoke run (seconds instead of minutes)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS_DIR,
        help="folder for the results (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="py-spy profiles: quote_path profiles the bot when a target is missed (auto) or "
        "always; sandbox_load profiles the sandbox during the load unless never "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="quote_path: pin the bot to the last core and the driver and sandbox to the others "
        "(best on an otherwise idle machine)",
    )
    parser.add_argument(
        "--no-deflate",
        action="store_true",
        help="quote_path: refuse permessage-deflate on the driver's websocket "
        "(the sandbox relay accepts it, so it is on by default)",
    )
    parser.add_argument(
        "--baseline",
        default=quote_path.DEFAULT_BASELINE,
        metavar="REV",
        help="quote_path: also drive the bot at this git revision (git archive into the scratch "
        "folder), phase by phase with the current one, and report ratios; none: leave it out "
        "(default: %(default)s, the commit before the desk work)",
    )
    parser.add_argument(
        "--no-signers",
        action="store_true",
        help="quote_path: leave out the bot signing through 'solver signer serve' (key file, "
        "SoftHSM2 token; issue 28), which run beside the in-process bot by default",
    )
    parser.add_argument(
        "--no-pg",
        action="store_true",
        help="quote_path: leave out the bot with its journal on PostgreSQL (bot_pg, issue 27; "
        "a throwaway PostgreSQL 15 started for it), which runs beside the SQLite bot by default "
        "when the PostgreSQL binaries are there",
    )
    parser.add_argument(
        "--replay-baseline",
        default="none",
        metavar="REV",
        help="replay: also replay the 100k stream at this git revision (git archive into the "
        "scratch folder), three paired runs, and report the ratio of requests per CPU second "
        "(default: none)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="S",
        help="before each benchmark wait up to S seconds for other processes to use under "
        "0.25 cores (default: 30, 5 with --quick; the load measured is recorded either way)",
    )
    parser.add_argument(
        "--soak-seconds",
        type=float,
        default=None,
        metavar="N",
        help=f"soak: seconds at {soak.RATE_PER_S} requests/s (default: "
        f"{soak.DEFAULT_SECONDS:.0f}, {soak.QUICK_SECONDS:.0f} with --quick)",
    )
    parser.add_argument(
        "--chaos-seconds",
        type=float,
        default=None,
        help=f"chaos: seconds of faults (default: {chaos.DEFAULT_SECONDS:.0f}, "
        f"{chaos.QUICK_SECONDS:.0f} with --quick)",
    )
    args = parser.parse_args(argv)
    if args.wait_quiet is None:
        args.wait_quiet = 5.0 if args.quick else 30.0
    return args


async def main_async(args: argparse.Namespace) -> int:
    args.results.mkdir(parents=True, exist_ok=True)
    names = args.only or list(NAMES)
    command = "python -m benchmarks.run " + " ".join(sys.argv[1:])
    failed = []
    for name in names:
        started = time.monotonic()
        print(f"== {name} ==", file=sys.stderr, flush=True)
        quiet = await wait_for_quiet(args.wait_quiet, progress=Progress(name))
        print(
            f"== background load {quiet['background_cores_at_start']:.2f} cores "
            f"(waited {quiet['waited_s']} s)",
            file=sys.stderr,
            flush=True,
        )
        try:
            if name == "quote_path":
                options = quote_path.Options(
                    quick=args.quick,
                    profile=args.profile,
                    pin=args.pin,
                    deflate=not args.no_deflate,
                    baseline=args.baseline,
                    signers=not args.no_signers,
                    pg=not args.no_pg,
                    command=command,
                    quiet=quiet,
                )
                result = await quote_path.run(args.results, options)
            elif name == "soak":
                result = await soak.run(
                    args.results,
                    soak.Options(
                        seconds=args.soak_seconds, quick=args.quick, command=command, quiet=quiet
                    ),
                )
            elif name == "chaos":
                result = await chaos.run(
                    args.results,
                    quick=args.quick,
                    seconds=args.chaos_seconds,
                    command=command,
                    quiet=quiet,
                )
            elif name == "failover":
                result = await failover.run(
                    args.results, quick=args.quick, command=command, quiet=quiet
                )
            elif name == "pg_fence":
                result = await pg_fence.run(
                    args.results, quick=args.quick, command=command, quiet=quiet
                )
            elif name == "replay":
                result = await replay.run(
                    args.results, quick=args.quick, command=command, quiet=quiet,
                    profile=args.profile, baseline=args.replay_baseline,
                )  # fmt: skip
            else:
                result = await sandbox_load.run(
                    args.results,
                    quick=args.quick,
                    command=command,
                    quiet=quiet,
                    profile=args.profile,
                )
        except Exception as exc:
            print(f"== {name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        if result.get("errors"):
            failed.append(name)
        print(
            f"== {name} done in {time.monotonic() - started:.0f} s -> "
            f"{args.results / (name + '.md')}",
            file=sys.stderr,
            flush=True,
        )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
