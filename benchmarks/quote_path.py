"""Issue 4: the bot's quote path, end to end, over a real websocket.

Three processes on this machine:

- the **bot** — the real ``solver run --config <tmp yaml>``, key in an environment variable,
  logging at INFO; single-threaded (asyncio), so it uses one core at most (``--pin`` pins it);
- the **sandbox** (``benchmarks.sandbox_proc``): ledger RPC (salt, balances, fee, nonce checks)
  and the reference-price feed the bot polls, beside
- this process, the **driver**: a websocket server on ``127.0.0.1:0`` that plays the relay. The
  bot's ``bus.ws_url`` points at it; it confirms the two subscriptions, sends ``quote`` events
  and answers every ``quote_response`` with ``"OK"`` like a relay. A sample of the answers is
  verified (signature, recipient, mirrored amounts).

Latency is the time from just before the driver writes an event to the moment the driver's
loop reads the matching ``quote_response``: what a relay would see, including both websocket
stacks and the driver's own loop. Phases: fixed rates (500 and 2000 requests/s, paced in the
event loop's ~1 ms ticks) and saturation (as fast as the bot answers, ``inflight`` requests
outstanding). A request unanswered ``ANSWER_GRACE_S`` after its phase ends is *missing*.

Every request is quotable: sizes between 2 and 4000 USD on pairs with 1..5000 USD limits, the
``spread`` strategy, funding of 1e9 USD per token (reservations never run out),
``max_quotes_per_s`` 100000. ``min_deadline_ms`` is 1000 with ``deadline_margin_ms`` 0, so the
bot's deadline handling (``check_deadlines``, reservation release on the balance refresh) runs
at the rate it quotes — the steady state of a long-running bot — within a 10 s phase.

A phase during which other processes (a shared machine) used more than 0.3 cores is run
again, at most ``MAX_RETRIES`` times in all. When a target is missed (``--profile auto``) the
bot is profiled with py-spy during two more phases, at 500 requests/s and at saturation;
without py-spy, :func:`cprofile_engine` profiles the in-process path instead. The in-process
path is also timed on its own (``engine_only``): parse → decide → sign → store → frame, with no
socket, which separates the bot's own cost from the transport.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import cProfile
import gc
import io
import logging
import os
import pstats
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import yaml
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from benchmarks.common import (
    Child,
    CpuMeter,
    Progress,
    Stages,
    analyse_collapsed,
    calibrate,
    dirty_note,
    disturbed,
    log_tail,
    machine_info,
    md_table,
    pin,
    plot_stages,
    profile_markdown,
    pyspy_finish,
    pyspy_start,
    scratch_dir,
    stage_table,
    start_child,
    stop_child,
    summarize,
    two_core_layout,
    wait_for_quiet,
    write_json,
)
from benchmarks.sandbox_proc import SandboxHandle, start_sandbox, stop_sandbox
from sandbox.config import load_sandbox_config
from solver.config import BotConfig, load_bot_config
from solver.errors import SolverError
from solver.protocol.keys import SecretKey
from solver.protocol.signing import parse_signed, verify_signed

NAME = "quote_path"
KEY_ENV = "BENCH_SOLVER_KEY"
USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
MIN_DEADLINE_MS = 1000
FUNDING_USD = 1e9
ANSWER_GRACE_S = 3.0  # the relay waits at most 3000 ms for answers (protocol-notes 6)
TARGET_P99_MS_AT_2000 = 2.0
TARGET_SATURATION_QPS = 4000.0
SAT_INFLIGHT = 256
VERIFY_FIRST, VERIFY_EVERY = 50, 100
COOL_DOWN_S = 2.0
MAX_RETRIES = 2


# ---------------------------------------------------------------------------- requests


def request_templates(
    prices_usd: dict[str, float], n: int = 4096, seed: int = 4
) -> list[dict[str, Any]]:
    """Quote event data without ``quote_id``: NEAR/USDC twice as often as ETH/USDC, both ways,
    30 % exact-out, lognormal sizes (median 50 USD) clipped to 2..4000 USD."""
    decimals = {USDC: 6, NEAR: 24, ETH: 18}
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = NEAR if rng.random() < 2 / 3 else ETH
        asset_in, asset_out = (base, USDC) if rng.random() < 0.5 else (USDC, base)
        exact_out = bool(rng.random() < 0.3)
        size_usd = float(np.clip(50.0 * rng.lognormal(0.0, 0.9), 2.0, 4000.0))
        fixed = asset_out if exact_out else asset_in
        amount = int(size_usd / prices_usd[fixed] * 10 ** decimals[fixed])
        out.append(
            {
                "core_asset_identifier_in": asset_in,
                "core_asset_identifier_out": asset_out,
                ("exact_amount_out" if exact_out else "exact_amount_in"): str(amount),
                "min_deadline_ms": MIN_DEADLINE_MS,
            }
        )
    return out


def check_answer(template: dict[str, Any], params: dict[str, Any], contract: str) -> str | None:
    """None when the answer is a valid, signed mirror of the request; else what is wrong."""
    try:
        verified = verify_signed(parse_signed(params["signed_data"]))
    except (SolverError, KeyError) as exc:
        return f"signature: {type(exc).__name__}"
    if verified.recipient != contract:
        return "recipient"
    intents = verified.message.intents
    diff = getattr(intents[0], "diff", None) if len(intents) == 1 else None
    if not diff:
        return "not one token_diff"
    a_in, a_out = template["core_asset_identifier_in"], template["core_asset_identifier_out"]
    amount_in, amount_out = diff.get(a_in, 0), -diff.get(a_out, 0)
    output = params.get("quote_output", {})
    if "exact_amount_in" in template:
        if amount_in != int(template["exact_amount_in"]) or output.get("amount_out") != str(
            amount_out
        ):
            return "amounts"
    elif amount_out != int(template["exact_amount_out"]) or output.get("amount_in") != str(
        amount_in
    ):
        return "amounts"
    if amount_in <= 0 or amount_out <= 0:
        return "signs"
    return None


# ---------------------------------------------------------------------------- the driver


@dataclass
class Phase:
    name: str
    kind: str  # "rate" | "saturation"
    seconds: float
    rate: float = 0.0
    inflight: int = SAT_INFLIGHT
    recorded: bool = True


@dataclass
class PhaseData:
    phase: Phase
    started_ns: int = 0
    ended_ns: int = 0
    sent: int = 0
    answered: int = 0
    late: int = 0
    missing: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    send_offsets_ns: list[int] = field(default_factory=list)  # of answered requests
    answered_at_ns: list[int] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    attempts_other_cores: list[float] = field(default_factory=list)  # per run of the phase


class Relay:
    """The loopback driver: a one-solver relay that sends quote events and times the answers."""

    def __init__(self, templates: list[dict[str, Any]], contract: str) -> None:
        self.templates = templates
        self.contract = contract
        self.ws: ServerConnection | None = None
        self.subscribed = asyncio.Event()
        self.closed = asyncio.Event()
        self.sub_ids: dict[str, str] = {}
        self.extensions: list[str] = []
        self.outstanding: dict[str, tuple[PhaseData, int, int]] = {}  # qid -> (phase, tpl, t)
        self.space = asyncio.Event()
        self.inflight = 0
        self.verified = 0
        self.invalid: Counter[str] = Counter()
        self.unknown_answers = 0
        self.other_frames: Counter[str] = Counter()
        self.send_errors = 0
        self._seq = 0

    @property
    def sent_total(self) -> int:
        return self._seq

    async def handler(self, ws: ServerConnection) -> None:
        if self.ws is not None:
            await ws.close(1013, "one solver only")
            return
        self.ws = ws
        self.extensions = [type(e).__name__ for e in ws.protocol.extensions]
        try:
            while True:
                raw = await ws.recv(decode=False)
                now = time.perf_counter_ns()
                frame = orjson.loads(raw)
                method = frame.get("method")
                if method == "quote_response":
                    await self._on_answer(ws, frame, now)
                elif method == "subscribe":
                    kind = frame["params"][0]
                    sub = self.sub_ids.setdefault(kind, f"{kind}-sub")
                    await ws.send(
                        orjson.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": sub})
                    )
                    if {"quote", "quote_status"} <= self.sub_ids.keys():
                        self.subscribed.set()
                else:
                    self.other_frames[str(method)] += 1
        except ConnectionClosed:
            pass
        finally:
            self.ws = None
            self.closed.set()

    async def _on_answer(self, ws: ServerConnection, frame: dict[str, Any], now: int) -> None:
        params = frame["params"][0]
        entry = self.outstanding.pop(params.get("quote_id"), None)
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": "OK"}))
        if entry is None:
            self.unknown_answers += 1
            return
        data, template, sent_ns = entry
        data.answered += 1
        data.latencies_ns.append(now - sent_ns)
        data.send_offsets_ns.append(sent_ns - data.started_ns)
        data.answered_at_ns.append(now)
        self.inflight -= 1
        self.space.set()
        if self.verified < VERIFY_FIRST or data.answered % VERIFY_EVERY == 0:
            self.verified += 1
            problem = check_answer(self.templates[template], params, self.contract)
            if problem:
                self.invalid[problem] += 1

    async def send_one(self, data: PhaseData) -> None:
        ws = self.ws
        if ws is None:
            raise RuntimeError("the bot is not connected")
        self._seq += 1
        template = self._seq % len(self.templates)
        quote_id = f"bench-{self._seq}"
        event = {
            "jsonrpc": "2.0",
            "method": "event",
            "params": {
                "subscription": self.sub_ids["quote"],
                "data": {"quote_id": quote_id, **self.templates[template]},
                "metadata": {"partner_id": "bench"},
            },
        }
        frame = orjson.dumps(event)
        self.outstanding[quote_id] = (data, template, time.perf_counter_ns())
        self.inflight += 1
        data.sent += 1
        try:
            await ws.send(frame, text=True)
        except ConnectionClosed:
            self.send_errors += 1
            raise

    async def run_rate(self, data: PhaseData, progress: Progress) -> None:
        phase = data.phase
        loop = asyncio.get_running_loop()
        total = int(phase.rate * phase.seconds)
        t0 = loop.time()
        i = 0
        while i < total:
            due = min(total, int((loop.time() - t0) * phase.rate) + 1)
            while i < due:
                await self.send_one(data)
                i += 1
            progress.update(self._status(data, loop.time() - t0))
            await asyncio.sleep(max(0.0, t0 + i / phase.rate - loop.time()))

    async def run_saturation(self, data: PhaseData, progress: Progress) -> None:
        phase = data.phase
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        end = t0 + phase.seconds
        self.inflight = 0
        while loop.time() < end:
            while self.inflight < phase.inflight:
                await self.send_one(data)
            progress.update(self._status(data, loop.time() - t0))
            self.space.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.space.wait(), 0.2)
            self._expire(loop.time() - ANSWER_GRACE_S)

    def _expire(self, older_than_loop_s: float) -> None:
        """Free the in-flight slots of requests unanswered for longer than the grace."""
        limit_ns = time.perf_counter_ns() - int(ANSWER_GRACE_S * 1e9)
        for quote_id, (data, _, sent_ns) in list(self.outstanding.items()):
            if sent_ns < limit_ns:
                del self.outstanding[quote_id]
                data.missing += 1
                self.inflight -= 1

    def _status(self, data: PhaseData, elapsed: float) -> str:
        p = data.phase
        recent = data.latencies_ns[-2000:]
        p99 = float(np.percentile(recent, 99)) / 1e6 if recent else float("nan")
        return (
            f"{p.name}: {elapsed:4.1f}/{p.seconds:.0f} s  sent {data.sent}  "
            f"answered {data.answered}  recent p99 {p99:.2f} ms"
        )

    def _pending(self, data: PhaseData) -> bool:
        return any(d is data for d, _, _ in self.outstanding.values())

    async def drain(self, data: PhaseData) -> None:
        """Wait for the phase's answers (at most the grace); the rest are missing."""
        deadline = time.monotonic() + ANSWER_GRACE_S
        # Polled: answers arrive on the socket; there is no event to wait on per phase.
        while time.monotonic() < deadline and self._pending(data):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        for quote_id, (d, _, _) in list(self.outstanding.items()):
            if d is data:
                del self.outstanding[quote_id]
                data.missing += 1


