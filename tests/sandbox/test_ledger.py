"""Example-based tests of the verifier ledger (spec 2.10–2.12, 4.6, 5.3, 7; protocol-notes 1–4)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from sandbox.ledger import SignedItem, VerifierLedger
from sandbox.ledger_errors import (
    ERR_BALANCE,
    ERR_DEADLINE,
    ERR_INVALID_INTENT,
    ERR_INVARIANT,
    ERR_JSON,
    ERR_NONCE_USED,
    ERR_RECIPIENT,
    ERR_SIGNATURE,
    LedgerError,
    err_key_exists,
    err_no_key,
)
from sandbox.nonce_policy import ERR_NONCE_DEADLINE, ERR_NONCE_EXPIRED, ERR_SALT
from solver.protocol.amounts import U128_MAX
from solver.protocol.encoding import b58encode, b64decode, b64encode
from solver.protocol.intents import (
    AddPublicKey,
    FtWithdraw,
    Nep413Signed,
    RemovePublicKey,
    StorageDeposit,
    TokenDiff,
    Transfer,
)
from solver.protocol.nonce import VERSIONED_MAGIC, versioned_nonce
from solver.protocol.signing import (
    nep413_digest,
    secp256k1_address,
    sign_erc191,
    sign_nep413_message,
    sign_raw_ed25519,
)
from tests.sandbox.ledger_helpers import (
    CONTRACT,
    DEADLINE,
    NOW,
    TOKEN_A,
    TOKEN_B,
    TOKEN_C,
    WRAPPED_NATIVE,
    as_wire,
    current_salt,
    events,
    events_of_kind,
    fresh_nonce,
    implicit,
    make_key,
    message_text,
    new_ledger,
    pk,
    sign_intents,
    sign_raw_message,
    snapshot,
    token_diff_item,
    with_nonce_byte_flipped,
    with_signature_byte_flipped,
)

USER_KEY = make_key(1)
SOLVER_KEY = make_key(2)
BOB_KEY = make_key(3)
EXTRA_KEY = make_key(4)
OTHER_KEY = make_key(5)
USER = implicit(USER_KEY)
SOLVER = implicit(SOLVER_KEY)
BOB = "bob.sandbox"
ETH_PRIVATE = hashlib.sha256(b"ledger-test-eth-key").digest()
ETH_ACCOUNT = secp256k1_address(ETH_PRIVATE)


@pytest.fixture
def ledger() -> VerifierLedger:
    """A ledger with a funded user, a funded solver and a named account holding one key."""
    led = new_ledger()
    led.deposit(USER, TOKEN_A, 1_000)
    led.deposit(USER, WRAPPED_NATIVE, 500)
    led.deposit(SOLVER, TOKEN_B, 2_000)
    led.deposit(BOB, TOKEN_A, 300)
    led.deposit(BOB, TOKEN_C, 7)
    led.register_key(BOB, pk(BOB_KEY))
    return led


def expect_error(
    led: VerifierLedger, items: Sequence[SignedItem | dict[str, Any]], *, index: int | None = 0
) -> LedgerError:
    """Execute a batch that must fail; check all-or-nothing and return the error."""
    before = snapshot(led)
    with pytest.raises(LedgerError) as info:
        led.execute_intents(items, NOW)
    assert snapshot(led) == before
    assert info.value.index == index
    return info.value


def pair(led: VerifierLedger, amount_in: int = 100, amount_out: int = 40) -> list[Nep413Signed]:
    """A matched user/solver pair: the user gives A for B, the solver mirrors it."""
    return [
        token_diff_item(led, USER_KEY, USER, {TOKEN_A: -amount_in, TOKEN_B: amount_out}),
        token_diff_item(led, SOLVER_KEY, SOLVER, {TOKEN_A: amount_in, TOKEN_B: -amount_out}),
    ]


# ---------------------------------------------------------------------------- happy paths


def test_token_diff_pair_moves_balances_by_exactly_the_diffs(ledger: VerifierLedger) -> None:
    user_item = token_diff_item(
        ledger, USER_KEY, USER, {TOKEN_A: -250, TOKEN_B: 90}, deadline=DEADLINE
    )
    solver_item = token_diff_item(
        ledger,
        SOLVER_KEY,
        SOLVER,
        {TOKEN_A: 250, TOKEN_B: -90},
        deadline=DEADLINE + timedelta(minutes=1),
    )
    result = ledger.execute_intents([user_item, solver_item], NOW)

    assert ledger.mt_batch_balance_of(USER, [TOKEN_A, TOKEN_B]) == [750, 90]
    assert ledger.mt_batch_balance_of(SOLVER, [TOKEN_A, TOKEN_B]) == [250, 1_910]
    assert ledger.total_supply(TOKEN_A) == 1_300
    assert ledger.total_supply(TOKEN_B) == 2_000
    assert result.unmatched_deltas == {}
    assert result.min_deadline == DEADLINE
    expected_hashes = [
        b58encode(
            nep413_digest(
                item.payload.message, b64decode(item.payload.nonce), item.payload.recipient
            )
        )
        for item in (user_item, solver_item)
    ]
    assert result.intent_hashes == expected_hashes
    assert [e.account_id for e in result.executed] == [USER, SOLVER]
    assert [e.nonce for e in result.executed] == [
        user_item.payload.nonce,
        solver_item.payload.nonce,
    ]
    assert ledger.is_nonce_used(USER, user_item.payload.nonce)
    assert ledger.is_nonce_used(SOLVER, b64decode(solver_item.payload.nonce))
    assert not ledger.is_nonce_used(USER, solver_item.payload.nonce)


def test_events_are_dip4_lines_for_token_diff_and_intents_executed(
    ledger: VerifierLedger,
) -> None:
    items = pair(ledger, 100, 40)
    result = ledger.execute_intents(items, NOW)

    assert all(line.startswith("EVENT_JSON:{") for line in result.logs)
    parsed = events(result.logs)
    assert [e["event"] for e in parsed] == [
        "token_diff",
        "intents_executed",
        "token_diff",
        "intents_executed",
    ]
    assert {e["standard"] for e in parsed} == {"dip4"}
    assert {e["version"] for e in parsed} == {"0.3.0"}
    diffs = [e["data"] for e in events_of_kind(result.logs, "token_diff")]
    assert diffs == [
        [
            {
                "intent_hash": result.intent_hashes[0],
                "account_id": USER,
                "diff": {TOKEN_A: "-100", TOKEN_B: "40"},
                "fees_collected": {},
            }
        ],
        [
            {
                "intent_hash": result.intent_hashes[1],
                "account_id": SOLVER,
                "diff": {TOKEN_A: "100", TOKEN_B: "-40"},
                "fees_collected": {},
            }
        ],
    ]
    executed = [e["data"] for e in events_of_kind(result.logs, "intents_executed")]
    assert executed == [
        [{"intent_hash": h, "account_id": a, "nonce": i.payload.nonce}]
        for h, a, i in zip(result.intent_hashes, [USER, SOLVER], items, strict=True)
    ]
    assert ledger.events == result.logs


def test_wire_dicts_execute_like_models(ledger: VerifierLedger) -> None:
    items = pair(ledger, 10, 4)
    ledger.execute_intents([as_wire(items[0]), as_wire(items[1])], NOW)
    assert ledger.mt_batch_balance_of(USER, [TOKEN_A, TOKEN_B]) == [990, 4]


def test_transfer_moves_tokens_and_emits_event(ledger: VerifierLedger) -> None:
    item = sign_intents(
        ledger,
        BOB_KEY,
        BOB,
        [Transfer(receiver_id=USER, tokens={TOKEN_A: 30, TOKEN_C: 2}, memo="m")],
    )
    result = ledger.execute_intents([item], NOW)

    assert ledger.mt_batch_balance_of(BOB, [TOKEN_A, TOKEN_C]) == [270, 5]
    assert ledger.mt_batch_balance_of(USER, [TOKEN_A, TOKEN_C]) == [1_030, 2]
    (event,) = events_of_kind(result.logs, "transfer")
    assert event["data"] == [
        {
            "intent_hash": result.intent_hashes[0],
            "account_id": BOB,
            "receiver_id": USER,
            "tokens": {TOKEN_A: "30", TOKEN_C: "2"},
            "memo": "m",
        }
    ]


def test_ft_withdraw_debits_nep141_token_and_storage_deposit(ledger: VerifierLedger) -> None:
    item = sign_intents(
        ledger,
        USER_KEY,
        USER,
        [
            FtWithdraw(
                token="usdc.sandbox",
                receiver_id="alice.near",
                amount=400,
                storage_deposit=125,
                msg="go",
            )
        ],
    )
    result = ledger.execute_intents([item], NOW)

    assert ledger.mt_balance_of(USER, TOKEN_A) == 600
    assert ledger.mt_balance_of(USER, WRAPPED_NATIVE) == 375
    assert ledger.total_supply(TOKEN_A) == 900  # withdrawn tokens leave the verifier
    (event,) = events_of_kind(result.logs, "ft_withdraw")
    assert event["data"] == [
        {
            "intent_hash": result.intent_hashes[0],
            "account_id": USER,
            "token": "usdc.sandbox",
            "receiver_id": "alice.near",
            "amount": "400",
            "storage_deposit": "125",
            "msg": "go",
            "memo": None,
        }
    ]


def test_ft_withdraw_more_than_held_is_refused(ledger: VerifierLedger) -> None:
    item = sign_intents(
        ledger, USER_KEY, USER, [FtWithdraw(token="usdc.sandbox", receiver_id=USER, amount=1_001)]
    )
    assert expect_error(ledger, [item]).text == ERR_BALANCE


def test_storage_deposit_debits_wrapped_native(ledger: VerifierLedger) -> None:
    intent = StorageDeposit.model_validate(
        {
            "intent": "storage_deposit",
            "contract_id": "usdc.sandbox",
            "deposit_for_account_id": "alice.near",
            "amount": "120",
        }
    )
    result = ledger.execute_intents([sign_intents(ledger, USER_KEY, USER, [intent])], NOW)

    assert ledger.mt_balance_of(USER, WRAPPED_NATIVE) == 380
    (event,) = events_of_kind(result.logs, "storage_deposit")
    assert event["data"][0]["contract_id"] == "usdc.sandbox"
    assert event["data"][0]["deposit_for_account_id"] == "alice.near"
    assert event["data"][0]["amount"] == "120"


def test_add_public_key_then_sign_with_the_new_key(ledger: VerifierLedger) -> None:
    transfer = Transfer(receiver_id=USER, tokens={TOKEN_A: 5})
    # Before it is added, the key does not sign for the named account.
    err = expect_error(ledger, [sign_intents(ledger, EXTRA_KEY, BOB, [transfer])])
    assert err.text == err_no_key(pk(EXTRA_KEY), BOB)

    result = ledger.execute_intents(
        [sign_intents(ledger, BOB_KEY, BOB, [AddPublicKey(public_key=pk(EXTRA_KEY))])], NOW
    )
    assert events_of_kind(result.logs, "public_key_added")[0]["data"] == [
        {"account_id": BOB, "public_key": pk(EXTRA_KEY)}
    ]
    assert ledger.public_keys_of(BOB) == sorted([pk(BOB_KEY), pk(EXTRA_KEY)])
    assert ledger.has_public_key(BOB, pk(EXTRA_KEY))

    ledger.execute_intents([sign_intents(ledger, EXTRA_KEY, BOB, [transfer])], NOW)
    assert ledger.mt_balance_of(BOB, TOKEN_A) == 295
    assert ledger.mt_balance_of(USER, TOKEN_A) == 1_005


def test_remove_public_key_revokes_it(ledger: VerifierLedger) -> None:
    ledger.execute_intents(
        [sign_intents(ledger, BOB_KEY, BOB, [AddPublicKey(public_key=pk(EXTRA_KEY))])], NOW
    )
    result = ledger.execute_intents(
        [sign_intents(ledger, EXTRA_KEY, BOB, [RemovePublicKey(public_key=pk(BOB_KEY))])], NOW
    )
    assert events_of_kind(result.logs, "public_key_removed")[0]["data"] == [
        {"account_id": BOB, "public_key": pk(BOB_KEY)}
    ]
    assert ledger.public_keys_of(BOB) == [pk(EXTRA_KEY)]
    assert not ledger.has_public_key(BOB, pk(BOB_KEY))

    transfer = Transfer(receiver_id=USER, tokens={TOKEN_A: 1})
    err = expect_error(ledger, [sign_intents(ledger, BOB_KEY, BOB, [transfer])])
    assert err.text == err_no_key(pk(BOB_KEY), BOB)


def test_implicit_account_can_revoke_its_own_key(ledger: VerifierLedger) -> None:
    assert ledger.public_keys_of(USER) == [pk(USER_KEY)]
    assert ledger.has_public_key(USER, pk(USER_KEY))
    ledger.execute_intents(
        [
            sign_intents(
                ledger,
                USER_KEY,
                USER,
                [AddPublicKey(public_key=pk(EXTRA_KEY)), RemovePublicKey(public_key=pk(USER_KEY))],
            )
        ],
        NOW,
    )
    assert ledger.public_keys_of(USER) == [pk(EXTRA_KEY)]
    assert not ledger.has_public_key(USER, pk(USER_KEY))

    transfer = Transfer(receiver_id=BOB, tokens={TOKEN_A: 10})
    err = expect_error(ledger, [sign_intents(ledger, USER_KEY, USER, [transfer])])
    assert err.text == err_no_key(pk(USER_KEY), USER)
    ledger.execute_intents([sign_intents(ledger, EXTRA_KEY, USER, [transfer])], NOW)
    assert ledger.mt_balance_of(USER, TOKEN_A) == 990


def test_removing_a_key_the_account_does_not_hold_is_refused(ledger: VerifierLedger) -> None:
    item = sign_intents(ledger, BOB_KEY, BOB, [RemovePublicKey(public_key=pk(OTHER_KEY))])
    assert expect_error(ledger, [item]).text == err_no_key(pk(OTHER_KEY), BOB)


def test_raw_ed25519_item_executes(ledger: VerifierLedger) -> None:
    item = sign_raw_ed25519(
        USER_KEY,
        signer_id=USER,
        verifying_contract=CONTRACT,
        deadline=DEADLINE,
        nonce=fresh_nonce(ledger),
        intents=[Transfer(receiver_id=BOB, tokens={TOKEN_A: 11})],
    )
    result = ledger.execute_intents([item], NOW)
    assert ledger.mt_balance_of(BOB, TOKEN_A) == 311
    assert result.intent_hashes == [b58encode(hashlib.sha256(item.payload.encode()).digest())]


def test_raw_ed25519_with_wrong_recipient_is_refused(ledger: VerifierLedger) -> None:
    item = sign_raw_ed25519(
        USER_KEY,
        signer_id=USER,
        verifying_contract="intents.near",
        deadline=DEADLINE,
        nonce=fresh_nonce(ledger),
        intents=[Transfer(receiver_id=BOB, tokens={TOKEN_A: 11})],
    )
    assert expect_error(ledger, [item]).text == ERR_RECIPIENT


def test_erc191_item_executes_against_a_nep413_solver(ledger: VerifierLedger) -> None:
    ledger.deposit(ETH_ACCOUNT, TOKEN_A, 50)
    user_item = sign_erc191(
        ETH_PRIVATE,
        signer_id=ETH_ACCOUNT,
        verifying_contract=CONTRACT,
        deadline=DEADLINE,
        nonce=fresh_nonce(ledger),
        intents=[TokenDiff(diff={TOKEN_A: -50, TOKEN_B: 20})],
    )
    solver_item = token_diff_item(ledger, SOLVER_KEY, SOLVER, {TOKEN_A: 50, TOKEN_B: -20})
    result = ledger.execute_intents([user_item, solver_item], NOW)

    assert re.fullmatch(r"0x[0-9a-f]{40}", ETH_ACCOUNT)
    assert ledger.mt_batch_balance_of(ETH_ACCOUNT, [TOKEN_A, TOKEN_B]) == [0, 20]
    assert ledger.mt_batch_balance_of(SOLVER, [TOKEN_A, TOKEN_B]) == [50, 1_980]
    assert result.executed[0].account_id == ETH_ACCOUNT


def test_erc191_for_another_eth_account_lacks_the_key(ledger: VerifierLedger) -> None:
    other = "0x" + "ab" * 20
    item = sign_erc191(
        ETH_PRIVATE,
        signer_id=other,
        verifying_contract=CONTRACT,
        deadline=DEADLINE,
        nonce=fresh_nonce(ledger),
        intents=[TokenDiff(diff={TOKEN_A: -1})],
    )
    err = expect_error(ledger, [item])
    assert err.text.startswith("public key 'secp256k1:")
    assert err.text.endswith(f"doesn't exist for account '{other}'")


def test_fees_are_charged_on_negative_deltas_and_conserve_supply() -> None:
    led = new_ledger(fee_pips=3_000)  # 0.3 %
    led.deposit(USER, TOKEN_A, 10_000)
    led.deposit(SOLVER, TOKEN_B, 10_000)
    supply = {t: led.total_supply(t) for t in (TOKEN_A, TOKEN_B)}
    items = [
        token_diff_item(led, USER_KEY, USER, {TOKEN_A: -1_000, TOKEN_B: 333}),
        token_diff_item(led, SOLVER_KEY, SOLVER, {TOKEN_A: 1_000, TOKEN_B: -333}),
    ]
    result = led.execute_intents(items, NOW)

    # ceil(1000 * 3000 / 1e6) = 3; ceil(333 * 3000 / 1e6) = ceil(0.999) = 1
    assert led.mt_batch_balance_of(USER, [TOKEN_A, TOKEN_B]) == [10_000 - 1_000 - 3, 333]
    assert led.mt_batch_balance_of(SOLVER, [TOKEN_A, TOKEN_B]) == [1_000, 10_000 - 333 - 1]
    assert led.mt_batch_balance_of(led.fee_collector, [TOKEN_A, TOKEN_B]) == [3, 1]
    assert {t: led.total_supply(t) for t in (TOKEN_A, TOKEN_B)} == supply
    fees = [e["data"][0]["fees_collected"] for e in events_of_kind(result.logs, "token_diff")]
    assert fees == [{TOKEN_A: "3"}, {TOKEN_B: "1"}]
    assert led.fee() == 3_000


def test_fee_must_be_affordable_on_top_of_the_delta() -> None:
    led = new_ledger(fee_pips=1)
    led.deposit(USER, TOKEN_A, 1_000)
    led.deposit(SOLVER, TOKEN_B, 1_000)
    # The user holds exactly |delta|; the fee (ceil(1000 * 1e-6) = 1) is not covered.
    items = [
        token_diff_item(led, USER_KEY, USER, {TOKEN_A: -1_000, TOKEN_B: 1}),
        token_diff_item(led, SOLVER_KEY, SOLVER, {TOKEN_A: 1_000, TOKEN_B: -1}),
    ]
    assert expect_error(led, items).text == ERR_BALANCE


def test_fee_pips_outside_range_is_refused() -> None:
    with pytest.raises(ValueError, match="fee_pips"):
        VerifierLedger(fee_pips=1_000_000)
    with pytest.raises(ValueError, match="fee_pips"):
        VerifierLedger(fee_pips=-1)


def test_deadline_equal_to_now_is_not_expired(ledger: VerifierLedger) -> None:
    items = [
        token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -1, TOKEN_B: 1}, deadline=NOW),
        token_diff_item(ledger, SOLVER_KEY, SOLVER, {TOKEN_A: 1, TOKEN_B: -1}, deadline=NOW),
    ]
    assert ledger.execute_intents(items, NOW).min_deadline == NOW


def test_versioned_nonce_executes(ledger: VerifierLedger) -> None:
    nonce = versioned_nonce(current_salt(ledger), DEADLINE)
    assert nonce[:4] == VERSIONED_MAGIC
    item = sign_intents(
        ledger, USER_KEY, USER, [Transfer(receiver_id=BOB, tokens={TOKEN_A: 1})], nonce=nonce
    )
    ledger.execute_intents([item], NOW)
    assert ledger.is_nonce_used(USER, b64encode(nonce))


def test_same_nonce_is_independent_per_signer(ledger: VerifierLedger) -> None:
    nonce = fresh_nonce(ledger)
    items = [
        token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -5, TOKEN_B: 2}, nonce=nonce),
        token_diff_item(ledger, SOLVER_KEY, SOLVER, {TOKEN_A: 5, TOKEN_B: -2}, nonce=nonce),
    ]
    ledger.execute_intents(items, NOW)
    assert ledger.is_nonce_used(USER, nonce)
    assert ledger.is_nonce_used(SOLVER, nonce)
    assert not ledger.is_nonce_used(BOB, nonce)


def test_naive_now_is_refused(ledger: VerifierLedger) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        ledger.execute_intents(pair(ledger), NOW.replace(tzinfo=None))


# ---------------------------------------------------------------------------- error texts


def test_tampered_signature_is_invalid(ledger: VerifierLedger) -> None:
    item = pair(ledger)[0]
    assert expect_error(ledger, [with_signature_byte_flipped(item, 5)]).text == ERR_SIGNATURE


def test_signature_by_another_key_is_invalid(ledger: VerifierLedger) -> None:
    item = pair(ledger)[0]
    forged = as_wire(item)
    forged["public_key"] = pk(OTHER_KEY)
    assert expect_error(ledger, [forged]).text == ERR_SIGNATURE


def test_tampered_message_is_invalid_signature(ledger: VerifierLedger) -> None:
    item = pair(ledger)[0]
    wire = as_wire(item)
    wire["payload"]["message"] = wire["payload"]["message"].replace('"-100"', '"-1"')
    assert wire["payload"]["message"] != item.payload.message
    assert expect_error(ledger, [wire]).text == ERR_SIGNATURE


def test_tampered_nonce_is_invalid_signature(ledger: VerifierLedger) -> None:
    item = pair(ledger)[0]
    assert expect_error(ledger, [with_nonce_byte_flipped(item, 20)]).text == ERR_SIGNATURE


def test_malformed_signature_text_is_invalid_signature(ledger: VerifierLedger) -> None:
    wire = as_wire(pair(ledger)[0])
    wire["signature"] = "ed25519:0OIl"  # not base58
    assert expect_error(ledger, [wire]).text == ERR_SIGNATURE


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(lambda s: "not json at all", id="not-json"),
        pytest.param(lambda s: "[1, 2", id="truncated-json"),
        pytest.param(
            lambda s: message_text(s, DEADLINE, [{"intent": "teleport", "amount": "1"}]),
            id="unknown-intent",
        ),
        pytest.param(
            lambda s: message_text(s, DEADLINE, [{"intent": "token_diff", "diff": "x"}]),
            id="diff-not-a-map",
        ),
        pytest.param(
            lambda s: '{"deadline":"2026-03-01T12:05:00.000Z","intents":[]}', id="no-signer"
        ),
        pytest.param(
            lambda s: message_text(s, DEADLINE, [{"intent": "token_diff", "diff": {"usdc": "5"}}]),
            id="bad-asset-id",
        ),
    ],
)
def test_correctly_signed_bad_message_is_invalid_json(
    ledger: VerifierLedger, message: Callable[[str], str]
) -> None:
    item = sign_raw_message(ledger, USER_KEY, message(USER))
    err = expect_error(ledger, [item])
    assert err.text.startswith(ERR_JSON + ": ")


# protocol-notes 2: "Every amount is a JSON string ... Numbers are rejected."
@pytest.mark.parametrize(
    "intent",
    [
        pytest.param(
            {"intent": "transfer", "receiver_id": BOB, "tokens": {TOKEN_A: 5}},
            id="u128-number",
        ),
        pytest.param(
            {"intent": "token_diff", "diff": {TOKEN_A: -5}},
            id="i128-number",
        ),
        pytest.param(
            {"intent": "transfer", "receiver_id": BOB, "tokens": {TOKEN_A: "5.0"}}, id="decimal"
        ),
        pytest.param(
            {"intent": "transfer", "receiver_id": BOB, "tokens": {TOKEN_A: "-5"}}, id="negative"
        ),
        pytest.param(
            {"intent": "transfer", "receiver_id": BOB, "tokens": {TOKEN_A: str(U128_MAX + 1)}},
            id="above-u128",
        ),
    ],
)
def test_amounts_must_be_decimal_strings(ledger: VerifierLedger, intent: dict[str, object]) -> None:
    item = sign_raw_message(ledger, USER_KEY, message_text(USER, DEADLINE, [intent]))
    assert expect_error(ledger, [item]).text.startswith(ERR_JSON + ": ")


def test_malformed_wrapper_is_invalid_json(ledger: VerifierLedger) -> None:
    wire = as_wire(pair(ledger)[0])
    del wire["payload"]["recipient"]
    assert expect_error(ledger, [wire]).text.startswith(ERR_JSON)
    wire = as_wire(pair(ledger)[0])
    wire["standard"] = "nep999"
    assert expect_error(ledger, [wire]).text.startswith(ERR_JSON)


def test_wrong_recipient(ledger: VerifierLedger) -> None:
    item = token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -1}, recipient="intents.near")
    assert expect_error(ledger, [item]).text == ERR_RECIPIENT


def test_expired_deadline(ledger: VerifierLedger) -> None:
    item = token_diff_item(
        ledger, USER_KEY, USER, {TOKEN_A: -1}, deadline=NOW - timedelta(seconds=1)
    )
    assert expect_error(ledger, [item]).text == ERR_DEADLINE


def test_named_account_without_the_key(ledger: VerifierLedger) -> None:
    item = token_diff_item(ledger, USER_KEY, "carol.sandbox", {TOKEN_A: -1})
    assert expect_error(ledger, [item]).text == err_no_key(pk(USER_KEY), "carol.sandbox")
    assert ledger.public_keys_of("carol.sandbox") == []


def test_implicit_account_of_another_key(ledger: VerifierLedger) -> None:
    item = token_diff_item(ledger, OTHER_KEY, USER, {TOKEN_A: -1})
    assert expect_error(ledger, [item]).text == err_no_key(pk(OTHER_KEY), USER)


def test_random_salt_is_invalid(ledger: VerifierLedger) -> None:
    salt = current_salt(ledger)
    wrong = bytes(b ^ 0xFF for b in salt)
    item = token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -1}, nonce=wrong + bytes(28))
    assert expect_error(ledger, [item]).text == ERR_SALT


def test_rotated_salt_stays_valid_until_invalidated(ledger: VerifierLedger) -> None:
    old = ledger.current_salt()
    old_nonce_items = [pair(ledger, 10, 1), pair(ledger, 20, 2)]  # signed with the old salt
    new = ledger.rotate_salt()
    assert new != old
    assert ledger.current_salt() == new

    ledger.execute_intents(old_nonce_items[0], NOW)  # rotated away, not invalidated: valid
    assert ledger.mt_balance_of(USER, TOKEN_A) == 990

    ledger.invalidate_salts([old])
    assert expect_error(ledger, old_nonce_items[1]).text == ERR_SALT
    ledger.execute_intents(pair(ledger, 20, 2), NOW)  # the new salt is fine
    assert ledger.mt_balance_of(USER, TOKEN_A) == 970


def test_current_salt_cannot_be_invalidated(ledger: VerifierLedger) -> None:
    salt = ledger.current_salt()
    ledger.invalidate_salts([salt])
    assert ledger.current_salt() == salt
    ledger.execute_intents(pair(ledger), NOW)


def test_versioned_nonce_expired(ledger: VerifierLedger) -> None:
    nonce = versioned_nonce(current_salt(ledger), NOW - timedelta(seconds=1))
    item = token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -1}, nonce=nonce)
    assert expect_error(ledger, [item]).text == ERR_NONCE_EXPIRED


def test_intent_deadline_after_nonce_deadline(ledger: VerifierLedger) -> None:
    nonce = versioned_nonce(current_salt(ledger), DEADLINE - timedelta(seconds=1))
    item = token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -1}, nonce=nonce)
    assert expect_error(ledger, [item]).text == ERR_NONCE_DEADLINE


def test_versioned_nonce_with_invalid_salt(ledger: VerifierLedger) -> None:
    wrong = bytes(b ^ 0x0F for b in current_salt(ledger))
    item = token_diff_item(
        ledger, USER_KEY, USER, {TOKEN_A: -1}, nonce=versioned_nonce(wrong, DEADLINE)
    )
    assert expect_error(ledger, [item]).text == ERR_SALT


def test_same_item_twice_in_one_batch(ledger: VerifierLedger) -> None:
    transfer = sign_intents(
        ledger, USER_KEY, USER, [Transfer(receiver_id=BOB, tokens={TOKEN_A: 1})]
    )
    err = expect_error(ledger, [transfer, transfer], index=1)
    assert err.text == ERR_NONCE_USED
    assert not ledger.is_nonce_used(USER, transfer.payload.nonce)


def test_nonce_used_across_batches(ledger: VerifierLedger) -> None:
    items = pair(ledger)
    ledger.execute_intents(items, NOW)
    assert expect_error(ledger, items).text == ERR_NONCE_USED
    # A different message reusing the nonce is refused too.
    again = token_diff_item(
        ledger, USER_KEY, USER, {TOKEN_A: -7}, nonce=b64decode(items[0].payload.nonce)
    )
    assert expect_error(ledger, [again]).text == ERR_NONCE_USED
    assert ledger.mt_balance_of(USER, TOKEN_A) == 900


def test_debit_more_than_held(ledger: VerifierLedger) -> None:
    items = pair(ledger, 1_001, 1)
    assert expect_error(ledger, items).text == ERR_BALANCE


def test_credit_overflowing_u128(ledger: VerifierLedger) -> None:
    ledger.deposit(BOB, TOKEN_B, U128_MAX)
    transfer = Transfer(receiver_id=BOB, tokens={TOKEN_B: 1})
    assert expect_error(ledger, [sign_intents(ledger, SOLVER_KEY, SOLVER, [transfer])]).text == (
        ERR_BALANCE
    )
    diff_items = [
        token_diff_item(ledger, SOLVER_KEY, SOLVER, {TOKEN_B: -1}),
        token_diff_item(ledger, BOB_KEY, BOB, {TOKEN_B: 1}),
    ]
    assert expect_error(ledger, diff_items, index=1).text == ERR_BALANCE
    assert ledger.mt_balance_of(BOB, TOKEN_B) == U128_MAX


@pytest.mark.parametrize(
    "intent",
    [
        pytest.param(TokenDiff(diff={TOKEN_A: 0}), id="zero-delta"),
        pytest.param(TokenDiff(diff={TOKEN_A: -3, TOKEN_B: 0}), id="one-zero"),
        pytest.param(TokenDiff(diff={}), id="empty-diff"),
        pytest.param(Transfer(receiver_id=USER, tokens={TOKEN_A: 1}), id="self"),
        pytest.param(Transfer(receiver_id=BOB, tokens={}), id="no-tokens"),
        pytest.param(Transfer(receiver_id=BOB, tokens={TOKEN_A: 0}), id="zero"),
        pytest.param(
            FtWithdraw(token="usdc.sandbox", receiver_id=USER, amount=0), id="withdraw-zero"
        ),
    ],
)
def test_invalid_intents(ledger: VerifierLedger, intent: TokenDiff | Transfer | FtWithdraw) -> None:
    item = sign_intents(ledger, USER_KEY, USER, [intent])
    err = expect_error(ledger, [item])
    assert err.text.startswith(ERR_INVALID_INTENT + ": ")


def test_unbalanced_batch_violates_the_invariant(ledger: VerifierLedger) -> None:
    items = [
        token_diff_item(ledger, USER_KEY, USER, {TOKEN_A: -100, TOKEN_B: 40}),
        token_diff_item(ledger, SOLVER_KEY, SOLVER, {TOKEN_A: 90, TOKEN_B: -40}),
    ]
    err = expect_error(ledger, items, index=None)
    assert err.text.startswith(ERR_INVARIANT)
    assert err.detail == {"unmatched_deltas": {TOKEN_A: "-10"}}
    assert TOKEN_A in err.text
    assert not ledger.is_nonce_used(USER, items[0].payload.nonce)


def test_adding_an_existing_key(ledger: VerifierLedger) -> None:
    item = sign_intents(ledger, BOB_KEY, BOB, [AddPublicKey(public_key=pk(BOB_KEY))])
    assert expect_error(ledger, [item]).text == err_key_exists(pk(BOB_KEY), BOB)
    # An implicit account already holds its own key.
    own = sign_intents(ledger, USER_KEY, USER, [AddPublicKey(public_key=pk(USER_KEY))])
    assert expect_error(ledger, [own]).text == err_key_exists(pk(USER_KEY), USER)


# ---------------------------------------------------------------------------- check order


def _order_case_items(led: VerifierLedger, case: str) -> tuple[list[object], str, int]:
    """Batches with two or more faults each and the error the verifier reports first."""
    expired = NOW - timedelta(minutes=1)
    salt = current_salt(led)
    bad_salt_nonce = bytes(b ^ 0xFF for b in salt) + bytes(28)
    if case == "signature-before-json":
        item = sign_raw_message(led, USER_KEY, "not json", recipient="elsewhere.near")
        return [with_signature_byte_flipped(item)], ERR_SIGNATURE, 0
    if case == "json-before-recipient":
        return [sign_raw_message(led, USER_KEY, "{", recipient="elsewhere.near")], ERR_JSON, 0
    if case == "recipient-before-deadline":
        item = token_diff_item(
            led, USER_KEY, USER, {TOKEN_A: -1}, deadline=expired, recipient="elsewhere.near"
        )
        return [item], ERR_RECIPIENT, 0
    if case == "deadline-before-key":
        item = token_diff_item(led, OTHER_KEY, BOB, {TOKEN_A: -1}, deadline=expired)
        return [item], ERR_DEADLINE, 0
    if case == "key-before-salt":
        item = token_diff_item(led, OTHER_KEY, BOB, {TOKEN_A: -1}, nonce=bad_salt_nonce)
        return [item], err_no_key(pk(OTHER_KEY), BOB), 0
    if case == "salt-before-nonce-expiry":
        nonce = versioned_nonce(bytes(b ^ 0xFF for b in salt), NOW - timedelta(seconds=5))
        return [token_diff_item(led, USER_KEY, USER, {TOKEN_A: -1}, nonce=nonce)], ERR_SALT, 0
    if case == "nonce-expiry-before-nonce-deadline":
        nonce = versioned_nonce(salt, NOW - timedelta(seconds=5))  # both broken
        return (
            [token_diff_item(led, USER_KEY, USER, {TOKEN_A: -1}, nonce=nonce)],
            (ERR_NONCE_EXPIRED),
            0,
        )
    if case == "salt-before-nonce-used":
        used = pair(led, 1, 1)
        led.execute_intents(used, NOW)
        old = led.current_salt()
        led.rotate_salt()
        led.invalidate_salts([old])
        return list(used), ERR_SALT, 0
    if case == "nonce-used-before-intents":
        first = sign_intents(led, USER_KEY, USER, [Transfer(receiver_id=BOB, tokens={TOKEN_A: 1})])
        led.execute_intents([first], NOW)
        again = token_diff_item(
            led, USER_KEY, USER, {TOKEN_A: 0}, nonce=b64decode(first.payload.nonce)
        )
        return [again], ERR_NONCE_USED, 0
    if case == "intents-in-order-invalid-first":
        item = sign_intents(
            led,
            USER_KEY,
            USER,
            [TokenDiff(diff={TOKEN_A: 0}), Transfer(receiver_id=BOB, tokens={TOKEN_A: 10**9})],
        )
        return [item], ERR_INVALID_INTENT, 0
    if case == "intents-in-order-balance-first":
        item = sign_intents(
            led,
            USER_KEY,
            USER,
            [Transfer(receiver_id=BOB, tokens={TOKEN_A: 10**9}), TokenDiff(diff={TOKEN_A: 0})],
        )
        return [item], ERR_BALANCE, 0
    if case == "item-error-before-invariant":
        unbalanced = token_diff_item(led, USER_KEY, USER, {TOKEN_A: -5})
        late = token_diff_item(led, SOLVER_KEY, SOLVER, {TOKEN_B: -1}, deadline=expired)
        return [unbalanced, late], ERR_DEADLINE, 1
    if case == "earlier-item-first":
        broke = pair(led, 5_000, 1)  # user cannot pay: item 0 fails
        late = token_diff_item(led, SOLVER_KEY, SOLVER, {TOKEN_B: -1}, deadline=expired)
        return [*broke, late], ERR_BALANCE, 0
    raise AssertionError(case)


ORDER_CASES = [
    "signature-before-json",
    "json-before-recipient",
    "recipient-before-deadline",
    "deadline-before-key",
    "key-before-salt",
    "salt-before-nonce-expiry",
    "nonce-expiry-before-nonce-deadline",
    "salt-before-nonce-used",
    "nonce-used-before-intents",
    "intents-in-order-invalid-first",
    "intents-in-order-balance-first",
    "item-error-before-invariant",
    "earlier-item-first",
]


@pytest.mark.parametrize("case", ORDER_CASES)
def test_check_order(ledger: VerifierLedger, case: str) -> None:
    items, expected, index = _order_case_items(ledger, case)
    err = expect_error(ledger, items, index=index)  # type: ignore[arg-type]
    assert err.text == expected or err.text.startswith(expected + ":")


# ---------------------------------------------------------------------------- rollback


def test_failed_batch_rolls_back_earlier_items(ledger: VerifierLedger) -> None:
    items = pair(ledger, 100, 40)
    stranger_key = make_key(99)
    broke = token_diff_item(ledger, stranger_key, implicit(stranger_key), {TOKEN_A: -1})
    digest = ledger.state_digest()
    with pytest.raises(LedgerError) as info:
        ledger.execute_intents([*items, broke], NOW)
    assert info.value.text == ERR_BALANCE
    assert info.value.index == 2
    assert ledger.state_digest() == digest
    assert ledger.mt_batch_balance_of(USER, [TOKEN_A, TOKEN_B]) == [1_000, 0]
    assert ledger.mt_batch_balance_of(SOLVER, [TOKEN_A, TOKEN_B]) == [0, 2_000]
    assert not any(
        ledger.is_nonce_used(a, i.payload.nonce) for a, i in zip([USER, SOLVER], items, strict=True)
    )
    assert implicit(stranger_key) not in ledger.balances
    assert implicit(stranger_key) not in ledger.used_nonces
    assert ledger.events == []
    # The pair itself is still executable afterwards: nothing was consumed.
    ledger.execute_intents(items, NOW)
    assert ledger.mt_balance_of(USER, TOKEN_A) == 900


def test_failed_key_changes_are_rolled_back(ledger: VerifierLedger) -> None:
    item = sign_intents(
        ledger,
        USER_KEY,
        USER,
        [
            AddPublicKey(public_key=pk(EXTRA_KEY)),
            RemovePublicKey(public_key=pk(USER_KEY)),
            TokenDiff(diff={TOKEN_A: 0}),
        ],
    )
    expect_error(ledger, [item])
    assert ledger.public_keys_of(USER) == [pk(USER_KEY)]
    assert USER not in ledger.revoked_implicit


# ---------------------------------------------------------------------------- simulate_intents


def test_simulate_matched_pair_reports_without_changing_state(ledger: VerifierLedger) -> None:
    items = pair(ledger, 100, 40)
    digest = ledger.state_digest()
    out = ledger.simulate_intents(items, NOW)

    assert ledger.state_digest() == digest
    assert ledger.mt_balance_of(USER, TOKEN_A) == 1_000
    assert not ledger.is_nonce_used(USER, items[0].payload.nonce)
    assert ledger.events == []
    assert set(out) == {"intents_executed", "logs", "min_deadline", "state"}
    assert out["state"] == {"fee": 0, "current_salt": ledger.current_salt()}
    assert out["min_deadline"] == "2026-03-01T12:05:00.000Z"
    assert [e["account_id"] for e in out["intents_executed"]] == [USER, SOLVER]
    assert [e["nonce"] for e in out["intents_executed"]] == [i.payload.nonce for i in items]
    assert [e["event"] for e in events(out["logs"])] == [
        "token_diff",
        "intents_executed",
        "token_diff",
        "intents_executed",
    ]

    result = ledger.execute_intents(items, NOW)
    assert [e["intent_hash"] for e in out["intents_executed"]] == result.intent_hashes
    assert out["logs"] == result.logs


def test_simulate_single_quote_reports_unmatched_deltas(ledger: VerifierLedger) -> None:
    quote = token_diff_item(ledger, SOLVER_KEY, SOLVER, {TOKEN_A: 100, TOKEN_B: -95})
    digest = ledger.state_digest()
    out = ledger.simulate_intents([quote], NOW)

    assert ledger.state_digest() == digest
    assert out["invariant_violated"] == {
        "error": "unmatched_deltas",
        "unmatched_deltas": {TOKEN_A: "100", TOKEN_B: "-95"},
    }
    assert len(out["intents_executed"]) == 1
    assert ledger.mt_balance_of(SOLVER, TOKEN_A) == 0


def test_simulate_reports_fee_and_rotated_salt() -> None:
    led = new_ledger(fee_pips=250)
    led.deposit(SOLVER, TOKEN_B, 1_000)
    salt = led.rotate_salt()
    out = led.simulate_intents(
        [token_diff_item(led, SOLVER_KEY, SOLVER, {TOKEN_A: 10, TOKEN_B: -8})], NOW
    )
    assert out["state"] == {"fee": 250, "current_salt": salt}
    (diff_event,) = events_of_kind(out["logs"], "token_diff")
    assert diff_event["data"][0]["fees_collected"] == {TOKEN_B: "1"}


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        pytest.param(
            lambda led: [token_diff_item(led, USER_KEY, USER, {TOKEN_A: -1}, recipient="x.near")],
            ERR_RECIPIENT,
            id="recipient",
        ),
        pytest.param(
            lambda led: [token_diff_item(led, make_key(77), implicit(make_key(77)), {TOKEN_A: -1})],
            ERR_BALANCE,
            id="new-account-balance",
        ),
        pytest.param(
            lambda led: [token_diff_item(led, OTHER_KEY, "dave.sandbox", {TOKEN_A: 1})],
            err_no_key(pk(OTHER_KEY), "dave.sandbox"),
            id="no-key",
        ),
    ],
)
def test_simulate_runs_the_same_checks(
    ledger: VerifierLedger, build: Callable[[VerifierLedger], list[SignedItem]], expected: str
) -> None:
    items = build(ledger)
    digest = ledger.state_digest()
    with pytest.raises(LedgerError) as info:
        ledger.simulate_intents(items, NOW)
    assert info.value.text == expected
    assert ledger.state_digest() == digest


def test_simulate_does_not_consume_nonces_or_keys(ledger: VerifierLedger) -> None:
    add = sign_intents(ledger, BOB_KEY, BOB, [AddPublicKey(public_key=pk(EXTRA_KEY))])
    ledger.simulate_intents([add], NOW)
    assert ledger.public_keys_of(BOB) == [pk(BOB_KEY)]
    ledger.execute_intents([add], NOW)
    assert ledger.public_keys_of(BOB) == sorted([pk(BOB_KEY), pk(EXTRA_KEY)])


# ---------------------------------------------------------------------------- views


def test_current_salt_is_eight_hex_and_rotates(ledger: VerifierLedger) -> None:
    first = ledger.current_salt()
    assert re.fullmatch(r"[0-9a-f]{8}", first)
    second = ledger.rotate_salt()
    assert re.fullmatch(r"[0-9a-f]{8}", second)
    assert second != first
    assert new_ledger(seed=3).current_salt() == new_ledger(seed=3).current_salt()


def test_balance_views(ledger: VerifierLedger) -> None:
    assert ledger.mt_balance_of(USER, TOKEN_A) == 1_000
    assert ledger.mt_balance_of(USER, TOKEN_C) == 0
    assert ledger.mt_balance_of("nobody.sandbox", TOKEN_A) == 0
    assert ledger.mt_batch_balance_of(BOB, [TOKEN_C, TOKEN_B, TOKEN_A]) == [7, 0, 300]
    assert ledger.mt_batch_balance_of("nobody.sandbox", [TOKEN_A]) == [0]
    assert ledger.mt_batch_balance_of(BOB, []) == []


def test_is_nonce_used_takes_base64(ledger: VerifierLedger) -> None:
    items = pair(ledger)
    nonce_text = items[0].payload.nonce
    assert ledger.is_nonce_used(USER, nonce_text) is False
    ledger.execute_intents(items, NOW)
    assert ledger.is_nonce_used(USER, nonce_text) is True
    assert ledger.is_nonce_used(USER, b64decode(nonce_text)) is True
    assert ledger.is_nonce_used(BOB, nonce_text) is False


def test_public_key_views(ledger: VerifierLedger) -> None:
    assert ledger.public_keys_of(USER) == [pk(USER_KEY)]
    assert ledger.public_keys_of(BOB) == [pk(BOB_KEY)]
    assert ledger.public_keys_of("nobody.sandbox") == []
    assert ledger.has_public_key(USER, pk(USER_KEY))
    assert not ledger.has_public_key(USER, pk(BOB_KEY))
    assert ledger.has_public_key(BOB, pk(BOB_KEY))
    assert not ledger.has_public_key(BOB, pk(USER_KEY))
    # An implicit account owns its key with no registration at all.
    fresh = make_key(123)
    assert ledger.has_public_key(implicit(fresh), pk(fresh))


def test_deposit_validates_inputs(ledger: VerifierLedger) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        ledger.deposit(USER, TOKEN_A, -1)
    with pytest.raises(ValueError, match=re.escape(ERR_BALANCE)):
        ledger.deposit(USER, TOKEN_A, U128_MAX)
    with pytest.raises(ValueError, match="invalid account id"):
        ledger.deposit("Not Valid", TOKEN_A, 1)
    assert ledger.mt_balance_of(USER, TOKEN_A) == 1_000


def test_nep413_sign_message_round_trip_through_ledger(ledger: VerifierLedger) -> None:
    """A hand-written message in another key order is accepted (the verifier ignores order)."""
    message = (
        '{"signer_id":"'
        + USER
        + '","intents":[{"intent":"transfer","receiver_id":"'
        + BOB
        + '","tokens":{"'
        + TOKEN_A
        + '":"3"}}],"deadline":"2026-03-01T12:05:00.000Z"}'
    )
    item = sign_nep413_message(USER_KEY, message, fresh_nonce(ledger), CONTRACT)
    ledger.execute_intents([item], NOW)
    assert ledger.mt_balance_of(BOB, TOKEN_A) == 303
