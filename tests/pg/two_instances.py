"""Helpers of the two-instance tests (issue 27): two ``solver run`` processes of one account on
one PostgreSQL journal against a sandbox (takers on or off), started as an active and a standby
with a user asking for quotes (:func:`active_and_standby`), and the judge that reads the relay's
side (:meth:`Pair.judge`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg

from sandbox.bus_records import AnswerArrival
from sandbox.config import PairSpec, TakersSpec
from sandbox.server import Sandbox
from solver.core import fact_codec
from solver.core import facts as f
from solver.protocol.keys import SecretKey
from tests.app.harness import (
    DEFAULT_BALANCES,
    FLOORS,
    NEAR,
    USDC,
    bot_overrides,
    eventually,
    fund,
    sandbox_config,
)
from tests.app.store_children import ask
from tests.app.test_cli_run import write_config
from tests.pg.cluster import PASSWORD, PASSWORD_ENV

KEY_ENV = "SOLVER_TWO_INSTANCES_KEY"
TOKEN = "two-instances-test-token-0123456789"
LEASE_S = 2.0
EXIT_FENCED = 75


@dataclass
class Instance:
    name: str
    process: asyncio.subprocess.Process
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def said(self, text: str, timeout_s: float = 30) -> None:
        await eventually(
            lambda: text in self.output() or self.process.returncode is not None,
            f"{self.name} to say {text!r}",
            timeout_s,
            0.05,
        )
        assert text in self.output(), self.output()


@dataclass
class Pair:
    sandbox: Sandbox
    url: str
    env: dict[str, str]
    configs: dict[str, Path]
    tmp: Path
    ports: dict[str, int]
    running: list[Instance] = field(default_factory=list)

    async def control(self, name: str, path: str) -> tuple[int, dict[str, Any]]:
        """``GET path`` of instance ``name``'s control API: status code and JSON."""
        url = f"http://127.0.0.1:{self.ports[name]}{path}"
        async with httpx.AsyncClient(timeout=5) as http:
            response = await http.get(url, headers={"authorization": f"Bearer {TOKEN}"})
        return response.status_code, response.json()

    async def start(self, name: str, run: int = 1) -> Instance:
        """Start instance ``name`` (its ``run``-th time: its own log)."""
        log = self.tmp / f"{name}{run}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "solver.cli", "--traceback", "run", "--config",
                str(self.configs[name]), "--shutdown-wait", "0",
                env=self.env, cwd=self.tmp, stdin=asyncio.subprocess.DEVNULL,
                stdout=out, stderr=out,
            )  # fmt: skip
        instance = Instance(name, process, log)
        self.running.append(instance)
        return instance

    async def new_answer(self, since: float, what: str, timeout_s: float) -> float:
        """When the relay first received an answer after ``since`` from a connection that had
        sent none before it (the new active's, judged from the relay's side)."""
        before = {a.conn_id for a in self.sandbox.bus.arrivals if a.at <= since}

        def fresh() -> list[float]:
            arrivals = list(self.sandbox.bus.arrivals)
            return [a.at for a in arrivals if a.at > since and a.conn_id not in before]

        await eventually(lambda: bool(fresh()), what, timeout_s, 0.02)
        return min(fresh())

    async def answer_after(self, since: float, what: str, timeout_s: float) -> AnswerArrival:
        """The first answer the relay received after ``since``, from any connection."""

        def after() -> list[AnswerArrival]:
            return [a for a in list(self.sandbox.bus.arrivals) if a.at > since]

        await eventually(lambda: bool(after()), what, timeout_s, 0.02)
        return min(after(), key=lambda a: a.at)

    def subscribed(self) -> int:
        """Connections subscribed to quote requests."""
        return sum(
            "quote" in c.subscriptions.values() for c in self.sandbox.bus.connections.values()
        )

    def journal(self) -> list[tuple[f.QuoteOpened, str | None]]:
        """Every answer in the shared journal, with its signature."""
        with psycopg.connect(self.url, password=PASSWORD) as conn:
            rows = conn.execute(
                "SELECT body FROM journal WHERE kind = 'quote_opened' ORDER BY seq"
            ).fetchall()
        out = []
        for (body,) in rows:
            doc = orjson.loads(body)
            fact = fact_codec.decode("quote_opened", doc)
            assert isinstance(fact, f.QuoteOpened)
            out.append((fact, (doc.get("signed_data") or {}).get("signature")))
        return out

    def judge(self) -> dict[str, tuple[float, float, int]]:
        """What the relay received, judged: every answer is in the journal, no nonce repeats,
        the connections' answering spans never overlap (at most one instance answers at any
        moment), and the answers open at once never promise more of an asset than the account
        was funded with above its floor (:func:`exposure`: whoever signed them; settled ones
        still counted, inflows not, so it is a bound, not the desk's own figure). Returns each
        connection's ``(first, last, count)``."""
        journal = self.journal()
        signatures = {sig for _, sig in journal}
        nonces = [fact.nonce for fact, _ in journal]
        assert len(nonces) == len(set(nonces)), "a nonce repeats in the journal"
        spans: dict[str, tuple[float, float, int]] = {}
        for arrival in self.sandbox.bus.arrivals:
            assert arrival.signature in signatures, f"an answer not in the journal: {arrival}"
            first, last, count = spans.get(arrival.conn_id, (arrival.at, arrival.at, 0))
            spans[arrival.conn_id] = (min(first, arrival.at), max(last, arrival.at), count + 1)
        ordered = sorted(spans.values())
        for (_, end, _), (start, _, _) in itertools.pairwise(ordered):
            assert end < start, f"two instances answered at the same time: {spans}"
        received = {a.signature for a in self.sandbox.bus.arrivals}
        for asset, peak in exposure([q for q, sig in journal if sig in received]).items():
            free = DEFAULT_BALANCES.get(asset, 0) - FLOORS.get(asset, 0)
            print(f"judge: at most {peak / free:.1%} of the spendable {asset} promised at once")
            assert peak <= free, f"{asset}: {peak} offered at once, {free} to spend"
        return spans


