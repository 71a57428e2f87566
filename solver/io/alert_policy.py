"""Which alerts become messages, and when: incidents, deduplication, rate limits, outages.

The sans-I/O half of :mod:`solver.io.notify` (STYLE 1 and 3): no sockets, no clock reads, time
is an argument, so every rule here is tested synchronously.

An **incident** is one condition, named by ``kind`` (``reconciliation``, ``stale_data``,
``bus_disconnected``, ...) and an optional ``key`` (an asset, a pair), that is either open or
resolved. A person wants exactly two messages per incident: one when it opens, one when it
recovers. The desk and the watches below may repeat an alert while its condition holds (a risk
breach is re-evaluated on every tick); :class:`IncidentTracker` turns that stream into state
changes and drops the repeats.

A condition that **flaps** (open, resolved, open, ...) would still page someone every few
seconds, so each kind has a token bucket (``burst`` messages at once, ``per_hour`` sustained).
A change that finds the bucket empty is not lost: the incident is marked pending, and when a
token is back one message reports its *current* state and how many changes it folds in. The
last message a person receives about an incident is therefore always its current state — a
dropped "resolved" would leave them believing the bot is still broken, a dropped "open" that it
is healthy.

:class:`OutageWatch` (and :class:`BusWatch`) turn "connection lost / restored" observations into
an incident only when the outage outlasts a threshold: reconnecting within seconds is normal.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from solver.core.actions import Alert

__all__ = [
    "AlertMessage",
    "BusWatch",
    "IncidentState",
    "IncidentTracker",
    "OutageWatch",
    "TokenBucket",
    "format_duration",
]

BUS_DISCONNECTED = "bus_disconnected"


def format_duration(seconds: float) -> str:
    """``1h02m05s`` / ``3m20s`` / ``12.5s``: how long, for a person reading a phone."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


@dataclass(frozen=True, slots=True)
class AlertMessage:
    """One message to deliver: the state an incident is in now."""

    kind: str
    key: str
    resolved: bool
    detail: str
    at: datetime
    """When the incident entered the state reported."""
    opened_at: datetime | None = None
    """When it opened (None: before this process started, e.g. a pause restored on restart)."""
    changes: int = 1
    """State changes folded into this message (more than 1 after rate limiting)."""
    reminder: bool = False
    """Still open after a restart: the state is not new, the process is."""

    @property
    def incident(self) -> str:
        return f"{self.kind}:{self.key}" if self.key else self.kind

    def title(self, name: str) -> str:
        return f"[{name}] {'RESOLVED' if self.resolved else 'ALERT'}: {self.incident}"

    def body(self) -> str:
        lines = [self.detail] if self.detail else []
        what = "resolved" if self.resolved else "opened"
        lines.append(f"{what} at {self.at.isoformat(timespec='seconds')}")
        if self.reminder:
            lines.append("still open after a restart of the bot")
        if self.resolved and self.opened_at is not None:
            lines.append(f"open for {format_duration((self.at - self.opened_at).total_seconds())}")
        if self.changes > 1:
            lines.append(f"{self.changes} changes since the last message (rate limited)")
        return "\n".join(lines)


class TokenBucket:
    """``burst`` tokens, refilled at ``per_hour``; starts full. Clock going back refills 0."""

    __slots__ = ("_per_s", "_tokens", "_updated", "burst")

    def __init__(self, burst: int, per_hour: float, now: datetime) -> None:
        if burst < 1 or per_hour <= 0:
            raise ValueError("burst must be >= 1 and per_hour > 0")
        self.burst = burst
        self._per_s = per_hour / 3600.0
        self._tokens = float(burst)
        self._updated = now

    def _refill(self, now: datetime) -> None:
        elapsed = max(0.0, (now - self._updated).total_seconds())
        self._tokens = min(float(self.burst), self._tokens + elapsed * self._per_s)
        self._updated = max(now, self._updated)

    def take(self, now: datetime) -> bool:
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def ready_at(self, now: datetime) -> datetime:
        """The earliest time :meth:`take` can succeed."""
        self._refill(now)
        missing = max(0.0, 1.0 - self._tokens)
        return self._updated + timedelta(seconds=missing / self._per_s)


@dataclass(frozen=True, slots=True)
class IncidentState:
    """What a restart must know of one incident (:mod:`solver.io.alert_spool` keeps it):
    its state, and whether a person has been told it (``untold``: changes not delivered)."""

    kind: str
    key: str
    open: bool
    detail: str
    since: datetime
    opened_at: datetime | None
    untold: int


@dataclass(slots=True)
class _Incident:
    open: bool
    detail: str
    since: datetime
    opened_at: datetime | None
    pending: int = 0
    """Changes not yet told; > 0 while waiting for a token."""


