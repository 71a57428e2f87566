"""What the bus's inbound side feeds the desk (solver/runtime/inbound.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from solver.config import load_bot_config
from solver.core import events as ev
from solver.protocol.keys import SecretKey
from solver.runtime import bot as live

ROOT = Path(__file__).resolve().parents[2]


def test_only_a_refused_answer_reaches_the_desk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay's ``OK`` to an answer changes nothing on the desk (the bus client counts it:
    ``responses_ok``), so only a refusal is fed to it: one event an answer less on the live
    path (issue 29)."""
    key = SecretKey.generate()
    config = load_bot_config(ROOT / "config" / "default.yaml").with_overrides(
        {
            "account.id": key.public_key.implicit_account_id(),
            "storage.path": str(tmp_path / "bot.sqlite"),
            "metrics.listen": None,
        }
    )
    bot = live.LiveBot(config, key)
    fed: list[Any] = []

    def feed(event: ev.Event, now: int | None = None) -> list[Any]:
        fed.append(event)
        return []

    monkeypatch.setattr(bot.executor, "feed", feed)
    try:
        bot.inbound.on_response("q-ok", True, None)
        assert fed == []
        bot.inbound.on_response("q-refused", False, "deadline too short")
        assert fed == [ev.RelayReplied("q-refused", False, "deadline too short")]
    finally:
        assert bot.store is not None
        bot.store.close()
