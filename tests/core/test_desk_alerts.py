"""Every incident the desk raises is also told when it recovers (issue 14): a pause by the
operator's resume; an alert-only reconciliation breach by the next snapshot that reconciles;
stale data as soon as the inputs are fresh again (the pause itself stays latched)."""

from __future__ import annotations

from solver.core import events as ev
from solver.core.actions import Action, Alert
from solver.core.desk import Desk
from solver.core.desk_snapshot import restore, snapshot
from solver.core.pauses import GLOBAL
from solver.core.risk import RiskLimits
from tests.core.desk_helpers import BALANCES, E6, USDC, at, feed, make_desk


def alerts(actions: list[Action]) -> list[tuple[str, bool]]:
    return [(a.kind, a.resolved) for a in actions if isinstance(a, Alert)]


def stolen(amount_usdc: int) -> dict[str, int]:
    return {**BALANCES, USDC: BALANCES[USDC] - amount_usdc * E6}


def test_an_alert_only_mismatch_recovers_with_the_next_clean_snapshot() -> None:
    limits = RiskLimits(1e9, 1e9, {}, halt_on_mismatch=False)
    desk = make_desk(limits=limits)
    assert alerts(feed(desk, at(0.5), stolen(7))) == []  # held: confirmed by a later snapshot
    assert alerts(feed(desk, at(1), stolen(7))) == [("reconciliation", False)]
    assert not desk.pauses  # alert only
    # The gap is absorbed: the next snapshot of the same balances reconciles clean.
    (resolved,) = [a for a in feed(desk, at(2), stolen(7)) if isinstance(a, Alert)]
    assert (resolved.kind, resolved.resolved) == ("reconciliation", True)
    assert "reconcile again" in resolved.detail and "--accept-balances" in resolved.detail
    assert alerts(feed(desk, at(3), stolen(7))) == []  # told once
    # A new theft opens a new incident, and it recovers again.
    assert alerts(feed(desk, at(3.5), stolen(9))) == []
    assert alerts(feed(desk, at(4), stolen(9))) == [("reconciliation", False)]
    assert alerts(feed(desk, at(5), stolen(9))) == [("reconciliation", True)]


def test_a_mismatch_reads_in_whole_units_with_the_exact_gap_beside() -> None:
    """What a person reads (the alert, the pause's reason) is in whole units with the symbol;
    the smallest units stay beside, exact."""
    limits = RiskLimits(1e9, 1e9, {}, halt_on_mismatch=False)
    desk = make_desk(limits=limits)
    feed(desk, at(0.5), stolen(7))
    (alert,) = [a for a in feed(desk, at(1), stolen(7)) if isinstance(a, Alert)]
    symbol = desk.symbols.get(USDC, USDC)
    assert f"off by -7 {symbol} (-7000000 in smallest units)" in alert.detail
    (resolved,) = [a for a in feed(desk, at(2), stolen(7)) if isinstance(a, Alert)]
    assert f"{USDC}: -7 {symbol}" in resolved.detail
    halting = make_desk(limits=RiskLimits(1e9, 1e9, {}))
    feed(halting, at(0.5), stolen(7))
    feed(halting, at(1), stolen(7))
    reason = halting.pauses.reason(GLOBAL)
    assert reason is not None and f"-7 {symbol} (-7000000 in smallest units)" in reason


def test_a_halting_mismatch_recovers_only_when_the_operator_resumes() -> None:
    desk = make_desk(limits=RiskLimits(1e9, 1e9, {}))
    assert alerts(feed(desk, at(0.5), stolen(7))) == []
    assert alerts(feed(desk, at(1), stolen(7))) == [("reconciliation", False)]
    assert desk.pauses.get(GLOBAL, "reconciliation") is not None
    assert alerts(feed(desk, at(2), stolen(7))) == []  # clean, but still paused: no recovery
    actions = desk.receive(ev.OperatorResume(None, accept_balances=True), at(3))
    assert alerts(actions) == [("reconciliation", True)]


def stale_desk() -> Desk:
    desk = make_desk(limits=RiskLimits(1e9, 1e9, {}, max_stale_s=60))
    assert alerts(desk.tick(at(30))) == []
    assert alerts(desk.tick(at(61))) == [("stale_data", False)]
    assert desk.pauses.get(GLOBAL, "stale_data") is not None
    assert alerts(desk.tick(at(62))) == []  # still stale: no repeat
    return desk


def test_stale_data_recovers_when_the_inputs_are_fresh_again_and_stays_paused() -> None:
    desk = stale_desk()
    feed(desk, at(70), BALANCES)  # the node answers again: fresh balances and prices
    (resolved,) = [a for a in desk.tick(at(70)) if isinstance(a, Alert)]
    assert (resolved.kind, resolved.resolved) == ("stale_data", True)
    assert "fresh again" in resolved.detail and "solver resume" in resolved.detail
    assert desk.pauses.get(GLOBAL, "stale_data") is not None  # latched: only resume clears it
    assert alerts(desk.tick(at(71))) == []
    # Stale again under the same pause: told again, and its recovery too.
    assert alerts(desk.tick(at(140))) == [("stale_data", False)]
    feed(desk, at(141), BALANCES)
    assert alerts(desk.tick(at(141))) == [("stale_data", True)]
    # The resume lifts the pause (its own recovery alert; the notifier drops the repeat).
    actions = desk.receive(ev.OperatorResume(None), at(142))
    assert alerts(actions) == [("stale_data", True)]
    assert not desk.pauses and alerts(desk.tick(at(143))) == []


def test_a_resume_while_inputs_are_still_stale_pauses_and_tells_again() -> None:
    desk = stale_desk()
    actions = desk.receive(ev.OperatorResume(None), at(63))
    assert alerts(actions) == [("stale_data", True), ("stale_data", False)]
    assert desk.pauses.get(GLOBAL, "stale_data") is not None


def test_a_stale_pause_restored_after_a_restart_still_tells_its_recovery() -> None:
    desk = stale_desk()
    doc = snapshot(desk)
    again = make_desk(limits=RiskLimits(1e9, 1e9, {}, max_stale_s=60))
    restore(again, doc)
    feed(again, at(70), BALANCES)
    assert alerts(again.tick(at(70))) == [("stale_data", True)]
