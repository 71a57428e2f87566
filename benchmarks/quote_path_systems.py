"""The systems ``quote_path`` drives: the bot, the bot at a baseline commit, the minimal solver.

Each is a child process with its own key and account, connected to its own :class:`Relay`:

- **bot**: ``python -m solver.cli run --config <yaml> --shutdown-wait 0`` from this tree;
- **baseline**: the same command from a ``git archive`` of the baseline commit in the scratch
  folder, with ``PYTHONPATH=<that tree>`` first and ``cwd`` there (the same YAML schema);
  :func:`import_origin` checks, with the same environment, which ``solver`` it imports;
- **minimal**: :mod:`benchmarks.minimal_solver` (issue 11's floor).

The bots log at INFO to their own file; their summary lines (periodic and at shutdown) are
parsed by :func:`read_bot_log`, in both the current (``response_us``) and the baseline's
(``decision_us``) wording. The bot (not the baseline) also serves its control API and
``/metrics`` on a free port, as a deployment does, which :mod:`benchmarks.quote_path_inside`
reads before and after each run.
"""

from __future__ import annotations

import ast
import asyncio
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from benchmarks.common import ROOT, Child, log_tail, start_child
from benchmarks.quote_path_driver import DECIMALS, ETH, NEAR, USDC, Relay
from solver.config import BotConfig, apply_overrides, load_bot_config
from solver.protocol.keys import SecretKey

KEY_ENV = "BENCH_SOLVER_KEY"
FUNDING_USD = 1e9
SUBSCRIBE_TIMEOUT_S = 30.0


@dataclass
class System:
    """One system under test: its relay, its process and its account."""

    name: str  # "bot" | "baseline" | "minimal" | "signer_file" | "signer_token"
    relay: Relay
    key: SecretKey
    child: Child | None = None
    shutdown: dict[str, Any] | None = None
    imports_from: str | None = None  # where its ``solver`` package came from
    metrics_url: str | None = None  # the bot's ``/metrics`` (the current tree's bot only)

    @property
    def account(self) -> str:
        return self.key.public_key.implicit_account_id()


# ---------------------------------------------------------------------------- configuration


def config_overrides(config: BotConfig) -> dict[str, Any]:
    """The overrides :func:`bot_config` applied, read back from ``config``, for another tree."""
    dumped = config.model_dump(mode="json")
    keys = ("account", "verifier_contract", "bus", "chain", "prices", "pairs", "risk", "quote",
            "storage", "metrics", "log")  # fmt: skip
    out: dict[str, Any] = {}
    for key in keys:
        value = dumped[key]
        if isinstance(value, dict):
            for name in _OVERRIDDEN.get(key, ()):
                out[f"{key}.{name}"] = value[name]
        else:
            out[key] = value
    out["pairs"] = [{k: v for k, v in pair.items() if k in _PAIR_KEYS} for pair in dumped["pairs"]]
    # Optional keys left unset (None) may be unknown to an older tree: leave them out.
    sources = out["prices.sources"]
    out["prices.sources"] = [{k: v for k, v in src.items() if v is not None} for src in sources]
    return out


_OVERRIDDEN = {
    "account": ("id", "key_env", "key_file"),
    "bus": ("ws_url", "rpc_url"),
    "chain": ("rpc_url", "balance_refresh_ms"),
    "prices": ("sources",),
    "risk": ("floors", "max_open_exposure_usd", "max_quotes_per_s", "max_daily_loss_usd",
             "max_drawdown_usd"),
    "quote": ("deadline_margin_ms",),
    "storage": ("path",),
    "metrics": ("listen",),
    "log": ("level", "format", "summary_every_s"),
}  # fmt: skip
_PAIR_KEYS = ("base", "quote", "strategy", "params", "min_notional_usd", "max_notional_usd")


def bot_config(
    info: dict[str, Any], ws_url: str, account: str, storage: Path, summary_every_s: float
) -> BotConfig:
    pair = {
        "quote": USDC,
        "strategy": "spread",
        "params": {"spread_bps": 25},
        "min_notional_usd": 1.0,
        "max_notional_usd": 5000.0,
    }
    return load_bot_config(ROOT / "config/default.yaml").with_overrides(
        {
            "account.id": account,
            "account.key_env": KEY_ENV,
            "account.key_file": None,
            "verifier_contract": info["verifier_contract"],
            "bus.ws_url": ws_url,
            "bus.rpc_url": info["relay_rpc"],
            "chain.rpc_url": info["chain_rpc"],
            "chain.balance_refresh_ms": 500,
            "prices.sources": [{"kind": "sandbox", "url": info["prices"], "refresh_ms": 1000}],
            "pairs": [{"base": NEAR, **pair}, {"base": ETH, **pair}],
            "risk.floors": {},
            "risk.max_open_exposure_usd": 1e12,
            "risk.max_quotes_per_s": 100000.0,
            # No fills happen here; keep the PnL kill switch out of the way of a 1e9 USD
            # inventory marked at moving prices.
            "risk.max_daily_loss_usd": 1e12,
            "risk.max_drawdown_usd": 1e12,
            "quote.deadline_margin_ms": 0,
            "storage.path": str(storage),
            "metrics.listen": None,
            "log.level": "INFO",
            "log.format": "text",
            "log.summary_every_s": summary_every_s,
        }
    )


def free_port() -> int:
    """A port free on 127.0.0.1 now (for the bot's control API)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def funding(prices: dict[str, float]) -> dict[str, int]:
    return {a: int(FUNDING_USD / prices[a]) * 10**d for a, d in DECIMALS.items()}


def fresh_store(path: Path) -> Path:
    """A store path with no file left by an earlier run (the bot would recover its quotes)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


