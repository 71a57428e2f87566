"""Simulated takers against a small fake relay (a real FastAPI app on loopback).

The fake relay is a test double of the sandbox bus (spec 4.7): it quotes from the reference
price with a configurable edge, signs the solver's side as a solver would (protocol-notes 6),
and, when asked to settle, executes both signed items on the sandbox ledger, so a taker's
intent is checked by the real verifier rather than by re-reading our own code.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.requests import ClientDisconnect

from sandbox.chain import SandboxChain
from sandbox.config import PairSpec, TakersSpec, TokenSpec
from sandbox.ledger import VerifierLedger
from sandbox.ledger_errors import LedgerError
from sandbox.prices import PriceProcess, usd_to_amount
from sandbox.serving import serving as serve
from sandbox.takers import TakerPopulation, TakerRequest
from solver.protocol.encoding import b58encode, b64decode
from solver.protocol.intents import TokenDiff, format_deadline
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import intent_hash, parse_signed, sign_nep413, verify_signed

CONTRACT = "intents.sandbox"
USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"
TOKENS = {
    USDC: TokenSpec(symbol="USDC", decimals=6, usd=1.0),
    WNEAR: TokenSpec(symbol="wNEAR", decimals=24, usd=3.2),
}
SOLVER_KEY = SecretKey(hashlib.sha256(b"fake-relay-solver").digest())
SOLVER = SOLVER_KEY.public_key.implicit_account_id()


def spec(**overrides: Any) -> TakersSpec:
    base: dict[str, Any] = {
        "count": 3,
        "requests_per_s": 200.0,
        "size_usd_median": 50.0,
        "size_usd_sigma": 0.8,
        "tolerance_bps": 60.0,
        "exact_out_share": 0.5,
        "wait_ms": 200,
        "funding_usd": 10_000.0,
        "pairs": [PairSpec(base=WNEAR, quote=USDC)],
    }
    return TakersSpec.model_validate(base | overrides)


@dataclass
class FakeRelay:
    """Quotes at reference x (1 + edge_bps/1e4) in the user's favour; ``mode`` breaks it."""

    chain: SandboxChain
    prices: PriceProcess
    edge_bps: int = 0
    mode: str = "normal"
    settle: bool = True
    quotes: list[dict[str, Any]] = field(default_factory=list)
    publishes: list[dict[str, Any]] = field(default_factory=list)
    solver_items: dict[str, dict[str, Any]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)  # ends mode "slow"

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/rpc", response_model=None)
        async def rpc(request: Request) -> Any:
            try:
                body = await request.json()
            except ClientDisconnect:  # a taker cancelled on stop: nothing to answer
                return JSONResponse({}, status_code=499)
            rid, params = body["id"], body["params"][0]
            if self.mode == "slow":
                await self.release.wait()
            if self.mode == "bad_json":
                return PlainTextResponse("not json")
            if self.mode == "http_500":
                return JSONResponse({"oops": True}, status_code=500)
            if self.mode == "rpc_error":
                return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no"}}
            if body["method"] == "quote":
                return {"jsonrpc": "2.0", "id": rid, "result": self.quote(params)}
            return {"jsonrpc": "2.0", "id": rid, "result": self.publish(params)}

        return app

    def quote(self, params: dict[str, Any]) -> Any:
        self.quotes.append(params)
        if self.mode == "empty":
            return []
        if self.mode == "garbage":
            return [{"quote_hash": 5}, "nonsense"]
        asset_in = params["core_asset_identifier_in"]
        asset_out = params["core_asset_identifier_out"]
        with localcontext() as ctx:
            ctx.prec = 80
            rate = (
                Decimal(repr(self.prices.rate(asset_in, asset_out)))
                * Decimal(10) ** (TOKENS[asset_out].decimals - TOKENS[asset_in].decimals)
                * (1 + Decimal(self.edge_bps) / 10_000)
            )
            if "exact_amount_in" in params:
                amount_in = int(params["exact_amount_in"])
                amount_out = int((amount_in * rate).to_integral_value(ROUND_FLOOR))
            else:
                amount_out = int(params["exact_amount_out"])
                amount_in = int((amount_out / rate).to_integral_value(ROUND_CEILING))
        if self.mode == "mismatch":
            amount_in += 1
            amount_out += 1
        deadline = self.chain.clock() + timedelta(milliseconds=params["min_deadline_ms"])
        signed = sign_nep413(
            SOLVER_KEY,
            signer_id=SOLVER,
            verifying_contract=CONTRACT,
            deadline=deadline,
            nonce=salted_nonce(bytes.fromhex(self.chain.ledger.current_salt())),
            intents=[TokenDiff(diff={asset_in: amount_in, asset_out: -amount_out})],
        )
        quote_hash = b58encode(intent_hash(signed))
        self.solver_items[quote_hash] = signed.model_dump(mode="json", exclude_none=True)
        item = {
            "quote_hash": quote_hash,
            "core_asset_identifier_in": asset_in,
            "core_asset_identifier_out": asset_out,
            "amount_in": str(amount_in),
            "amount_out": str(amount_out),
            "expiration_time": format_deadline(
                deadline - timedelta(days=1) if self.mode == "expired" else deadline
            ),
        }
        # A worse offer first: the taker must pick the best itself.
        worse_in = {**item, "quote_hash": "worse", "amount_in": str(amount_in * 2)}
        worse_out = {**item, "quote_hash": "worse", "amount_out": str(amount_out // 2)}
        return [worse_in if "exact_amount_out" in params else worse_out, item]

    def publish(self, params: dict[str, Any]) -> Any:
        self.publishes.append(params)
        user_item = params["signed_data"]
        ihash = b58encode(intent_hash(parse_signed(user_item)))
        if self.settle:
            solver_item = self.solver_items[params["quote_hashes"][0]]
            try:
                self.chain.execute([solver_item, user_item])
            except LedgerError as exc:
                return {"status": "FAILED", "intent_hash": ihash, "reason": exc.text}
        return {"status": "OK", "intent_hash": ihash}


@dataclass
class World:
    chain: SandboxChain
    prices: PriceProcess
    relay: FakeRelay
    url: str

    def takers(self, takers_spec: TakersSpec | None = None, seed: int = 3) -> TakerPopulation:
        return TakerPopulation(
            takers_spec or spec(), TOKENS, self.chain, self.prices, self.url, seed
        )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    chain = SandboxChain(VerifierLedger(CONTRACT, seed=7))
    prices = PriceProcess(TOKENS, seed=1)
    for asset in TOKENS:
        chain.ledger.deposit(SOLVER, asset, usd_to_amount(1e7, prices.usd(asset), 24))
    relay = FakeRelay(chain, prices)
    async with serve(relay.app()) as base:
        yield World(chain, prices, relay, f"{base}/rpc")


async def drive(takers: TakerPopulation, n: int) -> list[TakerRequest]:
    """Handle ``n`` drawn requests one after the other (no Poisson timing)."""
    requests = [r for r in (takers.draw() for _ in range(n)) if r is not None]
    async with httpx.AsyncClient(timeout=5.0) as client:
        for request in requests:
            await takers.handle(request, client)
    return requests


def test_fund_is_deterministic_and_credits_every_pair_token() -> None:
    chain = SandboxChain(VerifierLedger(CONTRACT, seed=7))
    prices = PriceProcess(TOKENS, seed=1)
    takers = TakerPopulation(spec(), TOKENS, chain, prices, "http://unused/rpc", seed=3)
    again = TakerPopulation(spec(), TOKENS, chain, prices, "http://unused/rpc", seed=3)
    other = TakerPopulation(spec(), TOKENS, chain, prices, "http://unused/rpc", seed=4)
    assert takers.users == again.users
    assert len(set(takers.users)) == 3
    assert not set(takers.users) & set(other.users)
    assert all(len(u) == 64 and int(u, 16) >= 0 for u in takers.users)
    takers.fund()
    for user in takers.users:
        assert chain.ledger.mt_balance_of(user, USDC) == 10_000 * 10**6
        assert chain.ledger.mt_balance_of(user, WNEAR) == 3125 * 10**24  # $10k at $3.2


def test_unknown_pair_token_is_refused() -> None:
    chain = SandboxChain(VerifierLedger(CONTRACT, seed=7))
    bad = spec(pairs=[PairSpec(base=WNEAR, quote="nep141:nope.sandbox")])
    with pytest.raises(ValueError, match="not a pair"):
        TakerPopulation(bad, TOKENS, chain, PriceProcess(TOKENS, seed=1), "http://x/rpc", 1)


def test_draws_follow_the_configured_distributions() -> None:
    chain = SandboxChain(VerifierLedger(CONTRACT, seed=7))
    prices = PriceProcess(TOKENS, seed=1)
    takers_spec = spec(exact_out_share=0.3)
    draws = [
        TakerPopulation(takers_spec, TOKENS, chain, prices, "http://x/rpc", seed=9).draw()
        for _ in range(2)
    ]
    assert draws[0] == draws[1]  # same seed, same first request
    takers = TakerPopulation(takers_spec, TOKENS, chain, prices, "http://x/rpc", seed=9)
    sample = [r for r in (takers.draw() for _ in range(4000)) if r is not None]
    sizes = np.array([r.size_usd for r in sample])
    assert np.median(sizes) == pytest.approx(50.0, rel=0.1)
    assert np.log(sizes).std() == pytest.approx(0.8, rel=0.1)
    assert np.mean([r.exact_out for r in sample]) == pytest.approx(0.3, abs=0.03)
    assert np.mean([r.asset_in == USDC for r in sample]) == pytest.approx(0.5, abs=0.03)
    assert {r.user for r in sample} == {0, 1, 2}


async def test_good_quotes_are_published_signed_mirrored_and_settle(world: World) -> None:
    world.relay.edge_bps = -10  # 10 bps worse than reference, inside the 60 bps tolerance
    takers = world.takers()
    takers.fund()
    before = {(u, a): world.chain.ledger.mt_balance_of(u, a) for u in takers.users for a in TOKENS}
    requests = await drive(takers, 12)
    assert {r.exact_out for r in requests} == {False, True}
    stats = takers.stats
    assert stats.published_ok == len(requests) == len(world.relay.publishes)
    assert stats.rejected_price == stats.no_quote == stats.insufficient_funds == 0
    assert not stats.errors and not stats.publish_failed
    salt = bytes.fromhex(world.chain.ledger.current_salt())
    spent: dict[tuple[str, str], int] = {}
    for request, published in zip(requests, world.relay.publishes, strict=True):
        assert published["quote_hashes"] != ["worse"]  # the best offer was chosen
        verified = verify_signed(parse_signed(published["signed_data"]))
        user = takers.users[request.user]
        assert verified.message.signer_id == user
        assert verified.key_owner == user
        assert verified.recipient == CONTRACT
        assert verified.nonce[:4] == salt
        assert b64decode(published["signed_data"]["payload"]["nonce"]) == verified.nonce
        (diff,) = verified.message.intents
        assert isinstance(diff, TokenDiff)
        solver = parse_signed(world.relay.solver_items[published["quote_hashes"][0]])
        (solver_diff,) = verify_signed(solver).message.intents
        assert isinstance(solver_diff, TokenDiff)
        assert diff.diff == {k: -v for k, v in solver_diff.diff.items()}
        exact_side = request.asset_out if request.exact_out else request.asset_in
        assert abs(diff.diff[exact_side]) == request.amount
        for asset, delta in diff.diff.items():
            spent[(user, asset)] = spent.get((user, asset), 0) + delta
    for (user, asset), delta in spent.items():
        assert world.chain.ledger.mt_balance_of(user, asset) == before[(user, asset)] + delta


async def test_bad_quotes_are_rejected(world: World) -> None:
    world.relay.edge_bps = -100  # worse than the 60 bps tolerance
    takers = world.takers()
    takers.fund()
    requests = await drive(takers, 6)
    assert takers.stats.rejected_price == len(requests) == len(world.relay.quotes)
    assert takers.stats.published_ok == 0
    assert world.relay.publishes == []


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "quote:bad_offer"),
        ("mismatch", "quote:mismatched_offer"),
        ("rpc_error", "quote:rpc_error_-32602"),
        ("http_500", "quote:http_500"),
        ("bad_json", "quote:bad_json"),
        ("expired", "quote:expired_offer"),
    ],
)
async def test_odd_answers_are_counted_not_raised(world: World, mode: str, reason: str) -> None:
    world.relay.mode = mode
    takers = world.takers()
    takers.fund()
    requests = await drive(takers, 3)
    assert takers.stats.errors[reason] >= len(requests)
    assert takers.stats.published_ok == 0


