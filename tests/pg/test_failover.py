"""Two instances of one account on one PostgreSQL journal (issue 27), real processes against the
sandbox, judged from the relay's side: at most one answers at any moment, every answer the relay
received is in the shared journal, no nonce repeats; a standby takes over within the lease and
2 s of the active's death; an active stopped past its lease sends nothing when it resumes and
exits fenced (75)."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path

from tests.app.harness import running_sandbox
from tests.app.store_children import solver
from tests.pg.cluster import Cluster
from tests.pg.two_instances import EXIT_FENCED, LEASE_S, active_and_standby, two_instances


async def test_sigterm_hands_over_and_kill_9_fails_over_within_the_lease(
    tmp_path: Path, pg_url: str
) -> None:
    async with (
        running_sandbox(tmp_path) as sandbox,
        two_instances(sandbox, pg_url, tmp_path) as pair,
    ):
        async with active_and_standby(pair) as (a, b, asker):
            assert pair.subscribed() == 1  # the standby holds no subscription
            code, health = await pair.control("b", "/healthz")
            assert code == 503 and "standby" in health["reasons"][0], health
            code, status = await pair.control("b", "/control/status")
            assert code == 200 and status["state"] == "STANDBY", status
            assert status["lease"]["role"] == "standby" and status["lease"]["held_by"]["live"]
            code, out = await solver(
                pair.env, tmp_path, "status", "--config", str(pair.configs["b"])
            )
            assert code == 0 and "STANDBY" in out and "lease held by" in out, out
            # A clean stop releases the lease: the standby takes over without waiting for it
            # to expire, and the stopped instance, started again, stands by.
            a.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            assert await asyncio.wait_for(a.process.wait(), 20) == 0, a.output()
            took = await pair.new_answer(stopped, "the standby to quote", LEASE_S + 10)
            print(f"handover after SIGTERM: {took - stopped:.2f} s (lease {LEASE_S} s)")
            assert took - stopped < LEASE_S, b.output()
            a2 = await pair.start("a", run=2)
            await a2.said("standby for")

            b.process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            assert await asyncio.wait_for(b.process.wait(), 10) == -signal.SIGKILL
            took = await pair.new_answer(killed, "the standby to quote", LEASE_S + 10)
            print(f"failover after kill -9: {took - killed:.2f} s (lease {LEASE_S} s)")
            assert took - killed < LEASE_S + 2.0, a2.output()
            await asker.offer_after(time.monotonic(), "a to go on quoting", 10)
        spans = pair.judge()
        assert len(spans) == 3, spans
        # The standby followed the journal: at the taking its desk held every quote the old
        # active answered (all still open: a minute's deadline, nobody took them).
        first, second, _ = sorted(spans.values())
        found = re.search(r"epoch 3\): the desk holds (\d+) open quotes", a2.output())
        assert found is not None, a2.output()
        assert int(found.group(1)) >= first[2] + second[2], (found.group(0), spans)
        code, status = await pair.control("a", "/control/status")
        assert (status["lease"]["role"], status["lease"]["epoch"]) == ("active", 3), status
        a2.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(a2.process.wait(), 20) == 0, a2.output()


async def test_a_stopped_active_resumes_fenced_and_a_cut_connection_is_made_again(
    tmp_path: Path, pg_url: str, pg_cluster: Cluster
) -> None:
    database = pg_url.rsplit("/", 1)[1]
    async with (
        running_sandbox(tmp_path) as sandbox,
        two_instances(sandbox, pg_url, tmp_path) as pair,
    ):
        async with active_and_standby(pair) as (a, b, asker):
            # The active's connections cut: it connects again at its next use, and keeps its
            # lease (it is in the database, not the connection).
            assert pg_cluster.terminate(database, pid=a.process.pid) >= 2  # journal, projection
            cut = time.monotonic()
            await asker.offer_after(cut + 0.5, "a to quote after the cut", LEASE_S + 5)
            assert a.process.returncode is None, a.output()

            a.process.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            await pair.new_answer(stopped, "the standby to take over", LEASE_S + 15)
            await b.said("epoch 2")
            before = len(pair.sandbox.bus.arrivals)
            a.process.send_signal(signal.SIGCONT)  # with requests waiting on its socket
            code = await asyncio.wait_for(a.process.wait(), 20)
            assert code == EXIT_FENCED, a.output()
            assert "fenced out of the lease" in a.output()
            assert "ALERT: lease_lost" in a.output()
            await asker.offer_after(time.monotonic(), "b to go on quoting", 10)
        spans = pair.judge()  # what a sent after SIGCONT, if anything, is in the journal too
        a_conn = [c for c, (first, _, _) in spans.items() if first < stopped]
        late = [x for x in list(pair.sandbox.bus.arrivals)[before:] if x.conn_id in a_conn]
        assert late == [], late
        b.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(b.process.wait(), 20) == 0, b.output()
