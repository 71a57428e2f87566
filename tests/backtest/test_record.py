"""``solver record`` against the real sandbox with takers running, and the recorder's rules:
a full queue drops (never blocks), assets outside the config are skipped, probes are sampled
by id and our own probes are not recorded as flow."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from backtest.stream.events import CompetitorEvent, PriceEvent, RequestEvent
from backtest.stream.read import read_stream
from backtest.stream.record import Recorder, sampled
from backtest.stream.record_stats import RecordStats
from sandbox.config import SandboxConfig, TokenSpec
from sandbox.server import Sandbox
from solver.cli import main
from solver.config import BotConfig, load_bot_config
from solver.protocol.bus import QuoteStatusEvent
from solver.protocol.keys import SecretKey
from solver.protocol.quote_request import QuoteRequest
from tests.sandbox.scripted import ScriptedSolver

ROOT = Path(__file__).resolve().parents[2]
USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
E6, E18, E24 = 10**6, 10**18, 10**24


def taker_sandbox(state_dir: Path) -> SandboxConfig:
    return SandboxConfig(
        state_dir=state_dir,
        tokens={
            USDC: TokenSpec(symbol="USDC", decimals=6, usd=1.0),
            NEAR: TokenSpec(symbol="wNEAR", decimals=24, usd=3.0, volatility_annual=0.9),
            ETH: TokenSpec(symbol="ETH", decimals=18, usd=3000.0),
        },
        bus={"solver_wait_ms": 300, "settlement_delay_ms": 100},
        prices={"tick_ms": 100},
        takers={
            "enabled": True,
            "count": 4,
            "requests_per_s": 25.0,
            "size_usd_median": 40.0,
            "wait_ms": 300,
            "pairs": [{"base": NEAR, "quote": USDC}],
        },
    )


@pytest.fixture
async def flowing(tmp_path: Path) -> AsyncIterator[tuple[Sandbox, ScriptedSolver]]:
    """A sandbox with takers asking and a scripted solver answering 3 USDC per wNEAR."""
    async with Sandbox(taker_sandbox(tmp_path / "sandbox"), run_takers=True) as sandbox:
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        sandbox.ledger.deposit(account, USDC, 100_000 * E6)
        sandbox.ledger.deposit(account, NEAR, 100_000 * E24)
        solver = ScriptedSolver(
            sandbox.urls()["relay_ws"], key, sandbox.ledger, rate_num=3 * E6, rate_den=E24
        )
        await solver.start()
        try:
            yield sandbox, solver
        finally:
            await solver.stop()


def recorder_config(sandbox: Sandbox, tmp_path: Path) -> BotConfig:
    """``config/default.yaml`` pointed at the sandbox (its key is never read)."""
    urls = sandbox.urls()
    return load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {
            "bus.ws_url": urls["relay_ws"],
            "bus.rpc_url": urls["relay_rpc"],
            "bus.wait_ms": 300,
            "quote.response_budget_ms": 250,
            "bus.reconnect_initial_ms": 100,
            "chain.rpc_url": urls["chain_rpc"],
            "prices.sources": [{"kind": "sandbox", "url": urls["prices"], "refresh_ms": 200}],
            "storage.path": str(tmp_path / "unused.sqlite"),
            "metrics.listen": None,
            "log.level": "WARNING",
        }
    )


async def record_until(
    recorder: Recorder, enough: Callable[[RecordStats], bool], limit_s: float = 20
) -> RecordStats:
    """Record until ``enough(stats)`` holds (or ``limit_s`` passed), then stop: a test waits
    for what it needs to see, not a fixed time that a busy machine may not fill."""
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    deadline = time.monotonic() + limit_s
    while not enough(recorder.stats) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    stop.set()
    return await asyncio.wait_for(task, 20)


async def test_solver_record_writes_requests_and_prices_from_a_live_bus(
    flowing: tuple[Sandbox, ScriptedSolver],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sandbox, solver = flowing
    config_file = tmp_path / "bot.yaml"
    config_file.write_text(
        yaml.safe_dump(recorder_config(sandbox, tmp_path).model_dump(mode="json"))
    )
    out = tmp_path / "rec" / "live.jsonl.gz"
    argv = ["record", "--config", str(config_file), "--out", str(out), "--duration", "3",
            "--price-interval-ms", "250", "--progress-every", "1"]  # fmt: skip
    code = await asyncio.to_thread(main, argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = orjson.loads(captured.out)
    assert "record: " in captured.err  # progress lines
    assert summary["paths"] == [str(out)]
    assert summary["dropped"] == 0

    reader = read_stream(out, strict=True)
    events = list(reader)
    assert reader.header.source.startswith("record ws://")
    assert set(reader.header.tokens) == {USDC, NEAR, ETH}
    requests = [e for e in events if isinstance(e, RequestEvent)]
    prices = [e for e in events if isinstance(e, PriceEvent)]
    assert len(requests) >= 10, reader.stats.as_dict()
    assert summary["requests"] == len(requests) == summary["written"] - len(prices)
    assert {p.asset for p in prices} == {USDC, NEAR, ETH}
    assert len(prices) >= 3 * 6  # ~12 rounds of every token in 3 s
    # What the recorder saw is what the scripted solver (on the same bus) was asked.
    asked = {e["quote_id"] for e in solver.events}
    assert {r.request.quote_id for r in requests} <= asked
    assert all(r.request.partner_id == "sandbox" for r in requests)
    assert {(r.request.asset_in, r.request.asset_out) for r in requests} <= {
        (NEAR, USDC),
        (USDC, NEAR),
    }
    assert [e.ts for e in events] == sorted(e.ts for e in events)


async def test_competitor_probes_record_the_best_answer_but_not_themselves(
    flowing: tuple[Sandbox, ScriptedSolver], tmp_path: Path
) -> None:
    sandbox, _solver = flowing
    out = tmp_path / "probes.jsonl"
    recorder = Recorder(
        recorder_config(sandbox, tmp_path),
        out,
        price_interval_ms=500,
        competitor_share=1.0,
        max_probes=64,
    )
    # Until a few probes have come back, however busy the machine (a fixed 2.5 s once ended
    # before any had, with every probe still in flight).
    stats = await record_until(recorder, lambda stats: stats.competitors >= 3)
    events = list(read_stream(out, strict=True))
    requests = {e.request.quote_id: e.request for e in events if isinstance(e, RequestEvent)}
    rivals = [e for e in events if isinstance(e, CompetitorEvent)]
    assert stats.probes > 0 and rivals, stats.as_dict()
    # What is counted is what was written: none counted after the end marker.
    assert stats.competitors == len(rivals) and stats.written == len(events), stats.as_dict()
    assert stats.own_probes >= len(rivals) - 2  # each probe came back to us as a quote event
    for rival in rivals:
        request = requests[rival.quote_id]
        # The scripted solver prices 3 USDC per wNEAR, so its answer is exactly predictable.
        if request.exact_in and request.asset_in == NEAR:
            assert rival.best_amount == request.amount * 3 * E6 // E24
        elif not request.exact_in and request.asset_out == USDC:
            assert rival.best_amount == -(-request.amount * E24 // (3 * E6))
    # Probes are not flow: every recorded request was a taker's.
    assert len(requests) == stats.requests


# ------------------------------------------------------------------------------ unit rules


def quote_event(quote_id: str, asset_in: str = NEAR, asset_out: str = USDC) -> QuoteRequest:
    return QuoteRequest(quote_id, asset_in, asset_out, True, 1000, 60_000)


def offline_config(tmp_path: Path) -> BotConfig:
    return load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {"storage.path": str(tmp_path / "unused.sqlite"), "metrics.listen": None}
    )


async def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    clock_ts = datetime(2025, 1, 1, tzinfo=UTC)
    recorder = Recorder(offline_config(tmp_path), tmp_path / "x.jsonl", queue_size=3,
                        clock=lambda: clock_ts)  # fmt: skip
    for i in range(10):
        recorder.on_quote(quote_event(f"q{i}"))
    assert recorder.stats.requests == 3
    assert recorder.stats.dropped == 7


async def test_assets_outside_the_config_are_skipped(tmp_path: Path) -> None:
    recorder = Recorder(offline_config(tmp_path), tmp_path / "x.jsonl")
    recorder.on_quote(quote_event("a", asset_in="nep141:doge.near"))
    recorder.on_quote(quote_event("b"))
    assert recorder.stats.unknown_asset == 1 and recorder.stats.requests == 1


def test_sampling_is_by_id_stable_and_about_the_share() -> None:
    ids = [f"quote-{i}" for i in range(20_000)]
    picked = [q for q in ids if sampled(q, 0.1)]
    assert 0.09 < len(picked) / len(ids) < 0.11
    assert picked == [q for q in ids if sampled(q, 0.1)]
    assert not any(sampled(q, 0.0) for q in ids[:100])
    assert all(sampled(q, 1.0) for q in ids[:100])


async def test_recording_stops_cleanly_on_stop_and_clamps_a_clock_step_back(
    tmp_path: Path,
) -> None:
    """No bus at all (the websocket keeps retrying): stop still flushes a valid file, and a
    wall clock stepping backwards never makes the file unsorted."""
    times = iter(datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in [5, 6, 9, 10, 3])
    config = offline_config(tmp_path).with_overrides(
        {
            "bus.ws_url": "ws://127.0.0.1:9/ws",
            "bus.rpc_url": "http://127.0.0.1:9/rpc",
            "prices.sources": [{"kind": "static", "prices": {USDC: 1.0, NEAR: 3.0, ETH: 3000.0}}],
        }
    )
    clock_values: list[datetime] = []

    def clock() -> datetime:
        value = next(times, None) or clock_values[-1] + timedelta(milliseconds=1)
        clock_values.append(value)
        return value

    recorder = Recorder(config, tmp_path / "x.jsonl", price_interval_ms=100, clock=clock)
    # Until six prices are in (the clock stepped back at the fifth), however busy the machine:
    # a fixed sleep counted on three price rounds in 0.35 s and got fewer when the cores were
    # taken.
    stats = await record_until(recorder, lambda stats: stats.prices >= 6)
    reader = read_stream(tmp_path / "x.jsonl", strict=True)
    events: list[Any] = list(reader)
    assert stats.prices == len(events) >= 6
    assert stats.clamped >= 1
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert not stats.connected


async def test_nothing_is_counted_after_the_recording_ended(tmp_path: Path) -> None:
    """A frame or a probe's answer that comes after the end marker is neither written nor
    counted (a run under load counted 3 competitors and wrote none of them)."""
    config = offline_config(tmp_path).with_overrides(
        {
            "bus.ws_url": "ws://127.0.0.1:9/ws",
            "bus.rpc_url": "http://127.0.0.1:9/rpc",
            "prices.sources": [{"kind": "static", "prices": {USDC: 1.0, NEAR: 3.0, ETH: 3000.0}}],
        }
    )
    recorder = Recorder(config, tmp_path / "x.jsonl", price_interval_ms=100)
    stop = asyncio.Event()
    stop.set()
    stats = await asyncio.wait_for(recorder.run(stop), 20)
    before = stats.as_dict()
    recorder.on_quote(quote_event("late"))
    recorder.on_quote_status(QuoteStatusEvent(quote_hash="hash", intent_hash="intent"))
    assert stats.as_dict() == before
    assert stats.written == len(list(read_stream(tmp_path / "x.jsonl", strict=True)))


def test_record_cli_refuses_bad_input_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "x.jsonl")
    assert main(["record", "--config", str(tmp_path / "missing.yaml"), "--out", out]) == 2
    assert "cannot read" in capsys.readouterr().err
    config = str(ROOT / "config" / "default.yaml")
    assert main(["record", "--config", config, "--out", out, "--duration", "0"]) == 2
    assert "--duration must be positive" in capsys.readouterr().err
