"""``kill -9`` of the bot, three times in a row, then a last run (issue 5, "restart safety").

The bot runs as a child process (``python -m solver.cli run --config``, the key in the
environment) against a sandbox in the test process; all its runs share one config and one
store. Each run answers a few requests that stay open, the first one also a quote that is won
but not yet settled when the bot dies, and the bot is killed with SIGKILL. The last run must
show that

- the open quotes came back from the journal (it logs ``desk rebuilt from the journal: N open quotes``),
- no nonce was ever signed twice, across all the runs, and the ledger never refused one as
  used,
- every quote reaches a terminal state: SETTLED for the won one (it executed while the bot was
  dead), LOST for the others once their deadlines passed,

and that the balances reconcile with no alert. Bounded: about 20 s in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from sandbox.bus_records import IntentRecord
from sandbox.server import Sandbox
from solver.protocol.bus import IntentStatus
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import PREFIX_LEN
from solver.protocol.signing import parse_signed, verify_signed
from tests.app.harness import (
    DEFAULT_BALANCES,
    E6,
    E18,
    E24,
    ETH,
    NEAR,
    TOKENS,
    USDC,
    bot_overrides,
    eventually,
    fund,
    running_sandbox,
)
from tests.app.test_cli_run import write_config
from tests.io.store_helpers import OPEN_STATES_SQL, committed_view
from tests.sandbox.scripted import rpc, user_item

KEY_ENV = "SOLVER_APP_TEST_RESTART_KEY"
KILLED_RUNS = 3
OPEN_MS = 6_000  # min_deadline_ms of the quotes left open: they outlive a restart or two


@dataclass
class Child:
    process: asyncio.subprocess.Process
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextlib.asynccontextmanager
async def bot_process(
    sandbox: Sandbox,
    config: Path,
    env: dict[str, str],
    log: Path,
    *,
    grace_s: float | None = 1.0,
) -> AsyncIterator[Child]:
    """Start ``solver run`` and wait until it has subscribed; kill it on the way out.
    ``grace_s``: its ``--shutdown-wait`` (None: the default)."""
    grace = ["--shutdown-wait", str(grace_s)] if grace_s is not None else []
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "solver.cli",
            "--traceback",  # a bug in the child shows its traceback in the log
            "run",
            "--config",
            str(config),
            *grace,
            env=env,
            cwd=config.parent,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    child = Child(process, log)
    try:

        def subscribed() -> bool:
            kinds = sorted(
                k for c in sandbox.bus.connections.values() for k in c.subscriptions.values()
            )
            return kinds == ["quote", "quote_status"] or process.returncode is not None

        await eventually(subscribed, "the bot to subscribe", 20, 0.05)
        assert process.returncode is None, child.output()
        yield child
    finally:
        if process.returncode is None:
            process.kill()
            await asyncio.wait_for(process.wait(), 5)


async def sigkill(sandbox: Sandbox, child: Child) -> None:
    child.process.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(child.process.wait(), 5) == -signal.SIGKILL
    await eventually(lambda: sandbox.bus.connections == {}, "the relay to drop the dead bot")


def read(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read the bot's store from outside. A running bot holds it alone (issue 24), so this
    reads a copy of the files made by ``cp`` in a child process (what a crash would leave:
    SQLite recovers the committed frames); a copy torn by a checkpoint running meanwhile is
    made again."""
    for attempt in range(5):
        try:
            with committed_view(db) as conn:
                return list(conn.execute(sql, params))
        except sqlite3.DatabaseError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def open_count(db: Path) -> int:
    """Quotes not terminal in the query tables: counted (a lost quote keeps a row only when
    sampled, and an open one gets its row when it is won or sampled: issue 29)."""
    sql = f"SELECT COALESCE(SUM(n), 0) FROM quote_counts WHERE {OPEN_STATES_SQL}"
    ((count,),) = read(db, sql)
    return int(count)


def opened_quotes(db: Path) -> list[dict[str, Any]]:
    """Every quote the runs signed, from their journal entries (what a dispute reads)."""
    sql = "SELECT body FROM journal WHERE kind = 'quote_opened' ORDER BY seq"
    return [orjson.loads(body) for (body,) in read(db, sql)]


