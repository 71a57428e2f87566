"""The rebalancer (solver/rebalance/rebalancer.py, its planning solver/rebalance/plan.py, docs/rebalance.md).

Planning is pure and tested on values: band checks, sizing under ``max_swap_usd`` and free
inventory, the frequency limit, the quote check. The executor runs against the real sandbox:
its ledger and bus (the deposit ``transfer`` is signed, published and settled for real) and its
swap API, which executes the swap through a scripted market maker on the bus
(:mod:`tests.io.swap_sandbox`). Faults are real: the bus or the swap API down, a process
restart, a deadline that passes, a maker that cannot pay. End to end, the running bot:
:func:`test_acceptance_the_bot_moves_a_skewed_inventory_back_into_its_band`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sandbox.server import Sandbox
from solver.config import BandSpec, RebalanceSpec
from solver.core.actions import Action, Record
from solver.core.clock import micros
from solver.core.desk import Desk, DeskSettings
from solver.core.desk_snapshot import restore
from solver.core.events import Event, OwnFlowSettled
from solver.core.inventory import Inventory
from solver.core.pauses import Pauses
from solver.core.rebalance_record import RebalanceRecord, RebalanceState
from solver.core.state import MarketState
from solver.core.view import DeskView
from solver.io.bus_rpc import BusRpcClient
from solver.io.ledger_client import LedgerClient
from solver.io.store.schema import NonceReusedError
from solver.io.store.sqlite_store import Store
from solver.io.swap_client import SwapApiClient
from solver.protocol import nonce as nonce_module
from solver.protocol.intents import Transfer
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import sign_nep413
from solver.protocol.swap import QuoteResponse, from_wire
from solver.rebalance.plan import (
    Band,
    Hold,
    Inputs,
    Plan,
    check_quote,
    plan_rebalance,
    resolve_band,
    swap_request,
    units_of,
    usd_of,
)
from solver.rebalance.rebalancer import Rebalancer
from tests.app.harness import E6, E18, E24, ETH, NEAR, USDC, eventually, fund, live_bot
from tests.io.peers import http_peer
from tests.io.swap_sandbox import DECIMALS, PRICES, SwapSandbox, swap_sandbox

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NEAR_BAND = BandSpec(min_usd=10_000.0, max_usd=20_000.0, target_usd=15_000.0)  # 3333..6666 NEAR


def spec(**changes: Any) -> RebalanceSpec:
    fields: dict[str, Any] = {
        "enabled": True,
        "dry_run": False,
        "bands": {NEAR: NEAR_BAND},
        "counter_asset": USDC,
        "max_swap_usd": 20_000.0,
        "min_interval_s": 0.0,
        "slippage_bps": 50,
        "max_cost_bps": 100,
    }
    fields.update(changes)
    return RebalanceSpec.model_validate(fields)


def inputs(balances: dict[str, int], **changes: Any) -> Inputs:
    fields: dict[str, Any] = {
        "now": T0,
        "balances": balances,
        "balances_at": T0 - timedelta(seconds=1),
        "free": dict(balances),
        "prices": PRICES,
        "decimals": DECIMALS,
    }
    fields.update(changes)
    return Inputs(**fields)


def plan(balances: dict[str, int], rebalance: RebalanceSpec | None = None, **changes: Any) -> Any:
    return plan_rebalance(rebalance or spec(), inputs(balances, **changes), balance_max_age_s=10)


# ---------------------------------------------------------------------------------- planning


def test_in_band_there_is_nothing_to_do() -> None:
    assert plan({NEAR: 5_000 * E24, USDC: 20_000 * E6}) is None
    # The band's edges are inside it.
    band = resolve_band(NEAR_BAND, 3.0, 24)
    assert band is not None
    assert plan({NEAR: band.low, USDC: 0}) is None and plan({NEAR: band.high, USDC: 0}) is None


def test_above_the_band_sells_down_to_the_target_for_the_counter_asset() -> None:
    decided = plan({NEAR: 10_000 * E24, USDC: 20_000 * E6})
    assert isinstance(decided, Plan)
    assert (decided.side, decided.asset_in, decided.asset_out) == ("sell", NEAR, USDC)
    assert decided.amount_in == 5_000 * E24  # 10,000 - target 5,000 (15,000 USD at 3)
    assert decided.usd_in == Decimal(15_000)
    assert decided.band == Band(10_000 * E24 // 3, 20_000 * E24 // 3, 5_000 * E24)


def test_below_the_band_buys_up_to_the_target_with_the_counter_asset() -> None:
    decided = plan({NEAR: 1_000 * E24, USDC: 50_000 * E6})
    assert isinstance(decided, Plan)
    assert (decided.side, decided.asset_in, decided.asset_out) == ("buy", USDC, NEAR)
    assert decided.amount_in == 12_000 * E6  # 4,000 NEAR short of 5,000, at 3 USD


def test_one_swap_moves_at_most_max_swap_usd() -> None:
    sell = plan({NEAR: 10_000 * E24, USDC: 0}, spec(max_swap_usd=1_500.0))
    assert isinstance(sell, Plan) and sell.amount_in == 500 * E24
    buy = plan({NEAR: 0, USDC: 10**12}, spec(max_swap_usd=1_500.0))
    assert isinstance(buy, Plan) and buy.amount_in == 1_500 * E6


def test_only_free_inventory_is_used() -> None:
    balances = {NEAR: 10_000 * E24, USDC: 20_000 * E6}
    capped = plan(balances, free={NEAR: 700 * E24, USDC: 0})
    assert isinstance(capped, Plan) and capped.amount_in == 700 * E24
    held = plan(balances, free={NEAR: 0, USDC: 0})
    assert isinstance(held, Hold) and "none of it is free" in held.reason
    short = plan({NEAR: 0, USDC: 20_000 * E6}, free={NEAR: 0, USDC: 0})
    assert isinstance(short, Hold) and f"no {USDC} is free" in short.reason


def test_the_largest_deviation_goes_first_and_a_blocked_one_does_not_block_the_others() -> None:
    eth_band = BandSpec(min=E18, max=3 * E18, target=2 * E18)
    rebalance = spec(bands={NEAR: NEAR_BAND, ETH: eth_band}, max_swap_usd=1e6)
    balances = {NEAR: 7_000 * E24, ETH: 10 * E18, USDC: 0}  # NEAR +6,000 USD, ETH +24,000 USD
    first = plan(balances, rebalance)
    assert isinstance(first, Plan) and first.asset == ETH and first.amount_in == 8 * E18
    blocked = plan(balances, rebalance, free={NEAR: 7_000 * E24, ETH: 0, USDC: 0})
    assert isinstance(blocked, Plan) and blocked.asset == NEAR


def test_rebalances_start_at_most_every_min_interval() -> None:
    rebalance = spec(min_interval_s=600.0)
    balances = {NEAR: 10_000 * E24, USDC: 0}
    soon = plan(balances, rebalance, last_started_at=T0 - timedelta(seconds=599))
    assert isinstance(soon, Hold) and "min_interval_s" in soon.reason
    later = plan(balances, rebalance, last_started_at=T0 - timedelta(seconds=600))
    assert isinstance(later, Plan)
    # Nothing out of band: no hold, whatever the interval.
    assert plan({NEAR: 5_000 * E24}, rebalance, last_started_at=T0) is None


def test_one_at_a_time_and_only_on_fresh_balances_taken_after_the_last_one() -> None:
    balances = {NEAR: 10_000 * E24, USDC: 0}
    assert plan(balances, in_flight=True) == Hold("a rebalance is in flight")
    assert plan(balances, balances_at=None) == Hold("no balances yet")
    assert plan(balances, balances_at=T0 - timedelta(seconds=11)) == Hold("balances are stale")
    stale = plan(balances, last_finished_at=T0 - timedelta(seconds=1))
    assert isinstance(stale, Hold) and "after the last rebalance" in stale.reason


def test_a_usd_band_needs_a_price_and_an_amount_band_does_not() -> None:
    held = plan({NEAR: 10_000 * E24, USDC: 0}, prices={USDC: 1.0})
    assert held == Hold(f"no price for {NEAR}")
    amounts = spec(bands={NEAR: BandSpec(min=E24, max=2 * E24, target=E24)})
    no_counter_price = plan({NEAR: 5 * E24, USDC: 0}, amounts, prices={NEAR: 3.0})
    assert no_counter_price == Hold(f"no price for the counter asset {USDC}")


def test_amounts_stay_exact_at_24_decimals() -> None:
    # A float would lose the last digits of 1e28-scale amounts; the planner does not.
    odd = 12_345_678_901_234_567_890_123_457
    band = BandSpec(min=E24, max=2 * E24, target=E24 + 1)
    decided = plan({NEAR: odd, USDC: 0}, spec(bands={NEAR: band}, max_swap_usd=1e9))
    assert isinstance(decided, Plan) and decided.amount_in == odd - E24 - 1
    assert units_of(usd_of(odd, 3.0, 24), 3.0, 24) == odd


def test_band_config_takes_one_unit_in_order() -> None:
    with pytest.raises(ValueError, match="not a mix"):
        BandSpec(min=1, max=3, target_usd=2.0)
    with pytest.raises(ValueError, match="min <= target <= max"):
        BandSpec(min=1, max=3, target=4)
    with pytest.raises(ValueError, match="counter_asset"):
        spec(bands={USDC: NEAR_BAND})
    with pytest.raises(ValueError, match="needs counter_asset"):
        spec(counter_asset=None)


# ---------------------------------------------------------------------------------- quote check


def quoted(rebalance: RebalanceSpec, **quote: Any) -> tuple[Any, QuoteResponse]:
    request = swap_request(NEAR, USDC, 1_000 * E24, "solver.test", rebalance, T0)
    body: dict[str, Any] = {
        "correlationId": "c",
        "timestamp": "2026-03-01T12:00:00.000Z",
        "signature": "ed25519:sig",
        "quoteRequest": request.model_dump(mode="json", by_alias=True, exclude_none=True),
        "quote": {
            "amountIn": str(1_000 * E24),
            "amountOut": str(2_990 * E6),
            "depositAddress": "deposit.swap.test",
            "timeWhenInactive": "2026-03-01T12:10:00.000Z",
            **quote,
        },
    }
    return request, from_wire(QuoteResponse, body)


def problem(rebalance: RebalanceSpec, *, echo: dict[str, Any] | None = None, **quote: Any) -> Any:
    request, response = quoted(rebalance, **quote)
    if echo:
        response = response.model_copy(
            update={"quote_request": response.quote_request.model_copy(update=echo)}
        )
    return check_quote(
        request, response, prices=PRICES, decimals=DECIMALS, max_cost_bps=100, now=T0
    )


def test_a_fair_quote_may_be_paid() -> None:
    assert problem(spec()) is None  # 2,990 USDC for 3,000 USD: 33 bps


def test_quotes_that_must_not_be_paid() -> None:
    rebalance = spec()
    assert "costs 200 bps" in problem(rebalance, amountOut=str(2_940 * E6))
    assert "no deposit address" in problem(rebalance, depositAddress=None)
    assert "amountIn" in problem(rebalance, amountIn=str(999 * E24))
    assert "no amountOut" in problem(rebalance, amountOut=None)
    assert "expires too soon" in problem(rebalance, timeWhenInactive="2026-03-01T12:00:05.000Z")
    assert "recipient differs" in problem(rebalance, echo={"recipient": "thief.test"})
    assert "amount differs" in problem(rebalance, echo={"amount": 1})


# ---------------------------------------------------------------------------------- executor


def new_desk() -> Desk:
    """A desk that quotes nothing: what the rebalancer shares with the quote path."""
    return Desk(DeskSettings(), {}, DECIMALS, floors={NEAR: 100 * E24})


@dataclass
class World:
    """The sandbox (ledger, bus, swap API) with a market maker, and our account on it."""

    swaps: SwapSandbox
    tmp_path: Path
    key: SecretKey = field(default_factory=SecretKey.generate)
    offset: timedelta = timedelta(0)
    flows: list[tuple[str, str, int, str, int]] = field(default_factory=list)
    desk: Desk = field(default_factory=new_desk)
    journal: Store | None = None
    """Where the desk's facts go (the executor's journal port, here the rebalancer's store)."""

    @property
    def inventory(self) -> Inventory:
        return self.desk.inventory

    @property
    def pauses(self) -> Pauses:
        return self.desk.pauses

    @property
    def state(self) -> MarketState:
        return self.desk.state

    def feed(self, event: Event) -> list[Action]:
        """What the executor does with the rebalancer's events: the desk decides, and what it
        decides is journaled (committed at once here) and projected into the query tables
        (the live bot's ticker does it a tick later)."""
        actions = self.desk.receive(event, self.now_us())
        if self.journal is not None:
            for action in actions:
                if isinstance(action, Record):
                    self.journal.journal.append(action.fact)
            self.journal.commit()
            self.journal.project()
        return actions

    def restart(self, store: Store) -> None:
        """A new process: its desk rebuilt from the journal alone (``solver.runtime.recovery.recover``), then
        the timers' first prices and balance snapshot."""
        self.desk = new_desk()
        doc, facts = store.journal.load()
        if doc is not None:
            restore(self.desk, doc)
        for fact in facts:
            self.desk.apply(fact)
        for asset, usd in PRICES.items():
            self.state.set_price(asset, usd, self.now_us())
        self.snapshot()

    @property
    def sandbox(self) -> Sandbox:
        return self.swaps.sandbox

    @property
    def account(self) -> str:
        return self.key.public_key.implicit_account_id()

    def clock(self) -> datetime:
        """The rebalancer's clock (its plans speak datetimes)."""
        return datetime.now(UTC) + self.offset

    def now_us(self) -> int:
        """The same clock as the desk takes it: µs (:mod:`solver.core.clock`)."""
        return micros(self.clock())

    def balances(self) -> dict[str, int]:
        return self.swaps.balances(self.account)

    def snapshot(self) -> None:
        """What the app's balance refresh does."""
        self.inventory.set_confirmed(self.balances(), self.now_us())

    def rebalancer(
        self,
        store: Store | None,
        rebalance: RebalanceSpec | None = None,
        *,
        bus_url: str | None = None,
        swap_url: str | None = None,
        dry_run: bool | None = None,
        durable: Callable[[], bool] = lambda: True,  # ``feed`` commits at once
    ) -> Rebalancer:
        self.journal = store
        http = self.swaps.http
        urls = self.sandbox.urls()
        return Rebalancer(
            rebalance or spec(deposit_wait_s=5.0),
            account=self.account,
            key=self.key,
            swap=SwapApiClient(swap_url or urls["swap_api"], self.swaps.token, client=http),
            bus=BusRpcClient(bus_url or urls["relay_rpc"], client=http),
            ledger=LedgerClient(urls["chain_rpc"], self.sandbox.ledger.contract_id, client=http),
            store=store,
            desk=DeskView(self.desk),
            feed=self.feed,
            durable=durable,
            clock=self.clock,
            balance_max_age_s=60,
            dry_run=dry_run,
            on_flow=lambda *flow: self.flows.append(flow),
        )

    def store(self) -> Store:
        return Store(self.tmp_path / "solver.sqlite", checkpoint_every_s=None)


