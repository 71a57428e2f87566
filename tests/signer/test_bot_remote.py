"""The live bot quoting against the sandbox through ``solver signer serve`` (issue 28).

- A bot child process (``solver run``) signs through a signer with a key file or a SoftHSM2
  token: every answer the relay got verifies (NEP-413) against the account's registered key,
  quotes settle, and the key's seed is in neither the bot's memory (``/proc/<pid>/mem``) nor any
  file it writes.
- The signer frozen (SIGSTOP), then killed mid-run (an in-process bot): requests skip with
  ``signer_busy``, then ``signer_down``, each with an alert that resolves when it answers
  again; every fact journaled stays, and quoting resumes when it is back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.server import Sandbox
from solver.core import facts as f
from solver.core.lifecycle import QuoteState
from solver.protocol.encoding import b58encode
from solver.protocol.signing import parse_signed, verify_signed
from tests.app.harness import (
    DEFAULT_BALANCES,
    E6,
    E24,
    ETH,
    NEAR,
    USDC,
    build_bot_config,
    eventually,
    fund,
    live_bot,
    running_sandbox,
)
from tests.sandbox.scripted import rpc, user_item
from tests.signer.helpers import (
    TEST_KEY,
    TEST_SEED,
    TOKEN_SKIP_REASON,
    SignerProcess,
    Token,
    running_signer,
    signer_yaml,
    start_signer,
)

CAPS = {asset: {"per_request": 10**30, "per_hour": 10**32} for asset in (USDC, NEAR, ETH)}
ACCOUNT = TEST_KEY.public_key.implicit_account_id()


def signer_config(tmp_path: Path, sandbox: Sandbox, key: dict[str, Any]) -> Path:
    urls = sandbox.urls()
    return signer_yaml(
        tmp_path / "signer.yaml",
        account=ACCOUNT,
        verifier=sandbox.ledger.contract_id,
        key=key,
        quote_caps=CAPS,
        chain_rpc_url=urls["chain_rpc"],
    )


def secret_forms() -> list[bytes]:
    """How the seed could sit in memory or a file: raw, hex, and the key's text form."""
    text = TEST_KEY.to_text()
    return [TEST_SEED, TEST_SEED.hex().encode(), text.encode(), text[8:40].encode()]


def scan_memory(pid: int) -> list[str]:
    """Which secret forms the readable mappings of ``pid`` hold (root reads any process)."""
    found: list[str] = []
    forms = secret_forms()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1]:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue  # [vvar] and friends cannot be read
            found += [f"{form[:6]!r}… in {fields[-1]}" for form in forms if form in chunk]
    return found


def mem_skip_reason() -> str | None:
    try:
        with open(f"/proc/{os.getpid()}/mem", "rb", 0) as mem:
            mem.read(0)
    except OSError as exc:
        return f"/proc/<pid>/mem is not readable here ({exc.strerror}): memory scan skipped"
    return None