def projected(db: Path) -> bool:
    """The running bot's query tables show everything it journaled."""
    ((behind,),) = read(
        db, "SELECT COALESCE(MAX(seq), 0) - (SELECT seq FROM projection) FROM journal"
    )
    return int(behind) == 0


def executed(intent: IntentRecord) -> bool:
    return intent.status is IntentStatus.SETTLED


async def ask(
    http: httpx.AsyncClient, url: str, asset_in: str, asset_out: str, amount: int
) -> dict[str, Any]:
    """A user's ``quote``: the bot's one offer."""
    body = await rpc(
        http,
        url,
        "quote",
        {
            "core_asset_identifier_in": asset_in,
            "core_asset_identifier_out": asset_out,
            "exact_amount_in": str(amount),
            "min_deadline_ms": OPEN_MS,
        },
    )
    (offer,) = body["result"]
    result: dict[str, Any] = offer
    return result


async def take(http: httpx.AsyncClient, url: str, sandbox: Sandbox, offer: dict[str, Any]) -> str:
    """A funded user publishes the mirror of ``offer``; the intent hash."""
    user = SecretKey.generate()
    asset_in, asset_out = offer["core_asset_identifier_in"], offer["core_asset_identifier_out"]
    sandbox.ledger.deposit(user.public_key.implicit_account_id(), asset_in, int(offer["amount_in"]))
    diff = {asset_in: -int(offer["amount_in"]), asset_out: int(offer["amount_out"])}
    item = user_item(user, sandbox.ledger, diff)
    params = {"quote_hashes": [offer["quote_hash"]], "signed_data": item}
    body = await rpc(http, url, "publish_intent", params)
    assert body["result"]["status"] == "OK", body
    intent_hash: str = body["result"]["intent_hash"]
    return intent_hash


def assert_recovered(log: Path, count: int) -> None:
    text = log.read_text(encoding="utf-8", errors="replace")
    found = re.findall(r"desk rebuilt from the journal: (\d+) open quotes", text)
    assert found == [str(count)], text


