"""PostgreSQL itself restarted, or down for longer than the lease (issue 27): two real instances
of one account against the sandbox with takers on, the server stopped under them with
``pg_ctl -m fast`` (its sessions ended, as an operator's restart or a package upgrade does).

Judged as the other fault tests judge (:meth:`~tests.pg.two_instances.Pair.judge`): at most one
instance answers at any moment from the relay's side, every answer the relay received is in the
shared journal, no nonce repeats, the answers open at once never promise more than the balance.

- Restarted: while the server is away every commit fails, so the active sends nothing. Back
  before the active's own deadline (80 % of the lease from before its last refresh), the active
  connects again, keeps its lease and epoch and quotes on; the standby stands by. Back after
  it, the active has exited 75 and the standby takes over. Either way some instance quotes
  within the lease and 2 s of the server being back.
- Down for twice the lease: the active's answers stop at once, it says it is fenced out at its
  deadline while the server is still down and exits 75; nobody answers while it is down; the
  standby takes the expired lease and quotes within the lease and 2 s of the server's start.
- And at the store: a commit the store makes aside (before its own writes) and loses makes the
  executor's next commit fail, so no answer leaves whose fact was lost with it.

The server is started again whatever happens (the session's cluster serves the worker's other
tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from solver.core import facts as f
from solver.io.store.pg.store import PgStore
from solver.io.store.schema import StoreError
from tests.io.store_helpers import ACCOUNT, T0_US, opened, signed_quote
from tests.pg.cluster import PASSWORD, PASSWORD_ENV, Cluster
from tests.pg.two_instances import (
    EXIT_FENCED,
    LEASE_S,
    Asker,
    Instance,
    Pair,
    active_and_standby,
    sandbox_with_takers,
    two_instances,
)


@contextlib.asynccontextmanager
async def left_running(cluster: Cluster) -> AsyncIterator[Cluster]:
    """The cluster, started again at the end if the test left it down."""
    try:
        yield cluster
    finally:
        if not cluster.running():
            await asyncio.to_thread(cluster.start)
        await asyncio.to_thread(cluster.ready)


@contextlib.asynccontextmanager
async def two_on_one_server(tmp_path: Path, pg_url: str, cluster: Cluster) -> AsyncIterator[Pair]:
    """Two instances of one account, takers on, on ``cluster`` (left running at the end)."""
    async with (
        left_running(cluster),
        sandbox_with_takers(tmp_path) as sandbox,
        two_instances(sandbox, pg_url, tmp_path) as pair,
    ):
        yield pair


async def the_active_quoting(
    pair: Pair, a: Instance, asker: Asker
) -> tuple[set[str], asyncio.Task[tuple[int, float]]]:
    """Once ``a`` answers: its connection ids at the relay and a task awaiting its exit."""
    await asker.offer_after(time.monotonic() + 0.5, "a to go on quoting", 10)
    a_conns = {x.conn_id for x in pair.sandbox.bus.arrivals}
    assert len(a_conns) == 1, a_conns
    return a_conns, asyncio.create_task(exit_of(a.process))


async def exit_of(process: asyncio.subprocess.Process) -> tuple[int, float]:
    """The process's exit code and when it exited."""
    code = await process.wait()
    return code, time.monotonic()


async def just_refreshed(pair: Pair) -> None:
    """Until the active has just refreshed its lease (a full lease left, by the database's
    clock, give or take a tenth of a second)."""

    def left() -> float:
        with psycopg.connect(pair.url, password=PASSWORD) as conn:
            row = conn.execute("SELECT EXTRACT(EPOCH FROM expires_at - now()) FROM lease")
            return float(row.fetchone()[0])  # type: ignore[index]

    deadline = time.monotonic() + 10
    while await asyncio.to_thread(left) < LEASE_S - 0.1:
        assert time.monotonic() < deadline, "the active does not refresh its lease"
        await asyncio.sleep(0.01)


async def stopped_cleanly(*instances: Instance) -> None:
    for instance in instances:
        if instance.process.returncode is None:
            instance.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(instance.process.wait(), 20) == 0, instance.output()


def test_a_commit_lost_aside_fails_the_executors_next_one(pg_url: str, pg_cluster: Cluster) -> None:
    """The store commits what the executor appended before its own writes (here the upkeep's
    projection slice). Lost to a server going away, the executor's next commit must fail too:
    finding nothing left to write, it succeeded, and the executor sent answers whose facts were
    never written."""
    store = PgStore(pg_url, password_env=PASSWORD_ENV, account=ACCOUNT, lease_s=30)
    try:
        assert store.try_take_lease()
        store.journal.append(opened(signed_quote("before")))
        store.journal.commit()
        store.journal.append(opened(signed_quote("lost")))  # its answer waits for the commit
        pg_cluster.stop()
        try:
            with pytest.raises(StoreError, match="cannot commit the journal"):
                store.project()
        finally:
            pg_cluster.start()
        store.journal.append(opened(signed_quote("next")))
        store.commit()  # aside again: nothing is written while the loss waits for the executor
        with pytest.raises(StoreError, match="lost facts"):
            store.journal.write_snapshot({}, T0_US)  # the desk holds facts the journal does not
        with pytest.raises(StoreError, match="made aside"):
            store.journal.commit()  # the executor's: none of its answers is sent
        store.journal.append(opened(signed_quote("again")))  # it appends its facts again
        store.journal.commit()
        _, facts = store.journal.load()
        assert [x.quote_id for x in facts if isinstance(x, f.QuoteOpened)] == ["before", "again"]
    finally:
        store.close()


