"""The store has one owner (issue 24): exclusive locking, a lock file naming the holder, a
stale holder taken over, no memory-mapped ``-shm``, the writer's own checkpoints, and a
consistent backup made by the owner. Real files and real processes: a second process opens
the store while this one holds it."""

from __future__ import annotations

import os
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from solver.io.store.owner import StoreBusyError, lock_path, read_holder
from solver.io.store.sqlite_store import Store, StoreError
from tests.chattr import immutable, require_chattr, store_paths
from tests.io.store_helpers import (
    ACCOUNT,
    append_quotes,
    checkpointed,
    committed_view,
    killed_owner,
    record,
    signed_quote,
)

REPO = Path(__file__).resolve().parents[2]


def _open_elsewhere(path: Path, *, create: bool) -> subprocess.CompletedProcess[str]:
    """Open the store from another process, as a second bot (or a reader) would."""
    code = textwrap.dedent(
        """
        import sys
        from solver.io.store.sqlite_store import Store, StoreError
        try:
            Store(sys.argv[1], create=sys.argv[2] == "1", busy_timeout_ms=100).close()
        except StoreError as exc:
            print(exc)
            sys.exit(2)
        print("opened")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path), "1" if create else "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_second_opener_is_refused_naming_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        append_quotes(store, signed_quote("q1"))
        store.commit()
        holder = read_holder(db)
        assert holder is not None and holder.pid == os.getpid()
        assert holder.host == socket.gethostname()
        mode = stat.S_IMODE(lock_path(db).stat().st_mode)
        assert mode == 0o600, oct(mode)
        for create in (True, False):  # a second bot, and a reader
            done = _open_elsewhere(db, create=create)
            assert done.returncode == 2, done.stdout + done.stderr
            assert f"in use by a running bot: pid {os.getpid()} on {holder.host}" in done.stdout
        # No shared-memory WAL index beside the store: nothing is memory-mapped (SIGBUS).
        assert not Path(f"{db}-shm").exists()
    assert not lock_path(db).exists()  # a clean close removes it
    assert _open_elsewhere(db, create=False).stdout.strip() == "opened"


def test_a_stale_holder_after_kill_9_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "bot.sqlite"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        stderr=subprocess.STDOUT,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "holding"
            with pytest.raises(StoreBusyError, match=f"pid {child.pid}"):
                Store(db, account=ACCOUNT, busy_timeout_ms=100)
            child.kill()
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
    stale = read_holder(db)
    assert stale is not None and stale.pid == child.pid and stale.alive() is False
    with Store(db, account=ACCOUNT) as store:  # the lock is free: taken over
        holder = read_holder(db)
        assert holder is not None and holder.pid == os.getpid()
        assert [q.quote_id for q in store.quotes_since()] == ["k1"]


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from solver.io.store.sqlite_store import Store
    from tests.io.store_helpers import ACCOUNT, append_quotes, signed_quote
    store = Store(sys.argv[1], account=ACCOUNT)
    append_quotes(store, signed_quote("k1"))
    store.commit()
    print("holding", flush=True)
    time.sleep(600)
    """
)


def test_a_lock_held_by_another_program_is_said_so(tmp_path: Path) -> None:
    """The lock file names a process that is gone, but the lock is held (here: a plain
    SQLite connection in exclusive mode): not taken over, and the message says why."""
    db = tmp_path / "bot.sqlite"
    Store(db, account=ACCOUNT).close()
    lock_path(db).write_bytes(
        orjson.dumps({"pid": 2**22 + 7, "host": socket.gethostname(), "started_at": "x"})
    )
    other = sqlite3.connect(db, isolation_level=None)
    try:
        other.execute("PRAGMA locking_mode = EXCLUSIVE")
        other.execute("SELECT COUNT(*) FROM journal").fetchone()
        with pytest.raises(StoreBusyError, match=r"another program.*not running"):
            Store(db, account=ACCOUNT, busy_timeout_ms=50)
    finally:
        other.close()


def test_the_writer_checkpoints_itself_when_enough_was_written(tmp_path: Path) -> None:
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=50) as store:
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        append_quotes(store, *(signed_quote(f"a{i}") for i in range(20)))
        assert not store.checkpoint_if_due()  # 20 new entries: not yet
        append_quotes(store, *(signed_quote(f"b{i}") for i in range(40)))
        size = db.stat().st_size
        assert checkpointed(store)
        assert db.stat().st_size > size  # pages reached the database file
        wal = Path(f"{db}-wal").stat().st_size
        append_quotes(store, signed_quote("c"))
        store.commit()
        assert Path(f"{db}-wal").stat().st_size <= wal  # written from its start again
        assert store.checkpoints is not None and store.checkpoints.passes == 1


