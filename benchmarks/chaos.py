"""Issue 24's chaos soak: does the bot run unattended through faults, needing no operator?

The sandbox runs in this process with takers on (three tokens at steady prices, a few requests a
second), the bot as a child (``solver run``, restarted a second after it dies, as the deploy
units' ``Restart=always`` does). Every 15–40 s (``--quick``: 5–12 s) one fault, drawn with a
fixed seed, is injected and, where it lasts, lifted again:

- ``kill9``: SIGKILL the bot (the supervisor restarts it);
- ``ledger_stall``: the ledger RPC stalls 20 s (``Sandbox.rpc_faults.stall_s``);
- ``ledger_down``: the ledger RPC answers 503 for 10 s;
- ``bus_restart``: the relay service restarts (every websocket dropped);
- ``sandbox_restart``: every sandbox service restarts (the state stays: same ledger);
- ``notify_drop``: the next ``quote_status`` for the bot is lost (``bus.notify_faults``);
- ``store_immutable``: ``chattr +i`` on the store's directory and files for 10 s (as root;
  skipped, and said so, where ``chattr`` fails).

The driver reads ``/control/status`` every second and acts as an operator only when it must:
a pause that still holds 60 s after the last fault was lifted is resumed (``/control/resume``;
with ``accept_balances`` when plain resume is refused), and each such action is counted. No
outside balance change is ever made, so every reconciliation pause is a false one.

At the end (faults stop, 30 s to settle, SIGTERM) it reports: faults injected by kind, pauses
(true: explained by a fault in force; false: the rest), operator actions, over-commitments
(status samples with a negative free balance), quotes never terminal (open in the store past
their deadline + 30 s), answers the relay received from the bot that are missing from its
journal, and duplicate nonces among them.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from benchmarks.chaos_report import markdown, plot
from benchmarks.common import Progress, machine_info, scratch_dir, write_json
from sandbox.config import SandboxConfig
from sandbox.server import Sandbox
from solver.core import fact_codec
from solver.core import facts as f
from solver.core.clock import micros
from solver.protocol.keys import SecretKey
from tests.app.harness import DEFAULT_BALANCES, NEAR, USDC, bot_overrides, fund, sandbox_config
from tests.app.test_cli_run import write_config

NAME = "chaos"
DEFAULT_SECONDS = 900.0
QUICK_SECONDS = 90.0
KEY_ENV = "SOLVER_CHAOS_KEY"
TOKEN_ENV = "SOLVER_CONTROL_TOKEN"
TOKEN = "chaos-control-token"
FAULTS = (
    "kill9",
    "ledger_stall",
    "ledger_down",
    "bus_restart",
    "sandbox_restart",
    "notify_drop",
    "store_immutable",
)
OPERATOR_AFTER_S = 60.0
EXPLAINS = {
    "store": ("store_immutable",),
    "stale": ("ledger_stall", "ledger_down", "sandbox_restart", "kill9"),
    "ledger": ("ledger_stall", "ledger_down", "sandbox_restart"),
    "balances": ("ledger_stall", "ledger_down", "sandbox_restart"),
    "salt": ("ledger_stall", "ledger_down", "sandbox_restart"),
    "bus": ("bus_restart", "sandbox_restart", "kill9"),
    "connect": ("bus_restart", "sandbox_restart", "kill9"),
}
"""Which faults can explain a pause, by a word of its reason; a reconciliation pause is never
explained (no outside balance change is made)."""


@dataclass
class Run:
    """What the soak saw, appended to as it goes."""

    started: float = field(default_factory=time.monotonic)
    faults: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    operator_actions: list[dict[str, Any]] = field(default_factory=list)
    active: set[str] = field(default_factory=set)
    lifted: dict[str, float] = field(default_factory=dict)  # kind -> when it last ended (run s)
    skipped: Counter[str] = field(default_factory=Counter)

    def now(self) -> float:
        return round(time.monotonic() - self.started, 2)


def chaos_sandbox(state: Path, seed: int) -> SandboxConfig:
    base = sandbox_config(state / "sandbox")
    takers = {
        "enabled": True,
        "count": 4,
        "requests_per_s": 3.0,
        "size_usd_median": 30.0,
        "size_usd_sigma": 0.5,
        "tolerance_bps": 200.0,
        "wait_ms": 3000,
        "funding_usd": 50_000.0,
        "pairs": [{"base": NEAR, "quote": USDC}],
    }
    return base.model_copy(update={"takers": base.takers.model_validate(takers), "seed": seed})


class Bot:
    """``solver run`` as a child, restarted by :meth:`ensure` after it died."""

    def __init__(self, config: Path, env: dict[str, str], logs: Path) -> None:
        self.config, self.env, self.logs = config, env, logs
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def ensure(self) -> bool:
        """Start the bot if it is not running; True when it was (re)started now."""
        if self.process is not None and self.process.poll() is None:
            return False
        self.starts += 1
        out = (self.logs / f"bot-{self.starts:03d}.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "solver.cli", "run", "--config", str(self.config)],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=self.config.parent,
        )
        return True

    def kill(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(10)


async def inject(kind: str, sb: Sandbox, bot: Bot, store: Path, account: str, run: Run) -> None:
    """One fault, lifted again before returning when it lasts."""
    start = run.now()
    lasted = 0.0
    run.active.add(kind)
    try:
        lasted = await _apply(kind, sb, bot, store, account, run)
    finally:
        run.active.discard(kind)
        run.lifted[kind] = run.now()
    if lasted >= 0:
        run.faults.append({"at": start, "kind": kind, "lasted_s": lasted})


async def _apply(kind: str, sb: Sandbox, bot: Bot, store: Path, account: str, run: Run) -> float:
    """Inject ``kind`` and lift it; how long it lasted (-1: could not be injected here)."""
    lasted = 0.0
    if kind == "kill9":
        bot.kill(signal.SIGKILL)
        await asyncio.sleep(1.0)
        bot.ensure()
    elif kind == "ledger_stall":
        sb.rpc_faults.stall_s, lasted = 20.0, 20.0
        await asyncio.sleep(lasted)
        sb.rpc_faults.stall_s = 0.0
    elif kind == "ledger_down":
        sb.rpc_faults.down, lasted = True, 10.0
        await asyncio.sleep(lasted)
        sb.rpc_faults.down = False
    elif kind in ("bus_restart", "sandbox_restart"):
        names = ["relay"] if kind == "bus_restart" else list(sb.services)
        for name in names:
            await sb.stop_service(name)
        await asyncio.sleep(2.0)
        for name in names:
            await sb.start_service(name)
    elif kind == "notify_drop":
        sb.bus.notify_faults.drop(solver=account, count=1)
    elif kind == "store_immutable":
        targets = [store.parent, *sorted(store.parent.glob(store.name + "*"))]
        if not chattr("+i", targets):
            run.skipped[kind] += 1
            return -1.0
        lasted = 10.0
        try:
            await asyncio.sleep(lasted)
        finally:
            chattr("-i", targets)
    return lasted


def explaining(reasons: str) -> tuple[str, ...] | None:
    """The fault kinds that can explain a pause with these reasons; None: nothing can."""
    if "reconcil" in reasons or "mismatch" in reasons:
        return None
    kinds = {k for word, ks in EXPLAINS.items() if word in reasons for k in ks}
    return tuple(sorted(kinds)) if kinds else FAULTS


def chattr(flag: str, targets: list[Path]) -> bool:
    """``chattr <flag>`` on every target (a few ms: run on the loop); False when it failed."""
    done = subprocess.run(
        ["chattr", flag, *map(str, targets)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


async def sample(http: httpx.AsyncClient, url: str, run: Run) -> dict[str, Any] | None:
    try:
        reply = await http.get(url + "/control/status", timeout=5)
        doc: dict[str, Any] = reply.json()
    except (httpx.HTTPError, ValueError):
        run.samples.append({"at": run.now(), "up": False})
        return None
    free = {a: int(v) for a, v in doc.get("free", {}).items()}
    run.samples.append(
        {
            "at": run.now(),
            "up": True,
            "state": doc.get("state"),
            "paused": doc.get("paused"),
            "open_quotes": doc.get("open_quotes"),
            "overcommitted": sorted(a for a, v in free.items() if v < 0),
        }
    )
    return doc


async def operate(http: httpx.AsyncClient, url: str, doc: dict[str, Any], run: Run) -> None:
    """Resume a pause that outlived by ``OPERATOR_AFTER_S`` every fault that could explain it
    (or any pause nothing explains), as an operator would, and count it."""
    paused = doc.get("paused") or {}
    if doc.get("state") != "PAUSED" and not paused:
        return
    kinds = explaining(orjson.dumps(paused).decode())
    if kinds is not None:
        if run.active & set(kinds):
            return
        ended = max((run.lifted.get(k, -1e9) for k in kinds), default=-1e9)
        first_paused = next(
            (s["at"] for s in reversed(run.samples) if s.get("up") and not s.get("paused")), 0.0
        )
        if run.now() - max(ended, first_paused) < OPERATOR_AFTER_S:
            return
    body: dict[str, Any] = {}
    reply = await http.post(url + "/control/resume", json=body, timeout=10)
    if reply.status_code >= 400:
        body = {"accept_balances": True}
        reply = await http.post(url + "/control/resume", json=body, timeout=10)
    run.operator_actions.append(
        {"at": run.now(), "paused": paused, "body": body, "status": reply.status_code}
    )


def journal_hashes(store: Path) -> tuple[set[str], list[str]]:
    """Quote hashes of the bot's ``QuoteOpened`` facts and every nonce it journaled."""
    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT kind, body FROM journal ORDER BY seq").fetchall()
    conn.close()
    hashes, nonces = set(), []
    for kind, body in rows:
        fact = fact_codec.decode(kind, orjson.loads(body))
        if type(fact) is f.QuoteOpened:
            hashes.add(fact.quote_hash)
            nonces.append(fact.nonce.hex())
    return hashes, nonces


