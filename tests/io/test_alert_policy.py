"""solver.io.alert_policy: incidents, dedup, rate limits, outage watches (no I/O, time given)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from solver.core.actions import Alert
from solver.io.alert_policy import (
    AlertMessage,
    BusWatch,
    IncidentTracker,
    OutageWatch,
    TokenBucket,
    format_duration,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_one_message_when_an_incident_opens_and_one_on_recovery() -> None:
    t = IncidentTracker(burst=3, per_hour=12)
    first = t.offer("reconciliation", "USDC off by 5", resolved=False, at=at(0))
    assert first is not None and not first.resolved and first.detail == "USDC off by 5"
    for i in range(1, 50):  # the desk repeats a breach on every tick
        assert t.offer("reconciliation", f"USDC off by {5 + i}", resolved=False, at=at(i)) is None
    assert t.duplicates == 49
    assert t.open_incidents() == ["reconciliation"]
    done = t.offer("reconciliation", "operator: accepted", resolved=True, at=at(600))
    assert done is not None and done.resolved
    assert done.opened_at == at(0) and done.at == at(600)
    assert "open for 10m00s" in done.body()
    assert t.offer("reconciliation", "again", resolved=True, at=at(601)) is None  # repeat
    assert t.open_incidents() == []
    assert t.rate_limited == 0


def test_incidents_are_per_kind_and_key() -> None:
    t = IncidentTracker()
    assert t.offer("stale_data", "prices", resolved=False, at=at(0)) is not None
    assert t.offer("store_error", "disk full", resolved=False, at=at(0)) is not None
    assert t.offer("reconciliation", "", resolved=False, at=at(0), key="USDC") is not None
    assert t.offer("reconciliation", "", resolved=False, at=at(0), key="ETH") is not None
    assert t.offer("reconciliation", "", resolved=False, at=at(1), key="ETH") is None
    assert sorted(t.open_incidents()) == [
        "reconciliation:ETH",
        "reconciliation:USDC",
        "stale_data",
        "store_error",
    ]


def test_recovery_of_an_unknown_incident_is_told_once() -> None:
    """After a restart, a pause restored from the journal may be lifted: say so, once."""
    t = IncidentTracker()
    message = t.offer("drawdown", "operator: resumed", resolved=True, at=at(5))
    assert message is not None and message.resolved and message.opened_at is None
    assert "open for" not in message.body()
    assert t.offer("drawdown", "operator: resumed", resolved=True, at=at(6)) is None


def test_flapping_is_rate_limited_and_folded_into_the_current_state() -> None:
    t = IncidentTracker(burst=2, per_hour=60)  # a token per minute after the first two
    sent = [t.offer("stale_data", "feed", resolved=False, at=at(0))]
    sent.append(t.offer("stale_data", "feed back", resolved=True, at=at(1)))
    assert all(m is not None for m in sent)
    # Bucket empty: the next changes wait, and only the current state will be told.
    assert t.offer("stale_data", "feed again", resolved=False, at=at(2)) is None
    assert t.offer("stale_data", "feed back again", resolved=True, at=at(3)) is None
    assert t.offer("stale_data", "third time", resolved=False, at=at(4)) is None
    assert t.rate_limited == 3 and t.pending == 1
    assert t.due(at(30)) == []  # no token yet
    assert t.next_due(at(30)) == at(60)
    (folded,) = t.due(at(60))
    assert (folded.resolved, folded.detail, folded.changes, folded.at) == (
        False,
        "third time",
        3,
        at(4),
    )
    assert "3 changes since the last message (rate limited)" in folded.body()
    assert t.pending == 0 and t.next_due(at(60)) is None


def test_rate_limit_is_per_kind() -> None:
    t = IncidentTracker(burst=1, per_hour=1)
    assert t.offer("stale_data", "a", resolved=False, at=at(0)) is not None
    assert t.offer("stale_data", "a", resolved=True, at=at(1)) is None  # kind's bucket empty
    assert t.offer("store_error", "b", resolved=False, at=at(1)) is not None  # another kind


def test_a_pending_change_that_is_undone_is_still_told() -> None:
    """Opened (told), resolved and reopened while limited: the person hears it flapped."""
    t = IncidentTracker(burst=1, per_hour=3600)
    assert t.offer("bus_disconnected", "down", resolved=False, at=at(0)) is not None
    assert t.offer("bus_disconnected", "up", resolved=True, at=at(0.1)) is None
    assert t.offer("bus_disconnected", "down", resolved=False, at=at(0.2)) is None
    (message,) = t.due(at(1))
    assert not message.resolved and message.changes == 2


def test_token_bucket_refills_and_caps() -> None:
    bucket = TokenBucket(burst=2, per_hour=3600, now=at(0))
    assert bucket.take(at(0)) and bucket.take(at(0)) and not bucket.take(at(0))
    assert bucket.ready_at(at(0.5)) == at(1)
    assert bucket.take(at(1)) and not bucket.take(at(1))
    assert bucket.take(at(10_000)) and bucket.take(at(10_000))
    assert not bucket.take(at(10_000))  # capped at burst, however long it rested
    assert not bucket.take(at(5))  # clock went back: no refill, no error
    with pytest.raises(ValueError):
        TokenBucket(burst=0, per_hour=1, now=at(0))


def test_message_title_and_body() -> None:
    message = AlertMessage("store_error", "", False, "disk I/O error", at(0))
    assert message.title("bot-eu-1") == "[bot-eu-1] ALERT: store_error"
    assert message.body() == "disk I/O error\nopened at 2025-03-01T12:00:00+00:00"
    resolved = AlertMessage("reconciliation", "USDC", True, "ok", at(3725), opened_at=at(0))
    assert resolved.title("s") == "[s] RESOLVED: reconciliation:USDC"
    assert "open for 1h02m05s" in resolved.body()
    assert format_duration(12.34) == "12.3s" and format_duration(200) == "3m20s"


def test_short_bus_outages_raise_nothing() -> None:
    watch = BusWatch(after_s=60)
    assert watch.down(at(0), "connection reset") == []
    assert watch.tick(at(59)) == []
    assert watch.up(at(59.5)) == []
    assert watch.tick(at(500)) == []  # up again: the clock stopped


def test_a_long_bus_outage_raises_once_and_recovers_once() -> None:
    watch = BusWatch(after_s=60)
    watch.down(at(0), "connection reset")
    assert watch.down(at(30), "refused") == []  # still the same outage, first cause kept
    (alert,) = watch.tick(at(61))
    assert alert == Alert("bus_disconnected", "down for 1m01s: connection reset")
    assert watch.tick(at(120)) == [] and watch.down(at(130)) == []
    (back,) = watch.up(at(181))
    assert back == Alert("bus_disconnected", "restored after 3m01s", resolved=True)
    assert watch.up(at(182)) == []


def test_outage_watch_with_zero_threshold_raises_on_down() -> None:
    watch = OutageWatch("price_feed", after_s=0)
    assert watch.down(at(0)) == [Alert("price_feed", "down for 0.0s")]


def test_watch_feeds_the_tracker() -> None:
    """The path the driver takes: watch alerts through the same tracker as the desk's."""
    watch, tracker = BusWatch(after_s=10), IncidentTracker()
    told: list[AlertMessage] = []
    watch.down(at(0))
    for second in range(0, 40):
        for alert in watch.tick(at(second)):
            message = tracker.offer(
                alert.kind, alert.detail, resolved=alert.resolved, at=at(second)
            )
            told += [message] if message else []
    for alert in watch.up(at(40)):
        message = tracker.offer(alert.kind, alert.detail, resolved=alert.resolved, at=at(40))
        told += [message] if message else []
    assert [(m.resolved, m.at) for m in told] == [(False, at(10)), (True, at(40))]
