"""The quote-path driver: a loopback relay that sends ``quote`` events and times the answers.

One :class:`Relay` per system under test (the bot, the baseline bot, the minimal solver), each
a websocket server on ``127.0.0.1:0`` that the system connects to as its ``bus.ws_url``. It
confirms both subscriptions, sends quote events at a fixed rate or with ``inflight`` requests
outstanding (saturation), and answers every ``quote_response`` with ``"OK"`` like a relay. A
sample of the answers is verified (signature, recipient, mirrored amounts).

Latency is from just before the driver writes an event to the moment its loop reads the
matching ``quote_response``: what a relay sees, both websocket stacks included. A request
unanswered ``ANSWER_GRACE_S`` after its phase is *missing*.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from benchmarks.common import CpuMeter, Measured, Progress, summarize
from solver.errors import SolverError
from solver.protocol.signing import parse_signed, verify_signed

USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
DECIMALS = {USDC: 6, NEAR: 24, ETH: 18}
MIN_DEADLINE_MS = 1000
ANSWER_GRACE_S = 3.0  # the relay waits at most 3000 ms for answers (protocol-notes 6)
SAT_INFLIGHT = 256
VERIFY_FIRST, VERIFY_EVERY = 50, 100


# ---------------------------------------------------------------------------- requests


def request_templates(
    prices_usd: dict[str, float], n: int = 4096, seed: int = 4
) -> list[dict[str, Any]]:
    """Quote event data without ``quote_id``: NEAR/USDC twice as often as ETH/USDC, both ways,
    30 % exact-out, lognormal sizes (median 50 USD) clipped to 2..4000 USD."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = NEAR if rng.random() < 2 / 3 else ETH
        asset_in, asset_out = (base, USDC) if rng.random() < 0.5 else (USDC, base)
        exact_out = bool(rng.random() < 0.3)
        size_usd = float(np.clip(50.0 * rng.lognormal(0.0, 0.9), 2.0, 4000.0))
        fixed = asset_out if exact_out else asset_in
        amount = int(size_usd / prices_usd[fixed] * 10 ** DECIMALS[fixed])
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


@dataclass
class PhaseData:
    phase: Phase
    started_ns: int = 0
    ended_ns: int = 0
    sent: int = 0
    answered: int = 0
    missing: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    send_offsets_ns: list[int] = field(default_factory=list)  # of answered requests
    answered_at_ns: list[int] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # cores over the sending window
    cpu_s_with_after_work: float = 0.0  # the system's CPU seconds, start -> quiet again
    loop_lag: dict[str, Any] | None = None  # the bot's own ticker lateness, start -> quiet
    inside: dict[str, Any] | None = None  # the bot's own response time (its /metrics)


class Relay:
    """The loopback driver: a one-solver relay that sends quote events and times the answers."""

    def __init__(self, templates: list[dict[str, Any]], contract: str) -> None:
        self.templates = templates
        self.contract = contract
        self.ws: ServerConnection | None = None
        self.subscribed = asyncio.Event()
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
            self._expire()

    def _expire(self) -> None:
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


# ---------------------------------------------------------------------------- one phase


async def run_phase(
    relay: Relay, phase: Phase, progress: Progress, pids: dict[str, Measured]
) -> PhaseData:
    """Send one phase to ``relay``'s system and wait for its answers (at most the grace)."""
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
    return data


def largest_stall_ms(data: PhaseData) -> float:
    """The longest time the system sent nothing while a request of the phase was waiting:
    for each answer (in arrival order), arrival - max(previous arrival, its request's send).
    Measured on the driver's clock, so it bounds the system's event-loop stalls from above
    (the driver's own loop and both socket stacks are in it too)."""
    if not data.answered_at_ns:
        return float("nan")
    arrived = np.array(data.answered_at_ns, dtype=np.int64)
    sent = data.started_ns + np.array(data.send_offsets_ns, dtype=np.int64)
    order = np.argsort(arrived, kind="stable")
    arrived, sent = arrived[order], sent[order]
    previous = np.concatenate(([sent[0]], arrived[:-1]))
    return float(np.max(arrived - np.maximum(previous, sent))) / 1e6


def phase_figures(data: PhaseData, system: str) -> dict[str, Any]:
    """The figures of one run of a phase against ``system`` (its CPU from ``data.cpu``)."""
    phase = data.phase
    window_s = (data.ended_ns - data.started_ns) / 1e9
    in_window = sum(1 for t in data.answered_at_ns if t <= data.ended_ns)
    cpu_window = data.cpu.get(system, 0.0) * window_s
    return {
        "system": system,
        "kind": phase.kind,
        "target_rate_per_s": phase.rate if phase.kind == "rate" else None,
        "seconds": round(window_s, 3),
        "sent": data.sent,
        "answered": data.answered,
        "missing": data.missing,
        "offered_rate_per_s": round(data.sent / window_s, 1) if window_s else None,
        "answers_per_s": round(in_window / window_s, 1) if window_s else None,
        # CPU time per answer: robust to sharing the machine (unlike the rates).
        "cpu_us_per_answer": round(cpu_window / in_window * 1e6, 1) if in_window else None,
        # ... and with the work the answers leave behind (deadlines, expiry) until quiet.
        "cpu_us_per_answer_with_after_work": round(
            data.cpu_s_with_after_work / data.answered * 1e6, 1
        )
        if data.answered
        else None,
        **(
            {
                "cpu_us_per_answer_incl_signer": round(
                    (cpu_window + data.cpu[system + "_signer"] * window_s) / in_window * 1e6, 1
                )
            }
            if in_window and system + "_signer" in data.cpu
            else {}
        ),
        # The PostgreSQL server's CPU (postmaster and backends) for a bot on that journal.
        **(
            {
                "cpu_us_per_answer_postgres": round(
                    data.cpu[system + "_postgres"] * window_s / in_window * 1e6, 1
                )
            }
            if in_window and system + "_postgres" in data.cpu
            else {}
        ),
        "latency_ms": summarize([x / 1e6 for x in data.latencies_ns], 4),
        "largest_stall_ms": round(largest_stall_ms(data), 3),
        "cpu_utilisation": data.cpu,
        "loop_lag": data.loop_lag,
        "inside": data.inside,
    }
