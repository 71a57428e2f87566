"""The desk, synchronously: every behaviour of issue 10 with time as an argument, no sockets."""

from __future__ import annotations

from solver.core import events as ev
from solver.core import fact_codec
from solver.core import facts as f
from solver.core.actions import (
    Alert,
    CheckNonce,
    OperatorReply,
    PollIntent,
    RefreshBalances,
)
from solver.core.clock import SECOND, from_micros, span
from solver.core.desk import Desk
from solver.core.desk_quotes import LOST_PER_FACT
from solver.core.desk_snapshot import restore, snapshot
from solver.core.facts import opened_fact
from solver.core.inventory import Reservation
from solver.core.lifecycle import Quote, QuoteState
from solver.core.quoting import DUPLICATE_QUOTE_ID, Skip
from solver.core.rebalance_record import RebalanceRecord
from solver.core.risk import RiskLimits
from tests.core.desk_helpers import (
    BALANCES,
    E6,
    E24,
    NEAR,
    USDC,
    answer,
    at,
    feed,
    make_desk,
    quote_hash,
    recorded,
    request,
    state_of,
)


def outflow(desk: Desk, quote_id: str) -> int:
    quote = desk.book.get(quote_id)
    assert quote is not None
    return quote.outflow


def test_an_unacknowledged_answer_keeps_its_reservation_through_a_disconnect() -> None:
    desk = make_desk(balances={USDC: 0, NEAR: 100 * E24})
    answer(desk, "q1", at(1), amount_usdc=100)
    reserved = desk.inventory.reserved[NEAR]
    assert reserved == outflow(desk, "q1")
    desk.receive(ev.ConnectionLost(), at(1.1))
    assert desk.book.get("q1") is not None
    assert desk.inventory.reserved[NEAR] == reserved
    # While the relay may still use q1, a new request cannot oversubscribe the balance.
    free_before = desk.inventory.free(NEAR)
    actions = desk.receive(request("q2", 1_000_000), at(1.2))
    assert isinstance(actions[0], Skip)
    assert desk.inventory.free(NEAR) == free_before
    # Only an explicit error reply releases it.
    desk.receive(ev.RelayReplied("q1", False, "quote expired"), at(1.3))
    assert desk.book.get("q1") is None
    assert NEAR not in desk.inventory.reserved


def test_a_request_gets_its_one_action_itself_or_in_a_list_as_an_event() -> None:
    """Issue 29: :attr:`Desk.decide` is the quote path's decision, the action itself (no list
    per request); :meth:`Desk.receive` of the request lists the same decision."""
    desk, twin = make_desk(), make_desk()
    action = desk.decide(request("q1"), at(1))
    assert isinstance(action, Quote) and action.quote_id == "q1"
    assert twin.receive(request("q1"), at(1)) == [action]
    assert desk.decide(request("q1"), at(1)) == Skip(
        DUPLICATE_QUOTE_ID, "a quote with this id is still open"
    )
    assert (desk.stats.requests, twin.stats.requests) == (2, 1)


def test_the_signature_back_to_the_desk_opens_the_quote_its_fact_would() -> None:
    """Issue 29: no ``QuoteSigned`` event, ``Record`` or list between the signature and the
    journal: :attr:`Desk.signed` opens the quote, and the ``QuoteOpened`` the executor builds
    for the journal (:func:`opened_fact`) opens the same quote on a restart."""
    desk = make_desk()
    (sign,) = desk.receive(request("q1"), at(1))
    assert isinstance(sign, Quote)
    reservation = desk.inventory.reservations["q1"]
    assert desk.signed(sign, quote_hash("q1"), b"\x07" * 32, at(1.5)) is None
    fact = opened_fact(sign, {"signed": 1})
    assert (fact.quote_id, fact.quote_hash, fact.nonce, fact.created_at) == (
        "q1", quote_hash("q1"), b"\x07" * 32, at(1.5),
    )  # fmt: skip
    assert (fact.asset_in, fact.asset_out, fact.exact_in, fact.partner_id) == (
        USDC, NEAR, True, None,
    )  # fmt: skip
    assert (fact.amount_in, fact.amount_out, fact.fee, fact.deadline) == (
        sign.amount_in, sign.amount_out, sign.fee, sign.deadline,
    )  # fmt: skip
    assert fact.signed_data == {"signed": 1}
    assert desk.book.find_hash(quote_hash("q1")) is desk.book.get("q1")
    assert desk.book.get("q1") is sign  # the decision's record, filed (no copy)
    assert desk.inventory.reservations["q1"] is reservation  # the decision's, not rebuilt
    assert desk.stats.pairs["wNEAR/USDC"].quotes == 1
    # Applied from the values the fact is built of: what the journal's copy applies.
    replayed = make_desk()
    replayed.apply(fact)
    assert replayed.book.get("q1") == desk.book.get("q1")
    restored = replayed.book.get("q1")
    assert restored is not None and (restored.exact_in, restored.partner_id) == (True, None)
    assert (replayed.book.open_outflow, replayed.book.open_inflow) == (
        desk.book.open_outflow, desk.book.open_inflow,
    )  # fmt: skip
    assert replayed.inventory.reservations["q1"] == reservation
    assert replayed.stats.pairs["wNEAR/USDC"].quotes == 1


