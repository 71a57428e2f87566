"""The live bot's upkeep off the quote path: when a desk snapshot is taken, and the garbage
collector at the ticker's pace (issue 11: no event-loop stall over 5 ms)."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import re
import time
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from solver.config import load_bot_config
from solver.core import facts as f
from solver.core.clock import MINUTE, SECOND, from_micros, micros, span
from solver.core.lifecycle import Quote
from solver.io.store import retention
from solver.protocol.keys import SecretKey
from solver.protocol.quote_request import QuoteRequest
from solver.runtime import bot as live
from solver.runtime import desk_snapshots, heap, snapshot_slices, upkeep
from solver.runtime.gc_pacer import GcPacer
from tests.io.store_helpers import append_quotes, signed_quote

ROOT = Path(__file__).resolve().parents[2]
NOW = micros(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[live.LiveBot]:
    key = SecretKey.generate()
    config = load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {
            "account.id": key.public_key.implicit_account_id(),
            "storage.path": str(tmp_path / "bot.sqlite"),
            "storage.lost_quote_sample_rate": 1.0,  # every lost row: retention counts them
            "metrics.listen": None,
        }
    )
    made = live.LiveBot(config, key)
    yield made
    assert made.store is not None
    made.store.close()


def _open_quotes(bot: live.LiveBot, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        bot.desk.book.add(
            Quote(
                f"q{i}",
                "a",
                "b",
                1,
                1,
                0,
                NOW + 5 * SECOND,
                quote_hash=f"h{i}",
                nonce=bytes(32),
                created_at=NOW,
            )
        )


def _snapshots(bot: live.LiveBot) -> int:
    assert bot.store is not None
    # The bot's own connection: it holds the store alone (issue 24).
    return int(bot.store._conn.execute("SELECT COUNT(*) FROM desk_snapshots").fetchone()[0])


def _made(bot: live.LiveBot) -> int:
    """The ticks' slices of the snapshot being made, until it is stored; how many. Each tick
    the store is asked for a checkpoint too, as the ticker does: a snapshot handed over while
    a pass runs is stored by the next pass (no loop here to say the pass ended)."""
    slices = 0
    while bot.upkeep.snapshots.making:
        bot.upkeep.checkpoint()
        bot.upkeep.snapshots.slice()
        slices += 1
    return slices


def test_a_due_snapshot_waits_for_a_quiet_book(bot: live.LiveBot) -> None:
    assert bot.store is not None
    journal = bot.store.journal
    _open_quotes(bot, desk_snapshots.SNAPSHOT_QUIET_QUOTES + 1)
    journal.appended = desk_snapshots.SNAPSHOT_DUE_FACTS - 1
    bot.upkeep.snapshots.maybe_take(NOW)
    journal.appended = desk_snapshots.SNAPSHOT_DUE_FACTS
    bot.upkeep.snapshots.maybe_take(NOW)  # due, but the book is busy: it waits
    assert _snapshots(bot) == 0
    bot.desk.book.quotes.pop("q0")
    bot.upkeep.snapshots.maybe_take(NOW)  # quiet now
    _made(bot)
    assert _snapshots(bot) == 1
    assert (
        journal.appended == desk_snapshots.SNAPSHOT_DUE_FACTS
    )  # the count goes on (others read it)
    journal.append(f.PauseSet("*", "operator", "a fact after the snapshot", NOW))
    journal.commit()  # (a later journal position: a second snapshot row, not a replaced one)
    bot.store.commit()  # after the pass that stored the first (in the bot: a tick later)
    journal.appended += desk_snapshots.SNAPSHOT_DUE_FACTS - 2
    bot.upkeep.snapshots.maybe_take(NOW)  # counted from the last snapshot: not due yet
    assert _snapshots(bot) == 1
    journal.appended += 1
    bot.upkeep.snapshots.maybe_take(NOW)
    _made(bot)
    assert _snapshots(bot) == 2


def test_a_busy_book_is_snapshot_anyway_past_the_forced_count(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made in slices (one chunk of entries a slice here): the quotes answered meanwhile are
    not in it, they are facts after it."""
    assert bot.store is not None
    monkeypatch.setattr(snapshot_slices, "SLICE_S", 0.0)
    journal = bot.store.journal
    _open_quotes(bot, desk_snapshots.SNAPSHOT_QUIET_QUOTES * 4)
    journal.appended = desk_snapshots.SNAPSHOT_FORCED_FACTS - 1
    bot.upkeep.snapshots.maybe_take(NOW)
    assert _snapshots(bot) == 0
    journal.appended = desk_snapshots.SNAPSHOT_FORCED_FACTS
    bot.upkeep.snapshots.maybe_take(NOW)  # captured, made from the next tick on
    assert _snapshots(bot) == 0 and bot.upkeep.snapshots.making
    bot.upkeep.snapshots.maybe_take(NOW)  # one at a time: nothing more is captured meanwhile
    _open_quotes(bot, 1, first=desk_snapshots.SNAPSHOT_QUIET_QUOTES * 4)
    assert _made(bot) >= 5  # two chunks of quotes, the splice, the insert, the deletion
    assert _snapshots(bot) == 1
    doc, _ = bot.store.journal.load()
    assert doc is not None and len(doc["quotes"]) == desk_snapshots.SNAPSHOT_QUIET_QUOTES * 4


