"""``solver swap quote | submit | status | rebalances`` and ``solver backtest import-history``
against the sandbox's own swap and history APIs, a scripted market maker on its bus
(:mod:`tests.io.swap_sandbox`). Commands run in-process in a thread (``main`` starts its own
event loop) while the sandbox runs in the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from backtest.stream.events import CompetitorEvent, PriceEvent, RequestEvent, TokenInfo
from backtest.stream.history_import import implied_price, import_records, infer_decimals
from backtest.stream.read import read_stream
from solver.cli import main
from solver.config import apply_overrides
from solver.core.rebalance_record import RebalanceRecord
from solver.io.store.sqlite_store import Store
from solver.protocol.history import TransactionRecord
from solver.protocol.keys import SecretKey
from tests.app.harness import E6, E24, NEAR, USDC, fund
from tests.cli.helpers import assert_one_line_error
from tests.io.store_helpers import step
from tests.io.swap_sandbox import SwapSandbox, swap_sandbox

DEFAULT_YAML = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
KEY_VAR = "SOLVER_SWAP_CLI_KEY"
TOKEN_VAR = "SOLVER_SWAP_CLI_TOKEN"


@dataclass
class Env:
    swaps: SwapSandbox
    key: SecretKey
    config: Path
    tmp_path: Path

    @property
    def account(self) -> str:
        return self.key.public_key.implicit_account_id()

    def balances(self) -> dict[str, int]:
        return self.swaps.balances(self.account)


def write_config(path: Path, swaps: SwapSandbox, account: str, **changes: Any) -> Path:
    urls = swaps.sandbox.urls()
    data = apply_overrides(
        yaml.safe_load(DEFAULT_YAML.read_text(encoding="utf-8")),
        {
            "account.id": account,
            "account.key_env": KEY_VAR,
            "account.key_file": None,
            "verifier_contract": swaps.sandbox.ledger.contract_id,
            "bus.ws_url": urls["relay_ws"],
            "bus.rpc_url": urls["relay_rpc"],
            "chain.rpc_url": urls["chain_rpc"],
            "prices.sources.0.url": urls["prices"],
            "storage.path": str(path.parent / "solver.sqlite"),
            "swap_api": {"base_url": urls["swap_api"], "token_env": TOKEN_VAR},
            "history_api": {"api_url": urls["history_api"], "token_env": TOKEN_VAR},
            **changes,
        },
    )
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
async def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Env]:
    async with swap_sandbox(tmp_path) as swaps:
        key = SecretKey.generate()
        monkeypatch.setenv(KEY_VAR, key.to_text())
        monkeypatch.setenv(TOKEN_VAR, swaps.token)
        account = key.public_key.implicit_account_id()
        fund(swaps.sandbox, account, {NEAR: 100 * E24, USDC: 1_000 * E6})
        yield Env(swaps, key, write_config(tmp_path / "bot.yaml", swaps, account), tmp_path)


async def cli(
    argv: list[str], capsys: pytest.CaptureFixture[str], env: Env | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """Run ``solver ARGV``; (exit code, the JSON lines printed, stderr). Never a secret."""
    code = await asyncio.to_thread(main, argv)
    captured = capsys.readouterr()
    if env is not None:
        for secret in (env.key.to_text()[len("ed25519:") :], env.swaps.token):
            assert secret not in captured.out and secret not in captured.err
    return code, [orjson.loads(line) for line in captured.out.splitlines()], captured.err


async def quote(env: Env, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    argv = ["swap", "quote", "--config", str(env.config), "--from", NEAR, "--to", USDC]
    code, out, err = await cli([*argv, "--amount-whole", "10", *extra], capsys, env)
    assert (code, err) == (0, ""), err
    assert len(out) == 1
    return out[0]


# ---------------------------------------------------------------------------------- swap


async def test_quote_prints_the_answer_as_received(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    body = await quote(env, capsys)
    assert body["signature"] and body["quote"]["depositAddress"]
    assert body["quote"]["amountIn"] == str(10 * E24)
    assert body["quote"]["amountOut"] == str(30 * E6)  # with the token: no platform fee
    echo = body["quoteRequest"]
    assert echo["recipient"] == echo["refundTo"] == env.account
    assert echo["depositType"] == echo["refundType"] == echo["recipientType"] == "INTENTS"
    assert echo["slippageTolerance"] == 50  # rebalance.slippage_bps of the config
    dry = await quote(env, capsys, "--dry", "--slippage-bps", "10")
    assert "depositAddress" not in dry["quote"] and dry["quoteRequest"]["slippageTolerance"] == 10


async def test_without_a_token_the_fee_is_warned_about(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(
        env.tmp_path / "no-token.yaml",
        env.swaps,
        env.account,
        swap_api={"base_url": env.swaps.swap_url},
    )
    argv = ["swap", "quote", "--config", str(config), "--from", NEAR, "--to", USDC, "--dry"]
    code, out, err = await cli([*argv, "--amount", str(10 * E24)], capsys, env)
    assert code == 0 and "0.2 % platform fee applies" in err
    assert out[0]["quote"]["amountOut"] == str(30 * E6 * 9980 // 10_000)


async def test_submit_pays_the_deposit_and_follows_the_swap(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    quote_file = env.tmp_path / "quote.json"
    quote_file.write_bytes(orjson.dumps(await quote(env, capsys)))
    argv = ["swap", "submit", "--config", str(env.config), "--quote", str(quote_file), "--follow"]
    code, out, err = await cli(argv, capsys, env)
    assert (code, err) == (0, ""), (out, err)
    result = out[0]
    assert result["deposit"]["status"] == "SETTLED"
    assert result["submit"]["status"] in ("KNOWN_DEPOSIT_TX", "PROCESSING", "SUCCESS")
    assert result["status"]["status"] == "SUCCESS"
    assert env.balances()[NEAR] == 90 * E24 and env.balances()[USDC] == 1_030 * E6
    # And the status command reads the same swap back.
    address = result["deposit_address"]
    argv = ["swap", "status", "--config", str(env.config), "--deposit-address", address]
    code, out, err = await cli(argv, capsys, env)
    assert code == 0 and out[0]["status"] == "SUCCESS"
    assert out[0]["swapDetails"]["amountOut"] == str(30 * E6)


async def test_submit_dry_run_simulates_and_pays_nothing(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    quote_file = env.tmp_path / "quote.json"
    quote_file.write_bytes(orjson.dumps(await quote(env, capsys)))
    argv = ["swap", "submit", "--config", str(env.config), "--quote", str(quote_file), "--dry-run"]
    code, out, err = await cli(argv, capsys, env)
    assert code == 0 and out[0]["deposit"]["status"] == "SIMULATED"
    assert "submit" not in out[0] and "dry run" in err
    assert env.balances()[NEAR] == 100 * E24


async def test_submit_refuses_what_it_cannot_pay(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    dry = env.tmp_path / "dry.json"
    dry.write_bytes(orjson.dumps(await quote(env, capsys, "--dry")))
    argv = ["swap", "submit", "--config", str(env.config), "--quote", str(dry)]
    code, out, err = await cli(argv, capsys, env)
    assert code == 2 and out == []
    assert_one_line_error(err)
    assert "a dry quote has no deposit address" in err
    stale = await quote(env, capsys)
    stale["quote"]["timeWhenInactive"] = "2020-01-01T00:00:00.000Z"
    old = env.tmp_path / "old.json"
    old.write_bytes(orjson.dumps(stale))
    code, _, err = await cli([*argv[:-1], str(old)], capsys, env)
    assert code == 2 and "timeWhenInactive" in err and "has passed" in err
    code, _, err = await cli(["swap", "submit", "--config", str(env.config)], capsys, env)
    assert code == 2 and "give --quote" in err


async def test_submit_reports_a_deposit_made_elsewhere(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    body = await quote(env, capsys)
    address = body["quote"]["depositAddress"]
    argv = ["swap", "submit", "--config", str(env.config), "--tx-hash", "tx-elsewhere"]
    code, out, err = await cli([*argv, "--deposit-address", address], capsys, env)
    assert (code, err) == (0, "")
    assert "deposit" not in out[0] and out[0]["submit"]["status"] == "KNOWN_DEPOSIT_TX"
    assert env.balances()[NEAR] == 100 * E24


async def test_status_errors_are_one_line(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["swap", "status", "--config", str(env.config), "--deposit-address", "nobody.test"]
    code, out, err = await cli(argv, capsys, env)
    assert code == 2 and out == []
    assert_one_line_error(err)
    assert "HTTP 404" in err
    code, _, err = await cli(["swap", "status", "--deposit-address", "x.test"], capsys, env)
    assert code == 2 and "no swap API" in err


# ---------------------------------------------------------------------------------- rebalances


def test_rebalances_lists_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "solver.sqlite"
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with Store(db, checkpoint_every_s=None) as store:
        for n, state in enumerate(("SUCCESS", "SUBMITTED")):
            record = RebalanceRecord(
                id=f"r{n}",
                created_at=t0 + timedelta(minutes=n),
                updated_at=t0 + timedelta(minutes=n),
                state="PLANNED",
                asset=NEAR,
                asset_in=NEAR,
                asset_out=USDC,
                amount_in=5 * E24,
                plan={"reason": "above max"},
            )
            step(store, record, "planned")
            finished = t0 if state == "SUCCESS" else None
            step(store, replace(record, state=state, finished_at=finished), state)
    assert main(["swap", "rebalances", "--db", str(db)]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["state"]) for r in lines] == [("r1", "SUBMITTED"), ("r0", "SUCCESS")]
    assert main(["swap", "rebalances", "--db", str(db), "--open"]) == 0
    assert [orjson.loads(x)["id"] for x in capsys.readouterr().out.splitlines()] == ["r1"]
    assert main(["swap", "rebalances", "--db", str(db), "--id", "r0"]) == 0
    one = orjson.loads(capsys.readouterr().out)
    assert [s["state"] for s in one["steps"]] == ["PLANNED", "SUCCESS"]
    assert one["plan"] == {"reason": "above max"}
    assert main(["swap", "rebalances", "--db", str(db), "--id", "nope"]) == 2


# ---------------------------------------------------------------------------------- history


async def test_import_history_writes_a_replayable_stream(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    started = datetime.now(UTC) - timedelta(seconds=5)
    for n in range(3):
        done = await env.swaps.swap(f"user{n}.test", (n + 1) * E24)
        assert done["status"] == "SUCCESS"
    out_file = env.tmp_path / "history.jsonl.gz"
    argv = [
        "backtest", "import-history", "--api-url", env.swaps.history_url, "--token-env",
        TOKEN_VAR, "--from", started.isoformat(), "--to",
        (datetime.now(UTC) + timedelta(seconds=5)).isoformat(), "--out", str(out_file),
        "--page-size", "2",
    ]  # fmt: skip
    code, out, err = await cli(argv, capsys, env)
    assert (code, err) == (0, ""), err
    assert out[0]["records"] == 3 and out[0]["skipped"] == {}
    with read_stream(out_file, strict=True) as reader:
        events = list(reader)
        header = reader.header
    assert header.tokens == {NEAR: TokenInfo("wrap", 24), USDC: TokenInfo("usdc", 6)}
    requests = [e for e in events if isinstance(e, RequestEvent)]
    assert [r.request.amount for r in requests] == [E24, 2 * E24, 3 * E24]  # oldest first
    assert all(r.request.exact_in and r.request.asset_in == NEAR for r in requests)
    prices = {(e.asset, e.usd) for e in events if isinstance(e, PriceEvent)}
    assert prices == {(NEAR, "3"), (USDC, "1")}
    competitors = [e.best_amount for e in events if isinstance(e, CompetitorEvent)]
    assert competitors == [3 * E6, 6 * E6, 9 * E6]
    # With the config: its symbols, and the history API found from it.
    argv = [
        "backtest", "import-history", "--config", str(env.config), "--from",
        started.date().isoformat(), "--to", "2099-01-01", "--out", str(out_file),
    ]  # fmt: skip
    code, out, _ = await cli(argv, capsys, env)
    assert code == 0 and out[0]["records"] == 3
    with read_stream(out_file) as reader:
        assert reader.header.tokens[NEAR] == TokenInfo("wNEAR", 24)


async def test_import_history_input_errors(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["backtest", "import-history", "--out", str(env.tmp_path / "x.jsonl")]
    code, _, err = await cli([*base, "--from", "2025-01-01", "--to", "2025-02-01"], capsys)
    assert code == 2 and "--api-url and --token-env" in err
    argv = [*base, "--config", str(env.config), "--from", "2025-02-01", "--to", "2025-01-01"]
    code, _, err = await cli(argv, capsys)
    assert code == 2 and "--to must be later than --from" in err
    argv = [*base, "--config", str(env.config), "--from", "yesterday", "--to", "2025-01-01"]
    code, _, err = await cli(argv, capsys)
    assert code == 2 and "--from" in err


def test_history_conversion_rules() -> None:
    assert infer_decimals(1_500_000, "1.5") == 6
    assert infer_decimals(12_345_678_901_234_567_890_123_456, "12345.678901") == 21  # rounded
    assert infer_decimals(10, "3") is None and infer_decimals(0, "0") is None
    assert implied_price(2 * E24, 24, "6.00") == "3"
    assert implied_price(3 * E6, 6, "2.99") == "0.996666666667"
    assert implied_price(E24, 24, "0") is None
    record = TransactionRecord.model_validate(
        {
            "originAsset": NEAR, "destinationAsset": USDC, "depositAddress": "a.test",
            "depositMemo": "7", "depositAddressAndMemo": "a.test_7", "recipient": "u.test",
            "status": "REFUNDED", "createdAt": "2026-01-01T00:00:00.000Z",
            "createdAtTimestamp": 1767225600, "intentHashes": None, "referral": None,
            "amountInFormatted": "2", "amountOutFormatted": "0", "appFees": [],
            "nearTxHashes": [], "originChainTxHashes": [], "destinationChainTxHashes": [],
            "amountIn": str(2 * E24), "amountInUsd": "6", "amountOut": "0", "amountOutUsd": "0",
            "refundTo": "u.test", "senders": [], "refundFeeFormatted": None,
        }
    )  # fmt: skip
    result = import_records([record], known={USDC: TokenInfo("USDC", 6)})
    kinds = [type(e).__name__ for e in result.sorted_events()]
    assert kinds == ["PriceEvent", "RequestEvent"]  # no output: no price, no competitor
    request = next(e for e in result.sorted_events() if isinstance(e, RequestEvent))
    assert request.request.quote_id == "history:a.test:7"
    unknown = import_records([record.model_copy(update={"amount_in_formatted": "3"})])
    assert unknown.skipped == {"unknown token decimals": 1} and unknown.events == []