async def test_empty_answer_is_no_quote_and_dead_relay_is_a_network_error(world: World) -> None:
    world.relay.mode = "empty"
    takers = world.takers()
    takers.fund()
    await drive(takers, 3)
    assert takers.stats.no_quote == 3
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/rpc"
    takers = TakerPopulation(spec(), TOKENS, world.chain, world.prices, dead, seed=3)
    takers.fund()
    await drive(takers, 2)
    assert takers.stats.errors["quote:network:ConnectError"] == 2


async def test_unfunded_users_are_skipped_and_verifier_failures_counted(world: World) -> None:
    takers = world.takers()  # not funded
    requests = await drive(takers, 8)
    assert takers.stats.insufficient_funds == len(requests)
    # Exact-in requests are skipped before asking; exact-out ones once amount_in is known.
    assert len(world.relay.quotes) == sum(r.exact_out for r in requests)
    assert world.relay.publishes == []

    poor = SandboxChain(VerifierLedger(CONTRACT, seed=7))  # the solver has nothing here
    world.relay.chain = poor
    broke = TakerPopulation(spec(), TOKENS, poor, world.prices, world.url, seed=3)
    broke.fund()
    requests = await drive(broke, 3)
    assert broke.stats.publish_failed == {"insufficient balance or overflow": len(requests)}


