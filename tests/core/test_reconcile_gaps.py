"""A gap explains itself before it pauses (issue 24), driven synchronously: time is an argument.

Each test is one finding of the operator's chaos run: an accept under a flow of settlements
counted one twice (3), a gap found while nonce checks were stalled stayed latched (4), a plain
``resume`` hid a gap (5), a quote whose ``quote_status`` the relay lost paused the bot instead
of being found by its nonce (6)."""

from __future__ import annotations

import dataclasses

import orjson

from solver.core import desk_snapshot, fact_codec
from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import (
    Action,
    Alert,
    CheckNonce,
    OperatorReply,
    PollIntent,
    RefreshBalances,
)
from solver.core.clock import SECOND
from solver.core.desk import Desk
from solver.core.desk_snapshot import restore, snapshot
from solver.core.lifecycle import Quote, QuoteState
from solver.core.pauses import GLOBAL
from solver.core.recent_lost import quote_of
from solver.core.risk import RiskLimits
from tests.core.desk_helpers import (
    BALANCES,
    E6,
    NEAR,
    USDC,
    answer,
    at,
    feed,
    make_desk,
    quote_hash,
    recorded,
)
from tests.core.test_desk import _assert_same, _fresh_like, _json

LIMITS = RiskLimits(1e9, 1e9, {})


def desk_with(**settings: object) -> Desk:
    desk = make_desk(limits=LIMITS)
    if settings:
        tuned = dataclasses.replace(desk.settings, **settings)  # type: ignore[arg-type]
        desk = Desk(
            tuned, desk.pipeline.routes, desk.state.decimals, symbols=desk.symbols,
            timer=lambda: 0.0,  # the strategy budget never trips on a busy machine
        )  # fmt: skip
        feed(desk, at(0), BALANCES)
    return desk


def executed(balances: dict[str, int], *quotes: Quote) -> dict[str, int]:
    """``balances`` after ``quotes`` executed on chain: their input in, their outflow out."""
    out = dict(balances)
    for q in quotes:
        out[q.asset_in] += q.amount_in
        out[q.asset_out] -= q.outflow
    return out


def open_quote(desk: Desk, quote_id: str, now: int) -> Quote:
    answer(desk, quote_id, now)
    quote = desk.book.get(quote_id)
    assert quote is not None
    return quote


def settle_by_status(desk: Desk, quote_id: str, now: int) -> list[Action]:
    """Its ``quote_status`` and a ``get_status`` answering SETTLED."""
    actions = desk.receive(ev.QuoteStatusSeen(quote_hash(quote_id), f"i-{quote_id}"), now)
    assert any(isinstance(a, PollIntent) for a in actions)
    return actions + desk.receive(ev.IntentStatusSeen(f"i-{quote_id}", "SETTLED"), now)


def alerts(actions: list[Action]) -> list[tuple[str, bool]]:
    return [(a.kind, a.resolved) for a in actions if isinstance(a, Alert)]


def reply(actions: list[Action]) -> OperatorReply:
    (found,) = [a for a in actions if isinstance(a, OperatorReply)]
    return found


def paused_on_a_gap(desk: Desk, balances: dict[str, int], t: float) -> None:
    """Two snapshots of ``balances`` (a gap is confirmed by a later snapshot): paused."""
    feed(desk, at(t), balances)
    feed(desk, at(t + 0.5), balances)
    assert desk.pauses.get(GLOBAL, "reconciliation") is not None, desk.pauses.as_dict()


def test_accept_under_a_flow_of_settlements_counts_none_twice() -> None:
    """Finding 3. The accepted snapshot already holds two fills the desk hears of later: one
    heard between the snapshot's request and the accept, one after the accept. The baseline
    must not count them again: no second gap, no second pause, no second accept."""
    desk = desk_with()
    q1, q2 = open_quote(desk, "q1", at(1)), open_quote(desk, "q2", at(1))
    theft = {**BALANCES, USDC: BALANCES[USDC] - 500 * E6}  # a ledger reset, say
    paused_on_a_gap(desk, theft, 2)
    on_chain = executed(theft, q1, q2)
    feed(desk, at(3), on_chain)  # the snapshot the operator's accept takes: both executed
    settle_by_status(desk, "q1", at(3.05))  # heard after the snapshot was requested
    actions = desk.receive(ev.OperatorResume(None, accept_balances=True), at(3.1))
    answer_ = reply(actions)
    assert answer_.ok, answer_.message
    settle_by_status(desk, "q2", at(3.2))  # heard 100 ms after the accept
    actions = feed(desk, at(4), on_chain)
    assert not desk.pauses, desk.pauses.as_dict()
    assert alerts(actions) == []
    assert desk.balances.reconciler.expected == on_chain
    assert desk.balances.report is not None and desk.balances.report["ok"]
    (corrected,) = [x for x in recorded(actions) if isinstance(x, f.BaselineCorrected)]
    assert sorted(corrected.quote_ids) == ["q1", "q2"]
    feed(desk, at(5), on_chain)
    assert not desk.pauses and desk.balances.reconciler.expected == on_chain
    # What it took as the move, in whole units: the snapshot against the fills heard of then
    # (both fills are in it, one not heard yet: the correction above put that right).
    assert "accepted balances: -300 USDC, -99.8 wNEAR (-499.60 USD)" in answer_.message


