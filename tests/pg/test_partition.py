"""A network partition between the active instance and the database (issue 27), real processes
against the sandbox with takers on, the active reaching PostgreSQL through a pausable TCP proxy
(:mod:`tests.pg.tcp_proxy`) and the standby directly.

Judged as the other fault tests judge (:meth:`~tests.pg.two_instances.Pair.judge`): at most one
instance answers at any moment from the relay's side, every answer the relay received is in the
shared journal, no nonce repeats, the answers open at once never promise more than the balance;
and the standby quotes within the lease and 2 s of the cut. The partitioned active stops
quoting and exits fenced (75) — at once when the database's side is reset (its lease cannot be
refreshed before it runs out), at the heal when the partition only held its bytes (its event
loop hung on the database, so it sent nothing; its held commit is then refused by the fence).
An answer committed just before the cut may still reach the relay just after it; none may
after the heal.
Its service manager starts it again: it comes back as a standby, and takes over when the other
stops.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from tests.pg.cluster import Cluster
from tests.pg.tcp_proxy import tcp_proxy
from tests.pg.two_instances import (
    EXIT_FENCED,
    LEASE_S,
    active_and_standby,
    sandbox_with_takers,
    two_instances,
)


async def exit_of(process: asyncio.subprocess.Process) -> tuple[int, float]:
    """The process's exit code and when it exited."""
    code = await process.wait()
    return code, time.monotonic()


@pytest.mark.parametrize("how", ["black_hole", "reset"])
async def test_a_partitioned_active_stops_and_comes_back_as_a_standby(
    tmp_path: Path, pg_url: str, pg_cluster: Cluster, how: str
) -> None:
    async with (
        tcp_proxy("127.0.0.1", pg_cluster.port) as proxy,
        sandbox_with_takers(tmp_path) as sandbox,
        two_instances(sandbox, pg_url, tmp_path, urls={"a": proxy.url(pg_url)}) as pair,
    ):
        async with active_and_standby(pair) as (a, b, asker):
            assert proxy.accepted >= 2  # the active's journal and projection, through the proxy
            await asker.offer_after(time.monotonic() + 0.5, "a to go on quoting", 10)
            a_conns = {x.conn_id for x in pair.sandbox.bus.arrivals}
            assert len(a_conns) == 1, a_conns

            proxy.partition(reset=how == "reset")
            cut = time.monotonic()
            watch = asyncio.create_task(exit_of(a.process))
            took = await pair.new_answer(cut, "the standby to quote", LEASE_S + 10)
            print(f"{how}: the standby quoted {took - cut:.2f} s after the cut (lease {LEASE_S} s)")
            assert took - cut < LEASE_S + 2.0, b.output()
            await b.said("epoch 2")
            if how == "reset":  # it could not refresh: it stopped before the lease ran out
                code, at = await asyncio.wait_for(watch, 10)
                print(f"reset: the active exited {at - cut:.2f} s after the cut")
            else:  # it hangs on the database, quoting nothing, until the heal
                await asyncio.sleep(1.0)
                assert a.process.returncode is None, a.output()
            from_a = [x.at for x in pair.sandbox.bus.arrivals if x.conn_id in a_conns]
            assert max(from_a) < took, "the partitioned active answered after the standby"
            assert max(from_a) < cut + LEASE_S, "the partitioned active answered past its lease"

            proxy.heal()
            healed = time.monotonic()
            if how == "black_hole":  # its held commit reaches the database: fenced
                code, at = await asyncio.wait_for(watch, 20)
                print(f"black hole: the active exited {at - healed:.2f} s after the heal")
            assert code == EXIT_FENCED, a.output()
            assert "fenced out of the lease" in a.output(), a.output()
            assert "ALERT: lease_lost" in a.output()
            # An answer whose commit returned just before the cut may reach the relay just after
            # it (it is in the journal and came before the standby's: judged above and below);
            # the commit held by the partition is refused at the heal, so nothing comes after.
            in_flight = [
                x for x in pair.sandbox.bus.arrivals if x.conn_id in a_conns and x.at > cut
            ]
            print(f"{how}: {len(in_flight)} answer(s) committed before the cut arrived after it")
            late = [x for x in in_flight if x.at > healed]
            assert late == [], f"the fenced active answered after the heal: {late}"

            # Its service manager starts it again (through the healed proxy): a standby.
            a2 = await pair.start("a", run=2)
            await a2.said("standby for")
            code, status = await pair.control("a", "/control/status")
            assert code == 200 and status["state"] == "STANDBY", status
            assert status["lease"]["held_by"]["epoch"] == 2, status
            await asker.offer_after(time.monotonic(), "b to go on quoting", 10)
            # ... and a ready one: b's clean stop hands it the lease.
            b.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            assert await asyncio.wait_for(b.process.wait(), 20) == 0, b.output()
            await pair.new_answer(stopped, "the restarted active to quote", LEASE_S + 10)
            await a2.said("epoch 3")
            await asker.offer_after(time.monotonic(), "a to go on quoting", 10)
        spans = pair.judge()
        assert len(spans) == 3, spans  # a, then b, then a again: one at a time
        a2.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(a2.process.wait(), 20) == 0, a2.output()