# ---------------------------------------------------------------------------- the bot's log


_STOPPED_RE = re.compile(
    r"requests=(?P<requests>\d+) quoted=(?P<quoted>\d+) skipped\[(?P<skipped>[^\]]*)\] "
    r"outcomes=(?P<outcomes>\{[^}]*\}) decision_us p50=(?P<p50>\d+) p99=(?P<p99>\d+) "
    r"open=(?P<open>\d+)"
)


def parse_summary(line: str) -> dict[str, Any] | None:
    match = _STOPPED_RE.search(line)
    if match is None:
        return None
    skipped = {}
    for item in match["skipped"].split(","):
        if "=" in item:
            k, v = item.split("=", 1)
            skipped[k] = int(v)
    outcomes = ast.literal_eval(match["outcomes"])
    return {
        "requests": int(match["requests"]),
        "quoted": int(match["quoted"]),
        "skipped": skipped,
        "outcomes": outcomes,
        "decision_us_p50": int(match["p50"]),
        "decision_us_p99": int(match["p99"]),
        "open_quotes": int(match["open"]),
    }


def _log_time(line: str) -> float | None:
    """Seconds of a ``2026-01-01 12:00:00,123`` log line prefix (its own day only)."""
    try:
        moment = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
    except ValueError:
        return None
    return moment.timestamp()


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
    first = _log_time(lines[0]) if lines else None
    summaries = []
    for line in lines:
        if " summary " in line and (summary := parse_summary(line)):
            at = _log_time(line)
            if at is not None and first is not None:
                summary["t_s"] = round(at - first, 1)
            summaries.append(summary)
    final = next((parse_summary(line) for line in reversed(lines) if "stopped:" in line), None)
    return {
        "lines": len(lines),
        "by_level": dict(levels),
        "warnings_and_errors": dict(notable.most_common(8)),
        "tracebacks": sum(1 for line in lines if line.startswith("Traceback")),
        "periodic_summaries": summaries,
        "final_summary": final,
        "tail": lines[-8:],
    }