def test_the_outflow_signed_never_exceeds_the_balance_across_reconnects() -> None:
    desk = make_desk(balances={USDC: 0, NEAR: 2_000 * E24})
    signed = 0
    for i in range(200):
        now = at(1 + i * 0.01)
        if i % 7 == 0:
            desk.receive(ev.ConnectionLost(), now)
            desk.receive(ev.ConnectionRestored(), now)
        actions = desk.receive(request(f"q{i}", 50), now)
        for action in actions:
            if isinstance(action, Quote):
                desk.signed(action, quote_hash(f"q{i}"), bytes(32), now)
                signed += outflow(desk, f"q{i}")
    assert signed <= 2_000 * E24


def test_a_quote_named_by_several_intents_follows_each_and_settles_once() -> None:
    desk = make_desk()
    answer(desk, "q1", at(1))
    h = quote_hash("q1")
    forged = desk.receive(ev.QuoteStatusSeen(h, "forged", None), at(1.1))
    genuine = desk.receive(ev.QuoteStatusSeen(h, "genuine", "tx1"), at(1.2))
    duplicate = desk.receive(ev.QuoteStatusSeen(h, "genuine", "tx1"), at(1.3))
    assert [a for a in forged if isinstance(a, PollIntent)] == [PollIntent("forged")]
    assert [a for a in genuine if isinstance(a, PollIntent)] == [PollIntent("genuine")]
    assert duplicate == []
    assert desk.stats.duplicate_statuses == 1
    # The forged one is unknown to the relay: it ends alone, the quote stays as it was.
    desk.receive(ev.IntentStatusSeen("forged", "NOT_FOUND_OR_NOT_VALID"), at(1.4))
    quote = desk.book.get("q1")
    assert quote is not None and quote.state is QuoteState.OPEN
    desk.receive(ev.IntentStatusSeen("genuine", "PENDING"), at(1.5))
    assert state_of(quote) is QuoteState.WON
    before = desk.inventory.confirmed[NEAR]
    actions = desk.receive(ev.IntentStatusSeen("genuine", "SETTLED", "tx1"), at(1.6))
    assert state_of(quote) is QuoteState.SETTLED and desk.book.get("q1") is None
    assert desk.inventory.confirmed[NEAR] == before - quote.outflow
    assert RefreshBalances() in actions
    assert desk.stats.outcomes["SETTLED"] == 1
    # A late status of the other claim changes nothing.
    assert desk.receive(ev.IntentStatusSeen("forged", "SETTLED"), at(2)) == []
    assert desk.inventory.confirmed[NEAR] == before - quote.outflow


def test_not_found_does_not_fail_a_quote_while_its_deadline_is_pending() -> None:
    desk = make_desk()
    answer(desk, "q1", at(1))
    quote = desk.book.get("q1")
    assert quote is not None
    desk.receive(ev.QuoteStatusSeen(quote.quote_hash, "i1", None), at(1.1))
    desk.receive(ev.IntentStatusSeen("i1", "TX_BROADCASTED"), at(1.2))
    desk.receive(ev.IntentStatusSeen("i1", "NOT_FOUND_OR_NOT_VALID"), at(1.3))
    assert quote.state is QuoteState.SETTLING and desk.book.get("q1") is quote
    desk.receive(ev.QuoteStatusSeen(quote.quote_hash, "i2", None), at(2))
    desk.receive(ev.IntentStatusSeen("i2", "SETTLED"), at(2.1))
    assert state_of(quote) is QuoteState.SETTLED