def test_plain_resume_refuses_while_a_reconciliation_gap_holds() -> None:
    """Finding 5: ``resume`` never books a gap as PnL silently; ``--accept-balances`` does, and
    says what it accepted in whole units."""
    desk = desk_with()
    theft = {**BALANCES, USDC: BALANCES[USDC] - 7 * E6}
    paused_on_a_gap(desk, theft, 1)
    refused = reply(desk.receive(ev.OperatorResume(None), at(2)))
    assert not refused.ok
    assert "reconciliation gap holds (-7 USDC)" in refused.message
    assert "--accept-balances" in refused.message
    assert any("reconciliation" in s for s in refused.still_paused)
    assert desk.pauses.get(GLOBAL, "reconciliation") is not None
    accepted = reply(desk.receive(ev.OperatorResume(None, accept_balances=True), at(3)))
    assert accepted.ok and "accepted balances: -7 USDC (-7.00 USD)" in accepted.message
    assert not desk.pauses


def lost_unnamed(desk: Desk, quote_id: str) -> Quote:
    """A quote nobody named while the bot stayed connected: LOST at its deadline, no RPC."""
    desk.receive(ev.ConnectionRestored(), at(0.5))
    quote = open_quote(desk, quote_id, at(1))
    past = (quote.deadline - at(0)) / SECOND + 2.5
    lost = recorded(desk.tick(at(past)))
    assert any(isinstance(x, f.QuotesLost) and quote_id in x.quote_ids for x in lost)
    return quote


def test_a_missed_status_is_found_by_its_nonce_and_booked_as_a_fill() -> None:
    """Finding 6: the relay lost the ``quote_status`` of a quote that executed; the balances
    move by its diff. The gap asks the nonces of the quotes closed without one, books the
    fill, says a status was missed, and never pauses."""
    desk = desk_with()
    quote = lost_unnamed(desk, "q1")
    t = (quote.deadline - at(0)) / SECOND + 3
    actions = feed(desk, at(t), executed(BALANCES, quote))
    assert [a.quote_id for a in actions if isinstance(a, CheckNonce)] == ["q1"]
    assert not desk.pauses and alerts(actions) == []  # held while the verifier is asked
    actions = desk.receive(ev.NonceChecked("q1", True), at(t + 0.1))
    (moved,) = [x for x in recorded(actions) if isinstance(x, f.QuoteMoved)]
    assert (moved.new, moved.reason) == ("SETTLED", "nonce used: its quote_status was missed")
    assert alerts(actions) == [("missed_status", False)]
    assert desk.stats.outcomes["SETTLED"] == 1 and desk.pnl.fills == 1
    actions = feed(desk, at(t + 0.2), executed(BALANCES, quote))
    assert not desk.pauses
    assert alerts(actions) == [("missed_status", True)]
    assert desk.balances.report is not None and desk.balances.report["ok"]


def test_a_gap_during_a_stall_pauses_after_the_hold_and_lifts_itself_once_explained() -> None:
    """Finding 4: the ledger stalls, so the nonce check that would explain a gap cannot be
    answered. The gap is held, then pauses after ``hold_max_s`` saying why; when the check
    answers (the stall is over) and explains it all, the pause lifts itself with a message."""
    desk = desk_with(hold_max_s=10.0)
    quote = lost_unnamed(desk, "q1")
    t = (quote.deadline - at(0)) / SECOND + 3
    moved = executed(BALANCES, quote)
    feed(desk, at(t), moved)
    desk.receive(ev.NonceChecked("q1", None), at(t + 1))  # the node does not answer
    asked = [a for a in desk.tick(at(t + 7)) if isinstance(a, CheckNonce)]
    assert [a.quote_id for a in asked] == ["q1"]  # asked again after nonce_retry_s
    feed(desk, at(t + 5), moved)
    assert not desk.pauses  # still held
    actions = feed(desk, at(t + 11), moved)
    pause = desk.pauses.get(GLOBAL, "reconciliation")
    assert pause is not None and "still unanswered" in pause.reason, desk.pauses.as_dict()
    actions = desk.receive(ev.NonceChecked("q1", True), at(t + 12))
    assert alerts(actions) == [("missed_status", False)]
    actions = feed(desk, at(t + 13), moved)
    assert desk.pauses.get(GLOBAL, "reconciliation") is None, desk.pauses.as_dict()
    kinds = alerts(actions)
    assert ("reconciliation", True) in kinds and ("missed_status", True) in kinds
    (resolved,) = [a for a in actions if isinstance(a, Alert) and a.kind == "reconciliation"]
    assert "explained" in resolved.detail
    assert desk.balances.report is not None and desk.balances.report["ok"]


