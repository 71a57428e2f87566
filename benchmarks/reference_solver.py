"""The real reference AMM solver, unmodified, against the sandbox with takers on (issue 23).

Not part of ``make bench``: it needs the solver's source, which CI cannot fetch (GitHub is not
reachable from CI, and the solver is not on npm). Get it beside the project, never inside it::

    git clone https://github.com/defuse-protocol/near-intents-amm-solver ../near-intents-amm-solver
    (cd ../near-intents-amm-solver && npm install)
    .venv/bin/python -m benchmarks.reference_solver --solver-dir ../near-intents-amm-solver

It starts the sandbox in-process with the quickstart settings of
``tests/sandbox/test_reference_solver.py`` (``nonces: deployed``, ``bus.asset_field_prefix:
defuse``, the default settlement delay, four takers at 4 requests/s on wNEAR/USDC), funds a fresh
account with reserves at the reference price, writes the solver's env file (only configuration:
``AMM_TOKEN*_ID``, ``NEAR_ACCOUNT_ID``, ``NEAR_PRIVATE_KEY``, ``NEAR_NODE_URL``,
``RELAY_WS_URL``, ``INTENTS_CONTRACT``), runs it as ``npm start`` does, and counts over a window
that starts once it is connected: quote requests, answers the relay accepted and refused (by
reason), batches published, settled and failed in execution (by reason), ``quote_status`` sent.
Results go to ``benchmarks/reference_solver.json`` and ``.md``; the key is never written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox.config import SandboxConfig
from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.sandbox.test_reference_solver import NEAR, RESERVES, USDC, config

HERE = Path(__file__).resolve().parent
CONNECTED = "WebSocket client connected"


def counts(sb: Sandbox) -> dict[str, Any]:
    s = sb.bus.stats
    return {
        "quote_requests": s.quote_requests,
        "answers_accepted": s.quote_answers_ok,
        "answers_refused": dict(s.quote_answers_rejected),
        "published": s.published,
        "publish_failed": dict(s.publish_failed),
        "settled": s.settled,
        "settlement_failed": dict(s.settlement_failed),
        "quote_status_sent": s.quote_status_sent,
    }


def delta(before: Any, after: Any) -> Any:
    if isinstance(after, dict):
        base = before if isinstance(before, dict) else {}
        return {k: delta(base.get(k, 0), v) for k, v in after.items()}
    return after - before


def solver_env(sb: Sandbox, key: SecretKey) -> dict[str, str]:
    urls = sb.urls()
    return {
        "NEAR_NETWORK_ID": "mainnet",  # its own check allows mainnet/testnet; views ignore it
        "AMM_TOKEN1_ID": USDC.removeprefix("nep141:"),  # it adds the nep141: prefix itself
        "AMM_TOKEN2_ID": NEAR.removeprefix("nep141:"),
        "TEE_ENABLED": "false",
        "NEAR_ACCOUNT_ID": key.public_key.implicit_account_id(),
        "NEAR_PRIVATE_KEY": key.to_text(),
        "APP_PORT": "0",
        "LOG_LEVEL": "info",
        "NEAR_NODE_URL": urls["chain_rpc"],
        "RELAY_WS_URL": urls["relay_ws"],
        "INTENTS_CONTRACT": sb.ledger.contract_id,
        "MARGIN_PERCENT": "0.3",
        "ONE_CLICK_API_ONLY": "false",
    }


async def run(solver_dir: Path, seconds: float) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="reference_solver_"))
    cfg: SandboxConfig = config(state, nonces="deployed", takers=True)
    async with Sandbox(cfg) as sb:
        key = SecretKey.generate()
        for asset, amount in RESERVES.items():
            sb.ledger.deposit(key.public_key.implicit_account_id(), asset, amount)
        env_name = f"sandbox{os.getpid()}"
        env_file = solver_dir / "env" / f".env.{env_name}"
        env = solver_env(sb, key)
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        env_file.chmod(0o600)
        log_path = state / "solver.log"
        child_env = {k: v for k, v in os.environ.items() if k not in env}
        child_env |= {"NODE_ENV": env_name, "FORCE_COLOR": "0"}
        started = time.monotonic()
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *("node", "-r", "tsconfig-paths/register", "-r", "ts-node/register"),
                "src/main.ts",
                cwd=solver_dir,
                env=child_env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                while CONNECTED not in log_path.read_text(errors="replace"):
                    if proc.returncode is not None or time.monotonic() - started > 180:
                        raise SystemExit(f"the solver did not connect; see {log_path}")
                    await asyncio.sleep(0.2)
                await asyncio.sleep(1.0)  # both subscriptions answered
                startup_s = time.monotonic() - started
                print(f"connected after {startup_s:.0f} s; counting for {seconds:.0f} s")
                before = counts(sb)
                await asyncio.sleep(seconds)
                window = delta(before, counts(sb))
            finally:
                if proc.returncode is None:
                    proc.terminate()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), 10)
                    if proc.returncode is None:
                        proc.kill()
                env_file.unlink(missing_ok=True)
    return {"window_s": seconds, "startup_s": round(startup_s, 1), **window}


def markdown(result: dict[str, Any]) -> str:
    asked = max(result["quote_requests"], 1)
    accepted = result["answers_accepted"]
    lines = [
        "# The reference AMM solver against the sandbox",
        "",
        f"In {result['window_s']:.0f} s with takers on: {result['quote_requests']} requests, "
        f"{accepted} answers accepted ({100 * accepted / asked:.0f} %), "
        f"{sum(result['answers_refused'].values())} refused {result['answers_refused']}; "
        f"{result['published']} published, {result['settled']} settled, failed in execution "
        f"{result['settlement_failed']}; {result['quote_status_sent']} quote_status sent.",
        "",
        "Command: `.venv/bin/python -m benchmarks.reference_solver --solver-dir <checkout>`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--solver-dir", type=Path, required=True, help="its checkout, installed")
    parser.add_argument("--seconds", type=float, default=60.0, help="counting window (60)")
    args = parser.parse_args()
    if not (args.solver_dir / "node_modules").is_dir():
        raise SystemExit(f"{args.solver_dir}: no node_modules; run npm install there first")
    result = asyncio.run(run(args.solver_dir.resolve(), args.seconds))
    (HERE / "reference_solver.json").write_text(json.dumps(result, indent=2) + "\n")
    (HERE / "reference_solver.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
