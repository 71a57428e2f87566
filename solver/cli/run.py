"""``solver run``: the bot, unattended, until SIGTERM / Ctrl-C; ``solver demo``: the bot against
the local sandbox with simulated takers and a live terminal view."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from solver.cli.config import add_set_argument, describe_overrides, overrides_of
from solver.config import load_bot_config
from solver.errors import ConfigError
from solver.io.key_files import load_secret_key
from solver.io.logsetup import setup_logging
from solver.runtime.loop import run_service


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = subparsers.add_parser(
        "run",
        help="run the bot on the message bus",
        description=(
            "Quote on the bus until SIGTERM or Ctrl-C, then stop quoting, flush the journal and "
            "exit 0 (open quotes are in the journal: the next start follows them). The signing "
            "key comes from the environment variable or 0600 file named in account.key_env / "
            "account.key_file."
        ),
    )
    run.add_argument("--config", required=True, help="bot YAML (see config/default.yaml)")
    add_set_argument(run)
    run.add_argument(
        "--shadow",
        action="store_true",
        help="run the whole pipeline on live flow, but sign and send nothing",
    )
    run.add_argument(
        "--shutdown-wait",
        type=float,
        default=0.0,
        metavar="S",
        help="on stop, first let open quotes settle for up to S seconds (default 0: the journal "
        "keeps them)",
    )
    run.set_defaults(handler=run_bot)

    demo = subparsers.add_parser(
        "demo",
        help="the bot against the local sandbox with simulated takers, with a live view",
        description="Start the sandbox and the bot in one process and show what happens.",
    )
    demo.add_argument("--config", default="config/sandbox.yaml", help="sandbox YAML")
    demo.add_argument(
        "--bot-config", default="config/default.yaml", help="bot YAML (URLs are filled in)"
    )
    demo.add_argument("--seconds", type=float, default=60.0, help="how long to run (default 60)")
    demo.add_argument("--plain", action="store_true", help="no live view: one line per second")
    demo.set_defaults(handler=run_demo)


def run_bot(args: argparse.Namespace) -> int:
    from solver.runtime.bot import LiveBot
    from solver.runtime.lease_keeper import EXIT_FENCED

    overrides = overrides_of(args)
    config = load_bot_config(args.config, overrides=overrides or None)
    setup_logging(config.log.level, config.log.format)
    key = (
        load_secret_key(env=config.account.key_env, path=config.account.key_file)
        if config.signer.mode == "in_process"
        else None  # the key is in the signer process (signer.mode remote)
    )
    if args.shutdown_wait < 0:
        raise ConfigError("--shutdown-wait must be >= 0")

    async def main() -> bool:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        bot = LiveBot(config, key, shadow=args.shadow)  # the store is checked and opened here
        # The start-up line: which file, which account, which mode, and what the command
        # line changed (a WARNING, so it is in the log whatever log.level says).
        logging.getLogger("solver.run").warning(
            "starting: config %s, account %s, %s, %s",
            args.config,
            config.account.id,
            "SHADOW (nothing signed or sent)" if args.shadow else "LIVE",
            describe_overrides(overrides),
        )
        await bot.run(stop, grace_s=args.shutdown_wait)
        return bot.fenced

    if run_service(main()):
        return EXIT_FENCED  # the lease was lost: docs/operations.md, "Two instances"
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from solver.cli.demo import demo

    if args.seconds <= 0:
        raise ConfigError("--seconds must be positive")
    return run_service(demo(args.config, args.bot_config, args.seconds, plain=args.plain))