async def test_kill_9_loop_recovers_open_quotes_and_every_quote_ends_terminal(
    tmp_path: Path,
) -> None:
    # Settlement takes 3 s: execution (then quote_status, as the real relay orders them) at 3 s.
    async with running_sandbox(tmp_path, settlement_delay_ms=3000) as sandbox:
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        fund(sandbox, account, DEFAULT_BALANCES)
        db = tmp_path / "solver.sqlite"
        overrides = {
            **bot_overrides(sandbox, account, KEY_ENV, db),
            "quote.deadline_margin_ms": 300,
            "log.level": "INFO",
        }
        config = write_config(tmp_path / "bot.yaml", overrides)
        env = {k: v for k, v in os.environ.items() if k != "SOLVER_CONTROL_TOKEN"}
        env[KEY_ENV] = key.to_text()
        url = sandbox.urls()["relay_rpc"]
        start = {a: sandbox.ledger.mt_balance_of(account, a) for a in TOKENS}
        offers: list[dict[str, Any]] = []
        open_at_kill: list[int] = []
        logs = [tmp_path / f"run{run}.log" for run in range(KILLED_RUNS)] + [tmp_path / "final.log"]

        async with httpx.AsyncClient(timeout=10) as http:
            for run in range(KILLED_RUNS):
                async with bot_process(sandbox, config, env, logs[run]) as child:
                    if run > 0:  # (a) what was open when the last run died came back
                        assert_recovered(logs[run], open_at_kill[-1])
                    for asset_in, amount in ((NEAR, 2 * E24), (ETH, E18 // 100)):
                        offers.append(await ask(http, url, asset_in, USDC, amount))
                    if run == 0:
                        # Taken, not yet executed: the user publishes; no quote_status comes
                        # before execution, so the bot still holds the quote open...
                        won = await ask(http, url, USDC, NEAR, 30 * E6)
                        offers.append(won)
                        intent_hash = await take(http, url, sandbox, won)
                    # The query tables follow the journal a tick later: read them caught up.
                    await eventually(functools.partial(projected, db), "the projection", 5)
                    open_at_kill.append(open_count(db))
                    await sigkill(sandbox, child)
                if run == 0:
                    # ...and dies before it executes: the batch settles while no bot runs, and
                    # its notification goes nowhere.
                    intent = sandbox.bus.intents[intent_hash]
                    assert intent.status in (IntentStatus.PENDING, IntentStatus.TX_BROADCASTED)
                    await eventually(functools.partial(executed, intent), "the execution", 5)
            assert open_at_kill[0] == 3  # two open, one taken

            # The last run: recovers, re-checks, and lets every deadline run out.
            async with bot_process(sandbox, config, env, logs[-1]) as child:
                assert_recovered(logs[-1], open_at_kill[-1])
                await eventually(lambda: open_count(db) == 0, "every quote to be terminal", 15)
                await asyncio.sleep(1.0)  # a few snapshots after the last transition
                child.process.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(child.process.wait(), 10) == 0, child.output()

        # (c) terminal states: the taken quote SETTLED (it executed while the bot was dead; a
        # later run found its nonce used), every other one LOST: all counted, the settled one
        # with its row, a lost one with a row only if it is in the sample (0.01 by default).
        opened = opened_quotes(db)
        assert [q["quote_hash"] for q in opened] == [o["quote_hash"] for o in offers]
        counts = read(db, "SELECT state, SUM(n) FROM quote_counts GROUP BY state HAVING SUM(n)")
        assert dict(counts) == {"LOST": 2 * KILLED_RUNS, "SETTLED": 1}
        states = dict(read(db, "SELECT quote_hash, state FROM quotes"))
        assert states.pop(won["quote_hash"]) == "SETTLED"
        assert set(states.values()) <= {"LOST"}
        # Found by its nonce, not by a notification: the fill knows no intent hash.
        assert read(db, "SELECT quote_hash, intent_hash FROM fills") == [(won["quote_hash"], None)]
        path = read(
            db,
            "SELECT t.old, t.new FROM transitions t JOIN quotes q USING (quote_id) "
            "WHERE q.quote_hash = ? ORDER BY t.id",
            won["quote_hash"],
        )
        assert path[0][0] == "OPEN" and path[-1][1] == "SETTLED", path

        # (b) nonces: one per quote across all the runs, all distinct, each the nonce signed in
        # its quote's item; only the won one is used on the ledger; the relay and the ledger
        # refused nothing (no "nonce was already used").
        nonces = {q["quote_id"]: q["nonce"] for q in opened}
        assert len(nonces) == len(set(nonces.values())) == len(offers)
        # Each under the prefix its run claimed (salt ‖ prefix ‖ counter): several runs, and no
        # quote nonce written to ``nonces``.
        claimed = read(db, "SELECT prefix FROM nonce_prefixes WHERE account = ?", account)
        prefixes = {bytes.fromhex(n)[4 : 4 + PREFIX_LEN] for n in nonces.values()}
        assert prefixes <= {bytes(p) for (p,) in claimed} and len(prefixes) > 1
        assert read(db, "SELECT nonce FROM nonces") == []
        signed = {
            q["quote_id"]: (
                q["quote_hash"],
                verify_signed(parse_signed(q["signed_data"])).nonce.hex(),
            )
            for q in opened
        }
        assert nonces == {quote_id: nonce for quote_id, (_, nonce) in signed.items()}
        used = {
            quote_hash
            for quote_hash, nonce in signed.values()
            if sandbox.ledger.is_nonce_used(account, bytes.fromhex(nonce))
        }
        assert used == {won["quote_hash"]}
        stats = sandbox.bus.stats
        assert stats.quote_answers_ok == len(offers) and stats.quote_answers_rejected == {}
        assert stats.publish_failed == {} and stats.settlement_failed == {}

        # Balances: exactly the one trade moved them, and every run reconciled them: no alert,
        # no pause, no traceback in any log.
        end = {a: sandbox.ledger.mt_balance_of(account, a) for a in TOKENS}
        assert end == {
            **start,
            USDC: start[USDC] + int(won["amount_in"]),
            NEAR: start[NEAR] - int(won["amount_out"]),
        }
        assert read(db, "SELECT kind, detail FROM alerts") == []
        for log in logs:
            text = log.read_text(encoding="utf-8", errors="replace")
            assert "PAUSED" not in text and "Traceback" not in text, text
