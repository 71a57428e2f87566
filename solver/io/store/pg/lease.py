"""The lease: one active instance per account, on the database's clock, with an epoch that fences
every write the active makes (STYLE 13: Chainlink's ``lease_lock.go``, plus Kleppmann's fencing
token).

One row per account in ``lease``: who holds it (:attr:`Lease.holder`, unique per process), its
epoch, and when it expires — ``now()`` of the database, never of the instance, so two instances
whose clocks disagree still agree on who holds it. An instance takes the row by an upsert that
succeeds only when the row is free or expired, and the epoch goes up by one at every taking.
The active refreshes it well inside its duration (a third of it). Every group commit of the
journal checks, in the same statement, that this holder still holds this epoch and that it has not
expired, locking the row while it writes (:mod:`solver.io.store.pg.journal`): a taker's upsert
waits for that commit to end and then sees what it wrote; a commit after the taking writes
nothing. So whatever the active sent is in the journal its successor replays.

Besides the database's check, the active keeps its own deadline on its monotonic clock: the lease
runs from before the refresh that extended it was sent, minus a margin. Past it, it commits
nothing more (and so sends nothing) even if the database would still accept it: a process that
was stopped (SIGSTOP, a long pause) learns that it may have lost the lease before it speaks, not
after. A lease it cannot refresh in time is lost for good: it exits, and its service manager
starts it again as a standby.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import psycopg

from solver.io.store.schema import FencedError

log = logging.getLogger("solver.lease")

MARGIN = 0.2
"""The share of the lease the active gives up to clock rate drift and the refresh's round trip."""

TAKE = """
INSERT INTO lease (account, holder, epoch, acquired_at, expires_at)
VALUES (%(account)s, %(holder)s, 1, now(), now() + make_interval(secs => %(duration)s))
ON CONFLICT (account) DO UPDATE
    SET holder = EXCLUDED.holder, epoch = lease.epoch + 1, acquired_at = now(),
        expires_at = EXCLUDED.expires_at
    WHERE lease.expires_at <= now()
RETURNING epoch, expires_at
"""
REFRESH = """
UPDATE lease SET expires_at = now() + make_interval(secs => %(duration)s)
WHERE account = %(account)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > now()
RETURNING expires_at
"""
RELEASE = """
UPDATE lease SET expires_at = now()
WHERE account = %(account)s AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > now()
"""
HOLDER = (
    "SELECT holder, epoch, EXTRACT(EPOCH FROM expires_at - now()), expires_at > now() "
    "FROM lease WHERE account = %s"
)


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    holder: str
    epoch: int
    live: bool
    left_s: float
    """Seconds until it expires by the database's clock (negative: expired)."""


def holder_id() -> str:
    """``host:pid:random``: unique per process, readable in ``solver status`` and the table."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """This instance's view of the account's lease: whether it holds it, with which epoch, and
    until when by its own clock (:attr:`valid_until`, monotonic)."""

    def __init__(self, account: str, duration_s: float, holder: str | None = None) -> None:
        if duration_s <= 0:
            raise ValueError("the lease's duration must be positive")
        self.account = account
        self.duration_s = duration_s
        self.holder = holder or holder_id()
        self.epoch: int | None = None
        self.valid_until = 0.0
        self.role = "standby"
        self.role_since = time.time()

    @property
    def refresh_every_s(self) -> float:
        return self.duration_s / 3

    def _params(self) -> dict[str, object]:
        return {
            "account": self.account,
            "holder": self.holder,
            "epoch": self.epoch,
            "duration": self.duration_s,
        }

    def _extend(self, started: float) -> None:
        self.valid_until = started + self.duration_s * (1 - MARGIN)

    def try_take(self, conn: psycopg.Connection) -> bool:
        """Take the lease if it is free or expired; True if this instance holds it now."""
        started = time.monotonic()
        row = conn.execute(TAKE, self._params()).fetchone()
        if row is None:
            return False
        self.epoch = int(row[0])
        self._extend(started)
        self.role, self.role_since = "active", time.time()
        log.warning("lease of %s taken: epoch %d, holder %s", self.account, self.epoch, self.holder)
        return True

    def refresh(self, conn: psycopg.Connection) -> None:
        """Extend the lease; :class:`FencedError` if it is not ours any more (taken, or expired
        before this refresh reached the database)."""
        if self.epoch is None:
            raise FencedError("the lease is not held")
        started = time.monotonic()
        row = conn.execute(REFRESH, self._params()).fetchone()
        if row is None:
            self.lose("the lease was not ours any more at its refresh")
        self._extend(started)

    def check(self) -> None:
        """Raise :class:`FencedError` unless the lease is held and, by this instance's own
        clock, cannot have expired yet (every commit asks this first, for nothing)."""
        if self.epoch is None:
            raise FencedError(f"the lease of {self.account} is not held (role {self.role})")
        if time.monotonic() >= self.valid_until:
            self.lose("the lease was not refreshed in time: it may have expired")

    def lose(self, why: str) -> None:
        epoch, self.epoch = self.epoch, None
        self.valid_until = 0.0
        if self.role != "fenced":
            self.role, self.role_since = "fenced", time.time()
        raise FencedError(f"fenced out of the lease of {self.account} (epoch {epoch}): {why}")

    def release(self, conn: psycopg.Connection) -> None:
        """Let the lease go now (a clean stop): a standby takes it at its next try."""
        if self.epoch is None:
            return
        try:
            conn.execute(RELEASE, self._params())
        except psycopg.Error as exc:
            log.warning("lease not released (it expires by itself): %s", exc)
        self.epoch = None
        self.role, self.role_since = "stopped", time.time()

    def fence_params(self) -> tuple[str, str, int]:
        """``(account, holder, epoch)`` for the commit's fence; :class:`FencedError` first if
        :meth:`check` says so."""
        self.check()
        assert self.epoch is not None
        return self.account, self.holder, self.epoch


def current_holder(conn: psycopg.Connection, account: str) -> LeaseHolder | None:
    row = conn.execute(HOLDER, (account,)).fetchone()
    if row is None:
        return None
    return LeaseHolder(str(row[0]), int(row[1]), bool(row[3]), float(row[2]))