def test_a_status_for_a_hash_never_signed_changes_nothing() -> None:
    desk = make_desk()
    answer(desk, "q1", at(1))
    assert desk.receive(ev.QuoteStatusSeen("not-ours", "i9", None), at(1.1)) == []
    assert desk.stats.stray_statuses == 1
    assert desk.receive(ev.IntentStatusSeen("i9", "SETTLED"), at(1.2)) == []


def test_past_the_deadline_connected_throughout_is_lost_without_an_rpc() -> None:
    desk = make_desk()
    desk.receive(ev.ConnectionRestored(), at(0.5))
    answer(desk, "q1", at(1))
    quote = desk.book.get("q1")
    assert quote is not None
    assert desk.tick(quote.deadline) == [] or True  # inside the grace
    actions = desk.tick(quote.deadline + 3 * SECOND)
    assert not any(isinstance(a, CheckNonce) for a in actions)
    assert desk.book.get("q1") is None and desk.stats.outcomes["LOST"] == 1
    assert NEAR not in desk.inventory.reserved


def test_many_quotes_past_their_deadline_are_lost_in_facts_of_bounded_size() -> None:
    """A tick that retires many quotes records them in ``QuotesLost`` facts of at most
    ``LOST_PER_FACT``: the query tables apply a fact whole, so its size bounds that pause."""
    desk = make_desk()
    desk.receive(ev.ConnectionRestored(), at(0.5))
    count = 2 * LOST_PER_FACT + 5
    for i in range(count):
        answer(desk, f"b{i}", at(1), amount_usdc=1)
    later = at(1) + span(60)
    facts = recorded(desk.tick(later))
    lost = [fact for fact in facts if isinstance(fact, f.QuotesLost)]
    assert [len(fact.quote_ids) for fact in lost] == [LOST_PER_FACT, LOST_PER_FACT, 5]
    assert {q for fact in lost for q in fact.quote_ids} == {f"b{i}" for i in range(count)}
    assert {fact.at for fact in lost} == {later}
    assert desk.book.quotes == {} and desk.stats.outcomes["LOST"] == count
    assert desk.inventory.reserved == {}


def test_past_the_deadline_after_a_disconnect_asks_the_nonce() -> None:
    desk = make_desk()
    desk.receive(ev.ConnectionRestored(), at(0.5))
    answer(desk, "q1", at(1))
    desk.receive(ev.ConnectionLost(), at(2))
    desk.receive(ev.ConnectionRestored(), at(3))
    quote = desk.book.get("q1")
    assert quote is not None
    late = (quote.deadline - at(0)) / SECOND + 3
    checks = [a for a in desk.tick(at(late)) if isinstance(a, CheckNonce)]
    assert checks == [CheckNonce("q1", quote.nonce)]
    assert desk.tick(at(late + 1)) == []  # asked already: not again before the retry time
    desk.receive(ev.NonceChecked("q1", True), at(late + 1.5))
    assert quote.state is QuoteState.SETTLED


def test_past_the_deadline_while_still_disconnected_asks_the_nonce() -> None:
    """No connection at the tick (``connected_since`` None): nothing is lost without asking."""
    desk = make_desk()
    desk.receive(ev.ConnectionRestored(), at(0.5))
    answer(desk, "q1", at(1))
    desk.receive(ev.ConnectionLost(), at(2))
    actions = desk.tick(at(60))
    assert [a.quote_id for a in actions if isinstance(a, CheckNonce)] == ["q1"]
    assert desk.book.get("q1") is not None and desk.stats.outcomes["LOST"] == 0


def test_a_quote_left_open_past_its_deadline_is_listed_again_beside_those_lost() -> None:
    """A tick that loses some due quotes and asks the nonce of another still lists that one
    at the next tick (issue 29: only a tick that closes every due quote drops their entries)."""
    desk = make_desk()
    answer(desk, "asked", at(1))  # answered before the connection: its nonce is asked
    desk.receive(ev.ConnectionRestored(), at(1.5))
    answer(desk, "lost", at(2))
    late = at(60)
    actions = desk.tick(late)
    assert [a.quote_id for a in actions if isinstance(a, CheckNonce)] == ["asked"]
    assert desk.book.get("lost") is None and desk.stats.outcomes["LOST"] == 1
    retry = late + span(desk.settings.nonce_retry_s)
    assert [a.quote_id for a in desk.tick(retry) if isinstance(a, CheckNonce)] == ["asked"]


