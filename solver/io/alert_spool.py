"""Alerts that outlive the process (issue 24): a small spool file beside the store.

The notifier's state — which incidents are open, which changes a person has not been told
yet (rate limited, or queued and not delivered) — lived in memory only, so a restart lost
folded messages and left incidents open on someone's phone for ever. The spool keeps that
state on disk, and a restart tells each incident's current state (see
:meth:`solver.io.alert_policy.IncidentTracker.settle`).

Why a file of its own and not the store: the one incident the store cannot record is the
store's own failure (``store_error``: disk full, I/O error, a lock held elsewhere), and that is
the one a person most needs to hear about after a restart. The spool is a few hundred bytes,
written whole to a temporary file and renamed (a crash leaves the old version or the new one,
never half of one), owner-only (``0600``) like the key files: alert details name accounts and
amounts. It lives at ``<storage.path>.alerts.json``.

It also says whether the previous run ended cleanly: ``running`` is written at start (with
the pid and a heartbeat refreshed every :data:`HEARTBEAT_EVERY_S`) and cleared by a clean
stop, so a process that died without SIGTERM (``kill -9``, the OOM killer, a power cut) is
noticed by the next start, which says when it was last alive.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from solver.io.alert_policy import IncidentState

__all__ = ["HEARTBEAT_EVERY_S", "AlertSpool", "RunMark", "spool_path"]

log = logging.getLogger("solver.notify")

HEARTBEAT_EVERY_S = 10.0
"""How often the running bot rewrites its heartbeat into the spool (and the metric)."""
VERSION = 1


def spool_path(store_path: str | os.PathLike[str]) -> Path:
    """``<storage.path>.alerts.json``: beside the store, on the same volume, never inside it."""
    return Path(f"{os.fspath(store_path)}.alerts.json")


@dataclass(frozen=True, slots=True)
class RunMark:
    """A run that has not stopped cleanly (yet): who, since when, last seen alive when."""

    pid: int
    started_at: datetime
    heartbeat_at: datetime


@dataclass(slots=True)
class AlertSpool:
    """The spool file: :meth:`load` once at start, :meth:`save` after every change."""

    path: Path
    running: RunMark | None = None
    incidents: list[IncidentState] = field(default_factory=list)
    failed: bool = False
    """The last write failed (said once, then again only after a success)."""

    def load(self) -> tuple[RunMark | None, list[IncidentState]]:
        """The previous run's mark (None: it stopped cleanly, or there was none) and its
        incidents. A missing file is a first start; a damaged one is said and ignored: alerts
        must never stop the bot from starting."""
        try:
            doc = orjson.loads(self.path.read_bytes())
            running = doc.get("running")
            mark = None if running is None else _mark(running)
            return mark, [_incident(item) for item in doc.get("incidents", [])]
        except FileNotFoundError:
            return None, []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("alerts: spool %s unreadable, ignored: %s", self.path, exc)
            return None, []

    def save(self) -> None:
        """Write the whole file atomically, owner-only. A failure is logged, never raised: a
        full disk is a reason to alert, not to stop alerting."""
        doc = {
            "version": VERSION,
            "running": None if self.running is None else _mark_doc(self.running),
            "incidents": [_incident_doc(i) for i in self.incidents],
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.fchmod(fd, 0o600)  # a tmp file left by an older umask
                os.write(fd, orjson.dumps(doc))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self.failed:
                log.error("alerts: cannot write the spool %s: %s", self.path, exc)
            self.failed = True
            with contextlib.suppress(OSError):
                tmp.unlink()
            return
        self.failed = False


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: Any) -> datetime:
    parsed = datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"naive time {value!r}")
    return parsed


def _mark_doc(mark: RunMark) -> dict[str, Any]:
    started, beat = _ts(mark.started_at), _ts(mark.heartbeat_at)
    return {"pid": mark.pid, "started_at": started, "heartbeat_at": beat}


def _mark(doc: dict[str, Any]) -> RunMark:
    return RunMark(int(doc["pid"]), _dt(doc["started_at"]), _dt(doc["heartbeat_at"]))


def _incident_doc(i: IncidentState) -> dict[str, Any]:
    return {
        "kind": i.kind, "key": i.key, "open": i.open, "detail": i.detail,
        "since": _ts(i.since), "opened_at": _ts(i.opened_at), "untold": i.untold,
    }  # fmt: skip


def _incident(doc: dict[str, Any]) -> IncidentState:
    opened = doc.get("opened_at")
    return IncidentState(
        kind=str(doc["kind"]),
        key=str(doc.get("key", "")),
        open=bool(doc["open"]),
        detail=str(doc.get("detail", "")),
        since=_dt(doc["since"]),
        opened_at=None if opened is None else _dt(opened),
        untold=int(doc.get("untold", 0)),
    )
