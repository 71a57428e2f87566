"""The signing policy as a pure object (issue 28): each rule refuses by name and books
nothing; the hourly caps count signed outflow in one-minute buckets."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import orjson

from solver.protocol.intents import format_deadline
from solver.protocol.nonce import salted_nonce, versioned_nonce
from solver.signer.policy import PolicyGuard, PolicySpec, nonce_salt

ACCOUNT, VERIFIER = "solver.near", "intents.near"
USDC, NEAR = "nep141:usdc.near", "nep141:wrap.near"
NOW = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
SALT = bytes.fromhex("252812b3")


def guard(**policy: object) -> PolicyGuard:
    spec = PolicySpec.model_validate(
        {"quote_caps": {USDC: {"per_request": 100, "per_hour": 250}}, **policy}
    )
    g = PolicyGuard(spec, account=ACCOUNT, verifier=VERIFIER)
    g.set_salts(frozenset({SALT}))
    return g


def quote(g: PolicyGuard, amount_out: int = 50, **changes: object) -> str | None:
    args: dict[str, object] = {
        "recipient": VERIFIER,
        "nonce": salted_nonce(SALT),
        "deadline": NOW + timedelta(seconds=30),
        "asset_out": USDC,
        "amount_out": amount_out,
        "amount_in": 7,
        "now": NOW,
        **changes,
    }
    refusal = g.check_quote(**args)  # type: ignore[arg-type]
    return None if refusal is None else refusal.rule


def test_a_quote_within_the_rules_passes_and_each_rule_refuses_by_name() -> None:
    g = guard()
    assert quote(g) is None
    assert quote(g, recipient="evil.near") == "recipient"
    assert quote(g, deadline=NOW + timedelta(hours=1)) == "deadline_too_far"
    assert quote(g, deadline=NOW - timedelta(seconds=1)) == "deadline_past"
    assert quote(g, nonce=salted_nonce(b"\x00\x00\x00\x01")) == "nonce_salt"
    assert quote(g, asset_out=NEAR) == "token_not_allowed"
    assert quote(g, amount_out=101) == "cap_per_request"


def test_the_hourly_cap_counts_what_was_signed_and_forgets_after_an_hour() -> None:
    g = guard()
    assert quote(g, 100) is None
    assert quote(g, 100) is None
    assert quote(g, 100) == "cap_per_hour"  # 300 > 250; the refusal books nothing
    assert quote(g, 50) is None  # exactly 250
    later = NOW + timedelta(minutes=61)
    assert quote(g, 100, now=later, deadline=later + timedelta(seconds=30)) is None


def test_the_salt_of_both_nonce_layouts() -> None:
    deadline = NOW + timedelta(seconds=30)
    assert nonce_salt(salted_nonce(SALT)) == SALT
    assert nonce_salt(versioned_nonce(SALT, deadline)) == SALT
    assert nonce_salt(b"short") is None
    g = guard()
    assert quote(g, nonce=versioned_nonce(SALT, deadline)) is None


def message(*intents: Mapping[str, object], signer: str = ACCOUNT, ahead_s: int = 60) -> str:
    body = {
        "deadline": format_deadline(NOW + timedelta(seconds=ahead_s)),
        "intents": list(intents),
        "signer_id": signer,
    }
    return orjson.dumps(body).decode()


def check(g: PolicyGuard, text: str, recipient: str = VERIFIER) -> str | None:
    refusal = g.check_message(message=text, recipient=recipient, nonce=salted_nonce(SALT), now=NOW)
    return None if refusal is None else refusal.rule


TRANSFER = {"intent": "transfer", "receiver_id": "treasury.near", "tokens": {USDC: "40"}}


def test_other_intents_only_when_named_with_their_caps_and_receivers() -> None:
    assert check(guard(), message(TRANSFER)) == "intent_not_allowed"
    named = guard(
        intents={
            "transfer": {
                "receivers": ["treasury.near"],
                "caps": {USDC: {"per_request": 50, "per_hour": 60}},
            }
        }
    )
    assert check(named, message(TRANSFER)) is None
    assert check(named, message(TRANSFER)) == "cap_per_hour"
    elsewhere = {**TRANSFER, "receiver_id": "thief.near"}
    assert check(named, message(elsewhere)) == "receiver"
    big = {**TRANSFER, "tokens": {USDC: "51"}}
    assert check(named, message(big)) == "cap_per_request"
    other = {**TRANSFER, "tokens": {NEAR: "1"}}
    assert check(named, message(other)) == "token_not_allowed"
    assert check(named, message(TRANSFER, signer="other.near")) == "signer"
    assert check(named, message(TRANSFER, ahead_s=3600)) == "deadline_too_far"
    assert check(named, message(TRANSFER), recipient="evil.near") == "recipient"
    assert check(named, "not json") == "message"


def test_key_changes_and_withdrawals_are_refused_unless_named() -> None:
    key = "ed25519:" + "1" * 44
    add = {"intent": "add_public_key", "public_key": key}
    withdraw = {
        "intent": "ft_withdraw",
        "token": "usdc.near",
        "receiver_id": "me.near",
        "amount": "5",
    }
    g = guard()
    assert check(g, message(add)) == "intent_not_allowed"
    assert check(g, message(withdraw)) == "intent_not_allowed"
    allowed = guard(
        intents={
            "add_public_key": {"public_keys": [key]},
            "ft_withdraw": {"caps": {USDC: {"per_request": 10, "per_hour": 10}}},
        }
    )
    assert check(allowed, message(add)) is None
    assert check(allowed, message(withdraw)) is None
    assert check(allowed, message({**add, "public_key": "ed25519:" + "2" * 44})) == "public_key"