# ---------------------------------------------------------------------------- configuration


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
    return load_bot_config("config/default.yaml").with_overrides(
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


def funding(prices: dict[str, float]) -> dict[str, int]:
    decimals = {USDC: 6, NEAR: 24, ETH: 18}
    return {a: int(FUNDING_USD / prices[a]) * 10 ** decimals[a] for a in decimals}


# ---------------------------------------------------------------------------- profile stages


_JOBS = ("refresh_balances", "refresh_salt", "refresh_fee", "poll_sandbox", "poll_static")


def _in(*paths: str) -> Callable[[str], bool]:
    """A frame test: the frame's code is in one of these files (robust to renamed functions)."""
    return lambda frame: any(f"({path})" in frame for path in paths)


STAGES: Stages = [
    # The first stage (in this order) found anywhere in a stack gets the sample.
    (
        "job: check_deadlines (is_nonce_used RPCs for expired quotes)",
        lambda f: "check_deadlines" in f or "is_nonce_used" in f,
    ),
    (
        "operations: reconciliation on each balance snapshot, risk tick, PnL",
        _in("solver/operations.py", "solver/core/risk.py", "solver/core/pnl.py"),
    ),
    (
        "jobs: balance / salt / fee / price refresh",
        lambda f: f.split(" (")[0].endswith(_JOBS) or "(solver/io/price_feeds.py)" in f,
    ),
    ("job: periodic summary line", lambda f: "summary (solver/app.py" in f),
    ("job: settlement polling", lambda f: "poll_settlements" in f),
    (
        "send quote_response (JSON, websockets frame, deflate, socket write)",
        lambda f: "send_quote_response (" in f,
    ),
    (
        "engine: store.record_quote (SQLite transaction per quote)",
        lambda f: "record_quote (solver/io/store.py" in f,
    ),
    ("engine: store, other writes", _in("solver/io/store.py", "solver/io/store_schema.py")),
    ("engine: sign (message, sha256, ed25519, base58)", _in("solver/protocol/quote_signing.py")),
    (
        "engine: decide (filters, strategy, limits, reservation)",
        _in("solver/core/quoting.py", "solver/core/inventory.py"),
    ),
    ("engine: the rest (request, nonce, book, metrics, outbox)", _in("solver/engine.py")),
    ("ws client: parse + validate + dispatch frames", _in("solver/io/bus_ws.py")),
    (
        "HTTP client of the jobs (httpx, httpcore, anyio, h11), stack cut above it",
        lambda f: any(lib in f for lib in ("httpx/", "httpcore/", "anyio/", "h11/")),
    ),
    ("websockets: receive (frame parsing, inflate)", lambda f: "websockets/" in f),
    ("asyncio: event loop, tasks, transports", lambda f: "asyncio/" in f),
]


# ---------------------------------------------------------------------------- in-process path


class GcWatch:
    """Counts the garbage collector's passes per generation and times them (gc.callbacks):
    a full (generation 2) pass walks every tracked object, the open book included."""

    def __init__(self) -> None:
        self.durations: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.durations[info["generation"]].append((time.perf_counter() - self._started) * 1e3)

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {
            f"gen{g}": {
                "count": len(d),
                "total_ms": round(sum(d), 1),
                "max_ms": round(max(d), 2) if d else 0.0,
            }
            for g, d in self.durations.items()
        }


class _FakeSocket:
    """Stands in for the bot's websocket: records when each frame was handed over."""

    def __init__(self) -> None:
        self.last_ns = 0
        self.frames = 0

    async def send(self, frame: bytes, text: bool = False) -> None:
        self.last_ns = time.perf_counter_ns()
        self.frames += 1


def _fresh_store(path: Path) -> Path:
    """A store path with no file left by an earlier run (the bot would recover its quotes)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def _refresh_inputs(app: Any, now: datetime) -> None:
    """What the bot's scheduled jobs would do: fresh salt, prices and balances."""
    prices = {USDC: 1.0, NEAR: 3.0, ETH: 3000.0}
    app.state.set_salt(bytes(4), now)
    for asset, usd in prices.items():
        app.state.set_price(asset, usd, now)
    app.inventory.set_confirmed(funding(prices), now)


def _engine_app(templates: list[dict[str, Any]], store: Path) -> Any:
    from solver.app import SolverApp, utc_now

    key = SecretKey.generate()
    info = {
        "verifier_contract": "intents.sandbox",
        "relay_rpc": "http://127.0.0.1:9/rpc",
        "chain_rpc": "http://127.0.0.1:9/",
        "prices": "http://127.0.0.1:9/prices",
    }
    account = key.public_key.implicit_account_id()
    config = bot_config(info, "ws://127.0.0.1:9/ws", account, _fresh_store(store), 0)
    app = SolverApp(config, key)
    _refresh_inputs(app, utc_now())
    # Private seams of the ws client, used only here: a connected socket and a subscription.
    app.ws._ws = cast(Any, _FakeSocket())
    app.ws._subs["quote-sub"] = "quote"
    return app


def _ended(app: Any) -> int:
    """Requests the engine finished without an answer (skipped or failed)."""
    stats = app.engine.stats
    return int(sum(stats.skipped.values()) + stats.send_failed)


async def _drive_engine(
    app: Any, templates: list[dict[str, Any]], n: int, tag: str
) -> tuple[list[int], float]:
    fake: _FakeSocket = app.ws._ws
    per_call: list[int] = []
    started = time.perf_counter()
    for i in range(n):
        if i % 500 == 0:
            _refresh_inputs(app, datetime.now(UTC))  # never stale, however slow the machine
        data = {"quote_id": f"{tag}-{i}", **templates[i % len(templates)]}
        raw = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "method": "event",
                "params": {"subscription": "quote-sub", "data": data, "metadata": {}},
            }
        )
        frames = fake.frames
        ended = _ended(app)
        t0 = time.perf_counter_ns()
        app.ws.handle_frame(raw)
        for _ in range(100):  # let the loop run until the answer is handed over or skipped
            await asyncio.sleep(0)
            if fake.frames > frames or _ended(app) > ended:
                break
        if fake.frames > frames:  # a skip sends nothing
            per_call.append(fake.last_ns - t0)
        app.ws.handle_frame(b'{"jsonrpc":"2.0","id":%d,"result":"OK"}' % app.ws._next_id)
    return per_call, time.perf_counter() - started


