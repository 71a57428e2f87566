"""Alerts delivered to a person: Apprise URLs from an environment variable (issue 14).

The bot runs unattended; the desk's :class:`~solver.core.actions.Alert` actions (kill switch,
reconciliation mismatch, stale data, store errors, and their recoveries) and the driver's
outage watches (:class:`~solver.io.alert_policy.BusWatch`) must reach someone's phone. Apprise
(https://github.com/caronc/apprise) is the delivery library: one URL syntax for webhooks,
Telegram, Slack, Discord, e-mail, ntfy and ~100 more, maintained by others, so adding a channel
is a change of environment, not of code.

How it fits the loop:

- :meth:`Notifier.notify` is synchronous and cheap, called from the event loop where the action
  is carried out. It asks the pure :class:`~solver.io.alert_policy.IncidentTracker` whether the
  alert is news (one message per opening, one per recovery, within a rate limit per kind) and
  queues at most one message. It never awaits, never blocks, never raises for delivery trouble.
- One background task (:meth:`Notifier.start`) delivers the queue: each destination in turn,
  with a timeout per attempt and retries after ``retry_delays_s``. Apprise runs its blocking
  HTTP clients in threads (``async_notify``), so a slow webhook never stalls quoting.
- The queue is bounded (``queue_size``): a dead destination with a storm of alerts drops new
  messages and counts them, rather than growing without limit.

Secrets: a destination URL carries its credentials (a bot token, a webhook path, a password),
so URLs are read from the variable named by ``alerts.urls_env`` and are never logged:
:func:`redact` keeps the scheme and, for plain web and mail schemes only, the host. Apprise's
own logger and urllib3's are capped at WARNING because they write the full URL at DEBUG.

Counters (:class:`NotifierStats`, exported by ``Metrics.sync_notifications``): ``sent`` and
``failed`` count deliveries per destination, ``dropped`` messages lost to a full queue,
``duplicate`` repeats of an incident's current state, ``rate_limited`` changes that had to wait
for a token (they are folded into a later message, not lost).

Durable (issue 24): with a :class:`~solver.io.alert_spool.AlertSpool` the incidents and the
changes not yet told (waiting for a token, or queued and not delivered) are written beside the
store after every change; the next start takes them back (:meth:`Notifier.restore`) and tells
each incident the previous run left open its current state (:meth:`Notifier.settle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import apprise

from solver.config.alerts import AlertsConfig
from solver.core.actions import Alert
from solver.errors import ConfigError
from solver.io.alert_policy import AlertMessage, IncidentState, IncidentTracker
from solver.io.alert_spool import AlertSpool

__all__ = ["Notifier", "NotifierStats", "parse_urls", "redact"]

log = logging.getLogger("solver.notify")

_HOST_IS_PUBLIC = frozenset(
    {"json", "jsons", "xml", "xmls", "form", "forms", "mailto", "mailtos", "ntfy", "ntfys"}
)
"""Schemes whose host is a server name rather than a credential (``tgram://TOKEN/...``)."""
_URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)


def parse_urls(text: str | None) -> list[str]:
    """Apprise URLs from the variable's value: separated by commas and/or whitespace."""
    if not text:
        return []
    return [part for part in re.split(r"[\s,]+", text.strip()) if part]


def redact(url: str) -> str:
    """What may be logged of a destination URL: the scheme, and the host only where it is not
    a credential. Paths, queries, users and passwords never appear."""
    match = _URL_RE.match(url.strip())
    if match is None:
        return "<not a URL>"
    scheme = match["scheme"].lower()
    if scheme not in _HOST_IS_PUBLIC:
        return f"{scheme}://…"
    authority = re.split(r"[/?#]", match["rest"], maxsplit=1)[0]
    host = authority.rpartition("@")[2]
    return f"{scheme}://{host}/…" if host else f"{scheme}://…"


@dataclass(slots=True)
class NotifierStats:
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    duplicate: int = 0
    rate_limited: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "sent": self.sent,
            "failed": self.failed,
            "dropped": self.dropped,
            "duplicate": self.duplicate,
            "rate_limited": self.rate_limited,
        }


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _Destination:
    """One Apprise URL, in an Apprise object of its own so each is retried on its own."""

    __slots__ = ("apprise", "name")

    def __init__(self, url: str, index: int) -> None:
        self.name = f"#{index} {redact(url)}"
        self.apprise = apprise.Apprise()
        if not self.apprise.add(url):
            # Apprise explains nothing we could show without the URL; the name is redacted.
            raise ConfigError(f"alerts: destination {self.name} is not a valid Apprise URL")