def test_a_gap_with_more_candidates_than_the_cap_pauses_saying_so() -> None:
    desk = desk_with(explain_max_checks=1)
    desk.receive(ev.ConnectionRestored(), at(0.5))
    q1, q2 = open_quote(desk, "q1", at(1)), open_quote(desk, "q2", at(1))
    desk.tick(at((q1.deadline - at(0)) / SECOND + 2.5))
    actions = feed(desk, at(20), executed(BALANCES, q1))
    assert not [a for a in actions if isinstance(a, CheckNonce)]
    pause = desk.pauses.get(GLOBAL, "reconciliation")
    assert pause is not None and "more than the 1 nonce checks" in pause.reason
    assert q2.quote_id  # both were candidates


def test_a_gap_no_quote_explains_pauses_on_the_second_snapshot_only() -> None:
    desk = desk_with()
    theft = {**BALANCES, USDC: BALANCES[USDC] - 7 * E6}
    feed(desk, at(1), theft)
    assert not desk.pauses  # a read that raced something: confirmed by the next snapshot
    feed(desk, at(1.5), BALANCES)  # it was: the next snapshot reconciles
    assert not desk.pauses and desk.balances.held_at is None
    paused_on_a_gap(desk, theft, 2)


def test_the_journal_rebuilds_held_gaps_late_fills_and_corrections() -> None:
    desk = desk_with()
    facts: list[f.Fact] = []
    desk.receive(ev.ConnectionRestored(), at(0.5))
    quote = open_quote(desk, "q1", at(1))
    facts += [f.QuoteOpened(quote.quote_id, quote.quote_hash, quote.asset_in, quote.asset_out,
                            quote.amount_in, quote.amount_out, quote.fee, quote.deadline,
                            quote.nonce, quote.created_at, True)]  # fmt: skip
    t = (quote.deadline - at(0)) / SECOND
    facts += recorded(desk.tick(at(t + 2.5)))
    facts += recorded(feed(desk, at(t + 3), executed(BALANCES, quote)))
    facts += recorded(desk.receive(ev.NonceChecked("q1", True), at(t + 3.1)))
    facts += recorded(feed(desk, at(t + 4), executed(BALANCES, quote)))
    rebuilt = _fresh_like(desk)
    feed(rebuilt, at(0), BALANCES)
    for fact in facts:
        rebuilt.apply(fact_codec.decode(f.kind_of(fact), _json(fact_codec.encode(fact))))
    _assert_same(desk, rebuilt)
    assert rebuilt.stats.outcomes["SETTLED"] == 1 and rebuilt.pnl.fills == 1
    assert rebuilt.balances.held_at is None and not rebuilt.balances.unresolved


def test_old_balances_facts_absorb_their_gaps_at_once() -> None:
    """A journal written before issue 24 has no ``held``: its gaps were absorbed at once, and
    replaying it still does, so the desk it rebuilds is the one it was."""
    desk = desk_with()
    body = _json(fact_codec.encode(f.BalancesReconciled(at(1), {**BALANCES, USDC: 1}, ())))
    del body["held"]
    desk.apply(fact_codec.decode("balances", body))
    assert desk.balances.unresolved == {USDC: 1 - BALANCES[USDC]}
    assert desk.balances.reconciler.expected is not None
    assert desk.balances.reconciler.expected[USDC] == 1


def test_a_desk_snapshot_keeps_what_a_gap_explains_itself_with() -> None:
    """Held gaps, the accepted baseline's doubts and the quotes closed without a nonce check
    survive a restart from a snapshot (and a snapshot written before issue 24 still reads)."""
    desk = desk_with()
    quote = lost_unnamed(desk, "q1")
    answer(desk, "q2", at(20), amount_usdc=10)  # too small to hide q1's fill in its range
    q2 = desk.book.get("q2")
    assert q2 is not None
    feed(desk, at(21), executed(BALANCES, quote))  # held, q1's nonce asked
    settle_by_status(desk, "q2", at(21.5))
    desk.receive(ev.OperatorResume(None, accept_balances=True), at(22))
    feed(desk, at(23), executed(BALANCES, quote, q2))
    assert "q1" in desk.gaps.asking  # its check is still out
    doc = _json(snapshot(desk))
    rebuilt = _fresh_like(desk)
    restore(rebuilt, doc)
    for part in ("held", "held_at", "baseline_at", "accepted_at", "doubts"):
        assert getattr(rebuilt.balances, part) == getattr(desk.balances, part), part
    assert set(rebuilt.gaps.recent_lost.rows) == {"q1"}
    assert rebuilt.gaps.recent_lost.find_hash(quote.quote_hash) is not None
    assert q2.quote_id in rebuilt.balances.doubts
    for key in ("held", "held_at", "baseline_at", "accepted_at", "doubts", "recent_lost"):
        del doc["balances"][key]
    older = _fresh_like(desk)
    restore(older, doc)
    assert older.balances.held_at is None and not older.gaps.recent_lost.rows


