"""Operator commands (``keys list/add/remove``, ``withdraw``, ``transfer``) against a real sandbox
on loopback: intents signed for the configured account, published alone (no solver quote),
followed to a final status; dry runs change nothing; bad input is exit code 2.

``main()`` runs its own event loop (``asyncio.run``), so it runs in a thread while the sandbox
serves in the test's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from sandbox.config import FundedAccount, SandboxConfig
from sandbox.config import TokenSpec as SandboxToken
from sandbox.ledger import DEFAULT_WRAPPED_NATIVE
from sandbox.server import Sandbox
from solver.cli import main
from solver.config import apply_overrides
from solver.io.ops_build import parse_amount, parse_whole_amount
from solver.protocol.amounts import U128_MAX
from solver.protocol.keys import SecretKey

OPS_VAR = "SOLVER_TEST_OPS_KEY"
SECOND_VAR = "SOLVER_TEST_OPS_KEY_2"
USDC = "nep141:usdc.sandbox"
NEAR = "nep141:wrap.sandbox"
E6 = 10**6
E24 = 10**24
DEFAULT_YAML = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
RECEIVER = "receiver.sandbox"


class Env:
    """The running sandbox, the operator account and a bot config file pointing at them."""

    def __init__(self, sandbox: Sandbox, key: SecretKey, config: Path) -> None:
        self.sandbox = sandbox
        self.ledger = sandbox.ledger
        self.key = key
        self.account = key.public_key.implicit_account_id()
        self.config = str(config)

    def balances(self, account: str | None = None) -> list[int]:
        return self.ledger.mt_batch_balance_of(account or self.account, [USDC, NEAR])

    def events(self, kind: str) -> list[dict[str, Any]]:
        found = []
        for line in self.ledger.events:
            event = orjson.loads(line.removeprefix("EVENT_JSON:"))
            if event["event"] == kind:
                found.extend(event["data"])
        return found


def write_bot_config(path: Path, sandbox: Sandbox, account: str) -> Path:
    urls = sandbox.urls()
    data = apply_overrides(
        yaml.safe_load(DEFAULT_YAML.read_text(encoding="utf-8")),
        {
            "account.id": account,
            "account.key_env": OPS_VAR,
            "account.key_file": None,
            "verifier_contract": sandbox.ledger.contract_id,
            "bus.ws_url": urls["relay_ws"],
            "bus.rpc_url": urls["relay_rpc"],
            "chain.rpc_url": urls["chain_rpc"],
            "prices.sources.0.url": urls["prices"],
        },
    )
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


async def start_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settlement_delay_ms: int
) -> tuple[Sandbox, Env]:
    key = SecretKey.generate()
    monkeypatch.setenv(OPS_VAR, key.to_text())
    config = SandboxConfig(
        tokens={
            USDC: SandboxToken(symbol="USDC", decimals=6, usd=1.0),
            NEAR: SandboxToken(symbol="wNEAR", decimals=24, usd=3.0),
        },
        bus={"solver_wait_ms": 300, "settlement_delay_ms": settlement_delay_ms},
        takers={"enabled": False},
        state_dir=tmp_path / "sandbox-state",
        accounts=[
            FundedAccount(name="ops", key_env=OPS_VAR, balances={USDC: 1_000 * E6, NEAR: 10 * E24})
        ],
    )
    sandbox = Sandbox(config, run_takers=False)
    await sandbox.start()
    assert sandbox.accounts["ops"].account_id == key.public_key.implicit_account_id()
    bot_yaml = write_bot_config(tmp_path / "bot.yaml", sandbox, sandbox.accounts["ops"].account_id)
    return sandbox, Env(sandbox, key, bot_yaml)


@pytest.fixture
async def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Env]:
    sandbox, environment = await start_env(tmp_path, monkeypatch, settlement_delay_ms=20)
    try:
        yield environment
    finally:
        await sandbox.stop()


async def cli(
    argv: list[str], capsys: pytest.CaptureFixture[str], env: Env | None = None
) -> tuple[int, dict[str, Any] | None, str]:
    """Run ``solver ARGV`` in a thread; return (exit code, the JSON printed or None, stderr)."""
    code = await asyncio.to_thread(main, argv)
    captured = capsys.readouterr()
    if env is not None:  # no secret, ever, on either stream
        secret = env.key.to_text()[len("ed25519:") :]
        assert secret not in captured.out
        assert secret not in captured.err
    lines = captured.out.splitlines()
    assert len(lines) <= 1, captured.out
    return code, (orjson.loads(lines[0]) if lines else None), captured.err


def settled(code: int, result: dict[str, Any] | None, err: str) -> dict[str, Any]:
    assert code == 0, (result, err)
    assert result is not None
    assert result["status"] == "SETTLED", result
    assert len(result["intent_hash"]) >= 32
    assert result.get("tx_hash")
    assert "reason" not in result
    return result


# ------------------------------------------------------------------------------ keys


async def test_keys_add_then_list_shows_it(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    own = env.key.public_key.to_text()
    code, listed, _ = await cli(["keys", "list", "--config", env.config], capsys, env)
    assert code == 0
    assert listed == {"account_id": env.account, "public_keys": [own]}

    quoting = SecretKey.generate().public_key.to_text()
    result = settled(
        *await cli(["keys", "add", "--config", env.config, "--public-key", quoting], capsys, env)
    )
    assert env.ledger.has_public_key(env.account, quoting)
    added = env.events("public_key_added")
    assert added == [{"account_id": env.account, "public_key": quoting}]
    assert any(e["intent_hash"] == result["intent_hash"] for e in env.events("intents_executed"))

    code, listed, _ = await cli(["keys", "list", "--config", env.config], capsys, env)
    assert code == 0 and listed is not None
    assert sorted(listed["public_keys"]) == sorted([own, quoting])

    # Adding it again: the verifier refuses, the reason is its own.
    code, result2, _ = await cli(
        ["keys", "add", "--config", env.config, "--public-key", quoting], capsys, env
    )
    assert code == 1 and result2 is not None
    assert result2["status"] == "FAILED"
    assert "already exists" in result2["reason"]


async def test_rotate_then_the_removed_key_no_longer_signs(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = env.key.public_key.to_text()
    second = SecretKey.generate()
    monkeypatch.setenv(SECOND_VAR, second.to_text())
    settled(
        *await cli(
            [
                "keys",
                "add",
                "--config",
                env.config,
                "--public-key",
                second.public_key.to_text(),
            ],
            capsys,
            env,
        )
    )
    # Remove the first key, signing with the second one: no --yes-remove-signing-key needed.
    code, result, err = await cli(
        [
            "keys",
            "remove",
            "--config",
            env.config,
            "--public-key",
            first,
            "--key-env",
            SECOND_VAR,
        ],
        capsys,
        env,
    )
    settled(code, result, err)
    assert err == ""
    assert env.ledger.public_keys_of(env.account) == [second.public_key.to_text()]
    assert env.events("public_key_removed") == [{"account_id": env.account, "public_key": first}]

    # The config's key (the removed one) no longer signs: refused with the verifier's reason.
    before = env.ledger.state_digest()
    code, result, _ = await cli(
        ["transfer", "--config", env.config, "--token", USDC, "--amount", "1", "--to", RECEIVER],
        capsys,
        env,
    )
    assert code == 1 and result is not None
    assert result["status"] == "FAILED"
    assert result["reason"] == f"public key '{first}' doesn't exist for account '{env.account}'"
    assert env.ledger.state_digest() == before

    # The second key still moves funds.
    settled(
        *await cli(
            [
                "transfer",
                "--config",
                env.config,
                "--token",
                USDC,
                "--amount",
                "7",
                "--to",
                RECEIVER,
                "--key-env",
                SECOND_VAR,
            ],
            capsys,
            env,
        )
    )
    assert env.ledger.mt_balance_of(RECEIVER, USDC) == 7


async def test_removing_the_signing_key_needs_the_explicit_flag(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    own = env.key.public_key.to_text()
    before = env.ledger.state_digest()
    code, result, err = await cli(
        ["keys", "remove", "--config", env.config, "--public-key", own], capsys, env
    )
    assert (code, result) == (2, None)
    assert err.startswith("solver: error: ") and "--yes-remove-signing-key" in err
    assert env.ledger.state_digest() == before

    # With the flag: a loud warning (it is the only key), then the account is locked out.
    code, result, err = await cli(
        ["keys", "remove", "--config", env.config, "--public-key", own, "--yes-remove-signing-key"],
        capsys,
        env,
    )
    settled(code, result, err)
    assert "solver: warning:" in err and "ONLY key" in err
    assert env.ledger.public_keys_of(env.account) == []
    code, result, _ = await cli(
        ["transfer", "--config", env.config, "--token", USDC, "--amount", "1", "--to", RECEIVER],
        capsys,
        env,
    )
    assert code == 1 and result is not None and "doesn't exist" in result["reason"]


# ------------------------------------------------------------------------------ funds


async def test_transfer_moves_exactly_the_amount(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    before = env.balances()
    result = settled(
        *await cli(
            [
                "transfer",
                "--config",
                env.config,
                "--token",
                USDC,
                "--amount",
                "1234567",
                "--to",
                RECEIVER,
                "--memo",
                "rebalance",
            ],
            capsys,
            env,
        )
    )
    assert env.balances() == [before[0] - 1_234_567, before[1]]
    assert env.balances(RECEIVER) == [1_234_567, 0]
    [event] = env.events("transfer")
    assert event["intent_hash"] == result["intent_hash"]
    assert event["tokens"] == {USDC: "1234567"} and event["memo"] == "rebalance"

    # --amount-whole: 1.5 wNEAR is exactly 1.5e24 in the smallest unit (24 decimals).
    settled(
        *await cli(
            [
                "transfer",
                "--config",
                env.config,
                "--token",
                NEAR,
                "--amount-whole",
                "1.5",
                "--to",
                RECEIVER,
            ],
            capsys,
            env,
        )
    )
    assert env.balances(RECEIVER) == [1_234_567, 15 * E24 // 10]
    assert env.balances()[1] == before[1] - 15 * E24 // 10


async def test_withdraw_debits_the_token_and_emits_ft_withdraw(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env.ledger.deposit(env.account, DEFAULT_WRAPPED_NATIVE, 5 * E24)
    before = env.balances()
    result = settled(
        *await cli(
            [
                "withdraw",
                "--config",
                env.config,
                "--token",
                USDC,
                "--amount-whole",
                "2.25",
                "--to",
                "cold-wallet.sandbox",
                "--memo",
                "sweep",
                "--storage-deposit",
                "1250000000000000000000",
            ],
            capsys,
            env,
        )
    )
    # The storage deposit is paid in the sandbox's own wNEAR (the configured wrapped_native).
    assert DEFAULT_WRAPPED_NATIVE == NEAR
    assert env.balances() == [before[0] - 2_250_000, before[1] - 1_250_000_000_000_000_000_000]
    [event] = env.events("ft_withdraw")
    assert event == {
        "intent_hash": result["intent_hash"],
        "account_id": env.account,
        "token": "usdc.sandbox",
        "receiver_id": "cold-wallet.sandbox",
        "amount": "2250000",
        "storage_deposit": "1250000000000000000000",
        "msg": None,
        "memo": "sweep",
    }

    # The bare token contract works too, and --msg is passed through.
    settled(
        *await cli(
            [
                "withdraw",
                "--config",
                env.config,
                "--token",
                "wrap.sandbox",
                "--amount",
                "5",
                "--to",
                "dex.sandbox",
                "--msg",
                '{"action":"deposit"}',
            ],
            capsys,
            env,
        )
    )
    second = env.events("ft_withdraw")[1]
    assert (second["token"], second["amount"], second["msg"]) == (
        "wrap.sandbox",
        "5",
        '{"action":"deposit"}',
    )
    assert env.balances()[1] == before[1] - 1_250_000_000_000_000_000_000 - 5


@pytest.mark.parametrize(
    "argv",
    [
        ["transfer", "--token", USDC, "--amount", "5", "--to", RECEIVER],
        ["withdraw", "--token", USDC, "--amount", "5", "--to", RECEIVER],
        ["keys", "add", "--public-key", SecretKey.generate().public_key.to_text()],
    ],
    ids=["transfer", "withdraw", "keys-add"],
)
async def test_dry_run_changes_nothing(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    before = env.ledger.state_digest()
    code, result, err = await cli([*argv, "--config", env.config, "--dry-run"], capsys, env)
    assert code == 0, (result, err)
    assert result is not None
    assert result["status"] == "SIMULATED"
    signed = result["signed_data"]
    assert signed["standard"] == "nep413"
    assert signed["payload"]["recipient"] == env.ledger.contract_id
    assert signed["public_key"] == env.key.public_key.to_text()
    simulation = result["simulation"]
    assert simulation["intents_executed"][0]["intent_hash"] == result["intent_hash"]
    assert "invariant_violated" not in simulation
    assert "dry run" in err and "valid authorization" in err
    assert env.ledger.state_digest() == before
    assert not env.sandbox.bus.intents  # nothing reached the bus


async def test_dry_run_reports_a_failing_simulation(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    before = env.ledger.state_digest()
    code, result, _ = await cli(
        [
            "withdraw",
            "--config",
            env.config,
            "--token",
            USDC,
            "--amount",
            str(10**15),
            "--to",
            RECEIVER,
            "--dry-run",
        ],
        capsys,
        env,
    )
    assert code == 1 and result is not None
    assert result["status"] == "SIMULATION_FAILED"
    assert "insufficient balance or overflow" in result["reason"]
    assert env.ledger.state_digest() == before


@pytest.mark.parametrize("command", ["transfer", "withdraw"])
async def test_insufficient_balance_is_exit_1_with_the_verifiers_reason(
    env: Env, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    before = env.ledger.state_digest()
    code, result, _ = await cli(
        [
            command,
            "--config",
            env.config,
            "--token",
            USDC,
            "--amount",
            str(1_000 * E6 + 1),
            "--to",
            RECEIVER,
        ],
        capsys,
        env,
    )
    assert code == 1 and result is not None
    assert result["status"] == "FAILED"
    assert result["reason"] == "insufficient balance or overflow"
    assert env.ledger.state_digest() == before


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--amount", "1.5"], "--amount-whole"),
        (["--amount", "-5"], "negative"),
        (["--amount=-5"], "negative"),
        (["--amount", str(U128_MAX + 1)], "exceeds u128"),
        (["--amount", "0"], "positive"),
        (["--amount", "12abc"], "not an unsigned decimal"),
        (["--amount", "1e6"], "--amount-whole"),
        (["--amount-whole", "1.0000001"], "more precision than the token's 6 decimals"),
        (["--amount-whole", "-1"], "digits with an optional fraction"),
        (["--amount-whole", "1e3"], "digits with an optional fraction"),
        (["--amount-whole", "0.0"], "positive"),
        (["--amount-whole", "1" + "0" * 33], "exceeds u128"),
    ],
)
@pytest.mark.parametrize("command", ["transfer", "withdraw"])
async def test_bad_amounts_are_exit_2(
    env: Env,
    capsys: pytest.CaptureFixture[str],
    command: str,
    extra: list[str],
    needle: str,
) -> None:
    before = env.ledger.state_digest()
    code, result, err = await cli(
        [command, "--config", env.config, "--token", USDC, "--to", RECEIVER, *extra], capsys, env
    )
    assert (code, result) == (2, None)
    assert err.startswith("solver: error: ") and len(err.splitlines()) == 1, err
    assert needle in err
    assert env.ledger.state_digest() == before
    assert not env.sandbox.bus.intents


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["withdraw", "--token", "nep245:multi.sandbox:1", "--amount", "1", "--to", RECEIVER],
            "nep141 tokens only",
        ),
        (
            ["transfer", "--token", "nep141:eth.sandbox", "--amount", "1", "--to", "Bad..Id"],
            "invalid account id",
        ),
        (
            ["transfer", "--token", "usdc.sandbox", "--amount", "1", "--to", RECEIVER],
            "--token",
        ),
        (
            ["transfer", "--token", "nep141:x.sandbox", "--amount-whole", "1", "--to", RECEIVER],
            "not in tokens",
        ),
        (["keys", "add", "--public-key", "ed25519:notakey"], "--public-key"),
        (
            ["transfer", "--token", USDC, "--amount", "1", "--to", RECEIVER, "--deadline-s", "0"],
            "--deadline-s",
        ),
        (
            ["transfer", "--token", USDC, "--amount", "1", "--to", RECEIVER, "--wait-s", "nan"],
            "--wait-s",
        ),
    ],
)
async def test_bad_input_is_exit_2(
    env: Env, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, result, err = await cli([*argv, "--config", env.config], capsys, env)
    assert (code, result) == (2, None), err
    assert needle in err


async def test_transfer_to_oneself_and_a_pasted_secret_are_refused(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await cli(
        ["transfer", "--config", env.config, "--token", USDC, "--amount", "1", "--to", env.account],
        capsys,
        env,
    )
    assert code == 2 and "itself" in err
    # A secret key given as --public-key is refused without being repeated (cli() checks).
    code, _, err = await cli(
        ["keys", "add", "--config", env.config, "--public-key", env.key.to_text()], capsys, env
    )
    assert code == 2 and "not a secret key" in err


# ------------------------------------------------------------------------------ following


async def test_accepted_then_failed_in_execution_is_not_found_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sandbox, env = await start_env(tmp_path, monkeypatch, settlement_delay_ms=600)
    try:
        task = asyncio.create_task(
            cli(
                [
                    "transfer",
                    "--config",
                    env.config,
                    "--token",
                    USDC,
                    "--amount",
                    "100",
                    "--to",
                    RECEIVER,
                ],
                capsys,
                env,
            )
        )
        for _ in range(500):  # accepted by the bus: now drain the balance before it settles
            if sandbox.bus.intents:
                break
            await asyncio.sleep(0.01)
        assert sandbox.bus.intents
        sandbox.ledger.balances[env.account][USDC] = 0
        code, result, _ = await task
        assert code == 1 and result is not None
        assert result["status"] == "NOT_FOUND_OR_NOT_VALID"
        assert "insufficient balance or overflow" in result["reason"]
        assert env.ledger.mt_balance_of(RECEIVER, USDC) == 0
    finally:
        await sandbox.stop()


async def test_no_final_status_within_the_wait_is_exit_1_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sandbox, env = await start_env(tmp_path, monkeypatch, settlement_delay_ms=3000)
    try:
        code, result, _ = await cli(
            [
                "transfer",
                "--config",
                env.config,
                "--token",
                USDC,
                "--amount",
                "100",
                "--to",
                RECEIVER,
                "--wait-s",
                "0.3",
            ],
            capsys,
            env,
        )
        assert code == 1 and result is not None
        assert result["status"] in ("PENDING", "TX_BROADCASTED")
        assert "no final status" in result["reason"] and result["deadline"] in result["reason"]
    finally:
        await sandbox.stop()


# ------------------------------------------------------------------------------ amounts


def test_whole_amounts_convert_exactly() -> None:
    assert parse_whole_amount("1.5", 6) == 1_500_000
    assert parse_whole_amount("1.50", 1) == 15
    assert parse_whole_amount("7", 0) == 7
    assert parse_whole_amount("0.000000000000000000000001", 24) == 1
    # 40 significant digits: beyond the default 28-digit Decimal context, still exact.
    assert (
        parse_whole_amount("123456789012345.123456789012345678901234", 24)
        == 123456789012345123456789012345678901234
    )
    assert parse_whole_amount("340282366920938.463463374607431768211455", 24) == U128_MAX
    for bad, decimals in (("1.5", 0), ("0.0000001", 6), ("1.", 6), (".5", 6), ("1_000", 6)):
        with pytest.raises(ValueError):
            parse_whole_amount(bad, decimals)


def test_smallest_unit_amounts() -> None:
    assert parse_amount("1") == 1
    assert parse_amount(str(U128_MAX)) == U128_MAX
    for bad in ("0", "01", "+1", "-1", "1.0", " 1", "", str(U128_MAX + 1)):
        with pytest.raises(ValueError):
            parse_amount(bad)
