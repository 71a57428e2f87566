"""Rotating the key in a SoftHSM2 token through the signer (issue 28; docs/operations.md):
a new key made in the token, ``add_public_key`` signed by the old one, the signer switched,
``remove_public_key`` of the old signed by the new, the old deleted from the token. The operator
commands sign through the signer process (``signer.mode: remote``), whose policy names exactly
these two keys: any other key change is refused by rule."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.app.harness import DEFAULT_BALANCES, build_bot_config, fund, running_sandbox
from tests.signer.helpers import (
    KEY_LABEL,
    TEST_KEY,
    TOKEN_SKIP_REASON,
    make_token,
    running_signer,
    signer_yaml,
)

pytestmark = pytest.mark.skipif(TOKEN_SKIP_REASON is not None, reason=TOKEN_SKIP_REASON or "")
ACCOUNT = TEST_KEY.public_key.implicit_account_id()


async def solver(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """``solver ARGS`` as a child, without blocking the loop the sandbox runs on."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "solver.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 90)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_rotate_the_key_in_the_token(tmp_path: Path) -> None:
    token = make_token(tmp_path / "hsm")
    made = token.keys("new", "--label", "quoting-2")
    assert made.returncode == 0, made.stderr
    new_key = orjson.loads(made.stdout)["public_key"]
    old_key = TEST_KEY.public_key.to_text()
    async with running_sandbox(tmp_path) as sandbox:
        fund(sandbox, ACCOUNT, DEFAULT_BALANCES)
        caps = {asset: {"per_request": 1, "per_hour": 1} for asset in DEFAULT_BALANCES}

        def config(label: str) -> Path:
            return signer_yaml(
                tmp_path / f"signer-{label}.yaml",
                account=ACCOUNT,
                verifier=sandbox.ledger.contract_id,
                key=token.key_spec(label),
                quote_caps=caps,
                chain_rpc_url=sandbox.urls()["chain_rpc"],
                intents={
                    "add_public_key": {"public_keys": [new_key]},
                    "remove_public_key": {"public_keys": [old_key]},
                },
            )

        env: dict[str, Any] = {k: v for k, v in token.env.items() if "PIN" not in k}
        with running_signer(config(KEY_LABEL), token.env) as signer:
            bot = build_bot_config(
                sandbox,
                TEST_KEY,
                tmp_path,
                {
                    "signer.mode": "remote",
                    "signer.socket": str(signer.socket),
                    "account.key_env": None,
                },
            )
            bot_yaml = tmp_path / "bot.yaml"
            bot_yaml.write_text(yaml.safe_dump(bot.model_dump(mode="json")))
            stray = "ed25519:" + "2" * 44
            code, _, err = await solver(
                "keys", "add", "--config", str(bot_yaml), "--public-key", stray, env=env
            )
            assert code == 2 and "public_key" in err and "Traceback" not in err, err
            code, out, err = await solver(
                "keys", "add", "--config", str(bot_yaml), "--public-key", new_key, env=env
            )
            assert code == 0, (out, err)
            assert orjson.loads(out)["status"] == "SETTLED"
        assert set(sandbox.ledger.public_keys_of(ACCOUNT)) == {old_key, new_key}
        with running_signer(config("quoting-2"), token.env) as signer:  # the switch
            assert signer.public_key == new_key
            code, out, err = await solver(
                "keys", "remove", "--config", str(bot_yaml), "--public-key", old_key, env=env
            )
            assert code == 0, (out, err)
        assert sandbox.ledger.public_keys_of(ACCOUNT) == [new_key]
    deleted = token.keys("delete", "--label", KEY_LABEL)
    assert deleted.returncode == 0, deleted.stderr
    assert orjson.loads(deleted.stdout)["objects_removed"] == 2