@pytest.fixture(params=["key_file", "token"])
def key_source(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """The signer's key spec and its children's environment."""
    if request.param == "token":
        if TOKEN_SKIP_REASON is not None:
            pytest.skip(TOKEN_SKIP_REASON)
        token: Token = request.getfixturevalue("token")
        yield token.key_spec(), token.env
    else:
        key_file: Path = request.getfixturevalue("key_file")
        yield {"key_file": str(key_file)}, dict(os.environ)


async def answered(http: Any, rpc_url: str, amount: int, timeout_s: float = 30) -> dict[str, Any]:
    """A user's quote (USDC for wNEAR) answered by the bot (retried while it starts)."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = await rpc(
            http,
            rpc_url,
            "quote",
            {
                "core_asset_identifier_in": USDC,
                "core_asset_identifier_out": NEAR,
                "exact_amount_in": str(amount),
                "min_deadline_ms": 60_000,
                "wait_ms": 1500,
            },
        )
        offers = body.get("result") or []
        if offers:
            offer: dict[str, Any] = offers[0]
            return offer
        if time.monotonic() > deadline:
            raise AssertionError(f"no answer within {timeout_s} s: {body}")
        await asyncio.sleep(0.1)


async def settle(http: Any, sandbox: Sandbox, offer: dict[str, Any]) -> None:
    """A user takes the offer; its intent settles on the ledger."""
    from solver.protocol.keys import SecretKey

    user = SecretKey.generate()
    user_account = user.public_key.implicit_account_id()
    sandbox.ledger.deposit(user_account, USDC, int(offer["amount_in"]))
    diff = {USDC: -int(offer["amount_in"]), NEAR: int(offer["amount_out"])}
    rpc_url = sandbox.urls()["relay_rpc"]
    item = user_item(user, sandbox.ledger, diff)
    body = await rpc(
        http,
        rpc_url,
        "publish_intent",
        {"quote_hashes": [offer["quote_hash"]], "signed_data": item},
    )
    assert body.get("result", {}).get("status") == "OK", body
    intent_hash = body["result"]["intent_hash"]

    async def settled() -> bool:
        status = await rpc(http, rpc_url, "get_status", {"intent_hash": intent_hash})
        return bool(status.get("result", {}).get("status") == "SETTLED")

    deadline = time.monotonic() + 20
    while not await settled():
        assert time.monotonic() < deadline, "the intent did not settle"
        await asyncio.sleep(0.05)
    assert sandbox.ledger.mt_batch_balance_of(user_account, [NEAR]) == [int(offer["amount_out"])]


def spawn_bot(bot_dir: Path, bot_yaml: Path) -> subprocess.Popen[bytes]:
    """``solver run`` as a child, with no key or PIN anywhere in its environment."""
    bot_env = {k: v for k, v in os.environ.items() if "KEY" not in k and "PIN" not in k}
    with open(bot_dir / "stdout.log", "wb") as out, open(bot_dir / "stderr.log", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "solver.cli", "run", "--config", str(bot_yaml)],
            env=bot_env,
            stdout=out,
            stderr=err,
            cwd=bot_dir,
        )


async def ended(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until the child exits (the loop keeps serving the sandbox meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the bot did not stop on SIGTERM")
        await asyncio.sleep(0.05)


def verify_answer(sandbox: Sandbox, offer: dict[str, Any]) -> None:
    """The answer the relay got verifies against a key the ledger has for the account."""
    record = sandbox.bus.quotes[offer["quote_hash"]]
    verified = verify_signed(parse_signed(record.signed_data))
    assert b58encode(verified.intent_hash) == offer["quote_hash"]
    assert verified.message.signer_id == ACCOUNT
    assert verified.public_key in sandbox.ledger.public_keys_of(ACCOUNT)


def test_the_memory_scan_finds_a_key_loaded_in_process() -> None:
    """The scan's positive control: a process that loads the key the way the in-process bot
    does (from an environment variable) is caught."""
    reason = mem_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    code = (
        "import os, sys; from solver.protocol.keys import SecretKey; "
        "k = SecretKey.from_text(os.environ.pop('HELD_KEY')); print('ready', flush=True); "
        "sys.stdin.read()"
    )
    env = {**os.environ, "HELD_KEY": TEST_KEY.to_text()}
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        assert scan_memory(child.pid) != []
    finally:
        child.kill()
        child.communicate(timeout=10)


async def test_the_bot_quotes_through_the_signer_and_never_holds_the_key(
    tmp_path: Path, key_source: tuple[dict[str, Any], dict[str, str]]
) -> None:
    import httpx

    key, env = key_source
    async with running_sandbox(tmp_path) as sandbox:
        fund(sandbox, ACCOUNT, DEFAULT_BALANCES)
        with running_signer(signer_config(tmp_path, sandbox, key), env) as signer:
            remote = {"signer.mode": "remote", "signer.socket": str(signer.socket)}
            config = build_bot_config(
                sandbox,
                TEST_KEY,
                tmp_path,
                {**remote, "account.key_env": None, "log.level": "INFO"},
            )
            bot_dir = tmp_path / "bot"
            bot_dir.mkdir()
            bot_yaml = bot_dir / "bot.yaml"
            bot_yaml.write_text(yaml.safe_dump(config.model_dump(mode="json")))
            bot = spawn_bot(bot_dir, bot_yaml)
            try:
                async with httpx.AsyncClient(timeout=30) as http:
                    rpc_url = sandbox.urls()["relay_rpc"]
                    for amount in (10 * E6, 25 * E6, 40 * E6):
                        offer = await answered(http, rpc_url, amount)
                        verify_answer(sandbox, offer)
                        await settle(http, sandbox, offer)
                reason = mem_skip_reason()
                if reason is not None:
                    print(f"NOTE: {reason}")
                else:
                    assert scan_memory(bot.pid) == []
            finally:
                bot.send_signal(signal.SIGTERM)
                await ended(bot, 30)
            assert bot.returncode == 0, (bot_dir / "stderr.log").read_text()[-2000:]
        signed = [line for line in signer.audit_lines() if "hash" in line]
        assert len(signed) >= 3
    assert bot_files_hold_no_secret(tmp_path) >= 3


def bot_files_hold_no_secret(tmp_path: Path) -> int:
    """Every file the bot wrote (its store, WAL, logs, config) is free of the seed; how many."""
    written = [p for p in (tmp_path / "bot").rglob("*") if p.is_file()]
    written += list(tmp_path.glob("solver.sqlite*"))
    assert any(p.name == "solver.sqlite" for p in written)
    for path in written:
        data = path.read_bytes()
        assert not [form for form in secret_forms() if form in data], path
    assert "Traceback" not in (tmp_path / "bot" / "stderr.log").read_text()
    return len(written)


async def test_the_signer_stopped_mid_run(tmp_path: Path, key_file: Path) -> None:
    async with running_sandbox(tmp_path) as sandbox:
        config = signer_config(tmp_path, sandbox, {"key_file": str(key_file)})
        signer: SignerProcess = start_signer(config, os.environ)
        try:
            async with live_bot(
                tmp_path,
                sandbox=sandbox,
                key=TEST_KEY,
                signer_socket=signer.socket,
                allowed_errors=("signer",),
            ) as bot:
                facts: list[f.Fact] = []
                bot.app.executor.observe(facts.append)
                offers = await bot.quote(USDC, NEAR, exact_in=10 * E6)
                assert offers, bot.diagnosis()
                verify_answer(sandbox, offers[0])
                intent = await bot.take(bot.new_user({USDC: 10 * E6}), offers[0])
                await eventually(
                    lambda: any(t.new is QuoteState.SETTLED for t in bot.transitions),
                    f"the quote to settle ({intent})",
                    20,
                )
                signer.process.send_signal(signal.SIGSTOP)  # slow: frozen, socket open
                assert await bot.unanswered(USDC, NEAR, exact_in=6 * E6) == []
                await eventually(
                    lambda: bot.app.signer.counts["signer_busy"] >= 1,  # type: ignore[union-attr]
                    "a signer_busy skip",
                    10,
                )
                assert any(a.kind == "signer_busy" for _, a in bot.app.executor.alerts)
                signer.process.send_signal(signal.SIGCONT)
                offers = await bot.quote(USDC, NEAR, exact_in=8 * E6)
                assert offers, bot.diagnosis()
                assert any(
                    a.kind == "signer_busy" and a.resolved for _, a in bot.app.executor.alerts
                )
                signer.stop(signal.SIGKILL)  # gone, without a word
                await eventually(
                    lambda: any(a.kind == "signer_down" for _, a in bot.app.executor.alerts),
                    "the signer_down alert",
                    10,
                )
                assert await bot.unanswered(USDC, NEAR, exact_in=5 * E6) == []
                assert bot.app.signer.counts["signer_down"] >= 1  # type: ignore[union-attr]
                assert not bot.app.desk.pauses.as_dict()  # a skip, not a pause
                signer = start_signer(config, os.environ)
                await eventually(
                    lambda: any(
                        a.kind == "signer_down" and a.resolved for _, a in bot.app.executor.alerts
                    ),
                    "the signer_down alert resolved",
                    10,
                )
                offers = await bot.quote(USDC, NEAR, exact_in=7 * E6)
                assert offers, bot.diagnosis()
                verify_answer(sandbox, offers[0])
                await bot.shutdown()
                observed = len(facts)
        finally:
            signer.stop()
    with sqlite3.connect(tmp_path / "solver.sqlite") as db:
        kinds = [kind for (kind,) in db.execute("SELECT kind FROM journal ORDER BY seq")]
    assert len(kinds) >= observed  # every fact recorded during the run is in the journal
    assert kinds.count("quote_opened") == 3, kinds


async def test_a_quote_beyond_the_signers_cap_is_refused_alerted_and_released(
    tmp_path: Path, key_file: Path
) -> None:
    async with running_sandbox(tmp_path) as sandbox:
        caps = {**CAPS, NEAR: {"per_request": E24, "per_hour": 10 * E24}}  # 1 wNEAR a quote
        config = signer_yaml(
            tmp_path / "signer.yaml",
            account=ACCOUNT,
            verifier=sandbox.ledger.contract_id,
            key={"key_file": str(key_file)},
            quote_caps=caps,
            chain_rpc_url=sandbox.urls()["chain_rpc"],
        )
        with running_signer(config, os.environ) as signer:
            async with live_bot(
                tmp_path,
                sandbox=sandbox,
                key=TEST_KEY,
                signer_socket=signer.socket,
                allowed_errors=("signer",),
            ) as bot:
                small = await bot.quote(USDC, NEAR, exact_in=1 * E6)  # ~0.33 wNEAR out
                assert small, bot.diagnosis()
                assert await bot.unanswered(USDC, NEAR, exact_in=30 * E6) == []  # ~10 wNEAR
                await eventually(
                    lambda: any(a.kind == "signer_refused" for _, a in bot.app.executor.alerts),
                    "the signer_refused alert",
                    10,
                )
                (alert,) = [a for _, a in bot.app.executor.alerts if a.kind == "signer_refused"]
                assert "cap_per_request" in alert.detail
                assert bot.app.desk.inventory.reserved.get(NEAR, 0) <= int(small[0]["amount_out"])
        lines = signer.audit_lines()
        assert [line.get("refused") for line in lines if "refused" in line] == ["cap_per_request"]
        assert len([line for line in lines if "hash" in line]) == 1  # only the small quote
