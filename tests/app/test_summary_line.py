"""The summary line after a restart (issue 24, part 8): counters since this start and
lifetime figures are labelled apart. Before, a quote that went LOST in the previous run (a
fact replayed from the journal after ``kill -9``) showed as ``outcomes={'LOST': 1}`` beside
``requests=0`` of the new process."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from solver.protocol.keys import SecretKey
from tests.app.harness import (
    DEFAULT_BALANCES,
    E24,
    NEAR,
    USDC,
    bot_overrides,
    eventually,
    fund,
    running_sandbox,
)
from tests.app.test_cli_run import write_config
from tests.app.test_restart import bot_process, sigkill
from tests.sandbox.scripted import rpc

KEY_ENV = "SOLVER_APP_TEST_SUMMARY_KEY"


def summaries(text: str) -> list[str]:
    return [line for line in text.splitlines() if " summary " in line]


async def test_the_summary_after_a_restart_labels_since_start_and_lifetime(
    tmp_path: Path,
) -> None:
    async with running_sandbox(tmp_path) as sandbox:
        key = SecretKey.generate()
        account = key.public_key.implicit_account_id()
        fund(sandbox, account, DEFAULT_BALANCES)
        overrides = {
            **bot_overrides(sandbox, account, KEY_ENV, tmp_path / "solver.sqlite"),
            "log.level": "INFO",
            "log.summary_every_s": 0.5,
        }
        config = write_config(tmp_path / "bot.yaml", overrides)
        env = {"PATH": "/usr/bin:/bin", KEY_ENV: key.to_text()}
        async with bot_process(sandbox, config, env, tmp_path / "run1.log") as first:
            async with httpx.AsyncClient(timeout=10) as http:
                body = await rpc(http, sandbox.urls()["relay_rpc"], "quote", {
                    "core_asset_identifier_in": NEAR, "core_asset_identifier_out": USDC,
                    "exact_amount_in": str(E24), "min_deadline_ms": 1_000,
                })  # fmt: skip
            assert len(body["result"]) == 1, body
            # Nobody takes it: LOST at its deadline, journaled, then the process dies.
            await eventually(lambda: "'LOST': 1" in first.output(), "the LOST outcome", 15)
            await sigkill(sandbox, first)
        async with bot_process(sandbox, config, env, tmp_path / "run2.log") as second:
            await eventually(lambda: bool(summaries(second.output())), "a summary line", 10)
            line = summaries(second.output())[-1]
        since, _, rest = line.partition("since start:")[2].partition("lifetime:")
        assert since and rest, line
        assert "requests=0" in since and "LOST" not in since, line
        assert re.search(r"realized=[+-][\d,.]+ USD", rest), line