async def test_run_makes_poisson_arrivals_and_stops_cleanly(world: World) -> None:
    takers = world.takers(spec(requests_per_s=40.0))
    takers.fund()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(takers.run(stop))
    async with asyncio.timeout(20):  # until five were taken, however busy the machine
        while takers.stats.published_ok < 5:
            await asyncio.sleep(0.01)
    stop.set()
    ran_s = loop.time() - started
    await asyncio.wait_for(task, timeout=10.0)
    stats = takers.stats
    # Arrivals keep an absolute schedule at 40 a second: far fewer than twice that over the
    # run (a busy loop delays them, the schedule catches up, it never bursts beyond).
    assert 5 <= stats.requests <= 2 * 40.0 * ran_s + 10, (stats.requests, ran_s)
    assert not stats.errors
    assert stats.as_dict()["requests"] == stats.requests


async def test_run_with_nothing_to_do_waits_for_stop(world: World) -> None:
    takers = world.takers(spec(requests_per_s=0.0))
    stop = asyncio.Event()
    task = asyncio.create_task(takers.run(stop))
    await asyncio.sleep(0.02)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, timeout=10.0)
    assert takers.stats.requests == 0


async def test_slow_relay_does_not_delay_arrivals_and_stop_cancels(world: World) -> None:
    world.relay.mode = "slow"
    takers = TakerPopulation(
        spec(requests_per_s=100.0), TOKENS, world.chain, world.prices, world.url, 3, max_in_flight=2
    )
    takers.fund()
    stop = asyncio.Event()
    task = asyncio.create_task(takers.run(stop))
    async with asyncio.timeout(20):  # arrivals go on while the two quotes hang
        while takers.stats.requests < 10:
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, timeout=10.0)  # the two stuck quotes are cancelled
    world.relay.release.set()
    stats = takers.stats
    assert stats.requests >= 10
    assert stats.errors == {"overloaded": stats.requests - 2}
    assert stats.published_ok == 0
