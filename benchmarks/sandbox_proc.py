"""The sandbox in its own process, for benchmarks: ``python -m benchmarks.sandbox_proc``.

A benchmark must not share a CPU with the service it loads, so the sandbox runs here: it reads
a spec (the :class:`~sandbox.config.SandboxConfig` as JSON and the balances to deposit),
starts every service on loopback port 0 without takers, prints one JSON line (URLs, verifier
contract, current salt) once listening, and serves until SIGTERM. Then it lets the settlements
in flight finish (at most 5 s), writes its statistics to ``--stats-out`` — bus counters,
intent statuses, every log record at WARNING or above, frames dropped by full outboxes, ledger
RPC view calls per method and account — stops cleanly and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import Child, read_json_line, start_child, stop_child
from sandbox.config import SandboxConfig
from sandbox.server import Sandbox

DRAIN_S = 5.0


class RecordCounter(logging.Handler):
    """Counts WARNING+ records by level and logger; keeps the first ERROR+ messages."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.by_level: Counter[str] = Counter()
        self.by_logger: Counter[str] = Counter()
        self.by_exception: Counter[str] = Counter()  # exception type of ERROR+ records
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.by_level[record.levelname] += 1
        self.by_logger[f"{record.name}:{record.levelname}"] += 1
        if record.levelno < logging.ERROR:
            return
        exc = record.exc_info[1] if record.exc_info else None
        self.by_exception[type(exc).__name__ if exc is not None else "-"] += 1
        if len(self.errors) < 20:
            text = record.getMessage()
            if exc is not None:
                text += f" [{type(exc).__name__}: {str(exc)[:200]}]"
            self.errors.append(f"{record.name}: {text}"[:500])


def count_views(sandbox: Sandbox) -> Counter[str]:
    """Count the chain RPC's view calls as ``method account`` (the sandbox keeps no such
    counter): e.g. how many ``is_nonce_used`` checks each solver made."""
    calls: Counter[str] = Counter()
    view = sandbox.chain.view

    def counted(method: str, args: dict[str, Any]) -> Any:
        calls[f"{method} {args.get('account_id', '-')}"] += 1
        return view(method, args)

    sandbox.chain.view = counted  # type: ignore[method-assign]
    return calls


def intent_summary(sandbox: Sandbox) -> dict[str, Any]:
    """Status of every user intent (records keyed by a quote hash are the same objects)."""
    intents: dict[str, Any] = {}
    for key, record in sandbox.bus.intents.items():
        if key != record.intent_hash:
            continue
        intents[key] = {
            "status": record.status.value,
            "quote_hashes": record.quote_hashes,
            "reason": record.reason,
        }
    return intents


async def serve(spec: dict[str, Any]) -> dict[str, Any]:
    config = SandboxConfig.model_validate(spec["config"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    counter = RecordCounter()
    logging.getLogger().addHandler(counter)
    logging.getLogger().setLevel(logging.WARNING)
    dropped: dict[str, int] = {}
    async with Sandbox(config, run_takers=False) as sandbox:
        views = count_views(sandbox)
        for name in ("uvicorn", "uvicorn.error"):  # uvicorn's own loggers do not propagate
            logging.getLogger(name).addHandler(counter)
        for account, balances in spec.get("fund", {}).items():
            for asset, amount in balances.items():
                sandbox.ledger.deposit(account, asset, int(amount))
        info = {
            **sandbox.urls(),
            "verifier_contract": sandbox.ledger.contract_id,
            "current_salt": sandbox.ledger.current_salt(),
        }
        sys.stdout.write(orjson.dumps(info).decode() + "\n")
        sys.stdout.flush()
        while not stop.is_set():
            for conn_id, conn in sandbox.bus.connections.items():
                dropped[conn_id] = conn.dropped_frames
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)
        started = time.monotonic()
        # Polled: the bus's settlement tasks are its own; there is no event to wait on.
        while sandbox.bus._tasks and time.monotonic() - started < DRAIN_S:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for conn_id, conn in sandbox.bus.connections.items():
            dropped[conn_id] = conn.dropped_frames
        stats = {
            "bus": asdict(sandbox.bus.stats),
            "settlements_unfinished_at_stop": len(sandbox.bus._tasks),
            "open_quote_requests_at_stop": len(sandbox.bus.open_quotes),
            "connections_at_stop": len(sandbox.bus.connections),
            "dropped_frames": sum(dropped.values()),
            "block_height": sandbox.chain.block_height,
            "intents": intent_summary(sandbox),
            "view_calls": dict(views),
        }
    stats["log_records"] = {
        "by_level": dict(counter.by_level),
        "by_logger": dict(counter.by_logger),
        "by_exception": dict(counter.by_exception),
        "errors": counter.errors,
    }
    return stats


@dataclass
class SandboxHandle:
    """A running sandbox child process and what it printed when ready."""

    child: Child
    info: dict[str, Any]
    stats_path: Path


async def start_sandbox(
    scratch: Path, config: SandboxConfig, fund: dict[str, dict[str, int]]
) -> SandboxHandle:
    """Start the sandbox child with ``config`` and ``fund`` (account -> asset -> amount)."""
    spec_path = scratch / "sandbox-spec.json"
    stats_path = scratch / "sandbox-stats.json"
    stats_path.unlink(missing_ok=True)
    spec = {
        "config": config.model_dump(mode="json"),
        "fund": {a: {k: str(v) for k, v in b.items()} for a, b in fund.items()},
    }
    spec_path.write_bytes(orjson.dumps(spec))
    argv = [sys.executable, "-m", "benchmarks.sandbox_proc", "--spec", str(spec_path)]
    argv += ["--stats-out", str(stats_path)]
    child = await start_child("sandbox", argv, scratch / "sandbox.log", stdout_pipe=True)
    try:
        info = await read_json_line(child, 30)
    except BaseException:
        await stop_child(child)
        raise
    return SandboxHandle(child, info, stats_path)


async def stop_sandbox(handle: SandboxHandle) -> tuple[dict[str, Any], dict[str, Any]]:
    """SIGTERM the sandbox; returns (how it stopped, the statistics it wrote)."""
    stopped = await stop_child(handle.child)
    try:
        stats: dict[str, Any] = orjson.loads(handle.stats_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        stats = {}
    return stopped, stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="JSON: config and funding")
    parser.add_argument("--stats-out", required=True, type=Path, help="where to write stats")
    args = parser.parse_args()
    spec = orjson.loads(args.spec.read_bytes())
    stats = asyncio.run(serve(spec))
    args.stats_out.write_bytes(orjson.dumps(stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