def test_a_failed_store_pauses_and_never_keeps_the_reservation() -> None:
    desk = make_desk()
    actions = desk.receive(request("q1"), at(1))
    assert isinstance(actions[0], Quote)
    actions = desk.receive(ev.QuoteNotSent("q1", "disk full", store_error=True), at(1))
    assert NEAR not in desk.inventory.reserved
    assert desk.pauses.reason(f"{USDC}->{NEAR}") == "store_error: disk full"
    assert any(isinstance(a, Alert) and a.kind == "store_error" for a in actions)


def test_a_store_error_pause_lifts_itself_when_the_store_works_again() -> None:
    desk = make_desk()
    desk.receive(request("q1"), at(1))
    desk.receive(ev.QuoteNotSent("q1", "disk I/O error", store_error=True), at(1))
    desk.receive(ev.OperatorPause(None, "maintenance"), at(1))
    actions = desk.receive(ev.StoreWorks("the journal commits again"), at(5))
    (alert,) = [a for a in actions if isinstance(a, Alert)]
    assert alert.kind == "store_error" and alert.resolved
    assert "the store works again" in alert.detail and "disk I/O error" in alert.detail
    # Only the store's pause lifts: the operator's holds until the operator resumes it.
    assert desk.pauses.reason("*") == "operator: maintenance"
    assert desk.receive(ev.StoreWorks("again"), at(6)) == []  # nothing left to lift


def test_resume_says_why_the_bot_stays_paused() -> None:
    desk = make_desk()
    desk.receive(ev.OperatorPause(None, "maintenance"), at(1))
    desk.receive(ev.OperatorPause("wNEAR/USDC", "pair"), at(1))
    (reply,) = [
        a
        for a in desk.receive(ev.OperatorResume("wNEAR/USDC"), at(2))
        if isinstance(a, OperatorReply)
    ]
    assert not reply.ok and "still paused" in reply.message and "maintenance" in reply.message
    (reply,) = [
        a for a in desk.receive(ev.OperatorResume(None), at(3)) if isinstance(a, OperatorReply)
    ]
    assert reply.ok, reply.message
    assert not desk.pauses


def test_accept_balances_after_a_deliberate_withdrawal_resumes_and_keeps_pnl() -> None:
    limits = RiskLimits(max_daily_loss_usd=50, max_drawdown_usd=50, max_mismatch={})
    desk = make_desk(limits=limits)
    desk.tick(at(1))
    assert desk.pnl.pnl == 0.0
    # The operator withdraws 500 USDC: a mismatch, and a 500 USD "loss".
    moved = {USDC: BALANCES[USDC] - 500 * E6, NEAR: BALANCES[NEAR]}
    feed(desk, at(2), moved)  # held: confirmed by a later snapshot
    feed(desk, at(2.5), moved)
    desk.tick(at(2.5))
    kinds = {p.kind for p in desk.pauses}
    assert {"reconciliation", "daily_loss", "drawdown"} <= kinds
    # Plain resume: the withdrawal is still a loss, and the reply does not claim success
    # unless it really resumed.
    actions = desk.receive(ev.OperatorResume(None, accept_balances=True), at(3))
    (reply,) = [a for a in actions if isinstance(a, OperatorReply)]
    assert reply.ok, reply.message
    assert "accepted balances" in reply.message
    assert not desk.pauses
    assert abs((desk.pnl.pnl or 0.0) - 0.0) < 1e-6
    # The next snapshot of the same balances reconciles cleanly.
    feed(desk, at(4), moved)
    desk.tick(at(4))
    assert not desk.pauses
    assert desk.balances.report is not None and desk.balances.report["ok"]