async def engine_only(templates: list[dict[str, Any]], n: int, scratch: Path) -> dict[str, Any]:
    """The bot's in-process quote path, no socket: ``handle_frame`` of an event → the answer
    frame handed to the socket, plus the relay's ``OK`` reply; logging at INFO to a file."""
    handler = logging.FileHandler(scratch / "engine-only.log")
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    app = _engine_app(templates, scratch / "engine-only.sqlite")
    try:
        await _drive_engine(app, templates, 2000, "warm")
        stats = app.engine.stats
        quoted_before = stats.quoted
        with GcWatch() as collections:
            per_call, wall = await _drive_engine(app, templates, n, "run")
        quoted = stats.quoted - quoted_before
        result = {
            "requests": n,
            "quoted": quoted,
            "skipped_incl_warm_up": dict(stats.skipped),
            "per_quote_us": summarize([x / 1000 for x in per_call]),
            "throughput_per_s_one_core": round(quoted / wall),
            "garbage_collections": collections.summary(),
            "open_quotes_at_end": len(app.engine.book.quotes),
            "note": "parse+validate+dispatch+decide+sign+frame, and the OK reply; no socket",
        }
    finally:
        await _close_app(app)
        root.removeHandler(handler)
        root.setLevel(old_level)
    return result


async def _close_app(app: Any) -> None:
    await app.http.aclose()
    if getattr(app, "store", None) is not None:
        app.store.close()


async def cprofile_engine(templates: list[dict[str, Any]], n: int, scratch: Path) -> dict[str, Any]:
    """Fallback profile (no py-spy): cProfile of the in-process path, top functions by self time."""
    app = _engine_app(templates, scratch / "engine-cprofile.sqlite")
    try:
        await _drive_engine(app, templates, 1000, "warm")
        profiler = cProfile.Profile()
        profiler.enable()
        await _drive_engine(app, templates, n, "prof")
        profiler.disable()
    finally:
        await _close_app(app)
    out = io.StringIO()
    st = pstats.Stats(profiler, stream=out)
    total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:25]  # type: ignore[attr-defined]
    return {
        "tool": "cProfile (in-process path, no socket)",
        "top_self": [
            {
                "function": f"{name} ({Path(file).name}:{line})",
                "pct_of_busy": round(100 * v[2] / total, 1),
            }
            for (file, line, name), v in rows
        ],
    }


# ---------------------------------------------------------------------------- orchestration


def phases(quick: bool) -> list[Phase]:
    s = 3.0 if quick else 10.0
    return [
        Phase("warm-up", "rate", 1.0 if quick else 2.0, rate=500, recorded=False),
        Phase("rate_500", "rate", s, rate=500),
        Phase("rate_2000", "rate", s, rate=2000),
        Phase("saturation", "saturation", s, inflight=SAT_INFLIGHT),
    ]


