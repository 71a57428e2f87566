"""Shared by the tests of alerts across restarts: a bot's config for ``solver run`` child
processes with ``SOLVER_ALERT_URLS`` pointing at a real HTTP sink, and waiting for a message."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from sandbox.server import Sandbox
from solver.protocol.keys import SecretKey
from tests.app.harness import DEFAULT_BALANCES, bot_overrides, eventually, fund, running_sandbox
from tests.app.test_cli_run import write_config
from tests.io.http_sink import HttpSink

KEY_ENV = "SOLVER_APP_TEST_ALERTS_KEY"


def titles(sink: HttpSink) -> list[str]:
    return [m["title"] for m in sink.messages()]


async def told(
    sink: HttpSink, title: str, after: int = 0, child: Callable[[], str] | None = None
) -> dict[str, Any]:
    """The first message titled ``title`` among those after the first ``after``; on a time
    out, the titles seen and the end of ``child()`` (the child's log) say why."""

    def found() -> bool:
        return any(m["title"] == title for m in sink.messages()[after:])

    try:
        await eventually(found, f"{title!r} in {titles(sink)}", 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{child()[-3000:] if child else ''}") from None
    return next(m for m in sink.messages()[after:] if m["title"] == title)


@contextlib.asynccontextmanager
async def child_setup(
    tmp_path: Path,
    sink: HttpSink,
    overrides: Mapping[str, Any],
    *,
    key: SecretKey | None = None,
    account: str | None = None,
) -> AsyncIterator[tuple[Sandbox, Path, dict[str, str], str]]:
    """A sandbox, a funded account (the key's implicit one unless ``account``), the bot's
    YAML and its environment (the key, the sink's URL)."""
    async with running_sandbox(tmp_path) as sandbox:
        key = key or SecretKey.generate()
        account = account or key.public_key.implicit_account_id()
        fund(sandbox, account, DEFAULT_BALANCES)
        base = bot_overrides(sandbox, account, KEY_ENV, tmp_path / "solver.sqlite")
        config = write_config(tmp_path / "bot.yaml", {**base, **overrides})
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        env[KEY_ENV] = key.to_text()
        env["SOLVER_ALERT_URLS"] = sink.url()
        yield sandbox, config, env, account