def never_terminal(store: Path, cutoff_iso: str) -> int:
    """Quotes past their deadline at ``cutoff_iso`` and not terminal: the won ones from their
    rows, the open ones from the journal (an open quote has a row only if it is sampled, issue
    29; the journal says which ended)."""
    with sqlite3.connect(store) as conn:
        (won,) = conn.execute(
            "SELECT count(*) FROM quotes WHERE state IN ('WON', 'SETTLING') AND deadline < ?",
            (cutoff_iso,),
        ).fetchone()
        rows = conn.execute(
            "SELECT kind, body FROM journal WHERE kind IN ('quote_opened', 'quote_moved', "
            "'quotes_lost') ORDER BY seq"
        ).fetchall()
    conn.close()
    cutoff = datetime.fromisoformat(cutoff_iso)
    cutoff = cutoff if cutoff.tzinfo is not None else cutoff.replace(tzinfo=UTC)  # UTC, as stored
    still_open: dict[str, int] = {}
    for kind, body in rows:
        fact = fact_codec.decode(kind, orjson.loads(body))
        if type(fact) is f.QuoteOpened:
            still_open[fact.quote_id] = fact.deadline
        elif type(fact) is f.QuotesLost:
            for quote_id in fact.quote_ids:
                still_open.pop(quote_id, None)
        elif type(fact) is f.QuoteMoved:
            still_open.pop(fact.quote_id, None)
    return int(won) + sum(1 for deadline in still_open.values() if deadline < micros(cutoff))