def phase_figures(data: PhaseData) -> dict[str, Any]:
    phase = data.phase
    window_s = (data.ended_ns - data.started_ns) / 1e9
    in_window = sum(1 for t in data.answered_at_ns if t <= data.ended_ns)
    lat_ms = [x / 1e6 for x in data.latencies_ns]
    timeline = []
    if data.latencies_ns:
        secs = np.array(data.send_offsets_ns) // 1_000_000_000
        lat = np.array(lat_ms)
        for s in range(int(secs.max()) + 1):
            chunk = lat[secs == s]
            if len(chunk):
                timeline.append(
                    {
                        "second": s,
                        "answered": len(chunk),
                        "p50_ms": round(float(np.percentile(chunk, 50)), 3),
                        "p99_ms": round(float(np.percentile(chunk, 99)), 3),
                    }
                )
    return {
        "kind": phase.kind,
        "target_rate_per_s": phase.rate if phase.kind == "rate" else None,
        "inflight": phase.inflight if phase.kind == "saturation" else None,
        "seconds": round(window_s, 3),
        "sent": data.sent,
        "answered": data.answered,
        "missing": data.missing,
        "offered_rate_per_s": round(data.sent / window_s, 1) if window_s else None,
        "answers_per_s": round(in_window / window_s, 1) if window_s else None,
        # Bot CPU time per answer: robust to sharing the machine (unlike the rates).
        "bot_cpu_us_per_answer": round(data.cpu.get("bot", 0.0) * window_s / in_window * 1e6, 1)
        if in_window
        else None,
        "latency_ms": summarize(lat_ms, 4),
        "cpu_utilisation": data.cpu,
        # Other processes' cores during each run of this phase; a run disturbed by more than
        # DISTURBED_CORES is repeated (at most MAX_RETRIES repeats per benchmark).
        "attempts_other_processes_cores": data.attempts_other_cores,
        "timeline_per_s": timeline,
    }


async def _run_phase(
    relay: Relay, phase: Phase, progress: Progress, pids: dict[str, int | None]
) -> PhaseData:
    data = PhaseData(phase)
    meter = CpuMeter(pids)
    meter.start()
    data.started_ns = time.perf_counter_ns()
    if phase.kind == "rate":
        await relay.run_rate(data, progress)
    else:
        await relay.run_saturation(data, progress)
    data.ended_ns = time.perf_counter_ns()
    data.cpu = meter.stop()
    await relay.drain(data)
    lat = sorted(data.latencies_ns)
    p99 = lat[int(0.99 * (len(lat) - 1))] / 1e6 if lat else float("nan")
    progress.log(
        f"{phase.name}: sent {data.sent}, answered {data.answered}, missing {data.missing}, "
        f"p99 {p99:.2f} ms; CPU (cores) bot {data.cpu['bot']:.2f}, driver "
        f"{data.cpu['driver']:.2f}, other processes {data.cpu['other_processes']:.2f}"
    )
    return data


def profile_phases(quick: bool) -> list[Phase]:
    """Extra phases with py-spy on the bot: a sustainable rate (where the background jobs
    show) and saturation (where the per-quote path shows)."""
    s = 4.0 if quick else 8.0
    return [
        Phase("rate_500 (profiled)", "rate", s, rate=500, recorded=False),
        Phase("saturation (profiled)", "saturation", s, recorded=False),
    ]


