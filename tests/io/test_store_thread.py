"""The store's thread and the event loop on the one connection (issue 29): a pass (with the
desk snapshot it may store first) holds the connection until the owner takes it back, and
nothing of the owner's touches SQLite meanwhile. Real files, a real thread and a real loop;
the thread is held mid-pass by SQLite's progress handler, so the interleaving is the test's."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from solver.io.store.checkpoint import Checkpointer
from solver.io.store.sqlite_store import Store
from tests.io.store_helpers import ACCOUNT, record, signed_quote


@contextmanager
def thread_held(conn: sqlite3.Connection, thread: Checkpointer) -> Iterator[threading.Event]:
    """The store's thread stops at its next SQLite statement until the event is set (the
    owner's own statements run as usual)."""
    go = threading.Event()

    def progress() -> int:
        if threading.current_thread() is thread:
            go.wait(10)
        return 0

    conn.set_progress_handler(progress, 1)
    try:
        yield go
    finally:
        go.set()
        conn.set_progress_handler(None, 1)


async def test_a_pass_ends_once_a_late_callback_of_the_one_before_cannot_end_it(
    tmp_path: Path,
) -> None:
    """The thread tells the loop a pass ended (``call_soon_threadsafe``) after it set
    ``done``; the owner may see ``done`` first, take the connection back and start the next
    pass (a desk snapshot waiting) before that callback runs. The late callback must not end
    the new pass: the owner would commit on the connection in the middle of the thread's
    snapshot transaction (its rows committed or rolled back with it)."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("a"))
        position = store.journal.snapshot_position()
        assert position is not None and store.checkpoints is not None
        thread = store.checkpoints.thread
        assert thread is not None
        first = store.store_snapshot(orjson.dumps({"n": 1}), 0, position)
        assert thread.done.wait(10)  # its callback waits for this loop's next turn
        with thread_held(store._conn, thread) as go:
            second = store.store_snapshot(orjson.dumps({"n": 2}), 0, position)
            assert first.done and not second.done and store.journal.held
            for _ in range(3):
                await asyncio.sleep(0)  # the first pass's callback runs
            assert not thread.done.is_set()  # the second pass is under way...
            assert store.journal.held  # ...and keeps the connection
            go.set()
            assert thread.done.wait(10)
        await asyncio.sleep(0)
        assert second.done and second.error is None
        store.commit()
        assert not store.journal.held