async def test_a_restarted_server_is_rejoined_by_whoever_holds_the_lease(
    tmp_path: Path, pg_url: str, pg_cluster: Cluster
) -> None:
    async with two_on_one_server(tmp_path, pg_url, pg_cluster) as pair:
        async with active_and_standby(pair) as (a, b, asker):
            a_conns, watch = await the_active_quoting(pair, a, asker)

            await just_refreshed(pair)
            began = time.monotonic()
            await asyncio.to_thread(pg_cluster.restart)  # the relay runs on meanwhile
            back = time.monotonic()
            again = await pair.answer_after(back, "an instance to quote again", LEASE_S + 10)
            kept = again.conn_id in a_conns
            print(
                f"restart: the server was away {back - began:.2f} s; quoting again "
                f"{again.at - back:.2f} s after it was back, by the "
                f"{'active (lease kept)' if kept else 'standby (failover)'} (lease {LEASE_S} s)"
            )
            assert again.at - back < LEASE_S + 2.0, (a.output(), b.output())
            # Its deadline was 80 % of the lease after the restart began (it had just
            # refreshed), and it tries again every 0.2 s: a restart shorter than 40 % of the
            # lease leaves it 40 % to connect again before it must stop.
            assert kept or back - began > 0.4 * LEASE_S, a.output()
            if kept:  # it connected again within its deadline: same epoch, no failover
                assert "connecting again" in a.output(), a.output()
                later = await pair.answer_after(back + LEASE_S, "answers a lease later", 10)
                assert later.conn_id in a_conns, "the active lost its lease after all"
                code, status = await pair.control("a", "/control/status")
                assert code == 200 and status["lease"]["role"] == "active", status
                assert status["lease"]["epoch"] == 1, status
                code, status = await pair.control("b", "/control/status")
                assert code == 200 and status["state"] == "STANDBY", status
                survivors = [a, b]
            else:  # it could not refresh before its deadline: fenced, and the standby took over
                code, _ = await asyncio.wait_for(watch, 20)
                assert code == EXIT_FENCED, a.output()
                assert "fenced out of the lease" in a.output(), a.output()
                await b.said("epoch 2")
                a2 = await pair.start("a", run=2)
                await a2.said("standby for")
                survivors = [b, a2]
            from_a = [x.at for x in pair.sandbox.bus.arrivals if x.conn_id in a_conns]
            if not kept:
                assert max(from_a) < began + LEASE_S, "the active answered past its lease"
            await asker.offer_after(time.monotonic(), "quoting to go on", 10)
        spans = pair.judge()
        assert len(spans) == (1 if kept else 2), spans
        await stopped_cleanly(*survivors)


async def test_a_server_down_past_the_lease_stops_all_quoting_then_the_standby_takes_over(
    tmp_path: Path, pg_url: str, pg_cluster: Cluster
) -> None:
    async with two_on_one_server(tmp_path, pg_url, pg_cluster) as pair:
        async with active_and_standby(pair) as (a, b, asker):
            a_conns, watch = await the_active_quoting(pair, a, asker)

            stopping = time.monotonic()
            await asyncio.to_thread(pg_cluster.stop)
            down = time.monotonic()
            await asyncio.sleep(2 * LEASE_S)
            said = a.output()  # at its deadline, while the server is down: it knows
            assert "fenced out of the lease" in said, said
            assert "refreshed in time" in said, said  # by its refresh or a commit
            starting = time.monotonic()
            await asyncio.to_thread(pg_cluster.start)
            up = time.monotonic()

            # Nobody answered while the server was down past the lease; the active's answers
            # stopped before its lease could run out.
            arrivals = list(pair.sandbox.bus.arrivals)
            during = [x for x in arrivals if stopping + LEASE_S <= x.at <= starting]
            assert during == [], f"answers while the database was down: {during}"
            last_a = max(x.at for x in arrivals if x.conn_id in a_conns)
            assert last_a < stopping + LEASE_S, "the active answered past its lease"
            done, _ = await asyncio.wait({watch}, timeout=20)
            assert done, f"the fenced active did not exit: {a.output()}"
            code, exited = watch.result()
            assert code == EXIT_FENCED, a.output()
            assert "ALERT: lease_lost" in a.output(), a.output()
            assert b.process.returncode is None, b.output()

            took = await pair.new_answer(up, "the standby to quote", LEASE_S + 10)
            print(
                f"outage: stop took {down - stopping:.2f} s, start {up - starting:.2f} s; the "
                f"active's last answer {last_a - stopping:+.2f} s and its exit "
                f"{exited - stopping:+.2f} s from the stop; the standby quoted {took - up:.2f} s "
                f"after the server was back (lease {LEASE_S} s)"
            )
            assert took - up < LEASE_S + 2.0, b.output()
            await b.said("epoch 2")

            a2 = await pair.start("a", run=2)  # by its service manager: a standby
            await a2.said("standby for")
            code, status = await pair.control("a", "/control/status")
            assert code == 200 and status["state"] == "STANDBY", status
            assert status["lease"]["held_by"]["epoch"] == 2, status
            await asker.offer_after(time.monotonic(), "b to go on quoting", 10)
        spans = pair.judge()
        assert len(spans) == 2, spans
        await stopped_cleanly(b, a2)