def exposure(quotes: list[f.QuoteOpened]) -> dict[str, int]:
    """Per asset, the most the answers promised at once: the peak over time of the sum of
    ``amount_out`` of the answers between their creation and their deadline."""
    events: dict[str, list[tuple[int, int]]] = {}  # (µs, change)
    for q in quotes:
        events.setdefault(q.asset_out, []).extend(
            [(q.created_at, q.amount_out), (q.deadline, -q.amount_out)]
        )
    peaks = {}
    for asset, changes in events.items():
        level = peak = 0
        for _, change in sorted(changes, key=lambda c: (c[0], c[1])):  # ends first at a tie
            level += change
            peak = max(peak, level)
        peaks[asset] = peak
    return peaks


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def sandbox_with_takers(tmp: Path) -> AsyncIterator[Sandbox]:
    """The tests' sandbox with simulated takers trading wNEAR/USDC both ways (a few requests a
    second, a second's wait), so quotes settle and balances move while instances fail over."""
    config = sandbox_config(tmp / "sandbox")
    takers = TakersSpec(
        count=4,
        requests_per_s=5.0,
        size_usd_median=20.0,
        wait_ms=1000,
        pairs=[PairSpec(base=NEAR, quote=USDC)],
    )
    async with Sandbox(config.model_copy(update={"takers": takers}), run_takers=True) as sandbox:
        yield sandbox


@contextlib.asynccontextmanager
async def two_instances(
    sandbox: Sandbox, url: str, tmp: Path, urls: Mapping[str, str] | None = None
) -> AsyncIterator[Pair]:
    """Two configs of one account (one key), one PostgreSQL journal, each its own local path
    and control port; the password only in the environment. ``urls``: the database URL an
    instance uses instead of ``url`` (through a proxy); the judge reads ``url``."""
    key = SecretKey.generate()
    account = key.public_key.implicit_account_id()
    fund(sandbox, account, DEFAULT_BALANCES)
    configs = {}
    ports = {}
    for name in ("a", "b"):
        ports[name] = _free_port()
        overrides: dict[str, Any] = {
            **bot_overrides(sandbox, account, KEY_ENV, tmp / name / "local"),
            "metrics.listen": f"127.0.0.1:{ports[name]}",
            "storage.url": (urls or {}).get(name, url),
            "storage.password_env": PASSWORD_ENV,
            "storage.lease_s": LEASE_S,
            "log.level": "INFO",
        }
        (tmp / name).mkdir()
        configs[name] = write_config(tmp / f"{name}.yaml", overrides)
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env[KEY_ENV] = key.to_text()
    env[PASSWORD_ENV] = PASSWORD
    env["SOLVER_CONTROL_TOKEN"] = TOKEN
    pair = Pair(sandbox, url, env, configs, tmp, ports)
    try:
        yield pair
    finally:
        for instance in pair.running:
            if instance.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    instance.process.send_signal(signal.SIGCONT)
                    instance.process.kill()
                await asyncio.wait_for(instance.process.wait(), 10)


@contextlib.asynccontextmanager
async def active_and_standby(
    pair: Pair, timeout_s: float = 30
) -> AsyncIterator[tuple[Instance, Instance, Asker]]:
    """Start ``a`` and wait until it subscribes (the active), then ``b`` until it stands by;
    a user asks for quotes without a pause until the block ends, and ``a`` has answered one."""
    active = await pair.start("a")
    await eventually(lambda: pair.subscribed() == 1, "a to subscribe", timeout_s)
    standby = await pair.start("b")
    await standby.said("standby for", timeout_s)
    asker = Asker(pair.sandbox.urls()["relay_rpc"])
    asker.start()
    try:
        await asker.offer_after(0, "a first offer", timeout_s)
        yield active, standby, asker
    finally:
        await asker.stop()


class Asker:
    """Asks the relay for quotes without a pause, in the background; keeps when offers came."""

    def __init__(self, relay_rpc: str) -> None:
        self.relay = relay_rpc
        self.offered: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if await ask(http, self.relay):
                        self.offered.append(time.monotonic())
                await asyncio.sleep(0.02)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def offer_after(self, since: float, what: str, timeout_s: float) -> float:
        await eventually(lambda: any(t > since for t in self.offered), what, timeout_s, 0.02)
        return min(t for t in self.offered if t > since)