def test_journal_replay_rebuilds_the_desk_exactly() -> None:
    limits = RiskLimits(max_daily_loss_usd=10, max_drawdown_usd=1e9, max_mismatch={})
    desk = make_desk(limits=limits)
    facts: list[f.Fact] = []
    facts += recorded(feed(desk, at(0), BALANCES))
    facts += recorded(desk.tick(at(0.5)))
    facts += recorded(answer(desk, "q1", at(1)))
    facts += recorded(answer(desk, "q2", at(1)))
    facts += recorded(desk.receive(ev.QuoteStatusSeen(quote_hash("q2"), "i2", "t2"), at(1.1)))
    facts += recorded(desk.receive(ev.OperatorPause("wNEAR/USDC", "watching"), at(1.2)))
    facts += recorded(desk.receive(ev.PriceSeen(NEAR, 1.9, at(1.3)), at(1.3)))
    facts += recorded(desk.tick(at(1.4)))  # NEAR fell: daily loss beyond 10 USD
    assert desk.pauses.get("*", "daily_loss") is not None
    # Round-trip every fact through the journal codec, then apply to a fresh desk.
    rebuilt = make_desk(limits=limits)
    rebuilt = _fresh_like(rebuilt)
    for fact in facts:
        rebuilt.apply(fact_codec.decode(f.kind_of(fact), _json(fact_codec.encode(fact))))
    _assert_same(desk, rebuilt)
    # And through a snapshot.
    from_snapshot = _fresh_like(make_desk(limits=limits))
    restore(from_snapshot, _json(snapshot(desk)))
    _assert_same(desk, from_snapshot)


def _fresh_like(desk: Desk) -> Desk:
    return Desk(
        desk.settings, desk.pipeline.routes, desk.state.decimals, symbols=desk.symbols,
        timer=lambda: 0.0,  # decisions, not the machine's speed
    )  # fmt: skip


def _json(doc: dict) -> dict:  # type: ignore[type-arg]
    import orjson

    loaded: dict = orjson.loads(orjson.dumps(doc))  # type: ignore[type-arg]
    return loaded


def _assert_same(a: Desk, b: Desk) -> None:
    assert set(a.book.quotes) == set(b.book.quotes)
    for quote_id, quote in a.book.quotes.items():
        other = b.book.quotes[quote_id]
        assert (quote.state, quote.nonce, quote.deadline, set(quote.claims)) == (
            other.state,
            other.nonce,
            other.deadline,
            set(other.claims),
        )
    assert a.inventory.reserved == b.inventory.reserved
    assert a.inventory.confirmed == b.inventory.confirmed
    assert a.balances.reconciler.expected == b.balances.reconciler.expected
    assert (a.pnl.start_equity, a.pnl.peak_pnl, a.pnl.day, a.pnl.day_start_pnl) == (
        b.pnl.start_equity,
        b.pnl.peak_pnl,
        b.pnl.day,
        b.pnl.day_start_pnl,
    )
    assert {(p.scope, p.kind, p.reason) for p in a.pauses} == {
        (p.scope, p.kind, p.reason) for p in b.pauses
    }
    assert set(a.settlement.polling) == set(b.settlement.polling)


def test_every_fact_kind_round_trips_through_the_journal_codec() -> None:
    when = at(1)
    moment = from_micros(when)  # a rebalance record keeps datetimes (an edge)
    samples: list[f.Fact] = [
        f.QuoteOpened("q", "h", USDC, NEAR, 2**128 - 1, 5, 1, when, b"\x01" * 32, when, True, "p"),
        f.QuoteOpened("q2", "h2", USDC, NEAR, 1, 5, 0, when, b"\x02" * 32, when, False, None),
        f.QuoteMoved("q", "SETTLED", when, "r", "i", "t", f.FillPrices(1.5, 2.0, -0.25)),
        f.QuoteMoved("q", "LOST", when),
        f.QuotesLost(("q", "q2"), when, "deadline passed, never named"),
        f.ClaimAdded("q", "i", None, when),
        f.ClaimEnded("q", "i", "NOT_FOUND_OR_NOT_VALID", when),
        f.BalancesReconciled(when, {USDC: 2**128 - 1}, (("k", USDC, 1, NEAR, 2),), True, {USDC: 3}),
        f.OwnFlow("k", USDC, 1, NEAR, 2, when),
        f.PnlMarked(when, 100.5, 3.0, "2026-11-22", -1.0),
        f.Markout("q", 60, -0.5, when),
        f.PauseSet("*", "drawdown", "too much", when),
        f.PauseCleared("*", "drawdown", when, "operator"),
        f.BaselineAccepted(when, {USDC: 1}, {USDC: -5}, -5.0),
        f.BalancesReconciled(when, {USDC: 1}, (), False, {USDC: 3}, True),
        f.BaselineCorrected(when, {USDC: -3, NEAR: 2**128 - 1}, ("q", "q2"), -3.5),
        f.RebalanceStarted("r1", f"{NEAR}->{USDC}", NEAR, 2**128 - 1, USDC, when, when),
        f.RebalanceDeposited("r1", when),
        f.RebalanceEnded("r1", f"{NEAR}->{USDC}", "SUCCESS", when),
        f.RebalanceStepped(
            RebalanceRecord(
                "r1", moment, moment, "SUCCESS", NEAR, NEAR, USDC, 2**128 - 1, {"side": "sell"},
                "received", {"amount": "1"}, {"quote": {"amountOut": "5"}}, "ed25519:s", "dep",
                "memo", 2**128 - 1, 4, "hash", {"standard": "nep413"}, b"\x03" * 32, moment,
                "tx", "SUCCESS", {"status": "SUCCESS"}, moment,
            ),
            "received 5",
        ),
        f.RebalanceStepped(RebalanceRecord("r2", moment, moment, "PLANNED", NEAR, NEAR, USDC, 1, {}),
                           None, carried=True),
    ]  # fmt: skip
    assert {type(s) for s in samples} == set(f.KIND_OF)
    for fact in samples:
        assert fact_codec.decode(f.kind_of(fact), _json(fact_codec.encode(fact))) == fact


