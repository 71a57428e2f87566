"""A storage fault never kills the bot (issue 24, finding 1).

The operator's chaos run: under flow, as root, ``chattr +i`` on the store's directory, database,
``-wal`` and ``-shm``. Half the runs died without a log line (once of SIGBUS: the memory-mapped
``-shm``), ``/control/status`` answered HTTP 500 with a traceback, and "the query tables are
behind the journal" was logged at every 20 ms tick. Here, as there, the real ``solver run``
quotes a flow of requests while its store is made immutable for real: it must pause with
``store_error`` and keep running, its status must answer 200 from memory all along, its log
must say the failure once (then count), and once the store is mutable again it must go back to
quoting by itself: the pause lifts once the store commits with every refused fact in it, and
no operator is needed (docs/operations.md)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.app.harness import eventually, running_sandbox
from tests.app.store_children import ask, control_url, headers, quoted, setup
from tests.app.test_restart import bot_process
from tests.chattr import require_chattr, set_immutable, store_paths

KEY_ENV = "SOLVER_STORE_FAULT_TEST_KEY"
FLOW_WORKERS = 3
HELD_S = 3.0
"""How long the store stays immutable once the bot paused: 150 ticks of the bot."""


async def _flow(http: httpx.AsyncClient, relay: str, answered: list[int]) -> None:
    """Quote requests one after another (a paused bot leaves them to the relay's wait)."""
    while True:
        with contextlib.suppress(httpx.HTTPError):
            answered.append(len(await ask(http, relay)))


async def _status(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await http.get(url + "/control/status", headers=headers())
    assert response.status_code == 200, response.text  # never a 500 with a traceback
    doc: dict[str, Any] = response.json()
    return doc


async def test_an_immutable_store_mid_flow_pauses_and_the_bot_lives_and_recovers_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "var" / "solver.sqlite"  # its own directory: the one made immutable
    db.parent.mkdir()
    require_chattr(db.parent)
    async with running_sandbox(tmp_path) as sandbox, httpx.AsyncClient(timeout=10) as http:
        s = setup(sandbox, tmp_path, KEY_ENV, db)
        relay = sandbox.urls()["relay_rpc"]
        log = tmp_path / "bot.log"
        async with bot_process(sandbox, s.config, s.env, log) as child:
            url = await control_url(db)
            await quoted(http, relay)
            answered: list[int] = []
            flow = [asyncio.create_task(_flow(http, relay, answered)) for _ in range(FLOW_WORKERS)]
            try:
                await eventually(lambda: sum(answered) >= 3, "quotes under flow", 20)
                lines_before = len(child.output().splitlines())
                try:
                    set_immutable(store_paths(db), True)
                    deadline = time.monotonic() + 20
                    while True:  # the status answers all along, until the pause shows
                        assert child.process.returncode is None, child.output()
                        doc = await _status(http, url)
                        if "store_error" in doc.get("paused", {}).get("*", ""):
                            break
                        assert time.monotonic() < deadline, doc
                        await asyncio.sleep(0.05)
                    paused_at = len(answered)
                    held_until = time.monotonic() + HELD_S
                    while time.monotonic() < held_until:  # paused, alive, answering
                        assert child.process.returncode is None, child.output()
                        doc = await _status(http, url)
                        assert doc["state"] == "PAUSED", doc
                        assert "store_error" in doc["paused"]["*"], doc
                        await asyncio.sleep(0.1)
                    # Nothing was quoted while paused (what the relay had before may finish).
                    assert sum(answered[paused_at + FLOW_WORKERS :]) == 0, answered
                finally:
                    set_immutable(store_paths(db), False)
                during = child.output().splitlines()[lines_before:]
                behind = [line for line in during if "query tables are behind" in line]
                assert len(behind) <= 1, behind
                assert len(during) < 15, "\n".join(during)  # said once, then counted
                assert "store_error" in "\n".join(during)  # the alert was logged

                # Writable again: no operator; the pause lifts itself once the store commits.
                deadline = time.monotonic() + 30
                while (await _status(http, url))["state"] != "RUNNING":
                    assert time.monotonic() < deadline, (await _status(http, url))["paused"]
                    await asyncio.sleep(0.1)
                assert "the store works again" in child.output()
                count = len(answered)
                await eventually(
                    lambda: sum(answered[count:]) >= 1, "a quote after the recovery", 20
                )
            finally:
                for task in flow:
                    task.cancel()
                for task in flow:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            child.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(child.process.wait(), 15) == 0, child.output()
        assert "Traceback" not in log.read_text(), log.read_text()
