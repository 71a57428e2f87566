"""``solver sandbox``: run the local service of the spec (ledger RPC node, message bus, price
feed, simulated takers) until Ctrl-C / SIGTERM.

Once listening it prints one JSON line with the URLs and funded accounts, so scripts and other
solvers can find it; a stats line goes to stderr every ``--stats-every`` seconds. The bot itself
never imports :mod:`sandbox`; only this command does, lazily.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import orjson

from solver.cli import print_json
from solver.runtime.loop import run_service


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="run the local service (message bus, ledger RPC, prices, simulated takers)",
        description=(
            "Start the sandbox service on loopback and print one JSON line "
            '{"relay_ws", "relay_rpc", "chain_rpc", "prices", "verifier_contract", "accounts"} '
            "once listening. Runs until Ctrl-C or SIGTERM, then shuts down cleanly."
        ),
    )
    parser.add_argument(
        "--config", default="config/sandbox.yaml", help="sandbox YAML (default %(default)s)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="first port; services use PORT, PORT+1, ... (0: ephemeral)",
    )
    parser.add_argument("--no-takers", action="store_true", help="do not start simulated takers")
    parser.add_argument(
        "--stats-every", type=float, default=10.0, metavar="S", help="stats line period"
    )
    parser.set_defaults(handler=run_sandbox)


def run_sandbox(args: argparse.Namespace) -> int:
    from sandbox.config import load_sandbox_config

    config = load_sandbox_config(args.config)
    if not 0 <= args.port <= 65530:
        from solver.errors import ConfigError

        raise ConfigError("--port must be between 0 and 65530")
    run_service(_serve(config, args))
    return 0


async def _serve(config: object, args: argparse.Namespace) -> None:
    from sandbox.config import SandboxConfig
    from sandbox.server import Sandbox

    assert isinstance(config, SandboxConfig)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Sandbox(
        config, host=args.host, port=args.port, run_takers=not args.no_takers
    ) as sandbox:
        print_json(sandbox.info())
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), args.stats_every)
            except TimeoutError:
                stats = {
                    "bus": sandbox.bus.stats.__dict__,
                    "block_height": sandbox.chain.block_height,
                }
                if sandbox.takers is not None:
                    stats["takers"] = sandbox.takers.stats.as_dict()
                sys.stderr.write("sandbox: " + orjson.dumps(stats).decode() + "\n")
