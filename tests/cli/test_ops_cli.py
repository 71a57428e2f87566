"""``solver status`` / ``pause`` / ``resume`` against a real control server in the test's loop.

``main()`` is synchronous and blocks on HTTP: it runs in a thread (``asyncio.to_thread``) so
the server, in this event loop, keeps serving.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from solver.cli import main
from solver.cli.ops import status_table
from solver.cli.status_pairs import pairs_table
from solver.config import validate_bot_config
from solver.io.control import ControlServer
from tests.cli.helpers import KEY_VAR, assert_one_line_error
from tests.config.helpers import minimal, write_yaml
from tests.io.fake_control import TOKEN, TOKEN_VAR, USDC, FakeTarget, running_control


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    monkeypatch.delenv(KEY_VAR, raising=False)  # the ops commands never need the signing key
    monkeypatch.setenv("COLUMNS", "160")  # rich: no wrapping of the table


@pytest.fixture
def target() -> FakeTarget:
    return FakeTarget()


@pytest.fixture
async def server(target: FakeTarget) -> AsyncIterator[ControlServer]:
    async with running_control(target) as running:
        yield running


def bot_config(tmp_path: Path, listen: str | None) -> str:
    data = minimal()
    data["metrics"] = {"listen": listen}
    return str(write_yaml(tmp_path / "bot.yaml", data))


@pytest.fixture
def config_file(tmp_path: Path, server: ControlServer) -> str:
    return bot_config(tmp_path, f"127.0.0.1:{server.port}")


async def solver(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_status_table(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    target.paused = {"*": "maintenance window"}
    assert await solver("status", "--config", config_file) == 0
    out, err = capsys.readouterr()
    assert err == ""
    for text in (
        "solver.sandbox",
        "connected",
        "PAUSED (maintenance window)",
        "open exposure",
        "1,234.50 USD",
        "reserved USDC",
        "1.5",
        "reserved wNEAR",
        "2",
        "120 requests, 40 quotes, win rate 25.0% (10/40)",
        "volume 512.75 USD",
        "win rate 12.5% (100/800)",
        "volume 9,876.50 USD",
        "-12.50 USD",
        "2025-01-02T03:04:05Z, balances match",
        "build",
    ):
        assert text in out, text
    assert ("status",) in target.calls


async def test_status_shows_paused_pairs_with_symbols(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    target.pause("wNEAR/USDC", "wide spreads")
    assert await solver("status", "--config", config_file) == 0
    out = capsys.readouterr().out
    assert "RUNNING" in out
    assert "wNEAR -> USDC: wide spreads" in out
    assert "USDC -> wNEAR: wide spreads" in out


async def test_status_json(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await solver("status", "--config", config_file, "--json") == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert orjson.loads(out) == target.status()


async def test_status_with_url_and_no_config(
    server: ControlServer, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await solver("status", "--url", server.url + "/", "--json") == 0
    assert orjson.loads(capsys.readouterr().out)["account"] == "solver.sandbox"


async def test_pause_and_resume(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await solver("pause", "--config", config_file, "--reason", "rolling keys") == 0
    assert capsys.readouterr().out == "paused all pairs: rolling keys\n"
    assert target.paused == {"*": "rolling keys"}

    assert await solver("pause", "--config", config_file, "--pair", "wNEAR/USDC") == 0
    assert capsys.readouterr().out == "paused wNEAR/USDC: paused from the command line\n"

    assert await solver("resume", "--config", config_file) == 0
    assert capsys.readouterr().out == "resumed everything\n"
    assert await solver("resume", "--config", config_file, "--pair", "wNEAR/USDC") == 0
    assert capsys.readouterr().out == "resumed wNEAR/USDC\n"
    assert target.paused == {}
    assert await solver("resume", "--config", config_file, "--accept-balances") == 0
    assert target.calls == [
        ("pause", None, "rolling keys"),
        ("pause", "wNEAR/USDC", "paused from the command line"),
        ("resume", None, False),
        ("resume", "wNEAR/USDC", False),
        ("resume", None, True),
    ]


async def test_resume_never_reports_success_while_the_bot_stays_paused(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    target.holds = ["drawdown: 3000.00 USD > 2500.0"]
    assert await solver("resume", "--config", config_file) == 1
    out, err = capsys.readouterr()
    assert out == ""
    line = "solver: not resumed: still paused: everything: drawdown: 3000.00 USD > 2500.0"
    assert line in err.splitlines(), err


async def test_unknown_pair_is_the_bots_answer(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await solver("pause", "--config", config_file, "--pair", "ETH/USDC") == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "HTTP 404: unknown pair ETH/USDC" in err


@pytest.mark.parametrize("pair", ["wNEARUSDC", "a/b/c", "/USDC"])
async def test_malformed_pair_is_refused_locally(
    config_file: str, target: FakeTarget, capsys: pytest.CaptureFixture[str], pair: str
) -> None:
    assert await solver("pause", "--config", config_file, "--pair", pair) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "BASE/QUOTE" in err
    assert target.calls == []


async def test_no_running_bot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    config = bot_config(tmp_path, f"127.0.0.1:{port}")
    for argv in (("status",), ("pause",), ("resume",)):
        assert await solver(*argv, "--config", config) == 2
        err = capsys.readouterr().err
        assert err == f"solver: error: no running bot at http://127.0.0.1:{port}\n"


async def test_wrong_token(
    monkeypatch: pytest.MonkeyPatch,
    config_file: str,
    target: FakeTarget,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(TOKEN_VAR, "not-the-token")
    assert await solver("pause", "--config", config_file) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert f"refused the token in {TOKEN_VAR} (HTTP 401)" in err
    assert "not-the-token" not in err
    assert target.calls == []


async def test_token_env_option(
    monkeypatch: pytest.MonkeyPatch, config_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TOKEN_VAR)
    monkeypatch.setenv("OPS_TOKEN", TOKEN)
    assert await solver("status", "--config", config_file, "--token-env", "OPS_TOKEN") == 0


async def test_no_token_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
    config_file: str,
    target: FakeTarget,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(TOKEN_VAR)
    assert await solver("status", "--config", config_file) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert f"{TOKEN_VAR} is not set" in err
    assert target.calls == []


async def test_bot_with_control_disabled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TOKEN_VAR)
    async with running_control(FakeTarget()) as server:  # built with no token: control off
        monkeypatch.setenv(TOKEN_VAR, TOKEN)
        config = bot_config(tmp_path, f"127.0.0.1:{server.port}")
        assert await solver("status", "--config", config) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "HTTP 403 (control disabled)" in err


async def test_metrics_disabled_in_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await solver("status", "--config", bot_config(tmp_path, None)) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "metrics.listen is null" in err


async def test_needs_config_or_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert await solver("status") == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "--config" in err


async def test_a_wildcard_listen_is_a_config_error_as_for_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` never serves the control API on ``0.0.0.0`` (issue 24: one rule for ``run``,
    ``config check`` and the commands that read the file), so no bot can be found there."""
    port = free_port()
    config = bot_config(tmp_path, f"0.0.0.0:{port}")
    assert await solver("status", "--config", config) == 2
    err = capsys.readouterr().err
    assert_one_line_error(err)
    assert "metrics.listen" in err and "loopback" in err, err