class IncidentTracker:
    """Alerts in, messages out: one per opening, one per recovery, within a rate limit.

    ``offer`` returns the message to send now, or None (a repeat, or no token: then
    :meth:`due` returns it later, folded). Counters: ``duplicates`` (repeats of the current
    state dropped) and ``rate_limited`` (changes that had to wait for a token).
    """

    def __init__(self, *, burst: int = 3, per_hour: float = 12.0) -> None:
        self.burst = burst
        self.per_hour = per_hour
        self._incidents: dict[tuple[str, str], _Incident] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._pending: dict[tuple[str, str], None] = {}  # insertion-ordered set
        self.duplicates = 0
        self.rate_limited = 0

    def open_incidents(self) -> list[str]:
        """``kind`` or ``kind:key`` of every incident open now."""
        return [f"{k}:{key}" if key else k for (k, key), i in self._incidents.items() if i.open]

    def offer(
        self, kind: str, detail: str, *, resolved: bool, at: datetime, key: str = ""
    ) -> AlertMessage | None:
        ident = (kind, key)
        incident = self._incidents.get(ident)
        if incident is not None and incident.open != resolved:
            # Same state as now: a repeat. Keep the newest detail for a folded message.
            self.duplicates += 1
            incident.detail = detail
            return None
        if incident is None:
            incident = self._incidents[ident] = _Incident(
                open=not resolved, detail=detail, since=at, opened_at=None if resolved else at
            )
        else:
            incident.open = not resolved
            incident.detail = detail
            incident.since = at
            if not resolved:
                incident.opened_at = at
        incident.pending += 1
        if self._bucket(kind, at).take(at):
            return self._told(ident, incident)
        self.rate_limited += 1
        self._pending[ident] = None
        return None

    def due(self, at: datetime) -> list[AlertMessage]:
        """Folded messages of pending incidents whose kind has a token again."""
        out = []
        for ident in list(self._pending):
            if self._bucket(ident[0], at).take(at):
                out.append(self._told(ident, self._incidents[ident]))
        return out

    def next_due(self, now: datetime) -> datetime | None:
        """When :meth:`due` will next have something (None: nothing pending)."""
        times = [self._bucket(kind, now).ready_at(now) for kind, _ in self._pending]
        return min(times, default=None)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def states(self, unsent: Collection[tuple[str, str]] = ()) -> list[IncidentState]:
        """Every incident a restart must carry on: the open ones, and the resolved ones whose
        change is still waiting for a token or, in ``unsent``, for its delivery."""
        out = []
        for ident, i in self._incidents.items():
            untold = i.pending or (1 if ident in unsent else 0)
            if i.open or untold:
                kind, key = ident
                out.append(IncidentState(kind, key, i.open, i.detail, i.since, i.opened_at, untold))
        return out

    def restore(self, states: Iterable[IncidentState]) -> None:
        """Take the incidents of the previous run (before any :meth:`offer`). A recovery not
        yet told waits as pending (:meth:`due` tells it); an open incident is told by
        :meth:`settle` once the desk can say whether it still holds, folding what the
        previous run had not told: two messages for it would say the same thing twice."""
        for s in states:
            ident = (s.kind, s.key)
            self._incidents[ident] = _Incident(s.open, s.detail, s.since, s.opened_at, s.untold)
            if s.untold and not s.open:
                self._pending[ident] = None

    def settle(self, kind: str, key: str, holds: bool, at: datetime) -> AlertMessage:
        """After a restart, the current state of an incident the previous run left open: a
        reminder that it still holds, or its recovery. Told at once (one per incident, once per
        start, so outside the rate limit); folds the changes the previous run did not tell."""
        ident = (kind, key)
        incident = self._incidents[ident]
        incident.pending += 1
        if not holds:
            incident.open = False
            incident.since = at
            incident.detail = f"no longer holds after a restart of the bot (was: {incident.detail})"
        message = self._told(ident, incident)
        if holds:
            return AlertMessage(
                kind, key, False, message.detail, message.at, message.opened_at,
                message.changes, reminder=True,
            )  # fmt: skip
        return message

    def _bucket(self, kind: str, at: datetime) -> TokenBucket:
        bucket = self._buckets.get(kind)
        if bucket is None:
            bucket = self._buckets[kind] = TokenBucket(self.burst, self.per_hour, at)
        return bucket

    def _told(self, ident: tuple[str, str], incident: _Incident) -> AlertMessage:
        self._pending.pop(ident, None)
        changes, incident.pending = incident.pending, 0
        return AlertMessage(
            kind=ident[0],
            key=ident[1],
            resolved=not incident.open,
            detail=incident.detail,
            at=incident.since,
            opened_at=incident.opened_at,
            changes=changes,
        )


class OutageWatch:
    """``down`` / ``up`` observations plus time -> an incident once an outage lasts ``after_s``.

    The driver calls :meth:`down` when the connection drops, :meth:`up` when it is back, and
    :meth:`tick` from a timer; each returns the alerts to raise (core ``Alert`` actions, so they
    take the same path as the desk's). An outage shorter than ``after_s`` raises nothing, and
    its recovery nothing either.
    """

    def __init__(self, kind: str, after_s: float) -> None:
        if after_s < 0:
            raise ValueError("after_s must be >= 0")
        self.kind = kind
        self.after_s = after_s
        self.down_since: datetime | None = None
        self.raised = False
        self._detail = ""

    def down(self, at: datetime, detail: str = "") -> list[Alert]:
        if self.down_since is None:
            self.down_since = at
            self._detail = detail
        return self.tick(at)

    def up(self, at: datetime) -> list[Alert]:
        since, raised = self.down_since, self.raised
        self.down_since, self.raised = None, False
        if since is None or not raised:
            return []
        lasted = format_duration((at - since).total_seconds())
        return [Alert(self.kind, f"restored after {lasted}", resolved=True)]

    def tick(self, at: datetime) -> list[Alert]:
        since = self.down_since
        if since is None or self.raised:
            return []
        lasted = (at - since).total_seconds()
        if lasted < self.after_s:
            return []
        self.raised = True
        why = f": {self._detail}" if self._detail else ""
        return [Alert(self.kind, f"down for {format_duration(lasted)}{why}")]


class BusWatch(OutageWatch):
    """The bus websocket: ``bus_disconnected`` after ``after_s`` (``alerts.bus_down_after_s``)."""

    def __init__(self, after_s: float) -> None:
        super().__init__(BUS_DISCONNECTED, after_s)