def test_a_snapshot_is_said_and_gives_the_freed_memory_back(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot's document and text are freed once it is written; the C heap's free pages
    then go back to the system (solver/runtime/heap.py), or each forced snapshot leaves more
    resident memory behind (the soak, issue 29)."""
    assert bot.store is not None
    calls: list[int] = []  # the snapshots written when it was called

    def give_back() -> bool:
        calls.append(_snapshots(bot))
        return True

    monkeypatch.setattr(heap, "give_back", give_back)
    bot.upkeep.snapshots.maybe_take(NOW)  # not due: nothing written, nothing to give back
    assert calls == []
    bot.store.journal.appended = desk_snapshots.SNAPSHOT_FORCED_FACTS
    with caplog.at_level(logging.INFO, logger="solver.bot"):
        bot.upkeep.snapshots.maybe_take(NOW)
        _made(bot)
    assert calls == [1]  # after the snapshot was written
    # Said, with what it held the loop for: the soak puts its memory steps beside these.
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("desk snapshot")]
    assert len(said) == 1
    facts = desk_snapshots.SNAPSHOT_FORCED_FACTS
    assert re.fullmatch(
        rf"desk snapshot: {facts} facts since the last, 0 open quotes, made in \d+ slices over "
        rf"\d+ ms, the loop held \d+ ms at most \(the longest slice \d+ ms, the insert \d+ ms, in the store's thread\)",
        said[0],
    )


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_the_paced_collector_frees_cycles_at_its_ticks_only() -> None:
    was = gc.isenabled()
    pacer = GcPacer(full_every_s=3600)
    pacer.start()
    try:
        assert not gc.isenabled()
        ref = _cycle()
        for _ in range(50_000):  # far past the automatic threshold: nothing collects it
            _Node()
        assert ref() is not None
        pacer.tick()
        assert ref() is None
        assert (pacer.passes, pacer.full_passes) == (1, 0)
        pacer.full_every_s = 0.0
        pacer.tick()
        assert pacer.full_passes == 1
    finally:
        pacer.stop()
        gc.unfreeze()
    assert gc.isenabled() == was
    pacer.tick()  # stopped: does nothing
    assert pacer.passes == 2


def test_a_request_sample_the_store_refuses_is_counted_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``storage.sample_requests`` keeps a sample of requests; a sample the store refuses (a
    real SQLite failure: a trigger aborts the insert) costs the quote nothing, is counted, and
    is logged the first time."""
    key = SecretKey.generate()
    config = load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {
            "account.id": key.public_key.implicit_account_id(),
            "storage.path": str(tmp_path / "bot.sqlite"),
            "storage.sample_requests": 1.0,
            "metrics.listen": None,
        }
    )
    bot = live.LiveBot(config, key)
    assert bot.store is not None and bot.inbound.sample_requests
    bot.store._conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON requests BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    )
    pair = config.pairs[0]
    request = QuoteRequest("sampled-1", pair.quote, pair.base, True, 1000, 60_000)
    with caplog.at_level("WARNING", logger="solver.store"):
        bot.inbound.on_quote(request)
        bot.store.commit()
        bot.inbound.on_quote(request._replace(quote_id="sampled-2"))
        bot.store.commit()
    assert bot.store.journal.extra_failed == 2
    said = [r.getMessage() for r in caplog.records if "request sample not stored" in r.getMessage()]
    assert len(said) == 1 and "disk full" in said[0]
    assert bot.desk.stats.requests == 2  # both requests went through the desk
    bot.store.close()


