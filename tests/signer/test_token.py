"""Keys in a real SoftHSM2 token (issue 28): made non-extractable and printed in the account's
format, imported, used by ``solver signer serve``, the PIN changed; a wrong PIN, a missing key
label or a module that is not a PKCS#11 library is one clear line, exit 2, no traceback, no PIN.
Skipped with a printed reason without SoftHSM2 or python-pkcs11."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from solver.core.clock import SECOND, now_micros
from solver.protocol.keys import PublicKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.quote_signing import SignedQuote
from solver.protocol.signing import parse_signed, verify_signed
from solver.signer.client import RemoteQuoteSigner
from tests.signer.helpers import (
    PIN_VAR,
    TEST_KEY,
    TEST_PIN,
    TOKEN_SKIP_REASON,
    Token,
    cli,
    make_token,
    running_signer,
    signer_yaml,
)

ACCOUNT, VERIFIER = "solver.sandbox", "intents.sandbox"
USDC, NEAR = "nep141:usdc.sandbox", "nep141:wrap.sandbox"
CAPS = {USDC: {"per_request": 1_000, "per_hour": 10_000}}


def config(tmp_path: Path, token: Token, **pkcs11: object) -> Path:
    return signer_yaml(
        tmp_path / "signer.yaml",
        account=ACCOUNT,
        verifier=VERIFIER,
        key=token.key_spec(**pkcs11),  # type: ignore[arg-type]
        quote_caps=CAPS,
    )


def test_keys_new_makes_a_key_in_the_token_and_prints_its_public_key(token: Token) -> None:
    made = token.keys("new", "--label", "fresh")
    assert made.returncode == 0, made.stderr
    out = orjson.loads(made.stdout)
    public = PublicKey.from_text(out["public_key"])
    assert out["account_id"] == public.implicit_account_id()
    assert "secret" not in made.stdout
    again = token.keys("new", "--label", "fresh")
    assert again.returncode == 2
    assert "exists already" in again.stderr and "Traceback" not in again.stderr


async def test_the_signer_signs_with_the_key_in_the_token(tmp_path: Path, token: Token) -> None:
    with running_signer(config(tmp_path, token), token.env) as signer:
        assert signer.public_key == TEST_KEY.public_key.to_text()
        client = RemoteQuoteSigner(signer.socket, ACCOUNT, VERIFIER, timeout_s=10)
        await client.start()
        results: list[SignedQuote | str] = []
        now = now_micros()
        for amount in range(1, 21):
            client.sign_later(
                quote_id=str(amount),
                deadline=now + 20 * SECOND,
                nonce=salted_nonce(b"\x01\x02\x03\x04"),
                asset_in=NEAR,
                amount_in=1,
                asset_out=USDC,
                amount_out=amount,
                reply=results.append,
            )
        for _ in range(1000):
            if len(results) == 20:
                break
            await asyncio.sleep(0.01)
        await client.close()
    assert len(results) == 20
    for amount, result in enumerate(results, 1):
        assert isinstance(result, SignedQuote), result
        assert verify_signed(parse_signed(result.signed_data)).public_key == signer.public_key
        assert f'"-{amount}"' in result.message


def serve_fails(tmp_path: Path, env: dict[str, str], yaml_path: Path) -> str:
    done = cli(["signer", "serve", "--config", str(yaml_path)], env, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in done.stderr
    assert TEST_PIN not in done.stderr + done.stdout
    return lines[0]


def test_a_wrong_pin_is_one_line_naming_the_token(tmp_path: Path, token: Token) -> None:
    env = {**token.env, PIN_VAR: "000000"}
    line = serve_fails(tmp_path, env, config(tmp_path, token))
    assert "PIN is incorrect" in line and "solver-test" in line and "000000" not in line


def test_a_missing_key_label_is_named(tmp_path: Path, token: Token) -> None:
    line = serve_fails(tmp_path, token.env, config(tmp_path, token, key_label="nope"))
    assert "no Ed25519 key labelled 'nope'" in line


def test_a_module_that_is_not_pkcs11_is_named(tmp_path: Path, token: Token) -> None:
    not_a_module = tmp_path / "libnot.so"
    not_a_module.write_bytes(b"\x7fELF not really")
    yaml_path = config(tmp_path, token)
    text = yaml_path.read_text().replace(token.module, str(not_a_module))
    yaml_path.write_text(text)
    line = serve_fails(tmp_path, token.env, yaml_path)
    assert f"module {not_a_module} is not a loadable PKCS#11 library" in line


def test_the_pin_in_yaml_is_refused(tmp_path: Path, token: Token) -> None:
    yaml_path = config(tmp_path, token)
    yaml_path.write_text(yaml_path.read_text().replace("pin_env:", "pin:"))
    line = serve_fails(tmp_path, token.env, yaml_path)
    assert "key.pkcs11.pin" in line


@pytest.mark.skipif(TOKEN_SKIP_REASON is not None, reason=TOKEN_SKIP_REASON or "")
async def test_the_pin_is_changed_and_the_old_one_no_longer_opens_it(tmp_path: Path) -> None:
    own = make_token(tmp_path / "hsm")  # its own token: the session's keeps its PIN
    env = {**own.env, "NEW_PIN": "551177"}
    changed = own.keys("pin", "--new-pin-env", "NEW_PIN", env=env)
    assert changed.returncode == 0, changed.stderr
    assert "551177" not in changed.stdout + changed.stderr
    serve_fails(tmp_path, own.env, config(tmp_path, own))  # the old PIN: refused
    with running_signer(config(tmp_path, own), {**own.env, PIN_VAR: "551177"}) as signer:
        assert signer.public_key == TEST_KEY.public_key.to_text()