def test_the_kill_switch_takes_loss_limits_in_percent_of_starting_equity() -> None:
    # Starting equity: 2,000 USDC + 1,000 wNEAR at 2 USD = 4,000 USD; 1 % of it is 40 USD,
    # far tighter than the USD limits.
    limits = RiskLimits(
        max_daily_loss_usd=1e9, max_drawdown_usd=1e9, max_mismatch={}, max_daily_loss_pct=1.0
    )
    desk = make_desk(limits=limits)
    desk.tick(at(1))
    assert desk.pnl.start_equity == 4_000.0
    desk.receive(ev.PriceSeen(NEAR, 1.97, at(2)), at(2))  # -30 USD: within 40
    desk.tick(at(2))
    assert not desk.pauses
    desk.receive(ev.PriceSeen(NEAR, 1.95, at(3)), at(3))  # -50 USD
    desk.tick(at(3))
    pause = desk.pauses.get("*", "daily_loss")
    assert pause is not None and "1 % of starting equity 4000.00 USD" in pause.reason
    # Drawdown in percent too, measured afresh after a resume.
    drawdown = RiskLimits(
        max_daily_loss_usd=1e9, max_drawdown_usd=1e9, max_mismatch={}, max_drawdown_pct=0.5
    )
    desk = make_desk(limits=drawdown)
    desk.tick(at(1))
    desk.receive(ev.PriceSeen(NEAR, 1.985, at(2)), at(2))  # -15 USD: within 20
    desk.tick(at(2))
    assert not desk.pauses
    desk.receive(ev.PriceSeen(NEAR, 1.975, at(3)), at(3))  # -25 USD
    desk.tick(at(3))
    assert desk.pauses.get("*", "drawdown") is not None


def test_a_debited_settlement_marks_no_loss_before_the_snapshot_shows_its_inflow() -> None:
    """The inventory debits a settlement's outflow at once and waits for a snapshot for its
    inflow (never overstating what can be paid). PnL is not marked in between: that half
    view is not a loss (a rebalance's deposit once tripped the kill switch this way)."""
    limits = RiskLimits(max_daily_loss_usd=10, max_drawdown_usd=10, max_mismatch={})
    desk = make_desk(limits=limits)
    feed(desk, at(0), BALANCES)
    desk.tick(at(0.5))
    assert desk.pnl.pnl == 0.0
    reserved = Reservation("own:1", NEAR, 100 * E24, USDC, 0, at(60))
    assert desk.inventory.reserve(reserved)
    desk.inventory.settle("own:1", at(1))  # 100 wNEAR (200 USD) out, the USDC not seen yet
    desk.tick(at(1.5))
    assert not desk.pauses and desk.pnl.pnl == 0.0
    # The snapshot requested after the settlement shows both sides: marked again.
    moved = {USDC: BALANCES[USDC] + 200 * E6, NEAR: BALANCES[NEAR] - 100 * E24}
    feed(desk, at(2), moved)
    desk.tick(at(2.5))
    assert not desk.inventory.unconfirmed_settlements
    assert desk.pnl.pnl is not None and abs(desk.pnl.pnl) < 1e-6
    assert {p.kind for p in desk.pauses}.isdisjoint({"daily_loss", "drawdown"})