@asynccontextmanager
async def world(tmp_path: Path, **options: Any) -> AsyncIterator[World]:
    async with swap_sandbox(tmp_path, **options) as swaps:
        w = World(swaps, tmp_path)
        fund(w.sandbox, w.account, {NEAR: 10_000 * E24, USDC: 20_000 * E6})
        for asset, usd in PRICES.items():
            w.state.set_price(asset, usd, w.now_us())
        w.snapshot()
        yield w


@asynccontextmanager
async def dead_url() -> AsyncIterator[str]:
    """A URL where nothing answers any more (a service that is down)."""
    async with http_peer(lambda _: (500, b"{}")) as url:
        pass
    yield url


async def until_finished(
    rebalancer: Rebalancer, store: Store, timeout_s: float = 15
) -> RebalanceRecord:
    """Tick as the app's job does until the one rebalance of ``store`` has ended."""
    async with asyncio.timeout(timeout_s):
        while True:
            await rebalancer.tick()
            records = store.rebalances()
            if records and records[0].finished_at is not None:
                return only(store)
            await asyncio.sleep(0.05)


def steps(store: Store, record_id: str) -> list[str]:
    states = [state for _, state, _ in store.rebalance_steps(record_id)]
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]  # changes only


def only(store: Store) -> RebalanceRecord:
    records = store.rebalances()
    assert len(records) == 1, records
    return records[0]