def pass_started(store: Store) -> bool:
    """Ask for a pass until one runs in the store's thread (the WAL's flush comes first)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        store.checkpoint_if_due()
        if store.checkpoints is not None and store.checkpoints.passing:
            return True
        time.sleep(0.001)
    return False


def test_a_commit_during_a_pass_goes_to_the_spill_file_and_joins_the_journal_after(
    tmp_path: Path,
) -> None:
    """The pass runs in the store's thread on the owner's connection: a commit meanwhile does
    not wait for it (issue 29: that wait was the bot's p99 at 2,000/s). Its rows go to
    ``<store>-spill`` with one write — in the OS page cache once it returned, as a WAL commit
    under ``synchronous=NORMAL`` — and join the journal, in order, at the first commit after
    the pass; the file is then empty."""
    db = tmp_path / "bot.sqlite"
    spill = Path(f"{db}-spill")
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=1) as store:
        record(store, signed_quote("a"))
        assert pass_started(store)  # once the thread flushed the WAL, the pass starts in it
        assert store.checkpoints is not None
        store.checkpoints.pacing.min_entries = 1000  # and no other after it
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        append_quotes(store, signed_quote("b"), signed_quote("c"))
        store.journal.commit()  # the executor's group commit, during the pass
        mine = [sql for sql in statements if not sql.startswith("PRAGMA")]  # the pass's own
        assert store.journal.held and mine == []  # the commit did not touch SQLite
        head, *lines = [orjson.loads(line) for line in spill.read_bytes().splitlines()]
        assert head == {"after": 1}  # the journal's last entry when the pass began
        assert [orjson.loads(body)["quote_id"] for _, _, body in lines] == ["b", "c"]
        assert checkpointed(store)  # the owner takes the connection back at a next look
        assert not store.journal.held
        append_quotes(store, signed_quote("d"))
        store.journal.commit()  # the spilled rows go first, then this one
        with committed_view(db) as conn:  # what a kill -9 now would leave
            rows = conn.execute("SELECT body FROM journal ORDER BY seq").fetchall()
        assert [orjson.loads(body)["quote_id"] for (body,) in rows] == ["a", "b", "c", "d"]
        assert spill.stat().st_size == 0 and store.checkpoints.passes == 1
    assert not spill.exists()  # a clean close leaves no spill file


def test_no_snapshot_position_is_given_while_a_pass_holds_the_connection(
    tmp_path: Path,
) -> None:
    """A desk snapshot captured during a pass includes the facts whose rows wait in the
    spill file, but the journal table's position does not: a restart would apply them a
    second time after it. While a pass holds the connection the journal gives no position
    (None: ask again later); after it, the spilled rows are in and counted."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=1) as store:
        record(store, signed_quote("a"))
        assert pass_started(store)
        assert store.checkpoints is not None
        store.checkpoints.pacing.min_entries = 1000  # and no other after it
        append_quotes(store, signed_quote("b"))
        store.journal.commit()  # spilled
        assert store.journal.snapshot_position() is None
        assert checkpointed(store)
        assert store.journal.snapshot_position() == 2  # "b" joined the journal first


def _store_with_two_snapshots(store: Store) -> int:
    """Snapshots 1 and 2 at positions 1 and 2, a third fact after them; its position."""
    for n, quote_id in ((1, "a"), (2, "x")):
        record(store, signed_quote(quote_id))
        store.journal.write_snapshot({"n": n}, 0)
    record(store, signed_quote("y"))
    position = store.journal.snapshot_position()
    assert position == 3
    return position


def _snapshots_n(store: Store) -> list[int]:
    rows = store._conn.execute("SELECT body FROM desk_snapshots ORDER BY seq").fetchall()
    return [orjson.loads(body)["n"] for (body,) in rows]


def test_a_desk_snapshot_is_stored_in_the_stores_thread_while_the_owner_commits(
    tmp_path: Path,
) -> None:
    """The insert of the soak's 8 MB snapshot held the event loop 20–80 ms: the store hands
    it to its checkpointer's thread, which writes it and drops the older ones (all but the
    latest two) in one transaction, then checkpoints. The owner's commits meanwhile go to the
    spill file without waiting, and join the journal after, in order."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        position = _store_with_two_snapshots(store)
        text = orjson.dumps({"n": 3, "pad": "x" * 4_000_000})
        job = store.store_snapshot(text, 0, position)
        assert store.journal.held  # the thread has the connection
        append_quotes(store, signed_quote("b"))
        store.journal.commit()  # the executor's group commit: to the spill file
        assert job.done.wait(10) and job.error is None and job.dropped
        store.commit()  # the owner takes the connection back; the spilled row goes in
        assert _snapshots_n(store) == [2, 3]
        with committed_view(db) as conn:
            bodies = [b for (b,) in conn.execute("SELECT body FROM journal ORDER BY seq")]
        assert [orjson.loads(b)["quote_id"] for b in bodies] == ["a", "x", "y", "b"]


def test_a_snapshot_the_thread_cannot_write_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """A failed insert (a full disk, here a trigger) is the job's error, for the caller's
    ``store_error`` pause; the older snapshots stay, and the store goes on committing."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT) as store:
        position = _store_with_two_snapshots(store)
        store._conn.execute(
            "CREATE TRIGGER full BEFORE INSERT ON desk_snapshots "
            "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
        job = store.store_snapshot(orjson.dumps({"n": 3}), 0, position)
        assert job.done.wait(10) and job.error is not None and "disk full" in job.error
        assert not job.dropped
        store.commit()
        assert _snapshots_n(store) == [1, 2]
        record(store, signed_quote("b"))  # commits as before


_SPILL_AND_DIE = textwrap.dedent(
    """
    import os, sys, time
    from solver.io.store.sqlite_store import Store
    from tests.io.store_helpers import ACCOUNT, append_quotes, record, signed_quote
    from tests.io.test_store_owner import pass_started

    store = Store(sys.argv[1], account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=1)
    record(store, signed_quote("a"))
    assert pass_started(store)
    append_quotes(store, signed_quote("b"), signed_quote("c"))
    store.journal.commit()  # spilled
    assert store.journal.held and store.journal.spill.spilled == 2
    with open(f"{sys.argv[1]}-spill", "ab") as torn:  # a write cut short by the death
        torn.write(b'[1,"quote_opened","{')
    print("spilled", flush=True)
    os.kill(os.getpid(), 9)
    """
)


def test_rows_spilled_by_an_owner_killed_during_a_pass_are_in_the_next_owners_journal(
    tmp_path: Path,
) -> None:
    """``kill -9`` while rows wait in the spill file: the next owner moves them into the
    journal before it reads anything (a restart rebuilds the desk with them), drops a last
    line cut short (its answers never left) with a warning, and removes the file."""
    db = tmp_path / "bot.sqlite"
    killed_owner(_SPILL_AND_DIE, db, "spilled")
    assert Path(f"{db}-spill").exists()
    with Store(db, account=ACCOUNT) as store:
        _, facts = store.journal.load()
        assert [getattr(fact, "quote_id", "") for fact in facts] == ["a", "b", "c"]
        assert store._conn.execute("SELECT COUNT(*) FROM quotes").fetchone()[0] == 3
    assert not Path(f"{db}-spill").exists()


def test_a_backup_while_the_store_is_held_is_a_consistent_database(tmp_path: Path) -> None:
    db = tmp_path / "bot.sqlite"
    copy = tmp_path / "copies" / "bot.bak"
    copy.parent.mkdir()
    with Store(db, account=ACCOUNT) as store:
        append_quotes(store, *(signed_quote(f"q{i}") for i in range(30)))
        store.commit()
        append_quotes(store, signed_quote("uncommitted-yet"))  # committed by the backup
        started = time.perf_counter()
        size = store.backup(copy)
        assert time.perf_counter() - started < 10
        assert size == copy.stat().st_size
        with pytest.raises(StoreError, match="exists already"):
            store.backup(copy)
    assert sorted(p.name for p in copy.parent.iterdir()) == ["bot.bak"]  # no -wal, no leftovers
    with Store(copy, create=False) as opened:
        assert len(opened.journal.load()[1]) == 31
    with Store(copy) as restored:  # as a bot started on it: it projects the journal
        assert len(restored.quotes_since(limit=100)) == 31


def test_a_failed_store_commit_fails_the_journals_next_commit(tmp_path: Path) -> None:
    """The store committed the driver's open transaction for its own reasons (the projection,
    a status read) and that commit failed: what the driver appended was rolled back, so the
    driver's own commit must fail too — else it sends answers that are not in the journal."""
    db = tmp_path / "store" / "bot.sqlite"
    db.parent.mkdir()
    require_chattr(db.parent)
    with Store(db, account=ACCOUNT) as store:
        record(store, signed_quote("q1"))
        append_quotes(store, signed_quote("q2"))  # appended, not committed
        with immutable(store_paths(db)), pytest.raises(StoreError):
            store.project()
        with pytest.raises(StoreError, match="cannot commit the journal"):
            store.journal.commit()
        store.journal.commit()  # said once: the store works again
        assert [type(x).__name__ for x in store.journal.load()[1]] == ["QuoteOpened"]


def test_the_wal_flush_ahead_of_a_pass_keeps_the_lock(tmp_path: Path) -> None:
    """The WAL is flushed from a thread on a descriptor of its own (the database's own file is
    never opened beside SQLite: closing such a descriptor drops the process's lock)."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=1) as store:
        for i in range(3):
            record(store, signed_quote(f"q{i}"))
            assert checkpointed(store)
        done = _open_elsewhere(db, create=False)
        assert done.returncode == 2 and "in use by a running bot" in done.stdout, done.stdout


def test_the_projection_and_the_pruning_wait_a_tick_while_a_pass_has_the_connection(
    tmp_path: Path,
) -> None:
    """The ticker's slices of projection and pruning do not wait for a pass on the event loop:
    they do nothing until it ended (and go on at a next tick)."""
    db = tmp_path / "bot.sqlite"
    with Store(db, account=ACCOUNT, checkpoint_every_s=0.0, checkpoint_min_entries=1) as store:
        record(store, signed_quote("a"))
        assert pass_started(store)
        assert store.checkpoints is not None
        store.checkpoints.pacing.min_entries = 1000
        append_quotes(store, signed_quote("b"))
        assert store.project() == 0
        step = store.prune(datetime.now(UTC))
        assert not step.done and step.rows == 0
        assert checkpointed(store)
        assert store.project() == 1  # the held entry, once the pass ended
