"""Who owns the store: the running bot is its only owner (issue 24).

Two bots on one store and key once both quoted: both wrote ``quote_opened`` for one quote, both
hit ``UNIQUE constraint failed``, and quotes with fills ended ``LOST``. So the store is opened
in SQLite's exclusive locking mode (:mod:`solver.io.store.sqlite_store`): the first access
takes a lock on the database file that the connection keeps until it closes. That lock is the
authority — the operating system drops it when the process dies in any way, ``kill -9``
included — and a second opener gets ``SQLITE_BUSY`` at once.

The lock alone cannot say *who* holds it, so the owner also writes a small JSON file beside the
store, ``<store>.lock`` (:func:`lock_path`): pid, host, start time and, once it serves one, its
control API's URL (``solver history`` and ``solver store backup`` go there while the bot runs).
It is written atomically (a new file created exclusively with mode 0600, synced, then renamed
over the old one), only *after* the SQLite lock was taken, and removed at a clean close. So:

- a second bot is refused naming the holder the file describes (:class:`StoreBusyError`);
- a file left by a bot killed with ``kill -9`` is stale by construction (its lock is gone):
  the next owner says whose place it takes and writes its own (:func:`take_over`);
- if the lock is held but the file names a process that is not running on this host, another
  program holds the store (a ``sqlite3`` shell, a reader): the message says that instead.

Never open and close the database file itself in the owning process outside SQLite: POSIX
locks belong to the process, and closing *any* descriptor of the file drops them all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from solver.io.store.schema import StoreError

log = logging.getLogger("solver.store")


class StoreBusyError(StoreError):
    """The store is held by another process (a running bot, or another program)."""

    def __init__(self, message: str, holder: Holder | None) -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """What ``<store>.lock`` says about the process that holds the store."""

    pid: int
    host: str
    started_at: str
    """ISO 8601, UTC."""
    control: str | None = None
    """The holder's control API (``http://127.0.0.1:9464``), once it serves one."""

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, started {self.started_at}"

    def alive(self) -> bool | None:
        """Whether the process runs: None when it is on another host (cannot be told)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # someone else's process: it exists
        return True


def lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".lock")


def me(started_at: datetime | None = None) -> Holder:
    at = (started_at or datetime.now(UTC)).isoformat(timespec="seconds")
    return Holder(os.getpid(), socket.gethostname(), at)


def read_holder(store: Path) -> Holder | None:
    """The holder ``<store>.lock`` names, or None (no file, or one that cannot be read)."""
    try:
        doc = orjson.loads(lock_path(store).read_bytes())
        return Holder(int(doc["pid"]), str(doc["host"]), str(doc["started_at"]), doc.get("control"))
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def write_holder(store: Path, holder: Holder) -> None:
    """Replace ``<store>.lock`` atomically: a fresh 0600 file (``O_EXCL``: never follows a
    planted link), synced, renamed over the old one. Raises :class:`StoreError`."""
    target = lock_path(store)
    temp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, orjson.dumps(asdict(holder)) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise StoreError(f"cannot write the store's lock file {target}: {exc}") from None


def remove_holder(store: Path, pid: int) -> None:
    """Remove ``<store>.lock`` if it still names ``pid`` (a clean close); a failure is said
    (the file is stale anyway: the next owner takes over)."""
    holder = read_holder(store)
    if holder is None or holder.pid != pid or holder.host != socket.gethostname():
        return
    try:
        lock_path(store).unlink()
    except OSError as exc:
        log.warning("cannot remove the store's lock file %s: %s", lock_path(store), exc)


def take_over(store: Path, holder: Holder) -> None:
    """Now that this process holds the SQLite lock: say whose stale place it takes, if any,
    and write ``holder``."""
    old = read_holder(store)
    if old is not None and (old.pid, old.host) != (holder.pid, holder.host):
        log.warning(
            "the store %s: taking over from %s (%s; its lock on the store is gone)",
            store,
            old.describe(),
            "not running" if old.alive() is False else "killed or stopped uncleanly",
        )
    write_holder(store, holder)


def busy_error(store: Path) -> StoreBusyError:
    """The error for a store whose SQLite lock another process holds, naming that process."""
    holder = read_holder(store)
    if holder is None:
        return StoreBusyError(
            f"the store {store} is in use by another process (no lock file "
            f"{lock_path(store)} names it: another program has the database open)",
            None,
        )
    if holder.alive() is False:
        return StoreBusyError(
            f"the store {store} is in use by another program: its lock file names "
            f"{holder.describe()}, which is not running",
            None,
        )
    return StoreBusyError(
        f"the store {store} is in use by a running bot: {holder.describe()}"
        + (f", control API {holder.control}" if holder.control else ""),
        holder,
    )