def test_the_recently_lost_quotes_restore_whole_from_rows_and_from_the_older_dicts() -> None:
    """A snapshot writes each recently lost quote as a row (issue 29: 20,000 dicts held the
    loop ~100 ms); the ``[quote, lost_at]`` entries of the snapshots written before (25a75e5)
    still read, to the same quotes."""
    desk = desk_with()
    first = lost_unnamed(desk, "q1")
    assert first.state is QuoteState.LOST
    doc = _json(snapshot(desk))
    (row,) = doc["balances"]["recent_lost"]
    assert isinstance(row, list) and row[0] == "q1" and len(row) == 13
    older = _json(snapshot(desk))
    older["balances"]["recent_lost"] = orjson.loads(
        orjson.dumps(
            [
                [desk_snapshot._quote(quote_of(row)), row[-1]]
                for row in desk.gaps.recent_lost.rows.values()
            ]
        )
    )
    for written in (doc, older):
        rebuilt = _fresh_like(desk)
        restore(rebuilt, written)
        assert list(rebuilt.gaps.recent_lost.rows.items()) == list(
            desk.gaps.recent_lost.rows.items()
        )


def test_a_gap_its_candidates_do_not_explain_pauses_once_they_answered() -> None:
    """The nonces say the closed quotes were really lost: a snapshot is asked at once, and the
    gap, still there, pauses (it was not theirs)."""
    desk = desk_with()
    quote = lost_unnamed(desk, "q1")
    t = (quote.deadline - at(0)) / SECOND + 3
    theft = {**BALANCES, NEAR: BALANCES[NEAR] - quote.outflow}  # looks like q1's outflow
    actions = feed(desk, at(t), theft)
    assert [a.quote_id for a in actions if isinstance(a, CheckNonce)] == ["q1"]
    actions = desk.receive(ev.NonceChecked("q1", False), at(t + 0.1))
    assert any(isinstance(a, RefreshBalances) for a in actions)
    assert not desk.pauses
    feed(desk, at(t + 0.2), theft)
    assert desk.pauses.get(GLOBAL, "reconciliation") is not None
    assert desk.stats.outcomes["SETTLED"] == 0


def test_the_recently_lost_quotes_cost_the_cyclic_collector_nothing() -> None:
    """Kept as rows of atoms, which a collection stops tracking: 20,000 ``Quote``
    objects were over half of what the bot's once-a-minute full collection walked (issue 29)."""
    import gc

    desk = desk_with()
    lost_unnamed(desk, "q1")
    gc.collect()
    (row,) = desk.gaps.recent_lost.rows.values()
    assert not gc.is_tracked(row)


def test_recent_lost_keeps_a_window_and_a_cap_dropping_the_oldest_first() -> None:
    """The quotes a gap may come from: those lost in the window, at most ``max_kept``, the
    oldest dropped first (and findable by hash only while kept)."""
    from solver.core.recent_lost import RecentLost

    desk = desk_with()
    quotes = [open_quote(desk, f"q{i}", at(0)) for i in range(6)]
    kept = RecentLost(window_s=10.0, max_kept=3)
    for i, quote in enumerate(quotes[:3]):
        kept.add(quote, at(i))
    assert list(kept.rows) == ["q0", "q1", "q2"]
    kept.add(quotes[3], at(3))  # the cap: q0 goes
    assert list(kept.rows) == ["q1", "q2", "q3"]
    assert kept.find_hash(quotes[0].quote_hash) is None
    found = kept.find_hash(quotes[1].quote_hash)  # built again from its row, LOST
    assert found is not None and found.state is QuoteState.LOST
    assert (found.quote_id, found.nonce, found.outflow, found.deadline) == (
        "q1",
        quotes[1].nonce,
        quotes[1].outflow,
        quotes[1].deadline,
    )
    kept.add(quotes[4], at(12.5))  # the window: q1 and q2 (lost at 1 and 2) are too old
    assert list(kept.rows) == ["q3", "q4"]
    kept.add(quotes[5], at(30))  # everything before 20 goes
    assert list(kept.rows) == ["q5"] and set(kept.by_hash.values()) == {"q5"}