async def test_a_skewed_inventory_is_swapped_back_to_its_target(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        with w.store() as store:
            rebalancer = w.rebalancer(store)
            record = await until_finished(rebalancer, store)
            assert record.state == RebalanceState.SUCCESS, record.reason
            assert steps(store, record.id) == [
                "PLANNED", "QUOTED", "DEPOSIT_SENT", "DEPOSITED", "SUBMITTED", "SUCCESS"
            ]  # fmt: skip
            # 5,000 NEAR (15,000 USD) paid into the deposit account; 15,000 USDC received.
            assert w.balances() == {NEAR: 5_000 * E24, USDC: 35_000 * E6, ETH: 0}
            assert record.amount_out == 15_000 * E6
            # The quote is kept whole, with the service's signature, and the signed deposit.
            assert record.quote_response is not None and record.quote_request is not None
            assert record.quote_response["signature"] == record.quote_signature
            assert record.quote_response["quote"]["depositAddress"] == record.deposit_address
            echo = record.quote_response["quoteRequest"]
            assert echo["recipient"] == echo["refundTo"] == w.account
            assert echo["depositType"] == echo["refundType"] == echo["recipientType"] == "INTENTS"
            assert record.deposit_signed is not None and record.deposit_nonce is not None
            assert store.nonce_used_before(w.account, record.deposit_nonce)
            assert record.status_response is not None
            assert record.status_response["swapDetails"]["amountOut"] == str(15_000 * E6)
            # The reconciliation heard of both moves; the inventory holds nothing back.
            assert w.flows == [
                (f"rebalance:{record.id}:deposit", USDC, 0, NEAR, 5_000 * E24),
                (f"rebalance:{record.id}:out", USDC, 15_000 * E6, NEAR, 0),
            ]
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {}
            assert rebalancer.in_flight == {} and rebalancer.open_flows() == []
            # PnL marks wait for a snapshot after it; then everything is in band.
            assert rebalancer.settling()
            await rebalancer.tick()
            w.snapshot()
            assert not rebalancer.settling()
            await rebalancer.tick()
            assert len(store.rebalances()) == 1


async def test_a_restart_resumes_a_deposit_the_bus_never_got(tmp_path: Path) -> None:
    async with world(tmp_path) as w, dead_url() as down:
        with w.store() as store:
            first = w.rebalancer(store, spec(deposit_wait_s=0.3), bus_url=down + "rpc")
            await first.tick()
            record = only(store)
            assert record.state == RebalanceState.DEPOSIT_SENT
            assert "publish_intent got no answer" in (record.reason or "")
            assert w.balances()[NEAR] == 10_000 * E24  # nothing moved yet
            # While it may still execute, the reconciliation allows for it and PnL waits.
            flows = {r.quote_id: r for r in first.open_flows()}
            assert flows[f"rebalance:{record.id}"].amount_out == 5_000 * E24
            assert first.settling()
            held = {f"{NEAR}->{USDC}": f"rebalancing: rebalancing ({record.id})"}
            assert w.pauses.as_dict() == held
            assert w.inventory.reserved == {NEAR: 5_000 * E24}
        # The process dies (kill -9: nothing but the store is left); a new one takes it up.
        with w.store() as store:
            w.restart(store)
            # The desk alone, from the journal: the input still held, the route still paused.
            assert w.inventory.reserved == {NEAR: 5_000 * E24}
            assert w.pauses.as_dict() == held
            second = w.rebalancer(store)
            assert await second.resume() == 1
            assert w.inventory.reserved == {NEAR: 5_000 * E24}  # held once, not twice
            done = await until_finished(second, store)
            assert done.state == RebalanceState.SUCCESS, done.reason
            assert done.deposit_intent_hash == record.deposit_intent_hash  # the same item
            details = [d or "" for _, _, d in store.rebalance_steps(done.id)]
            signed = [d for d in details if d.startswith("transfer")]
            assert signed == [f"transfer {record.deposit_intent_hash}"]  # signed once, ever
            assert w.balances() == {NEAR: 5_000 * E24, USDC: 35_000 * E6, ETH: 0}
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {}


async def test_a_deposit_the_bus_lost_is_published_again_until_it_executes(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w, dead_url() as down:
        with w.store() as store:
            rebalancer = w.rebalancer(store, spec(deposit_wait_s=0.3), bus_url=down + "rpc")
            await rebalancer.tick()
            lost = only(store)
            assert lost.state == RebalanceState.DEPOSIT_SENT
            # The bus is back: the same signed transfer goes out again and executes.
            rebalancer.bus = BusRpcClient(w.sandbox.urls()["relay_rpc"], client=w.swaps.http)
            done = await until_finished(rebalancer, store)
            assert done.state == RebalanceState.SUCCESS, done.reason
            assert done.deposit_intent_hash == lost.deposit_intent_hash
            assert w.balances() == {NEAR: 5_000 * E24, USDC: 35_000 * E6, ETH: 0}


async def test_a_deposit_never_executed_by_its_deadline_is_abandoned(tmp_path: Path) -> None:
    async with world(tmp_path) as w, dead_url() as down:
        with w.store() as store:
            rebalance = spec(deposit_wait_s=0.2, deposit_deadline_s=1.0)
            rebalancer = w.rebalancer(store, rebalance, bus_url=down + "rpc")
            await rebalancer.tick()
            assert only(store).state == RebalanceState.DEPOSIT_SENT
            await rebalancer.tick()  # still within its deadline: followed, not re-signed
            assert only(store).state == RebalanceState.DEPOSIT_SENT
            w.offset = timedelta(seconds=10)
            await rebalancer.tick()
            record = only(store)
            assert record.state == RebalanceState.ABANDONED
            assert "deposit expired unexecuted" in (record.reason or "")
            assert w.balances()[NEAR] == 10_000 * E24
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {} and w.flows == []
            assert not rebalancer.settling()


async def test_a_deposit_nonce_signed_before_is_never_signed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nonce is registered in the store before the deposit is signed: one registered
    before (here the random source repeats one) is refused, nothing is signed or published,
    and the next tick signs under a fresh nonce."""
    async with world(tmp_path) as w:
        with w.store() as store:
            repeated = b"\x07" * 28
            salt = bytes.fromhex(w.sandbox.ledger.current_salt())
            store.register_nonce(w.account, salt + repeated, w.clock())  # signed before
            real = nonce_module.salted_nonce
            monkeypatch.setattr(nonce_module, "salted_nonce", lambda s, u=None: s + repeated)
            rebalancer = w.rebalancer(store)
            with pytest.raises(NonceReusedError):
                await rebalancer.tick()
            (record,) = rebalancer.in_flight.values()
            assert record.state == RebalanceState.QUOTED and record.deposit_nonce is None
            assert w.sandbox.bus.intents == {} and w.balances()[NEAR] == 10_000 * E24
            monkeypatch.setattr(nonce_module, "salted_nonce", real)
            done = await until_finished(rebalancer, store)
            assert done.state == RebalanceState.SUCCESS, done.reason
            assert done.deposit_nonce is not None and done.deposit_nonce != salt + repeated
            assert store.nonce_used_before(w.account, done.deposit_nonce)


async def test_a_signed_deposit_is_published_only_once_it_is_in_the_journal(
    tmp_path: Path,
) -> None:
    """A restart must find any deposit that may have left: while the journal has not committed
    the DEPOSIT_SENT step, the signed item waits."""
    async with world(tmp_path) as w:
        with w.store() as store:
            committed = False
            rebalancer = w.rebalancer(store, durable=lambda: committed)
            await rebalancer.tick()
            await rebalancer.tick()
            (record,) = rebalancer.in_flight.values()
            assert record.state == RebalanceState.DEPOSIT_SENT
            assert w.sandbox.bus.intents == {} and w.balances()[NEAR] == 10_000 * E24
            committed = True
            done = await until_finished(rebalancer, store)
            assert done.state == RebalanceState.SUCCESS, done.reason
            assert done.deposit_intent_hash == record.deposit_intent_hash


async def test_a_costly_quote_is_refused_and_nothing_is_paid(tmp_path: Path) -> None:
    async with world(tmp_path, rate=(2_900 * E6, 1_000 * E24)) as w:  # 2.90 for 3.00 USD
        with w.store() as store:
            await w.rebalancer(store).tick()
            record = only(store)
            assert record.state == RebalanceState.ABANDONED
            assert "quote refused: the quote costs 333 bps" in (record.reason or "")
            assert record.quote_response is not None  # kept all the same
            assert steps(store, record.id) == ["PLANNED", "ABANDONED"]
            assert w.balances()[NEAR] == 10_000 * E24
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {}


async def test_a_swap_api_that_does_not_answer_abandons_before_paying(tmp_path: Path) -> None:
    async with world(tmp_path) as w, dead_url() as down:
        with w.store() as store:
            rebalancer = w.rebalancer(store, spec(min_interval_s=60.0), swap_url=down)
            await rebalancer.tick()
            record = only(store)
            assert record.state == RebalanceState.ABANDONED
            assert "no quote" in (record.reason or "")
            w.snapshot()
            await rebalancer.tick()  # the interval holds the next try back
            assert len(store.rebalances()) == 1
            assert w.balances()[NEAR] == 10_000 * E24


def drain_after_answering(w: World, asset: str) -> None:
    """The maker answers, then moves all its ``asset`` away (a signed transfer): the quote it
    gave can no longer be executed."""
    maker = w.swaps.maker
    ledger = w.sandbox.ledger

    def drain() -> None:
        held = ledger.mt_balance_of(maker.account, asset)
        if held:
            item = sign_nep413(
                maker.key,
                signer_id=maker.account,
                verifying_contract=ledger.contract_id,
                deadline=datetime.now(UTC) + timedelta(seconds=60),
                nonce=salted_nonce(bytes.fromhex(ledger.current_salt())),
                intents=[Transfer(receiver_id="sink.test", tokens={asset: held})],
            )
            w.sandbox.chain.execute([item.model_dump(mode="json", exclude_none=True)])

    def tamper(event: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().call_later(0.05, drain)
        return answer

    maker.tamper = tamper


async def test_a_refunded_swap_ends_refunded_with_the_refund_reported(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        drain_after_answering(w, USDC)
        with w.store() as store:
            record = await until_finished(w.rebalancer(store), store)
            assert record.state == RebalanceState.REFUNDED, record.reason
            assert "refunded" in (record.reason or "")
            assert w.balances()[NEAR] == 10_000 * E24  # paid, then refunded in full
            assert w.flows[-1] == (f"rebalance:{record.id}:refund", NEAR, 5_000 * E24, USDC, 0)
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {}


async def test_a_swap_in_progress_is_polled_tick_after_tick(tmp_path: Path) -> None:
    async with world(tmp_path, settlement_delay_ms=800) as w:
        with w.store() as store:
            rebalancer = w.rebalancer(store)
            await rebalancer.tick()  # deposit settled and submitted; the swap is under way
            record = only(store)
            assert record.state == RebalanceState.SUBMITTED
            seen: list[tuple[str | None, str | None, bool]] = []
            async with asyncio.timeout(15):
                while only(store).finished_at is None:
                    before = only(store)
                    count = len(store.rebalance_steps(record.id))
                    await rebalancer.tick()
                    after = only(store)
                    grew = len(store.rebalance_steps(record.id)) > count
                    seen.append((before.swap_status, after.swap_status, grew))
                    await asyncio.sleep(0.05)
            assert only(store).state == RebalanceState.SUCCESS
            # A step is written when the status changes, and only then.
            assert all(grew == (old != new) for old, new, grew in seen), seen
            assert any(not grew for _, _, grew in seen), seen


async def test_a_restart_before_the_deposit_was_signed_abandons(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        with w.store() as store:
            rebalancer = w.rebalancer(store)
            inputs_now = rebalancer._inputs(w.clock())
            decided = plan_rebalance(rebalancer.spec, inputs_now, balance_max_age_s=60)
            assert isinstance(decided, Plan)
            assert rebalancer.start(decided, w.clock()) is not None
        with w.store() as store:
            w.restart(store)
            assert w.inventory.reserved == {NEAR: 5_000 * E24}  # from the journal
            again = w.rebalancer(store)
            assert await again.resume() == 0
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {}  # released
            record = only(store)
            assert record.state == RebalanceState.ABANDONED
            assert "nothing was paid" in (record.reason or "")
            assert record.quote_response is None
            assert again.last_started_at == record.created_at  # the interval survives restarts


async def test_dry_run_only_logs_the_plan(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with world(tmp_path) as w, dead_url() as down:
        with w.store() as store, caplog.at_level(logging.INFO, "solver.rebalance.rebalancer"):
            rebalancer = w.rebalancer(
                store, spec(min_interval_s=60.0), swap_url=down, bus_url=down, dry_run=True
            )
            await rebalancer.tick()
            await rebalancer.tick()
            assert store.rebalances() == [] and w.balances()[NEAR] == 10_000 * E24
            assert w.inventory.reserved == {} and w.pauses.as_dict() == {}
            plans = [r.message for r in caplog.records if "dry run" in r.message]
            assert len(plans) == 1, plans  # once per min_interval_s
            assert f"sell {NEAR}: pay 5000 {NEAR} (~15000.00 USD) for {USDC}" in plans[0]


async def test_without_a_store_nothing_is_started(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        rebalancer = w.rebalancer(None)
        await rebalancer.tick()
        assert rebalancer.in_flight == {} and w.balances()[NEAR] == 10_000 * E24


# ---------------------------------------------------------------------------------- the bot


SKEWED = {USDC: 20_000 * E6, NEAR: 10_000 * E24, ETH: 5 * E18}


async def test_acceptance_the_bot_moves_a_skewed_inventory_back_into_its_band(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance (bot side): the running bot, its rebalancer enabled, moves a skewed inventory
    back into its band through the sandbox's swap API, a scripted solver providing the
    liquidity on the bus; the reconciliation takes the moves for its own and the kill switch
    stays quiet (``live_bot`` fails on any ERROR line)."""
    async with swap_sandbox(tmp_path, rate=(2_997 * E6, 1_000 * E24)) as swaps:
        monkeypatch.setenv("SOLVER_TEST_SWAP_TOKEN", swaps.token)
        overrides = {
            "swap_api": {"base_url": swaps.swap_url, "token_env": "SOLVER_TEST_SWAP_TOKEN"},
            "rebalance.enabled": True,
            "rebalance.dry_run": False,
            "rebalance.bands": {NEAR: {"min_usd": 10_000, "max_usd": 20_000, "target_usd": 15_000}},
            "rebalance.counter_asset": USDC,
            "rebalance.max_swap_usd": 20_000,
            "rebalance.min_interval_s": 0,
            "rebalance.tick_s": 0.2,
        }
        async with live_bot(
            tmp_path, sandbox=swaps.sandbox, overrides=overrides, balances=SKEWED
        ) as bot:
            band = resolve_band(NEAR_BAND, 3.0, 24)
            assert band is not None and not band.low <= SKEWED[NEAR] <= band.high
            app, rebalancer, store = bot.app, bot.app.rebalancer, bot.app.store
            assert rebalancer is not None and store is not None
            await eventually(
                lambda: [r.finished_at is None for r in store.rebalances()] == [False],
                "a rebalance to start and end (its row projected from the journal)",
                30,
            )
            assert [r.state for r in store.rebalances()] == ["SUCCESS"]
            assert bot.balances()[NEAR] == 5_000 * E24  # the target, inside the band
            assert bot.balances()[USDC] == SKEWED[USDC] + 14_985 * E6  # at 2.997
            # Fresh snapshots after it: reconciled clean, PnL marked again, not paused.
            ended = app.clock()

            def reconciled() -> bool:
                seen, last = app.desk.inventory.confirmed_at, app.desk.balances.report
                fresh = seen is not None and seen > ended
                return fresh and last is not None and last["ok"] and not rebalancer.settling()

            await eventually(reconciled, "a clean reconciliation after the rebalance")
            assert "*" not in app.desk.pauses.as_dict() and rebalancer.in_flight == {}


def test_flows_callback_shape_matches_the_desk_event() -> None:
    """The rebalancer reports flows as the desk's ``OwnFlowSettled`` event takes them."""
    params = [f.name for f in dataclasses.fields(OwnFlowSettled)]
    assert params == ["key", "asset_in", "amount_in", "asset_out", "outflow"]