async def _progress_after_one_call(bot: live.LiveBot, cpu_share: float) -> tuple[int, int]:
    """Journal entries left after one ``project()`` call, and after the loop has turned a few
    times more (extra slices, when any, are queued on the loop)."""
    assert bot.store is not None
    bot.upkeep._cpu_share = cpu_share
    bot.upkeep.project()
    after_call = bot.store.unprojected()
    for _ in range(upkeep.PROJECT_SLICES_BEHIND + 2):
        await asyncio.sleep(0)
    return after_call, bot.store.unprojected()


@pytest.mark.parametrize(("cpu_share", "more_slices"), [(0.9, False), (0.0, True)])
async def test_a_busy_process_projects_one_slice_an_idle_one_catches_up(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch, cpu_share: float, more_slices: bool
) -> None:
    """Behind the journal, the projection takes one slice a tick while the process is busy
    (the answers need the CPU) and more, queued on the loop, when it has CPU to spare."""
    assert bot.store is not None
    monkeypatch.setattr(upkeep, "PROJECT_BUDGET_S", 0.0)  # a slice: one entry, whatever the machine
    append_quotes(
        bot.store, *(signed_quote(f"p{i}") for i in range(upkeep.PROJECT_BEHIND_ENTRIES + 50))
    )
    bot.store.commit()
    after_call, later = await _progress_after_one_call(bot, cpu_share)
    assert (later < after_call) is more_slices
    assert later > 0  # the slices are bounded: a backlog is caught up over several ticks


