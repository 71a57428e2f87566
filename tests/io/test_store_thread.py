"""The store's thread and the event loop on the one connection (issue 29): a pass (with the
desk snapshot it may store first) holds the connection until the owner takes it back, and
nothing of the owner's touches SQLite meanwhile. Real files, a real thread and a real loop;
the thread is held mid-pass by SQLite's progress handler, so the interleaving is the test's."""

from __future__ import annotations

import asyncio
import sqlite3
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from solver.io.store.checkpoint import Checkpointer
from solver.io.store.sqlite_store import Store, StoreError
from tests.io.store_helpers import ACCOUNT, append_quotes, killed_owner, record, signed_quote


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
            assert first.done.is_set() and not second.done.is_set() and store.journal.held
            for _ in range(3):
                await asyncio.sleep(0)  # the first pass's callback runs
            assert not thread.done.is_set()  # the second pass is under way...
            assert store.journal.held  # ...and keeps the connection
            go.set()
            assert thread.done.wait(10)
        await asyncio.sleep(0)
        assert second.done.is_set() and second.error is None
        store.commit()
        assert not store.journal.held


def test_a_snapshot_position_is_refused_while_a_loss_waits_for_the_executor(
    tmp_path: Path,
) -> None:
    """A commit the store made aside (a status read, the projection) failed: the facts the
    driver appended were rolled back, and the desk holds them. The journal gives no snapshot
    position until the driver's own commit said so (as PostgreSQL's): the position would not
    cover facts the snapshot's state has, and asking must not take the loss from the driver's
    next commit, which would then succeed and send answers that are not in the journal."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("a"))
        store._conn.execute(
            "CREATE TRIGGER full BEFORE INSERT ON journal "
            "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
        append_quotes(store, signed_quote("b"))  # its answer waits for the driver's commit
        with pytest.raises(StoreError, match="disk full"):
            store.project()  # a commit made aside
        store._conn.execute("DROP TRIGGER full")  # the disk has room again
        with pytest.raises(StoreError):
            store.journal.snapshot_position()
        with pytest.raises(StoreError, match="disk full"):
            store.journal.commit()  # "b" is not in the journal: its answer must not leave
        assert store.journal.snapshot_position() == 1


def lose_b_then_append_c(store: Store) -> None:
    """ "a" committed; "b" appended, then lost by a commit made aside (the disk full for it);
    "c" appended after the loss, the driver's commit still to come."""
    record(store, signed_quote("a"))
    store._conn.execute(
        "CREATE TRIGGER full BEFORE INSERT ON journal BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    )
    append_quotes(store, signed_quote("b"))
    with pytest.raises(StoreError, match="disk full"):
        store.project()  # a commit made aside: "b" is gone
    store._conn.execute("DROP TRIGGER full")
    append_quotes(store, signed_quote("c"))  # decided after the loss


def test_after_a_loss_the_drivers_commit_writes_nothing_it_appends_it_all_again(
    tmp_path: Path,
) -> None:
    """The driver's commit that reports a loss (a commit made aside failed) fails; the driver
    then appends again every fact it had appended since its last commit (the executor's
    outbox), those after the loss too. So that commit must write none of them, as
    PostgreSQL's: else those after the loss are in the journal twice, and a restart applies
    them twice."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        lose_b_then_append_c(store)
        with pytest.raises(StoreError, match="disk full"):
            store.journal.commit()
        append_quotes(store, signed_quote("b"), signed_quote("c"))  # the driver's again
        store.journal.commit()
        ids = [getattr(fact, "quote_id", "") for fact in store.journal.load()[1]]
        assert ids == ["a", "b", "c"]


_DIE_ONCE_MOVED = textwrap.dedent(
    """
    import os, sys
    from solver.io.store.spill import Spill
    from solver.io.store.sqlite_store import Store
    from tests.io.store_helpers import ACCOUNT, append_quotes, checkpointed, record, signed_quote
    from tests.io.test_store_owner import pass_started

    store = Store(sys.argv[1], account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=1)
    record(store, signed_quote("a"))
    assert pass_started(store)
    store.checkpoints.pacing.min_entries = 1000  # and no other after it
    append_quotes(store, signed_quote("b"), signed_quote("c"))
    store.journal.commit()  # spilled
    assert checkpointed(store) and not store.journal.held
    Spill.emptied = lambda self: os.kill(os.getpid(), 9)  # the death, right after the COMMIT
    append_quotes(store, signed_quote("d"))
    print("moving", flush=True)
    store.journal.commit()
    """
)


def test_an_owner_killed_once_its_spill_was_moved_leaves_each_row_in_the_journal_once(
    tmp_path: Path,
) -> None:
    """``kill -9`` after the commit that moved the spilled rows into the journal, before the
    file was emptied: the next owner finds the rows in the journal and in the file. It must
    not insert them again (a restart would apply those facts twice)."""
    db = tmp_path / "bot.sqlite"
    killed_owner(_DIE_ONCE_MOVED, db, "moving")
    assert Path(f"{db}-spill").stat().st_size > 0
    with Store(db, account=ACCOUNT) as store:
        ids = [getattr(fact, "quote_id", "") for fact in store.journal.load()[1]]
        assert ids == ["a", "b", "c", "d"]
    assert not Path(f"{db}-spill").exists()


def test_a_spill_file_not_emptied_after_its_move_is_dropped_up_to_the_rows_still_out(
    tmp_path: Path,
) -> None:
    """A file the owner could not empty after moving its rows (logged) gets the next pass's
    rows after them: the next owner moves only those the journal does not hold."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("a"), signed_quote("b"))  # "b": moved after the first pass
    with Store(db, create=False, checkpoint_every_s=None) as reader:
        rows = reader._conn.execute("SELECT body FROM journal").fetchall()
    a, b = [orjson.loads(body) for (body,) in rows]
    lines = [{"after": 1}, [0, "quote_opened", orjson.dumps(b).decode()], {"after": 2}]
    lines.append([0, "quote_opened", orjson.dumps({**a, "quote_id": "c"}).decode()])
    Path(f"{db}-spill").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    with Store(db, account=ACCOUNT) as store:
        ids = [getattr(fact, "quote_id", "") for fact in store.journal.load()[1]]
        assert ids == ["a", "b", "c"]


def test_while_a_loss_waits_the_stores_own_commits_leave_the_drivers_rows_alone(
    tmp_path: Path,
) -> None:
    """The same loss, and a commit the store makes for itself (the next projection slice)
    before the driver's: it must not write what the driver appended after the loss either,
    which the driver appends again once its commit failed."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        lose_b_then_append_c(store)
        store.project()  # the store's next commit, before the driver's
        with pytest.raises(StoreError, match="disk full"):
            store.journal.commit()
        append_quotes(store, signed_quote("b"), signed_quote("c"))
        store.journal.commit()
        ids = [getattr(fact, "quote_id", "") for fact in store.journal.load()[1]]
        assert ids == ["a", "b", "c"]