def test_commands_are_registered(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("status", "pause", "resume"):
        assert main([command, "--help"]) == 0
    assert "--pair" in capsys.readouterr().out


def render(doc: dict[str, object], *, with_config: bool) -> str:
    config = validate_bot_config(minimal()) if with_config else None
    console = Console(record=True, width=200)
    console.print(status_table(doc, "http://127.0.0.1:1", config))
    return console.export_text()


def test_status_table_of_a_degraded_bot() -> None:
    doc: dict[str, object] = {
        "connected": False,
        "paused": {"*": "drawdown limit"},
        "pnl_usd": None,
        "last_reconciliation": {
            "at": "2025-01-02T03:04:05Z",
            "ok": False,
            "mismatches": {USDC: "-2500000"},
        },
        "uptime_s": 90061,
    }
    raw = render(doc, with_config=False)
    assert "DISCONNECTED" in raw
    assert "PAUSED (drawdown limit)" in raw  # derived from the global pause
    assert "unknown" in raw
    assert f"MISMATCH {USDC} -2500000" in raw
    assert "1d 01:01:01" in raw
    assert "MISMATCH USDC -2.5" in render(doc, with_config=True)


def test_status_table_shows_a_gap_held_while_it_is_explained() -> None:
    """Issue 24: a held gap is no mismatch yet, but people see it is being looked into."""
    doc: dict[str, object] = {
        "last_reconciliation": {
            "at": "2025-01-02T03:04:05Z",
            "ok": True,
            "mismatches": {},
            "held": {USDC: "5776293"},
        }
    }
    text = render(doc, with_config=True)
    assert "balances match; gap held, explaining: USDC 5.776293" in text


def test_status_table_of_a_minimal_document() -> None:
    text = render({"last_reconciliation": None}, with_config=True)
    assert "RUNNING" in text
    assert "never" in text


def test_status_shows_amounts_in_whole_units_and_a_row_per_pair() -> None:
    doc: dict[str, object] = {
        "reserved": {USDC: "1234567800"},
        "realized_pnl_usd": 1.5,
        "alerts": {"open": ["reconciliation"], "sent": 2, "failed": 0},
        "pairs": {
            "wNEAR/USDC": {
                "requests": 1200,
                "quotes": 40,
                "won": 10,
                "win_rate": 0.25,
                "settled": 9,
                "volume_usd": 512.75,
                "realized_pnl_usd": -3.5,
                "open_quotes": 2,
                "open_exposure_usd": 12.0,
            },
            "ETH/USDC": {"requests": 0, "quotes": 0, "win_rate": None},
        },
    }
    text = render(doc, with_config=True)
    assert "1,234.5678 USDC" in text
    assert "+1.50 USD" in text
    assert "reconciliation (2 sent, 0 failed)" in text
    assert "wNEAR/USDC" not in text  # the pairs have a table of their own
    table = pairs_table(doc)
    assert table is not None
    console = Console(record=True, width=200)
    console.print(table)
    rows = console.export_text()
    near = next(line for line in rows.splitlines() if "wNEAR/USDC" in line)
    for cell in ("1,200", "40", "10", "25.0%", "9", "512.75", "-3.50", "2", "12.00"):
        assert cell in near, (cell, near)
    eth = next(line for line in rows.splitlines() if "ETH/USDC" in line)
    assert "-" in eth
    assert pairs_table({}) is None