async def _profile(
    relay: Relay,
    bot: Child,
    scratch: Path,
    progress: Progress,
    phase: Phase,
    pids: dict[str, int | None],
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """py-spy on the running bot during one more phase."""
    out = scratch / f"pyspy-bot-{phase.kind}-{int(phase.rate)}.txt"
    spy = await pyspy_start(bot.pid, int(phase.seconds), out)
    if spy is None:
        return None, {}
    longer = Phase(phase.name, phase.kind, phase.seconds + 1, phase.rate, phase.inflight, False)
    data = await _run_phase(relay, longer, progress, {**pids, "py-spy": spy.pid})
    text = await pyspy_finish(spy, out)
    if text is None:
        progress.log(f"py-spy failed: {' | '.join(log_tail(spy.log_path, 3))}")
        return None, phase_figures(data)
    result = analyse_collapsed(text, STAGES)
    result["tool"] = (
        "py-spy record --rate 250 --idle --function (pausing it per sample), on the bot"
    )
    return result, phase_figures(data)


@dataclass(frozen=True)
class Options:
    quick: bool = False
    profile: str = "auto"  # auto | always | never
    pin: bool = False  # bot on the last core, driver and sandbox on the others
    deflate: bool = True  # accept permessage-deflate, as the sandbox relay (uvicorn) does
    command: str = ""
    quiet: dict[str, Any] | None = None


async def run(results_dir: Path, options: Options) -> dict[str, Any]:
    progress = Progress(NAME)
    scratch = scratch_dir(results_dir, NAME)
    started = time.monotonic()
    quick = options.quick
    layout = two_core_layout() if options.pin else None
    pinned = pin(0, layout[0]) if layout else False
    sandbox_cfg = load_sandbox_config("config/sandbox.yaml")
    sandbox_cfg = sandbox_cfg.model_copy(
        update={
            "takers": sandbox_cfg.takers.model_copy(update={"enabled": False}),
            "accounts": [],
            "state_dir": scratch / "sandbox-state",
            # Constant prices: the figures must not depend on a random walk.
            "tokens": {
                a: t.model_copy(update={"volatility_annual": 0.0})
                for a, t in sandbox_cfg.tokens.items()
            },
        }
    )
    prices = {asset: spec.usd for asset, spec in sandbox_cfg.tokens.items()}
    templates = request_templates(prices)
    calibration = calibrate()
    progress.log(
        f"calibration: ed25519 sign {calibration['ed25519_sign_us']} µs, base58(64 B) "
        f"{calibration['b58encode_64B_us']} µs ({calibration['ratio_to_design']}x DESIGN's)"
    )
    progress.log("timing the in-process quote path (no socket)")
    engine = await engine_only(templates, 5000 if quick else 20000, scratch)
    progress.log(
        f"in-process: p50 {engine['per_quote_us']['p50']:.0f} µs, "
        f"{engine['throughput_per_s_one_core']} quotes/s incl. the OK reply"
    )

    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    sandbox: SandboxHandle = await start_sandbox(scratch, sandbox_cfg, {account: funding(prices)})
    relay = Relay(templates, sandbox.info["verifier_contract"])
    bot: Child | None = None
    bot_stop: dict[str, Any] | None = None
    results: list[PhaseData] = []
    profiles: dict[str, dict[str, Any]] = {}
    profiled_phases: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    try:
        async with serve(
            relay.handler,
            "127.0.0.1",
            0,
            max_size=1 << 20,
            compression="deflate" if options.deflate else None,
        ) as server:
            port = server.sockets[0].getsockname()[1]
            ws_url = f"ws://127.0.0.1:{port}/ws"
            store = _fresh_store(scratch / "bot.sqlite")
            config = bot_config(sandbox.info, ws_url, account, store, 10)
            config_path = scratch / "bot.yaml"
            config_path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
            solver_bin = str(Path(sys.executable).parent / "solver")
            bot = await start_child(
                "bot",
                [solver_bin, "run", "--config", str(config_path), "--shutdown-wait", "3"],
                scratch / "bot.log",
                env={KEY_ENV: key.to_text()},
            )
            try:
                if layout:
                    pin(bot.pid, layout[1])
                progress.log(f"bot pid {bot.pid} starting; relay on port {port}")
                await _wait_subscribed(relay, bot)
                progress.log(f"bot subscribed (websocket extensions: {relay.extensions or 'none'})")
                pids: dict[str, int | None] = {
                    "bot": bot.pid,
                    "sandbox": sandbox.child.pid,
                    "driver": None,
                }
                retries = MAX_RETRIES
                for phase in phases(quick):
                    attempts: list[float] = []
                    while True:
                        data = await _run_phase(relay, phase, progress, pids)
                        attempts.append(data.cpu["other_processes"])
                        await asyncio.sleep(COOL_DOWN_S)
                        if not phase.recorded or not disturbed(data.cpu) or retries == 0:
                            break
                        retries -= 1
                        progress.log(
                            f"{phase.name} disturbed: other processes used "
                            f"{data.cpu['other_processes']:.2f} cores; repeating it"
                        )
                        await wait_for_quiet(10, progress=progress)
                    data.attempts_other_cores = attempts
                    if phase.recorded:
                        results.append(data)
                measured = targets({d.phase.name: phase_figures(d) for d in results})
                missed = not all(t["met"] for t in measured.values())
                if options.profile == "always" or (options.profile == "auto" and missed):
                    for phase in profile_phases(quick):
                        progress.log(f"profiling the bot with py-spy: {phase.name}")
                        await wait_for_quiet(10, progress=progress)
                        prof, figs = await _profile(relay, bot, scratch, progress, phase, pids)
                        if figs:
                            profiled_phases[phase.name] = figs
                        if prof is None:
                            break
                        profiles[phase.name] = prof
                        await asyncio.sleep(COOL_DOWN_S)
                    if not profiles:
                        progress.log("py-spy unavailable: cProfile of the in-process path instead")
                        profiles["in-process path"] = await cprofile_engine(
                            templates, 5000, scratch
                        )
            finally:
                # SIGTERM while the relay is still up, as in production.
                bot_stop = await stop_child(bot)
                progress.log(f"bot stopped: {bot_stop}")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        progress.log(f"error: {exc}")
    finally:
        if bot is not None and bot_stop is None:
            bot_stop = await stop_child(bot)
            progress.log(f"bot stopped: {bot_stop}")
        sandbox_stop, sandbox_stats = await stop_sandbox(sandbox)
        if pinned:
            pin(0, set(range(os.cpu_count() or 1)))
    if bot_stop is not None and not bot_stop["clean"]:
        errors.append(f"the bot did not exit cleanly on SIGTERM: {bot_stop}")
    figures = {d.phase.name: phase_figures(d) for d in results}
    bot_log = read_bot_log(bot.log_path) if bot is not None else {}
    result: dict[str, Any] = {
        "benchmark": NAME,
        "command": options.command,
        "quick": quick,
        "machine": {**machine_info(), "calibration": calibration, "quiet_check": options.quiet},
        "setup": {
            "processes": "bot (solver run) | sandbox (benchmarks.sandbox_proc) | driver (this)",
            "cpu_pinning": {"driver_and_sandbox": sorted(layout[0]), "bot": sorted(layout[1])}
            if layout and pinned
            else None,
            "websocket_extensions_negotiated": relay.extensions,
            "min_deadline_ms": MIN_DEADLINE_MS,
            "deadline_margin_ms": 0,
            "balance_refresh_ms": 500,
            "max_quotes_per_s": 100000,
            "log_level": "INFO",
            "store": "SQLite journal on (storage defaults: synchronous normal, no request "
            "sampling); a fresh file per run",
            "kill_switch": "max_daily_loss_usd / max_drawdown_usd 1e12 (no fills here), "
            "constant sandbox prices",
            "strategy": "spread 25 bps, pairs wNEAR/USDC and ETH/USDC, both directions",
            "request_sizes_usd": "lognormal median 50, clipped 2..4000; 30 % exact-out",
            "answer_grace_s": ANSWER_GRACE_S,
            "saturation_inflight": SAT_INFLIGHT,
            "latency": "driver clock: before writing the event -> reading the quote_response",
        },
        "targets": targets(figures),
        "phases": figures,
        "engine_only": engine,
        "answers_verified": {"checked": relay.verified, "invalid": dict(relay.invalid)},
        "driver_sent_total": relay.sent_total,
        "unknown_answers": relay.unknown_answers,
        "bot": {"log": bot_log, "shutdown": bot_stop},
        "sandbox": {
            "shutdown": sandbox_stop,
            "log_records": sandbox_stats.get("log_records"),
        },
        "profiles": profiles,
        "profiled_phases": profiled_phases,
        "errors": errors,
        "runtime_s": round(time.monotonic() - started, 1),
    }
    write_json(results_dir / f"{NAME}.json", result)
    (results_dir / f"{NAME}.md").write_text(markdown(result))
    plot(results, results_dir / f"{NAME}.png")
    if any(p.get("groups") for p in profiles.values()):
        plot_stages(profiles, results_dir / f"{NAME}_profile.png", "Bot CPU by stage")
    progress.log(f"wrote {NAME}.json/.md/.png in {result['runtime_s']} s")
    return result


async def _wait_subscribed(relay: Relay, bot: Child) -> None:
    waiter = asyncio.create_task(relay.subscribed.wait())
    exited = asyncio.create_task(bot.process.wait())
    await asyncio.wait({waiter, exited}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    for task in (waiter, exited):
        task.cancel()
    await asyncio.gather(waiter, exited, return_exceptions=True)
    if not relay.subscribed.is_set():
        tail = " | ".join(log_tail(bot.log_path, 5))
        raise RuntimeError(f"the bot did not subscribe within 30 s: {tail}")


def targets(figures: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rate = figures.get("rate_2000")
    if rate:
        p99 = rate["latency_ms"].get("p99", float("nan"))
        out["p99_ms_at_2000_per_s"] = {
            "target": f"<= {TARGET_P99_MS_AT_2000}",
            "measured": p99,
            "missing": rate["missing"],
            "met": bool(p99 <= TARGET_P99_MS_AT_2000 and rate["missing"] == 0),
        }
    sat = figures.get("saturation")
    if sat:
        qps = sat["answers_per_s"] or 0.0
        out["saturation_quotes_per_s"] = {
            "target": f">= {TARGET_SATURATION_QPS:.0f}",
            "measured": qps,
            "met": bool(qps >= TARGET_SATURATION_QPS),
        }
    return out


# ---------------------------------------------------------------------------- report


def markdown(r: dict[str, Any]) -> str:
    phases_ = r["phases"]
    rows = []
    for name, f in phases_.items():
        lat = f["latency_ms"]
        rows.append(
            [
                name,
                f["offered_rate_per_s"],
                f["answers_per_s"],
                f["sent"],
                f["missing"],
                lat.get("p50", float("nan")),
                lat.get("p90", float("nan")),
                lat.get("p99", float("nan")),
                lat.get("max", float("nan")),
                f["bot_cpu_us_per_answer"],
                f"{f['cpu_utilisation'].get('bot', 0):.2f}",
                f"{f['cpu_utilisation'].get('driver', 0):.2f}",
                f"{f['cpu_utilisation'].get('sandbox', 0):.2f}",
                f"{f['cpu_utilisation'].get('other_processes', 0):.2f}",
                len(f.get("attempts_other_processes_cores") or [1]),
            ]
        )
    lines = [
        "# Quote path benchmark (issue 4)",
        "",
        f"Run: `{r.get('command', '.venv/bin/python -m benchmarks.run --only quote_path')}`"
        f"{' (quick)' if r['quick'] else ''}, {r['machine']['date_utc']}, commit "
        f"`{r['machine']['git_commit']}`{dirty_note(r['machine'])}, "
        f"{r['machine']['cpu_model']} × {r['machine']['cpus']}, "
        f"Python {r['machine']['python']}. Total {r['runtime_s']} s.",
        "",
        "The real bot (`solver run`, logging at INFO, one asyncio thread"
        f"{', pinned to its own core' if r['setup']['cpu_pinning'] else ''}) answers a loopback "
        "relay (this driver) over a websocket "
        f"({', '.join(r['setup']['websocket_extensions_negotiated']) or 'no extensions'}); the "
        "sandbox (ledger RPC, prices) runs in a third process. Latency = event written → "
        "`quote_response` read, on the driver's clock. See `benchmarks/README.md`.",
        "",
        f"Machine check: ed25519 sign {r['machine']['calibration']['ed25519_sign_us']} µs, "
        f"base58(64 B) {r['machine']['calibration']['b58encode_64B_us']} µs "
        f"({r['machine']['calibration']['ratio_to_design']}× DESIGN's budgets); other processes "
        f"used {(r['machine'].get('quiet_check') or {}).get('background_cores_at_start', '-')} "
        "cores before the run (per phase: `other procs` below).",
        "",
        "## Targets",
        "",
    ]
    trows = [
        [k, v["target"], v["measured"], "met" if v["met"] else "**MISSED**"]
        for k, v in r["targets"].items()
    ]
    lines += [md_table(["target", "wanted", "measured", ""], trows), ""]
    lines += [
        "## Phases",
        "",
        md_table(
            [
                "phase",
                "offered/s",
                "answered/s",
                "sent",
                "missing",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
                "bot CPU µs/answer",
                "bot",
                "driver",
                "sandbox",
                "other procs",
                "runs",
            ],
            rows,
        ),
        "",
        "`answered/s` counts answers that arrived within the phase's sending window; `missing` "
        f"are requests still unanswered {r['setup']['answer_grace_s']:.0f} s after it. "
        "`bot CPU µs/answer` is the bot's CPU time over the phase per answer sent: 4000 "
        "quotes/s on one core leaves 250 µs. `bot`, `driver`, `sandbox` and `other procs` are "
        "CPU in cores over the phase, the last being processes that are not part of the "
        "benchmark; a run in which those used more than 0.3 cores is repeated (`runs`; at "
        "most 2 repeats in all) and the last run is reported.",
        "",
    ]
    eng = r["engine_only"]
    pq = eng["per_quote_us"]
    lines += [
        "## The bot's own cost (in-process, no socket)",
        "",
        f"`handle_frame(event)` → answer frame handed to the socket, for {eng['requests']:,} "
        f"requests ({eng['quoted']:,} quoted): p50 {pq['p50']:.1f} µs, p99 {pq['p99']:.1f} µs, "
        f"max {pq['max']:.0f} µs; with the relay's OK reply, "
        f"**{eng['throughput_per_s_one_core']:,} quotes/s on one core** without any network.",
        "",
        f"Garbage collection during those requests (the book held "
        f"{eng.get('open_quotes_at_end', 0):,} open quotes at the end): "
        + "; ".join(
            f"{g}: {v['count']} passes, {v['total_ms']} ms in all, longest {v['max_ms']} ms"
            for g, v in (eng.get("garbage_collections") or {}).items()
        )
        + ". A full (gen2) pass stops the loop for its whole length.",
        "",
    ]
    final = (r["bot"]["log"] or {}).get("final_summary")
    if final:
        lines += [
            "## The bot's view",
            "",
            f"Its summary line at shutdown: {final['requests']:,} requests reached the engine of "
            f"{r['driver_sent_total']:,} sent"
            + (
                f" ({r['driver_sent_total'] - final['requests']:,} did not: its websocket client "
                "drops events while 1024 quote tasks are in flight), "
                if r["driver_sent_total"] > final["requests"]
                else ", "
            )
            + f"{final['quoted']:,} quoted, skipped {final['skipped'] or 'none'}; outcomes "
            f"{final['outcomes']}; its own `decision_us` p50 {final['decision_us_p50']} µs / p99 "
            f"{final['decision_us_p99']} µs (as the engine measures it, over its last 20,000 "
            f"quotes); {final['open_quotes']:,} quotes still open at exit.",
            "",
        ]
    log = r["bot"]["log"] or {}
    periodic = log.get("periodic_summaries") or []
    if periodic:
        lines += [
            "Its periodic summary lines (every 10 s): requests so far, quotes retired as LOST "
            "(deadline passed, nonce unused) and quotes still open. Every quote's deadline is "
            "1 s after it is made, so a book much larger than one second of quotes is a "
            "backlog of expiry checks.",
            "",
            md_table(
                [
                    "s since start",
                    "requests",
                    "quoted",
                    "LOST (retired)",
                    "open quotes",
                    "decision p99 µs",
                ],
                [
                    [
                        p.get("t_s", "-"),
                        p["requests"],
                        p["quoted"],
                        p["outcomes"].get("LOST", 0),
                        p["open_quotes"],
                        p["decision_us_p99"],
                    ]
                    for p in periodic
                ],
            ),
            "",
        ]
    if log.get("warnings_and_errors"):
        lines += ["Warnings and errors in the bot's log (numbers masked):", ""]
        lines += [f"- {n}× `{m}`" for m, n in log["warnings_and_errors"].items()]
        lines += [""]
    shutdown = r["bot"]["shutdown"] or {}
    lines += [
        f"Bot log: {log.get('lines', 0)} lines {log.get('by_level', {})}, "
        f"{log.get('tracebacks', 0)} tracebacks. Shutdown on SIGTERM: exit code "
        f"{shutdown.get('exit_code')} after {shutdown.get('shutdown_s')} s"
        f"{' (KILLED after the timeout)' if shutdown.get('killed_after_timeout') else ''}. "
        f"Answers verified (signature, recipient, amounts): {r['answers_verified']['checked']}, "
        f"invalid: {r['answers_verified']['invalid'] or 'none'}.",
        "",
    ]
    profiles = r.get("profiles") or {}
    if profiles:
        lines += ["## Where the time goes", ""]
        staged = {n: p for n, p in profiles.items() if p.get("groups")}
        if staged:
            runs = r.get("profiled_phases") or {}
            lines += [
                "py-spy on the bot during extra phases ("
                + "; ".join(
                    f"{n}: {runs.get(n, {}).get('answers_per_s', '-')} answers/s, "
                    f"{runs.get(n, {}).get('bot_cpu_us_per_answer', '-')} µs bot CPU per answer, "
                    f"main thread busy in {p['busy_share_pct']}% of samples"
                    for n, p in staged.items()
                )
                + "). Each busy sample goes to the first stage of this table's order found in "
                "its stack; shares are of busy samples.",
                "",
                stage_table(staged),
                "",
            ]
        for name, prof in profiles.items():
            lines += [f"### {name}", ""]
            lines += profile_markdown(prof, "the bot", rows=15, level="####", stages=False)
    if r["errors"]:
        lines += ["## Errors", ""] + [f"- {e}" for e in r["errors"]] + [""]
    lines += ["Plots: `quote_path.png` (latency CDF and p99 over time)"]
    if any(p.get("groups") for p in profiles.values()):
        lines[-1] += ", `quote_path_profile.png` (profiles by stage)"
    lines[-1] += ". All figures: `quote_path.json`."
    return "\n".join(lines) + "\n"


def plot(results: list[PhaseData], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for data in results:
        if not data.latencies_ns:
            continue
        lat = np.sort(np.array(data.latencies_ns) / 1e6)
        y = np.arange(1, len(lat) + 1) / len(lat)
        ax1.plot(lat, y, label=f"{data.phase.name} (n={len(lat):,})")
        offs = np.array(data.send_offsets_ns) / 1e9
        bins = np.floor(offs / 0.5)
        xs, p99s = [], []
        arr = np.array(data.latencies_ns) / 1e6
        for b in np.unique(bins):
            chunk = arr[bins == b]
            xs.append(b * 0.5)
            p99s.append(np.percentile(chunk, 99))
        ax2.plot(xs, p99s, marker=".", label=data.phase.name)
    ax1.axvline(
        TARGET_P99_MS_AT_2000, color="grey", ls="--", lw=1, label="2 ms (p99 target at 2000/s)"
    )
    ax1.axhline(0.99, color="grey", ls=":", lw=1)
    ax1.set_xscale("log")
    ax1.set_xlabel("request → answer latency (ms, log)")
    ax1.set_ylabel("fraction of answers")
    ax1.set_title("Latency CDF per phase")
    if results:
        ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, which="both")
    ax2.set_yscale("log")
    ax2.set_xlabel("seconds into the phase")
    ax2.set_ylabel("p99 latency per 0.5 s (ms, log)")
    ax2.set_title("p99 over time")
    ax2.axhline(TARGET_P99_MS_AT_2000, color="grey", ls="--", lw=1)
    if any(d.latencies_ns for d in results):
        ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