class Notifier:
    """Delivers alert messages in the background; see the module doc.

    ``urls`` are Apprise URLs (empty: track and log only). ``clock`` gives ``at`` when a caller
    does not; the tracker's rate limits run on those times.
    """

    def __init__(
        self,
        urls: Sequence[str] = (),
        *,
        name: str = "solver",
        burst: int = 3,
        per_hour: float = 12.0,
        queue_size: int = 100,
        send_timeout_s: float = 20.0,
        retry_delays_s: Sequence[float] = (2.0, 10.0, 60.0),
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        # Apprise, and urllib3 under it, log whole URLs (tokens, webhook paths) at DEBUG: never
        # let those records exist, whatever the root level. (The bot's own HTTP is httpx.)
        for library in ("apprise", "urllib3"):
            library_log = logging.getLogger(library)
            if library_log.level < logging.WARNING:  # NOTSET too: it would inherit the root's
                library_log.setLevel(logging.WARNING)
        self.destinations = [_Destination(url, i) for i, url in enumerate(urls, 1)]
        self.name = name
        self.tracker = IncidentTracker(burst=burst, per_hour=per_hour)
        self.queue_size = queue_size
        self.send_timeout_s = send_timeout_s
        self.retry_delays_s = tuple(retry_delays_s)
        self.clock = clock
        self.stats = NotifierStats()
        self._queue: deque[AlertMessage] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.spool: AlertSpool | None = None
        """Where the incidents outlive the process (None: in memory only)."""
        self._unsent: Counter[tuple[str, str]] = Counter()  # queued, not delivered yet
        self.restored: list[tuple[str, str]] = []
        """Incidents the previous run left open, until :meth:`settle` tells their state."""

    @classmethod
    def from_config(
        cls,
        config: AlertsConfig,
        environ: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], datetime] = _utc_now,
    ) -> Notifier:
        """Build from ``alerts:``; URLs from ``environ[config.urls_env]`` (default os.environ).

        Raises ConfigError when ``required`` and no URL is set, or a URL is not Apprise's.
        """
        env = os.environ if environ is None else environ
        urls = parse_urls(env.get(config.urls_env)) if config.enabled else []
        if config.enabled and not urls:
            if config.required:
                raise ConfigError(
                    f"alerts.required is true but ${config.urls_env} holds no Apprise URL"
                )
            log.warning("alerts: $%s is empty: alerts are logged, not delivered", config.urls_env)
        notifier = cls(
            urls,
            name=config.name,
            burst=config.burst,
            per_hour=config.per_hour,
            queue_size=config.queue_size,
            send_timeout_s=config.send_timeout_s,
            retry_delays_s=config.retry_delays_s,
            clock=clock,
        )
        if urls:
            names = ", ".join(d.name for d in notifier.destinations)
            log.info("alerts: delivering to %s", names)
        return notifier

    # ------------------------------------------------------------------ from the event loop

    def notify(
        self,
        kind: str,
        detail: str,
        resolved: bool = False,
        at: datetime | None = None,
        *,
        key: str = "",
    ) -> None:
        """Report an alert (or its recovery). Non-blocking; repeats are dropped (module doc)."""
        when = self.clock() if at is None else at
        tracker = self.tracker
        limited = tracker.rate_limited
        message = tracker.offer(kind, detail, resolved=resolved, at=when, key=key)
        self.stats.duplicate = tracker.duplicates
        self.stats.rate_limited = tracker.rate_limited
        if message is not None:
            self._enqueue(message)
        elif tracker.rate_limited != limited:
            self._wake.set()  # the worker must learn when the next token is due
            what = "RESOLVED" if resolved else "ALERT"
            log.info("alerts: %s %s rate limited: told when the limit allows", what, kind)
            self.save()

    def announce(self, kind: str, detail: str, at: datetime | None = None) -> None:
        """A message about no incident (``unclean_restart``): told once, nothing to resolve."""
        when = self.clock() if at is None else at
        self._enqueue(AlertMessage(kind=kind, key="", resolved=False, detail=detail, at=when))

    # ------------------------------------------------------------------ across restarts

    def restore(self, states: list[IncidentState]) -> None:
        """The previous run's incidents (from the spool), before any alert of this run."""
        self.tracker.restore(states)
        self.restored = [(s.kind, s.key) for s in states if s.open]
        if self.tracker.pending:
            self._wake.set()  # resolved changes never told: due at once

    def settle(self, holds: Callable[[str, str], bool], at: datetime | None = None) -> None:
        """Tell each incident the previous run left open its state now: ``holds(kind, key)``
        true sends a reminder, false its recovery. An incident this run has already reported
        on (resolved by the desk meanwhile) is left as it is."""
        when = self.clock() if at is None else at
        restored, self.restored = self.restored, []
        open_now = set(self.tracker.open_incidents())
        for kind, key in restored:
            if (f"{kind}:{key}" if key else kind) not in open_now:
                continue
            self._enqueue(self.tracker.settle(kind, key, holds(kind, key), when))
        self.save()

    def save(self) -> None:
        """Write the incidents to the spool (if any): after every change of what is told."""
        spool = self.spool
        if spool is not None:
            spool.incidents = self.tracker.states(self._unsent)
            spool.save()

    def alert(self, action: Alert, at: datetime | None = None) -> None:
        """:meth:`notify` for the desk's :class:`~solver.core.actions.Alert` action."""
        self.notify(action.kind, action.detail, action.resolved, at)

    def _enqueue(self, message: AlertMessage) -> None:
        if len(self._queue) >= self.queue_size:
            self.stats.dropped += 1
            log.error("alerts: queue full, dropped: %s", message.title(self.name))
            # Never delivered: the spool keeps it untold, so the next start tells it.
            self._unsent[message.kind, message.key] += 1
            self.save()
            return
        self._queue.append(message)
        self._unsent[message.kind, message.key] += 1
        self._idle.clear()
        self._wake.set()
        self.save()

    # ------------------------------------------------------------------ the delivery task

    def start(self) -> None:
        """Start delivering (needs a running loop). Messages queued before are sent now."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="alert-notifier")

    async def drain(self) -> None:
        """Wait until the queue is delivered (pending rate-limited changes not included)."""
        await self._idle.wait()

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Deliver what is queued within ``timeout_s``, then stop."""
        task, self._task = self._task, None
        if task is None:
            if self._queue:
                log.error("alerts: never started; %d message(s) not delivered", len(self._queue))
            return
        try:
            await asyncio.wait_for(self.drain(), timeout_s)
        except TimeoutError:
            log.error("alerts: %d message(s) not delivered at shutdown", len(self._queue))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self.tracker.pending:
            log.warning("alerts: %d rate-limited change(s) never sent", self.tracker.pending)

    async def _run(self) -> None:
        while True:
            while self._queue:
                message = self._queue[0]
                await self._deliver(message)
                self._queue.popleft()
                ident = (message.kind, message.key)
                self._unsent[ident] -= 1
                if self._unsent[ident] <= 0:
                    del self._unsent[ident]
                self.save()
            for message in self.tracker.due(self.clock()):
                self._enqueue(message)  # kept as unsent until delivered
            if self._queue:
                continue
            self._idle.set()
            self._wake.clear()
            due = self.tracker.next_due(self.clock())
            timeout = None if due is None else max(0.0, (due - self.clock()).total_seconds())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _deliver(self, message: AlertMessage) -> None:
        title, body = message.title(self.name), message.body()
        if message.resolved:
            log.warning("%s: %s", title, message.detail)
        else:
            log.error("%s: %s", title, message.detail)
        kind = apprise.NotifyType.SUCCESS if message.resolved else apprise.NotifyType.FAILURE
        for destination in self.destinations:
            if await self._send(destination, title, body, kind):
                self.stats.sent += 1
            else:
                self.stats.failed += 1
                log.error("alerts: could not deliver %r to %s", title, destination.name)

    async def _send(
        self, destination: _Destination, title: str, body: str, kind: apprise.NotifyType
    ) -> bool:
        for delay in (0.0, *self.retry_delays_s):
            if delay:
                await asyncio.sleep(delay)
            try:
                ok = await asyncio.wait_for(
                    destination.apprise.async_notify(body=body, title=title, notify_type=kind),
                    self.send_timeout_s,
                )
            except TimeoutError:
                log.warning("alerts: %s timed out after %ss", destination.name, self.send_timeout_s)
                continue
            except Exception as exc:  # a plugin bug must not kill the delivery task
                log.warning("alerts: %s raised %s", destination.name, type(exc).__name__)
                continue
            if ok:
                return True
        return False