async def test_a_saturated_process_projects_a_slice_every_few_ticks(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At full CPU the quote path has the core: one slice every
    ``PROJECT_SATURATED_EVERY_TICKS`` ticks, so the query tables still move, slowly."""
    assert bot.store is not None
    monkeypatch.setattr(upkeep, "PROJECT_BUDGET_S", 0.0)  # a slice: one entry
    append_quotes(bot.store, *(signed_quote(f"s{i}") for i in range(50)))
    bot.store.commit()
    left = [bot.store.unprojected()]
    for _ in range(2 * upkeep.PROJECT_SATURATED_EVERY_TICKS):
        bot.upkeep._cpu_share = 1.0
        bot.upkeep.project()
        left.append(bot.store.unprojected())
    moved = [i for i in range(1, len(left)) if left[i] < left[i - 1]]
    assert moved == [upkeep.PROJECT_SATURATED_EVERY_TICKS, 2 * upkeep.PROJECT_SATURATED_EVERY_TICKS]
    bot.upkeep._cpu_share = 0.3  # not saturated: a slice every tick again
    bot.upkeep.project()
    assert bot.store.unprojected() < left[-1]


def test_caught_up_the_projection_waits_for_a_batch_or_its_longest_wait(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a low rate a slice every tick was mostly its fixed cost (~300 µs for a dozen
    entries): caught up, the next slice waits for ``PROJECT_BATCH_ENTRIES`` new entries or
    ``PROJECT_MAX_WAIT_S``, whichever first. Time is an argument."""
    _slices_end_caught_up(monkeypatch)
    store = bot.store
    assert store is not None
    t0 = micros(datetime(2026, 11, 27, tzinfo=UTC))
    append_quotes(store, *(signed_quote(f"w{i}") for i in range(3)))
    store.commit()
    bot.upkeep.project_when_due(t0)  # the first slice: nothing to wait for
    assert store.unprojected() == 0
    append_quotes(store, *(signed_quote(f"x{i}") for i in range(5)))
    store.commit()
    wait = span(upkeep.PROJECT_MAX_WAIT_S)
    bot.upkeep.project_when_due(t0 + wait - 1)  # a few new entries, the wait not over
    assert store.unprojected() == 5
    bot.upkeep.project_when_due(t0 + wait)  # the longest wait is over
    assert store.unprojected() == 0
    batch = upkeep.PROJECT_BATCH_ENTRIES
    append_quotes(store, *(signed_quote(f"y{i}") for i in range(batch - 1)))
    store.commit()
    bot.upkeep.project_when_due(t0 + wait + 1)
    assert store.unprojected() == batch - 1  # one short of a batch: waits
    append_quotes(store, signed_quote("y-last"))
    store.commit()
    bot.upkeep.project_when_due(t0 + wait + 2)  # a batch: at once
    assert store.unprojected() < batch


def _slices_end_caught_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice's budget (``PROJECT_BUDGET_S``, 0.5 ms) is wall time: with both cores busy a
    slice of three entries ran out of it after one (a full suite on a loaded machine). These
    tests are about when a slice is due, not how long it may take: their slices catch up."""
    monkeypatch.setattr(upkeep, "PROJECT_BUDGET_S", 60.0)


def test_a_slice_a_checkpoint_pass_kept_out_is_not_taken_for_caught_up(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due slice that found the connection with a checkpoint pass projected nothing: the
    next tick tries again, rather than waiting for a batch or the longest wait as if the
    query tables had caught up."""
    _slices_end_caught_up(monkeypatch)
    store = bot.store
    assert store is not None
    t0 = micros(datetime(2026, 11, 27, tzinfo=UTC))
    append_quotes(store, signed_quote("c0"))
    store.commit()
    bot.upkeep.project_when_due(t0)
    append_quotes(store, *(signed_quote(f"c{i}") for i in range(1, 6)))
    store.commit()
    wait = span(upkeep.PROJECT_MAX_WAIT_S)
    store.journal.held = True  # a checkpoint pass has the connection
    bot.upkeep.project_when_due(t0 + wait)  # due by time: the store cannot project now
    assert store.unprojected() == 5
    store.journal.held = False  # the pass ended
    bot.upkeep.project_when_due(t0 + wait + 1)  # the next tick, not a batch or 250 ms later
    assert store.unprojected() == 0


async def test_a_tick_turns_the_loop_between_its_parts(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The desk's tick, a projection slice and the gauges each run between two turns of the
    loop: a request arriving meanwhile waits for one part, not the whole tick. The tick is
    stepped by hand: each ``send`` is the loop taking it up again."""
    store = bot.store
    assert store is not None
    append_quotes(store, *(signed_quote(f"t{i}") for i in range(upkeep.PROJECT_BATCH_ENTRIES)))
    store.commit()
    order: list[str] = []
    project_when_due = bot.upkeep.project_when_due

    def project(now: int) -> bool:
        order.append("project")
        return project_when_due(now)

    monkeypatch.setattr(bot.upkeep, "project_when_due", project)
    monkeypatch.setattr(bot.upkeep, "checkpoint", lambda: order.append("checkpoint"))
    monkeypatch.setattr(bot.upkeep, "measure_cpu", lambda: None)  # not saturated: a slice runs
    tick = bot.upkeep.tick(upkeep.GAUGES_EVERY_TICKS)  # gauges are due too
    while True:
        try:
            tick.send(None)
        except StopIteration:
            break
        order.append("turn")
    assert order == ["turn", "project", "turn", "checkpoint", "turn"]
    assert store.unprojected() < upkeep.PROJECT_BATCH_ENTRIES  # the slice ran


def test_the_gauges_say_how_far_the_query_tables_are_behind(
    bot: live.LiveBot, caplog: pytest.LogCaptureFixture
) -> None:
    """``solver_query_tables_behind``: the journal entries not projected yet, refreshed with
    the gauges; a store that cannot say is logged and read as 0, the gauges still refresh."""
    assert bot.store is not None
    append_quotes(bot.store, *(signed_quote(f"g{i}") for i in range(7)))
    bot.store.commit()

    def behind() -> float:
        value = bot.metrics.registry.get_sample_value("solver_query_tables_behind")
        assert value is not None
        return value

    bot.operator.refresh_metrics()
    assert behind() == 7
    bot.store.project()
    bot.operator.refresh_metrics()
    assert behind() == 0
    append_quotes(bot.store, signed_quote("g7"))
    bot.store.commit()
    bot.operator.refresh_metrics()
    assert behind() == 1
    conn = bot.store._conn
    conn.execute("ALTER TABLE projection RENAME TO projection_away")  # the store cannot say
    with caplog.at_level("WARNING", logger="solver.bot"):
        bot.operator.refresh_metrics()
        bot.operator.refresh_metrics()  # ten a second live: said once, not at every refresh
    conn.execute("ALTER TABLE projection_away RENAME TO projection")
    assert behind() == 0
    said = [r for r in caplog.records if "cannot read how far" in r.getMessage()]
    assert len(said) == 1
    bot.operator.refresh_metrics()  # works again: a later failure is said again
    assert behind() == 1 and not bot.operator._store_errors


def _old_lost_quotes(bot: live.LiveBot, prefix: str, count: int) -> None:
    assert bot.store is not None
    old = from_micros(NOW) - timedelta(days=40)
    quotes = [signed_quote(f"{prefix}{i}", at=old) for i in range(count)]
    append_quotes(bot.store, *quotes)
    ids = tuple(q[0].quote_id for q in quotes)
    bot.store.journal.append(f.QuotesLost(ids, micros(old) + MINUTE, "expired"))
    bot.store.project()


def _quotes(bot: live.LiveBot) -> int:
    assert bot.store is not None
    return int(bot.store._conn.execute("SELECT COUNT(*) FROM quotes").fetchone()[0])


def test_the_store_forgets_old_quotes_a_budget_a_tick_then_waits_for_the_next_pass(
    bot: live.LiveBot, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``storage.retain_days`` (30 in the default config): quotes never traded and older go,
    a chunk a tick while there are more, one line when the pass is done; the next pass comes
    ``PRUNE_EVERY_S`` later, and none runs while the process is saturated."""
    monkeypatch.setattr(upkeep, "PRUNE_BUDGET_S", 0.0)  # a tick: one chunk, whatever the machine
    monkeypatch.setattr(retention, "CHUNK", 4)
    assert bot.config.storage.retain_days == 30
    _old_lost_quotes(bot, "a", 10)
    bot.upkeep._cpu_share = 1.0  # saturated: the quote path first
    bot.upkeep.maybe_prune(NOW)
    assert _quotes(bot) == 10
    bot.upkeep._cpu_share = 0.2
    left = []
    with caplog.at_level("INFO", logger="solver.bot"):
        for tick in range(4):
            bot.upkeep.maybe_prune(NOW + tick * SECOND)
            left.append(_quotes(bot))
    assert left == [6, 2, 0, 0]
    said = [r.getMessage() for r in caplog.records if "forgot" in r.getMessage()]
    assert said == [
        "store: forgot what is older than 30 days: 10 quotes never traded, 0 journal entries, "
        "0 balance snapshots, 0 request samples"
    ]
    _old_lost_quotes(bot, "b", 3)
    bot.upkeep.maybe_prune(NOW + span(upkeep.PRUNE_EVERY_S - 1))  # not due yet
    assert _quotes(bot) == 3
    bot.upkeep.maybe_prune(NOW + span(upkeep.PRUNE_EVERY_S + 5))
    assert _quotes(bot) == 0


def test_a_null_retention_keeps_everything(tmp_path: Path) -> None:
    key = SecretKey.generate()
    config = load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {
            "account.id": key.public_key.implicit_account_id(),
            "storage.path": str(tmp_path / "keep.sqlite"),
            "storage.retain_days": None,
            "storage.lost_quote_sample_rate": 1.0,
            "metrics.listen": None,
        }
    )
    made = live.LiveBot(config, key)
    try:
        _old_lost_quotes(made, "k", 5)
        made.upkeep.maybe_prune(NOW)
        assert _quotes(made) == 5
    finally:
        assert made.store is not None
        made.store.close()


def test_the_gauges_say_how_large_the_store_is_and_how_much_disk_is_left(
    bot: live.LiveBot, caplog: pytest.LogCaptureFixture
) -> None:
    """``solver_store_bytes`` (database and WAL) and ``solver_store_disk_free_bytes`` (for the
    ``SolverDiskFilling`` alert); a store that cannot be read is said once and left unknown."""
    assert bot.store is not None
    path = bot.store.path
    append_quotes(bot.store, *(signed_quote(f"d{i}") for i in range(50)))
    bot.store.commit()

    def gauge(name: str) -> float:
        value = bot.metrics.registry.get_sample_value(name)
        assert value is not None
        return value

    bot.operator.refresh_metrics()
    wal = Path(f"{path}-wal")
    on_disk = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    assert gauge("solver_store_bytes") == on_disk > 50 * 1000  # the signed answers are there
    volume = os.statvfs(path.parent)
    free = gauge("solver_store_disk_free_bytes")
    assert abs(free - volume.f_bavail * volume.f_frsize) < 64 << 20  # the disk moves a little
    moved = path.with_name("moved.sqlite")
    path.rename(moved)  # the store cannot be read any more
    try:
        with caplog.at_level("WARNING", logger="solver.bot"):
            bot.operator.refresh_metrics()
            bot.operator.refresh_metrics()
        said = [r for r in caplog.records if "cannot read the size" in r.getMessage()]
        assert len(said) == 1
        assert math.isnan(gauge("solver_store_disk_free_bytes"))
    finally:
        moved.rename(path)


async def test_the_ticker_says_how_long_the_loop_was_held(bot: live.LiveBot) -> None:
    """``solver_loop_lag_seconds``: each tick records how late its 20 ms sleep woke. A
    callback that holds the loop for 80 ms shows as a lag past 50 ms, and as held by the bot
    (``solver_loop_lag_held_seconds``: a blocking call is the bot's, not the machine's)."""
    registry = bot.metrics.registry

    def sample(name: str, family: str = "solver_loop_lag_seconds", **labels: str) -> float:
        return registry.get_sample_value(f"{family}_{name}", labels) or 0.0

    stop = asyncio.Event()
    ticker = asyncio.create_task(bot.upkeep.run(stop))
    await asyncio.sleep(5 * upkeep.TICK_S)
    held_from = sample("count")
    time.sleep(0.08)  # noqa: ASYNC251 (on purpose: the loop is held, the tick falls due)
    await asyncio.sleep(5 * upkeep.TICK_S)
    stop.set()
    await asyncio.wait_for(ticker, 1.0)
    assert held_from >= 2 and sample("count") >= held_from + 2
    assert sample("count") - sample("bucket", le="0.05") >= 1  # the held wake-up
    assert sample("sum") >= 0.05
    held = "solver_loop_lag_held_seconds"
    assert sample("count", held) == sample("count")  # one of each per tick
    assert sample("count", held) - sample("bucket", held, le="0.02") >= 1
    assert sample("sum", held) <= sample("sum")  # never more than the lateness
