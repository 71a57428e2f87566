"""One bot per store (issue 24, finding 2): a second ``solver run`` on the same store and key,
only its metrics port changed, once quoted beside the first (both wrote ``quote_opened`` for one
quote; fills ended ``LOST``). Now it exits 2 naming the holder while the first keeps quoting;
``solver history`` and ``solver store backup`` go through the running bot; and after
``kill -9`` of the first, a new run takes over its stale lock.

Real child processes (``solver run``, ``solver history``, ``solver store backup``) against a
sandbox on 127.0.0.1 port 0; nothing mocked."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import orjson

from solver.core import facts as f
from solver.io.store.owner import lock_path, read_holder
from solver.io.store.sqlite_store import Store
from tests.app.harness import eventually, running_sandbox
from tests.app.store_children import control_url, quoted, setup, solver
from tests.app.test_restart import bot_process

KEY_ENV = "SOLVER_ONE_OWNER_TEST_KEY"


async def test_a_second_run_exits_2_naming_the_holder_and_a_killed_holder_is_taken_over(
    tmp_path: Path,
) -> None:
    async with running_sandbox(tmp_path) as sandbox, httpx.AsyncClient(timeout=10) as http:
        s = setup(sandbox, tmp_path, KEY_ENV, tmp_path / "var" / "solver.sqlite")
        relay = sandbox.urls()["relay_rpc"]
        config = str(s.config)
        async with bot_process(sandbox, s.config, s.env, tmp_path / "first.log") as first:
            await control_url(s.db)
            holder = read_holder(s.db)
            assert holder is not None and holder.pid == first.process.pid
            offers = [await quoted(http, relay)]

            # The operator's chaos run: the same config, only the metrics port changed.
            code, output = await solver(
                s.env, tmp_path, "run", "--config", config, "--set", "metrics.listen=127.0.0.1:0"
            )
            assert code == 2, output
            assert f"in use by a running bot: pid {first.process.pid} on {holder.host}" in output
            assert len(sandbox.bus.connections) == 1  # the second never reached the relay
            offers.append(await quoted(http, relay))  # the first keeps quoting
            assert first.process.returncode is None

            # history and backup while it runs: through its control API.
            code, output = await solver(
                s.env, tmp_path, "history", "--config", config, "--kind", "quotes", "--format",
                "json",
            )  # fmt: skip
            assert code == 0, output
            # Lost quotes keep a row only when sampled (0.01 by default): said on standard
            # error; an open quote has its row once it is won (or if it is in the sample).
            note, _, text = output.partition("\n")
            assert note.startswith("note: lost quotes are sampled at rate 0.01"), output
            listed = {row["quote_hash"] for row in orjson.loads(text)}
            assert listed <= {o["quote_hash"] for o in offers}, output
            code, output = await solver(
                s.env, tmp_path, "history", "--config", config, "--kind", "pairs", "--format",
                "json",
            )  # fmt: skip
            assert code == 0, output
            # (The bot projects its journal before it reads: nothing is a tick behind.)
            assert [row["quotes"] for row in orjson.loads(output)] == [len(offers)], output
            backup = tmp_path / "backups" / "solver.bak"
            backup.parent.mkdir()
            code, output = await solver(
                s.env, tmp_path, "store", "backup", "--config", config, "--out", str(backup)
            )
            assert code == 0 and "made by the running bot" in output, output
            with Store(backup, create=False) as copy:
                _, facts = copy.journal.load()
            opened = {x.quote_hash for x in facts if isinstance(x, f.QuoteOpened)}
            assert {o["quote_hash"] for o in offers} <= opened

            first.process.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(first.process.wait(), 10) == -signal.SIGKILL
            await eventually(lambda: sandbox.bus.connections == {}, "the relay to drop it", 10)

        assert read_holder(s.db) == holder  # stale: the killed bot could not remove it
        async with bot_process(sandbox, s.config, s.env, tmp_path / "next.log") as next_run:
            assert f"taking over from pid {first.process.pid}" in next_run.output()
            await quoted(http, relay)
            taken = read_holder(s.db)
            assert taken is not None and taken.pid == next_run.process.pid
            next_run.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(next_run.process.wait(), 10) == 0, next_run.output()
        assert not lock_path(s.db).exists()