def relay_answers(sb: Sandbox, account: str) -> list[tuple[str, str]]:
    """(quote_hash, nonce) of every answer of ``account`` the relay took."""
    out = []
    for record in sb.bus.quotes.values():
        payload = record.signed_data.get("payload", {})
        message = orjson.loads(payload.get("message", "{}")) if isinstance(payload, dict) else {}
        if message.get("signer_id") == account:
            out.append((record.quote_hash, base64.b64decode(payload["nonce"]).hex()))
    return out


def figures(
    run: Run, sb: Sandbox, account: str, store: Path, end_iso: str, bot_starts: int
) -> dict[str, Any]:
    answers = relay_answers(sb, account)
    journaled, journal_nonces = journal_hashes(store)
    relay_nonces = [nonce for _, nonce in answers]
    pauses = pause_episodes(run)
    return {
        "faults": dict(Counter(x["kind"] for x in run.faults)),
        "faults_skipped": dict(run.skipped),
        "bot_starts": bot_starts,
        "pauses_true": sum(1 for p in pauses if p["explained"]),
        "pauses_false": sum(1 for p in pauses if not p["explained"]),
        "pause_episodes": pauses,
        "operator_actions": len(run.operator_actions),
        "overcommitted_samples": sum(1 for s in run.samples if s.get("overcommitted")),
        "quotes_never_terminal": never_terminal(store, end_iso),
        "relay_answers": len(answers),
        "answers_missing_from_journal": sum(1 for h, _ in answers if h not in journaled),
        "duplicate_nonces": (len(relay_nonces) - len(set(relay_nonces)))
        + (len(journal_nonces) - len(set(journal_nonces))),
        "settled_batches": sb.bus.stats.settled,
        "taker_requests": sb.takers.stats.requests if sb.takers else 0,
    }


