"""The replay engine: the live pipeline's decisions, settlement on the ledger, the clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from backtest.engine import Replay
from backtest.measure.downsampled import Downsampled
from backtest.measure.fill_record import FillRecord
from backtest.ports import ImmediateLoop
from backtest.report.outputs import summary
from backtest.settle import USER_FUNDS, LedgerSettler, SettlementFailed
from backtest.stream.events import CompetitorEvent, RequestEvent, StreamEvent
from solver.core import events as ev
from solver.core.actions import Action, Decision
from solver.core.clock import from_micros, micros
from solver.core.desk import Desk
from solver.core.lifecycle import Quote
from solver.core.market import QuoteRequest
from solver.core.quoting import Skip
from solver.runtime.wiring import build_desk
from tests.backtest.replay_helpers import (
    E6,
    E24,
    HEADER,
    NEAR,
    USDC,
    at,
    bot_config,
    competitor,
    flow,
    price,
    prices,
    request,
    run,
    settings,
)


def _request_of(event: ev.Event) -> QuoteRequest | None:
    """The request an event asks to decide (the executor hands the request itself)."""
    return event if isinstance(event, QuoteRequest) else None


def _decision(action: Decision) -> Quote | Skip:
    """The decision as it was made: a copy of the quote, which the book changes once signed."""
    assert isinstance(action, Quote | Skip), action
    return dataclasses.replace(action) if isinstance(action, Quote) else action


def _ceil_fee(amount: int, pips: int) -> int:
    return -(-amount * pips // 1_000_000)


def test_the_replay_drives_the_live_desk_through_events_only() -> None:
    # Every answer loses (a competitor always beats it), so reservations pile up until their
    # deadlines and small balances and an exposure limit make some requests skip. The replay's
    # desk is the live one (build_desk from the same config) and changes only through the
    # events it is fed and the signatures handed back (Desk.signed): a fresh desk fed the same
    # events and signatures at the same times decides
    # exactly the same for every request, and ends in the same state.
    config = bot_config(risk__max_open_exposure_usd=1_500.0)
    events = flow(400, every=0.25)
    with_competitors: list[StreamEvent] = []
    for event in events:
        with_competitors.append(event)
        if isinstance(event, RequestEvent):
            best = 10**36 if event.request.exact_in else 1
            with_competitors.append(CompetitorEvent(event.ts, event.request.quote_id, best))
    replay = Replay(
        config,
        settings(
            balances={USDC: str(900 * E6), NEAR: str(300 * E24)}, fill={"model": "competitor"}
        ),
    )
    # None: a tick; a callable: a signature handed back, given to the twin the same way.
    fed: list[tuple[ev.Event | Callable[[Desk], object] | None, int]] = []
    decided: dict[str, Quote | Skip] = {}
    desk = replay.desk
    receive, tick, decide = desk.receive, desk.tick, replay.executor._decide

    def receiving(event: ev.Event, now: int) -> list[Action]:
        fed.append((event, now))
        return receive(event, now)

    def deciding(request: QuoteRequest, now: int) -> Decision:
        fed.append((request, now))
        action = decide(request, now)
        decided[request.quote_id] = _decision(action)
        return action

    def ticking(now: int) -> list[Action]:
        fed.append((None, now))
        return tick(now)

    signed = replay.executor._signed
    twin_quotes: dict[str, Quote] = {}  # the twin's own decisions, signed as the replay's

    def signing(*args: Any) -> None:  # the signature back: (quote, ..., now)
        def again(other: Desk) -> object:
            return other.signed(twin_quotes[args[0].quote_id], *args[1:])

        fed.append((again, args[-1]))
        return signed(*args)

    desk.receive = receiving  # type: ignore[method-assign]
    replay.executor._decide = deciding
    desk.tick = ticking  # type: ignore[method-assign]
    replay.executor._signed = signing  # type: ignore[assignment]
    result = replay.run(with_competitors, HEADER)

    twin = build_desk(config, timer=lambda: 0.0)
    expected: dict[str, Quote | Skip] = {}
    for fed_event, now in fed:
        if fed_event is None:
            twin.tick(now)
        elif callable(fed_event):
            fed_event(twin)
        elif (request := _request_of(fed_event)) is not None:
            action = twin.decide(request, now)
            expected[request.quote_id] = _decision(action)
            if isinstance(action, Quote):
                twin_quotes[request.quote_id] = action
        else:
            twin.receive(fed_event, now)
    assert decided == expected
    assert twin.stats == desk.stats
    assert twin.inventory.reservations == desk.inventory.reservations
    assert twin.book.quotes.keys() == desk.book.quotes.keys()
    reasons = {"Quote" if isinstance(o, Quote) else o.reason for o in decided.values()}
    assert {"Quote", "strategy_no_quote", "exposure_limit"} <= reasons
    assert desk.stats.outcomes["LOST"] > 100  # ended by the desk after their deadlines
    assert result.measures.won == 0 and result.final_inventory == result.start_inventory


def test_winning_fills_move_the_ledger_by_exactly_their_diffs_and_fees() -> None:
    fills: list[FillRecord] = []
    events = [
        *prices(0),
        request(1, "a", 10 * E24),
        request(2, "b", 30 * E6, asset_in=USDC, asset_out=NEAR),
        request(3, "c", 5 * E6, exact_in=False),
        request(4, "d", 2 * E24, asset_in=USDC, asset_out=NEAR, exact_in=False),
    ]
    replay = Replay(
        bot_config(), settings(fill={"model": "always"}, fee_pips=300), on_fill=fills.append
    )
    result = replay.run(events, HEADER)
    assert [f.quote_id for f in fills] == ["a", "b", "c", "d"]
    expected = dict(result.start_inventory)
    for fill in fills:
        assert fill.fee == _ceil_fee(fill.amount_out, 300) > 0
        expected[fill.asset_in] += fill.amount_in
        expected[fill.asset_out] -= fill.amount_out + fill.fee
    assert result.final_inventory == expected
    ledger = replay.settler.ledger
    for token in (USDC, NEAR):
        solver_fees = sum(f.fee for f in fills if f.asset_out == token)
        user_fees = sum(_ceil_fee(f.amount_in, 300) for f in fills if f.asset_in == token)
        assert ledger.mt_balance_of(ledger.fee_collector, token) == solver_fees + user_fees
        assert ledger.total_supply(token) == result.start_inventory[token] + USER_FUNDS
    # The inventory took the ledger's balances; nothing stays reserved.
    assert {a: replay.inventory.confirmed[a] for a in (USDC, NEAR)} == result.final_inventory
    assert replay.inventory.reserved == {} and result.open_at_end == 0
    fee_usd = sum(f.fee * f.price_out / 10 ** (6 if f.asset_out == USDC else 24) for f in fills)
    assert result.measures.fees == pytest.approx(fee_usd)
    assert result.measures.won == 4 and result.measures.quoted == 4


def test_a_losing_quote_keeps_its_reservation_until_its_deadline() -> None:
    # As live: the reservation holds until a balance snapshot taken after the deadline (the
    # replay's desk takes one at every tick, each second), and the desk ends the quote LOST
    # once the deadline and its grace have passed (no nonce check: nothing was missed).
    config = bot_config()
    snapshots: list[dict[str, int]] = []
    open_quotes: list[int] = []
    replay = Replay(
        config,
        settings(
            balances={USDC: str(10_000 * E6), NEAR: str(10_000 * E24)}, fill={"model": "competitor"}
        ),
    )

    def events() -> Iterator[StreamEvent]:
        yield from prices(0)
        yield request(1, "a", 10 * E24, min_deadline_ms=10_000)  # deadline 1 + 10 + 5 = 16 s
        yield competitor(1, "a", 10**30)  # far better for the user: we lose at 2 s
        for seconds in (2.5, 15.9, 16.0, 16.5, 17.0, 19.5):
            yield price(seconds, NEAR, "3.0")
            snapshots.append(dict(replay.inventory.reserved))  # after the event was handled
            open_quotes.append(len(replay.desk.book.quotes))

    result = replay.run(events(), HEADER)
    assert config.quote.deadline_margin_ms == 5_000
    held = snapshots[0][USDC]
    assert held > 0
    assert snapshots == [{USDC: held}] * 4 + [{}, {}]
    assert open_quotes == [1, 1, 1, 1, 1, 0]  # LOST at the first tick past 16 s + 2 s of grace
    assert result.desk.stats.outcomes == {"LOST": 1}
    assert result.measures.lost == {"competitor": 1} and result.measures.won == 0
    assert result.final_inventory == result.start_inventory


@pytest.mark.parametrize(
    ("strategy", "reason"),
    [
        ("spread", "strategy_no_quote"),  # the strategy looks at free inventory itself
        ("tests.backtest.replay_helpers:Greedy", "insufficient_inventory"),  # the pipeline does
    ],
)
def test_the_inventory_guard_holds_no_fill_beyond_the_balance(strategy: str, reason: str) -> None:
    # 100 USDC, 30 of them a floor: one 20-NEAR sale (~60 USD out) fits, the next ones do not,
    # neither while it is reserved nor after it settled (40 USDC left, 10 free).
    config = bot_config(
        risk__floors={USDC: str(30 * E6)}, pairs__0__strategy=strategy, pairs__0__params={}
    )
    events = [*prices(0), *(request(1 + i * 0.4, f"q{i}", 20 * E24) for i in range(6))]
    _, result = run(
        events, config, balances={USDC: str(100 * E6), NEAR: "0"}, fill={"model": "always"}
    )
    assert result.measures.won == 1
    assert result.measures.skips == {reason: 5}
    assert result.measures.settle_failed == {}
    assert 30 * E6 <= result.final_inventory[USDC] < 100 * E6
    assert result.final_inventory[NEAR] == 20 * E24


@pytest.mark.parametrize("sign", [False, True])
def test_the_ledger_refuses_an_outflow_beyond_the_balance(sign: bool) -> None:
    settler = LedgerSettler(
        contract="intents.near",
        solver_account="solver.near",
        user_account="user.near",
        fee_pips=100,
        sign=sign,
    )
    settler.fund({USDC: 10 * E6}, [USDC, NEAR])

    def quote_paying(amount_out: int) -> Quote:
        """A quote of 1 NEAR for ``amount_out`` USDC, with the fee on it."""
        fee = _ceil_fee(amount_out, 100)
        return Quote("x", NEAR, USDC, E24, amount_out, fee, micros(at(60)), True)

    quote = quote_paying(10 * E6)  # fee does not fit
    before = settler.ledger.state_digest()
    with pytest.raises(SettlementFailed, match="insufficient balance"):
        settler.settle(quote, settler.sign(quote), at(1))
    assert settler.ledger.state_digest() == before
    ok = quote_paying(9 * E6)
    assert settler.settle(ok, settler.sign(ok), at(1)) == ok.fee
    assert settler.balance(USDC) == E6 - ok.fee


def test_signing_on_and_off_leave_the_same_ledger_and_summary() -> None:
    events = flow(60)
    results = {}
    for sign in (False, True):
        replay, result = run(events, fill={"model": "always"}, fee_pips=250, sign=sign)
        ledger = replay.settler.ledger
        results[sign] = (
            {a: dict(b) for a, b in ledger.balances.items()},
            result.final_inventory,
            result.measures.won,
            result.desk.pnl.realized_usd,
            result.desk.pnl.pnl,
            dict(result.measures.skips),
        )
        assert result.measures.won > 20 and result.measures.settle_failed == {}
    assert results[False] == results[True]


def test_a_settlement_after_the_deadline_fails_and_releases() -> None:
    events = [*prices(0), request(1, "a", 10 * E24, min_deadline_ms=1_000), price(30, NEAR, "3.0")]
    replay, result = run(events, fill={"model": "always"}, settlement_delay_ms=20_000)
    assert result.measures.settle_failed == {"deadline has expired": 1}
    assert result.measures.won == 0 and replay.inventory.reserved == {}
    assert result.desk.stats.outcomes == {"LOST": 1}  # at 7 s + grace, before the attempt
    assert result.final_inventory == result.start_inventory


@pytest.mark.parametrize("sign", [False, True])
def test_a_refused_settlement_ends_one_claim_and_the_deadline_ends_the_quote(sign: bool) -> None:
    # The ledger refuses the taker's batch (the USDC left behind the desk's back): as live, the
    # desk hears the claim and NOT_FOUND_OR_NOT_VALID for it; the quote stays open with its
    # reservation (another intent could still use it) until its deadline, then the nonce
    # (unused, the ledger says) makes it LOST.
    config = bot_config(
        risk__halt_on_mismatch=False, risk__max_daily_loss_usd=1e9, risk__max_drawdown_usd=1e9
    )
    replay = Replay(config, settings(fill={"model": "always"}, sign=sign))
    reserved: list[int] = []

    def events() -> Iterator[StreamEvent]:
        yield from prices(0)
        yield request(1, "a", 10 * E24)  # pays ~30 USDC out; deadline 1 + 10 + 5 = 16 s
        ledger = replay.settler.ledger
        ledger.balances[replay.settler.solver][USDC] = 0  # settles at 2 s: refused
        for seconds in (10.0, 16.5, 17.5, 19.5):
            yield price(seconds, NEAR, "3.0")
            reserved.append(replay.inventory.reserved.get(USDC, 0))

    result = replay.run(events(), HEADER)
    assert list(result.measures.settle_failed) == ["insufficient balance or overflow"]
    assert result.measures.won == 0 and result.halted is None
    assert reserved[0] == reserved[1] > 0 and reserved[2:] == [0, 0]
    assert result.desk.stats.outcomes == {"LOST": 1}
    assert result.desk.book.quotes == {}


def test_the_reconciliation_of_the_desk_halts_the_replay() -> None:
    # The same unexplained move with the default halt_on_mismatch: the desk's reconciliation
    # pause is the replay's halt.
    replay = Replay(bot_config(), settings(fill={"model": "always"}))

    def events() -> Iterator[StreamEvent]:
        yield from prices(0)
        replay.settler.ledger.balances[replay.settler.solver][USDC] -= E6
        yield request(1.5, "a", 10 * E24)

    result = replay.run(events(), HEADER)
    assert result.halted is not None
    assert result.halted["reason"].startswith(f"reconciliation: {USDC}: on-chain balance off")
    assert result.halted["at"] == at(1).isoformat(timespec="microseconds")
    assert result.measures.skips == {"paused": 1}


def test_an_answer_slower_than_the_bus_wait_loses() -> None:
    events = [*prices(0), request(1, "a", 10 * E24), request(2, "b", 10 * E24)]
    _, result = run(events, fill={"model": "always"}, latency={"kind": "fixed", "ms": 3_001})
    assert result.measures.quoted == 2 and result.measures.lost == {"late": 2}
    _, result = run(events, fill={"model": "always"}, latency={"kind": "fixed", "ms": 2_000})
    assert result.measures.won == 2


def test_competitor_events_count_until_the_outcome_is_decided() -> None:
    events = [
        *prices(0),
        competitor(0.5, "early", 10**30),  # before its request: still counts
        request(1, "early", 10 * E24),
        request(1, "late", 10 * E24),
        competitor(2.5, "late", 10**30),  # after the outcome (1 s + 1 s): too late to matter
        competitor(2.5, "never-asked", 1),
    ]
    # Unobserved requests uncontested, so "late" (its competitor came too late) wins.
    _, result = run(events, fill={"model": "competitor", "unobserved": {"mode": "uncontested"}})
    assert result.measures.lost == {"competitor": 1} and result.measures.won == 1
    # By default its competition is modelled on what was observed: the one beaten "early".
    _, result = run(events, fill={"model": "competitor"})
    assert result.measures.lost == {"competitor": 1, "competitor_model": 1}


def test_the_kill_switch_pauses_quoting_after_a_drawdown() -> None:
    events = [
        *prices(0),
        request(1, "a", 10 * E24),
        price(5, NEAR, "2.5"),  # the NEAR held (100k USD worth) loses a sixth of its value
        request(6, "b", 10 * E24),
    ]
    config = bot_config(risk__max_drawdown_usd=1_000.0, risk__max_daily_loss_usd=1e9)
    _, result = run(events, config, fill={"model": "always"})
    assert result.halted is not None and result.halted["reason"].startswith("drawdown")
    assert result.measures.skips == {"paused": 1}
    _, result = run(events, config, fill={"model": "always"}, kill_switch=False)
    assert result.halted is None and result.measures.won == 2


def test_the_kill_switch_of_the_replay_is_the_desks() -> None:
    # A tiny drawdown limit: the first adverse tick pauses the desk, and the replay's halt is
    # that very pause (its time and reason); the desk's own PnL book measured the drawdown.
    events = [*flow(40, every=0.5), price(25, NEAR, "2.97"), request(26, "late", 10 * E24)]
    config = bot_config(risk__max_drawdown_usd=0.01, risk__max_daily_loss_usd=1e9)
    replay, result = run(events, config, fill={"model": "always"})
    pause = replay.desk.pauses.get("*", "drawdown")
    assert pause is not None and result.halted is not None
    assert result.halted == {
        "at": from_micros(pause.at).isoformat(timespec="microseconds"),
        "reason": f"drawdown: {pause.reason}",
    }
    assert pause.reason.startswith("drawdown ") and pause.reason.endswith("USD > 0.01")
    assert replay.desk.risk_paused() and result.measures.skips["paused"] > 0
    assert replay.desk.pnl.drawdown_usd() > 0.01 or replay.desk.pnl.peak_pnl > 0
    assert summary(result, fill_model="always", seed=0)["halted"] == result.halted


def test_static_price_sources_stay_fresh_until_the_stream_prices_the_asset() -> None:
    config = bot_config(
        prices__sources=[{"kind": "static", "prices": {USDC: 1.0, NEAR: 3.0}}],
    )
    events: list[StreamEvent] = [request(1, "a", 10 * E24), request(100, "b", 10 * E24)]
    _, result = run(events, config, fill={"model": "always"})
    assert result.measures.won == 2
    assert result.start_inventory[USDC] == 100_000 * E6
    # Once the stream prices NEAR, that price goes stale like any other.
    events = [request(1, "a", 10 * E24), price(2, NEAR, "3.0"), request(100, "b", 10 * E24)]
    _, result = run(events, config, fill={"model": "always"})
    assert result.measures.skips == {"stale_price": 1}


def test_starting_balances_default_to_a_usd_amount_at_the_first_price() -> None:
    events: list[StreamEvent] = [price(0, USDC, "1.0"), request(1, "a", E24), price(2, NEAR, "4.0")]
    _, result = run(events, starting_usd=1_000.0, balances={USDC: "5"})
    assert result.start_inventory == {USDC: 5, NEAR: 250 * E24}
    assert result.desk.pnl.start_equity == pytest.approx(1_000.0 + 5e-6)


def test_pnl_is_marked_from_the_first_prices_even_when_they_come_late() -> None:
    events: list[StreamEvent] = [
        request(1, "early", E24),  # no price yet: skipped
        *prices(5),
        price(9, NEAR, "3.3"),
    ]
    _, result = run(events, balances={USDC: str(1_000 * E6), NEAR: str(100 * E24)})
    assert result.measures.skips == {"no_price": 1}
    assert result.desk.pnl.start_equity == pytest.approx(1_300.0)
    assert result.desk.pnl.pnl == pytest.approx(30.0)
    assert result.measures.max_drawdown == 0.0


def test_decimals_disagreeing_with_the_stream_header_are_refused() -> None:
    from backtest.stream.events import Header, TokenInfo
    from solver.errors import ConfigError

    header = Header(HEADER.created, "x", {USDC: TokenInfo("USDC", 18)})
    with pytest.raises(ConfigError, match="decimals"):
        Replay(bot_config(), settings()).run([], header)


def test_an_empty_stream_gives_an_empty_result() -> None:
    _, result = run([])
    assert result.measures.requests == 0 and result.measures.first_ts is None


def test_memory_stays_bounded_by_the_open_work() -> None:
    events: list[StreamEvent] = []
    for i, event in enumerate(flow(3_000, every=0.1)):
        events.append(event)
        if i % 10 == 0:  # answers to requests we never saw: forgotten after a while
            events.append(CompetitorEvent(event.ts, f"nobody{i}", 1))
    # Every user takes (a fixed 60 bps limit, above the 25 bps spread): all quotes end won.
    taker = {"kind": "fixed", "tolerance_bps": 60}
    replay, result = run(events, fill={"model": "always", "taker": taker})
    assert result.measures.won > 1_000 and result.measures.events["competitor"] > 300
    assert not replay.relay.resolves and not result.measures.open_fills
    assert not replay.desk.book.quotes and not replay.desk.inventory.reservations
    assert len(replay.relay.competitors) < 100
    series = Downsampled(capacity=10)
    for i in range(10_000):
        series.add(float(i), (float(i),))
    assert len(series.points) < 20 and series.series()[-1] == (9_999.0, (9_999.0,))


def test_a_replay_runs_once() -> None:
    replay, _ = run(prices(0))
    with pytest.raises(RuntimeError, match="once"):
        replay.run(prices(0), HEADER)


def test_the_immediate_loop_runs_deferred_work_at_once() -> None:
    # The replay's loop port (issue 29: call_soon is operator.call, no frame of its own): the
    # outbox's flush and a failed commit's retry both run before the call returns.
    loop = ImmediateLoop()
    ran: list[str] = []
    loop.call_soon(lambda: ran.append("soon"))
    loop.call_later(5.0, lambda: ran.append("later"))
    assert ran == ["soon", "later"]


def test_the_relay_values_a_unit_at_the_price_the_desk_holds() -> None:
    """The relay takes each asset's USD per smallest unit when the replay feeds the desk a
    price (a static source's at every tick, the stream's as it comes), as the desk holds it."""
    config = bot_config(prices__sources=[{"kind": "static", "prices": {USDC: 1.0, NEAR: 3.0}}])
    events: list[StreamEvent] = [request(1, "a", 10 * E24), price(2, NEAR, "3.3")]
    replay, result = run([*events, request(3, "b", 10 * E24)], config, fill={"model": "always"})
    held = replay.desk.state.prices
    assert held[NEAR].usd == 3.3 and result.measures.won == 2
    assert replay.relay.unit_usd == {USDC: held[USDC].usd / 1e6, NEAR: held[NEAR].usd / 1e24}
