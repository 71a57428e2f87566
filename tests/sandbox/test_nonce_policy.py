"""The verifier's nonce policy, wrapped native token and error texts (issue 13).

Pure ledger tests: time is :data:`NOW`, nothing reads the clock.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from sandbox.config import SandboxConfig, load_sandbox_config
from sandbox.ledger import VerifierLedger
from sandbox.ledger_errors import ERR_NONCE_USED, LedgerError
from sandbox.nonce_policy import ERR_NONCE_DEADLINE, ERR_NONCE_EXPIRED, ERR_SALT
from solver.protocol.intents import Nep413Signed, StorageDeposit, TokenDiff, Transfer
from solver.protocol.nonce import salted_nonce, versioned_nonce
from tests.sandbox.ledger_helpers import (
    CONTRACT,
    DEADLINE,
    NOW,
    TOKEN_A,
    current_salt,
    implicit,
    make_key,
    sign_intents,
)

ROOT = Path(__file__).resolve().parents[2]
KEY, OTHER = make_key(1301), make_key(1302)
USER, BOB = implicit(KEY), implicit(OTHER)


def ledger(policy: str) -> VerifierLedger:
    led = VerifierLedger(CONTRACT, nonce_policy=policy, seed=13)  # type: ignore[arg-type]
    led.deposit(USER, TOKEN_A, 1_000)
    return led


def transfer(led: VerifierLedger, nonce: bytes, *, deadline: datetime = DEADLINE) -> Nep413Signed:
    return sign_intents(
        led,
        KEY,
        USER,
        [Transfer(receiver_id=BOB, tokens={TOKEN_A: 1})],
        nonce=nonce,
        deadline=deadline,
    )


def legacy_nonce() -> bytes:
    """32 random bytes whose first four are not a salt (the reference solver's nonces)."""
    while True:
        nonce = os.urandom(32)
        if nonce[:4] != bytes.fromhex("5628f6c6"):
            return nonce


def test_spec_policy_refuses_a_legacy_nonce() -> None:
    led = ledger("spec")
    with pytest.raises(LedgerError) as info:
        led.execute_intents([transfer(led, legacy_nonce())], NOW)
    assert info.value.text == ERR_SALT


def test_deployed_policy_accepts_legacy_nonces_once() -> None:
    led = ledger("deployed")
    nonce = legacy_nonce()
    led.execute_intents([transfer(led, nonce)], NOW)
    assert led.mt_balance_of(BOB, TOKEN_A) == 1
    assert led.is_nonce_used(USER, nonce)
    with pytest.raises(LedgerError) as info:
        led.execute_intents([transfer(led, nonce)], NOW)
    assert info.value.text == ERR_NONCE_USED


@pytest.mark.parametrize("policy", ["spec", "deployed"])
def test_salted_and_versioned_nonces_pass_under_both_policies(policy: str) -> None:
    led = ledger(policy)
    salt = current_salt(led)
    led.execute_intents([transfer(led, salted_nonce(salt))], NOW)
    led.execute_intents([transfer(led, versioned_nonce(salt, DEADLINE))], NOW)
    assert led.mt_balance_of(BOB, TOKEN_A) == 2


@pytest.mark.parametrize("policy", ["spec", "deployed"])
def test_versioned_nonces_are_checked_under_both_policies(policy: str) -> None:
    led = ledger(policy)
    salt = current_salt(led)
    bad_salt = bytes(b ^ 0xFF for b in salt)
    cases = [
        (versioned_nonce(bad_salt, DEADLINE), DEADLINE, ERR_SALT),
        (versioned_nonce(salt, NOW - timedelta(seconds=1)), NOW, ERR_NONCE_EXPIRED),
        (versioned_nonce(salt, NOW + timedelta(seconds=5)), DEADLINE, ERR_NONCE_DEADLINE),
    ]
    for nonce, deadline, error in cases:
        with pytest.raises(LedgerError) as info:
            led.execute_intents([transfer(led, nonce, deadline=deadline)], NOW)
        assert info.value.text == error


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="nonce_policy must be one of spec, deployed"):
        VerifierLedger(CONTRACT, nonce_policy="lenient")  # type: ignore[arg-type]


def test_invariant_error_text_is_json() -> None:
    led = ledger("spec")
    item = sign_intents(led, KEY, USER, [TokenDiff(diff={TOKEN_A: -5})])
    with pytest.raises(LedgerError) as info:
        led.execute_intents([item], NOW)
    assert info.value.text == 'invariant violated: unmatched deltas {"' + TOKEN_A + '":"-5"}'
    text = info.value.text.split("unmatched deltas ", 1)[1]
    assert json.loads(text) == {TOKEN_A: "-5"}


def test_storage_deposit_is_paid_in_the_configured_wrapped_native() -> None:
    wrapped = "nep141:wnear.sandbox"
    led = VerifierLedger(CONTRACT, wrapped_native=wrapped, seed=13)
    led.deposit(USER, wrapped, 500)
    intent = StorageDeposit(contract_id="usdc.sandbox", account_id=BOB, amount=120)
    led.execute_intents([sign_intents(led, KEY, USER, [intent])], NOW)
    assert led.mt_balance_of(USER, wrapped) == 380


def test_config_nonce_policy_and_wrapped_native(tmp_path: Path) -> None:
    shipped = load_sandbox_config(ROOT / "config" / "sandbox.yaml")
    assert shipped.nonces == "spec"
    assert shipped.wrapped_native in shipped.tokens
    solver = next(a for a in shipped.accounts if a.name == "solver")
    assert solver.balances[shipped.wrapped_native] > 0  # funded

    tokens = {TOKEN_A: {"symbol": "USDC", "decimals": 6, "usd": 1.0}}
    with pytest.raises(ValidationError, match=r"wrapped_native: nep141:wrap\.sandbox is not in"):
        SandboxConfig.model_validate({"tokens": tokens})
    with pytest.raises(ValidationError, match="nonces"):
        SandboxConfig.model_validate(
            {"tokens": tokens, "wrapped_native": TOKEN_A, "nonces": "legacy"}
        )
    deployed = SandboxConfig.model_validate(
        {"tokens": tokens, "wrapped_native": TOKEN_A, "nonces": "deployed"}
    )
    assert deployed.nonces == "deployed"