def pause_episodes(run: Run) -> list[dict[str, Any]]:
    """Contiguous runs of samples with a pause, each judged against the faults in force."""
    episodes: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for s in run.samples:
        paused = s.get("paused") or {}
        if s.get("up") and paused:
            if current is None:
                current = {"from": s["at"], "to": s["at"], "reasons": orjson.dumps(paused).decode()}
                episodes.append(current)
            current["to"] = s["at"]
        elif s.get("up"):
            current = None
    for ep in episodes:
        ep["explained"] = (
            any(x["at"] - 5 <= ep["from"] <= x["at"] + x["lasted_s"] + 30 for x in run.faults)
            and "mismatch" not in ep["reasons"]
            and "reconcil" not in ep["reasons"]
        )
    return episodes


async def soak(results: Path, seconds: float, quick: bool, progress: Progress) -> dict[str, Any]:
    state = scratch_dir(results, NAME)
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True, mode=0o700)
    rng = random.Random(24)
    gaps = (5.0, 12.0) if quick else (15.0, 40.0)
    run = Run()
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    async with Sandbox(chaos_sandbox(state, seed=24)) as sb:
        fund(sb, account, DEFAULT_BALANCES)
        store = state / "store" / "solver.sqlite"
        store.parent.mkdir(parents=True, exist_ok=True)
        port = free_port()
        overrides = bot_overrides(sb, account, KEY_ENV, store)
        overrides |= {"metrics.listen": f"127.0.0.1:{port}", "log.level": "INFO"}
        config = write_config(state / "bot.yaml", overrides)
        env = {**os.environ, KEY_ENV: key.to_text(), TOKEN_ENV: TOKEN}
        bot = Bot(config, env, state)
        bot.ensure()
        url = f"http://127.0.0.1:{port}"
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=headers) as http:
            end = time.monotonic() + seconds
            next_fault = time.monotonic() + rng.uniform(*gaps)
            fault: asyncio.Task[None] | None = None
            while time.monotonic() < end:
                bot.ensure()
                doc = await sample(http, url, run)
                if doc is not None and (fault is None or fault.done()):
                    await operate(http, url, doc, run)
                if (fault is None or fault.done()) and time.monotonic() >= next_fault:
                    kind = rng.choice(FAULTS)
                    fault = asyncio.create_task(inject(kind, sb, bot, store, account, run))
                    next_fault = time.monotonic() + rng.uniform(*gaps)
                progress.update(f"{run.now():.0f} s, {len(run.faults)} faults")
                await asyncio.sleep(1.0)
            if fault is not None:
                await fault
            settle_until = time.monotonic() + 30
            while time.monotonic() < settle_until:
                bot.ensure()
                if (doc := await sample(http, url, run)) is not None:
                    await operate(http, url, doc, run)
                await asyncio.sleep(1.0)
        end_iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 30))
        bot.kill(signal.SIGTERM)
        result = figures(run, sb, account, store, end_iso, bot.starts)
    shutil.rmtree(state / "sandbox", ignore_errors=True)
    return {
        "seconds": seconds,
        "quick": quick,
        **result,
        "faults_timeline": run.faults,
        "operator_timeline": run.operator_actions,
        "samples": run.samples,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def run(
    results: Path, *, quick: bool, seconds: float | None, command: str, quiet: dict[str, Any]
) -> dict[str, Any]:
    """Entry of ``python -m benchmarks.run --only chaos``: writes chaos.json/.md/.png."""
    span = seconds or (QUICK_SECONDS if quick else DEFAULT_SECONDS)
    doc = await soak(results, span, quick, Progress(NAME, every_s=10.0))
    doc |= {"command": command, "quiet": quiet, "machine": machine_info()}
    write_json(results / f"{NAME}.json", doc)
    (results / f"{NAME}.md").write_text(markdown(doc), encoding="utf-8")
    plot(doc, results / f"{NAME}.png")
    return doc
