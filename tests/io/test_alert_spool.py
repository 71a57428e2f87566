"""The alert spool (issue 24): incidents and the previous run's mark survive on disk, owner-only,
written whole; a damaged file never stops a start. And the tracker's side: what it hands the
spool, what it takes back, and the one message per incident a restart sends."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from solver.io.alert_policy import IncidentState, IncidentTracker
from solver.io.alert_spool import AlertSpool, RunMark, spool_path

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_spool_round_trips_owner_only(tmp_path: Path) -> None:
    path = spool_path(tmp_path / "bot.sqlite")
    assert path.name == "bot.sqlite.alerts.json"
    spool = AlertSpool(path)
    spool.running = RunMark(4242, at(0), at(30))
    spool.incidents = [IncidentState("store_error", "", True, "disk full", at(5), at(5), 1)]
    old = os.umask(0o022)
    try:
        spool.save()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600
    assert not path.with_name(path.name + ".tmp").exists()
    assert AlertSpool(path).load() == (spool.running, spool.incidents)


def test_a_missing_or_damaged_spool_is_a_first_start(tmp_path: Path) -> None:
    path = tmp_path / "s.alerts.json"
    assert AlertSpool(path).load() == (None, [])
    path.write_bytes(b'{"running": {"pid": 1, "started_at": "yesterday"')
    assert AlertSpool(path).load() == (None, [])


def test_a_spool_that_cannot_be_written_is_said_not_raised(tmp_path: Path) -> None:
    spool = AlertSpool(tmp_path / "missing-dir" / "s.alerts.json")
    spool.save()
    assert spool.failed


def test_the_tracker_hands_over_open_and_untold_incidents_only() -> None:
    tracker = IncidentTracker(burst=1, per_hour=1)
    assert tracker.offer("drawdown", "-3k", resolved=False, at=at(0)) is not None
    assert tracker.offer("drawdown", "", resolved=True, at=at(1)) is None  # rate limited
    assert tracker.offer("stale_data", "old", resolved=False, at=at(2)) is not None
    assert tracker.offer("stale_data", "", resolved=True, at=at(3)) is None
    states = {s.kind: s for s in tracker.states()}
    assert set(states) == {"drawdown", "stale_data"}
    assert not states["drawdown"].open and states["drawdown"].untold == 1
    told = IncidentTracker()
    assert told.offer("reconciliation", "gap", resolved=False, at=at(0)) is not None
    assert told.offer("reconciliation", "", resolved=True, at=at(1)) is not None
    assert told.states() == []  # resolved and told: nothing to carry
    assert [s.untold for s in told.states(unsent={("reconciliation", "")})] == [1]


def test_after_a_restart_one_message_per_incident_with_its_state() -> None:
    previous = [
        IncidentState("reconciliation", "", True, "USDC off by -7", at(0), at(0), 0),
        IncidentState("stale_data", "", True, "prices old", at(10), at(10), 2),
        IncidentState("drawdown", "", False, "resume", at(20), at(5), 1),
    ]
    tracker = IncidentTracker(burst=3, per_hour=12)
    tracker.restore(previous)
    assert tracker.pending == 1  # the untold recovery waits; the open ones wait for settle
    (folded,) = tracker.due(at(50))  # the drawdown's recovery the previous run never told
    assert folded.kind == "drawdown" and folded.resolved
    reminder = tracker.settle("reconciliation", "", True, at(100))
    assert (reminder.resolved, reminder.reminder) == (False, True)
    assert "still open after a restart" in reminder.body() and "USDC off by -7" in reminder.body()
    resolved = tracker.settle("stale_data", "", False, at(100))
    assert resolved.resolved and resolved.changes == 3  # two untold before, and this one
    assert "no longer holds after a restart" in resolved.detail
    assert "open for 1m30s" in resolved.body()
    assert tracker.due(at(100)) == []  # one message per incident, no folded twin
    assert tracker.open_incidents() == ["reconciliation"] and tracker.pending == 0