# ---------------------------------------------------------------------------- the baseline tree


def export_tree(rev: str, scratch: Path) -> tuple[Path, str]:
    """``git archive`` of ``rev`` into ``scratch/baseline-<sha>`` (reused when present);
    returns the folder and the commit's full hash."""
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
    tree = scratch / f"baseline-{sha[:10]}"
    if not (tree / ".exported").exists():
        tree.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(_git("archive", sha))) as tar:
            tar.extractall(tree, filter="data")
        (tree / ".exported").write_text(sha + "\n")
    return tree, sha


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def import_origin(tree: Path) -> str:
    """The file of the ``solver`` package a child started like the bot imports."""
    code = "import solver; print(solver.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env=tree_env(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def tree_env(tree: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{path}" if path else str(tree)}


# ---------------------------------------------------------------------------- starting


async def start_bot(system: System, config: BotConfig, tree: Path, scratch: Path) -> None:
    """``python -m solver.cli run`` from ``tree`` (this checkout, or the baseline's).

    This checkout gets ``config`` as resolved; another tree gets its own ``config/default.yaml``
    with the same overrides (an older bot refuses keys it does not know yet)."""
    config_path = scratch / f"{system.name}.yaml"
    if tree == ROOT:
        data: Any = config.model_dump(mode="json")
    else:
        base = yaml.safe_load((tree / "config/default.yaml").read_text(encoding="utf-8"))
        data = apply_overrides(base, config_overrides(config))
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))
    system.imports_from = import_origin(tree)
    if not Path(system.imports_from).is_relative_to(tree):
        raise RuntimeError(f"{system.name} would import solver from {system.imports_from}")
    argv = [sys.executable, "-m", "solver.cli", "run", "--config", str(config_path)]
    argv += ["--shutdown-wait", "0"]
    env = tree_env(tree)
    if config.signer.mode == "in_process":  # remote: the key is in the signer, not the bot
        env[KEY_ENV] = system.key.to_text()
    log_path = scratch / f"{system.name}.log"
    system.child = await start_child(system.name, argv, log_path, env=env, cwd=tree)


async def start_minimal(
    system: System, info: dict[str, Any], prices: dict[str, float], ws_url: str, scratch: Path
) -> None:
    argv = [sys.executable, "-m", "benchmarks.minimal_solver", "--url", ws_url]
    argv += ["--account", system.account, "--contract", info["verifier_contract"]]
    argv += ["--salt", info["current_salt"], "--prices", orjson.dumps(prices).decode()]
    system.imports_from = import_origin(ROOT)
    env = {**tree_env(ROOT), KEY_ENV: system.key.to_text()}
    system.child = await start_child(system.name, argv, scratch / "minimal.log", env=env)


async def wait_subscribed(system: System) -> None:
    assert system.child is not None
    waiter = asyncio.create_task(system.relay.subscribed.wait())
    exited = asyncio.create_task(system.child.process.wait())
    await asyncio.wait(
        {waiter, exited}, timeout=SUBSCRIBE_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
    )
    for task in (waiter, exited):
        task.cancel()
    await asyncio.gather(waiter, exited, return_exceptions=True)
    if not system.relay.subscribed.is_set():
        tail = " | ".join(log_tail(system.child.log_path, 5))
        raise RuntimeError(
            f"{system.name} did not subscribe in {SUBSCRIBE_TIMEOUT_S:.0f} s: {tail}"
        )


# ---------------------------------------------------------------------------- the bot's log


_SUMMARY_RE = re.compile(
    r"requests=(?P<requests>\d+) quoted=(?P<quoted>\d+) skipped\[(?P<skipped>[^\]]*)\] "
    r"outcomes=(?P<outcomes>\{[^}]*\}) (?P<timed>decision_us|response_us) p50=(?P<p50>\d+) "
    r"p99=(?P<p99>\d+).*?open=(?P<open>\d+)"  # 'now: open=' since issue 24's summary
)


def parse_summary(line: str) -> dict[str, Any] | None:
    match = _SUMMARY_RE.search(line)
    if match is None:
        return None
    skipped = {}
    for item in match["skipped"].split(","):
        if "=" in item:
            k, v = item.split("=", 1)
            skipped[k] = int(v)
    return {
        "requests": int(match["requests"]),
        "quoted": int(match["quoted"]),
        "skipped": skipped,
        "outcomes": ast.literal_eval(match["outcomes"]),
        "timed": match["timed"],  # decision_us (baseline) or response_us (the desk's bot)
        "us_p50": int(match["p50"]),
        "us_p99": int(match["p99"]),
        "open_quotes": int(match["open"]),
    }


def read_bot_log(path: Path) -> dict[str, Any]:
    lines = path.read_text(errors="replace").splitlines()
    levels: Counter[str] = Counter()
    notable: Counter[str] = Counter()  # WARNING+ messages, numbers and times masked
    for line in lines:
        parts = line.split(" ", 4)
        if len(parts) >= 3 and parts[2] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            levels[parts[2]] += 1
            if parts[2] != "INFO" and len(parts) == 5:
                message = re.sub(r"\(trigger: [^)]*\)", "", parts[4])
                notable[f"{parts[2]} {parts[3]} {re.sub(r'[0-9]+', '#', message)}"[:160]] += 1
    final = next((parse_summary(line) for line in reversed(lines) if "stopped:" in line), None)
    return {
        "lines": len(lines),
        "by_level": dict(levels),
        "warnings_and_errors": dict(notable.most_common(8)),
        "tracebacks": sum(1 for line in lines if line.startswith("Traceback")),
        "final_summary": final,
        "tail": lines[-5:],
    }
