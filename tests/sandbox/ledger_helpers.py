"""Shared builders for the verifier-ledger tests: keys, signed items, events, tampering.

Everything is deterministic except the random part of salted nonces; time is always the
explicit :data:`NOW` (or a value derived from it), never the clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from sandbox.ledger import DEFAULT_WRAPPED_NATIVE, VerifierLedger
from solver.protocol.encoding import b58decode, b58encode, b64decode, b64encode
from solver.protocol.intents import Nep413Signed, TokenDiff
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.signing import sign_nep413, sign_nep413_message

CONTRACT = "intents.sandbox"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(minutes=5)

TOKEN_A = "nep141:usdc.sandbox"
TOKEN_B = "nep141:wbtc.sandbox"
TOKEN_C = "nep245:mt.sandbox:42"
WRAPPED_NATIVE = DEFAULT_WRAPPED_NATIVE


def make_key(seed: int) -> SecretKey:
    """A deterministic ed25519 key for test number ``seed``."""
    return SecretKey(hashlib.sha256(f"ledger-test-key-{seed}".encode()).digest())


def implicit(key: SecretKey) -> str:
    """The implicit account id (64 hex) that owns ``key`` without registration."""
    return key.public_key.implicit_account_id()


def pk(key: SecretKey) -> str:
    return key.public_key.to_text()


def new_ledger(*, fee_pips: int = 0, seed: int = 7) -> VerifierLedger:
    return VerifierLedger(CONTRACT, fee_pips=fee_pips, seed=seed)


def current_salt(ledger: VerifierLedger) -> bytes:
    return bytes.fromhex(ledger.current_salt())


def fresh_nonce(ledger: VerifierLedger) -> bytes:
    """A salted nonce (spec layout) with the ledger's current salt."""
    return salted_nonce(current_salt(ledger))


def sign_intents(
    ledger: VerifierLedger,
    key: SecretKey,
    signer: str,
    intents: Sequence[BaseModel],
    *,
    deadline: datetime = DEADLINE,
    nonce: bytes | None = None,
    recipient: str | None = None,
) -> Nep413Signed:
    """A nep413 item by ``signer`` with ``key``, the current salt and ``deadline``."""
    return sign_nep413(
        key,
        signer_id=signer,
        verifying_contract=ledger.contract_id if recipient is None else recipient,
        deadline=deadline,
        nonce=fresh_nonce(ledger) if nonce is None else nonce,
        intents=list(intents),
    )


def token_diff_item(
    ledger: VerifierLedger,
    key: SecretKey,
    signer: str,
    diff: dict[str, int],
    *,
    deadline: datetime = DEADLINE,
    nonce: bytes | None = None,
    recipient: str | None = None,
) -> Nep413Signed:
    """A signed ``token_diff`` for ``signer`` (negative = given, positive = received)."""
    return sign_intents(
        ledger,
        key,
        signer,
        [TokenDiff(diff=diff)],
        deadline=deadline,
        nonce=nonce,
        recipient=recipient,
    )


def sign_raw_message(
    ledger: VerifierLedger,
    key: SecretKey,
    message: str,
    *,
    nonce: bytes | None = None,
    recipient: str | None = None,
) -> Nep413Signed:
    """A correctly signed nep413 item around an arbitrary message string."""
    return sign_nep413_message(
        key,
        message,
        fresh_nonce(ledger) if nonce is None else nonce,
        ledger.contract_id if recipient is None else recipient,
    )


def message_text(signer: str, deadline: datetime, intents: list[dict[str, Any]]) -> str:
    """A hand-built message (to put wrong types on the wire), spec key order."""
    body = {
        "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "intents": intents,
        "signer_id": signer,
    }
    return json.dumps(body, separators=(",", ":"))


def as_wire(item: BaseModel) -> dict[str, Any]:
    """The JSON object of a signed item, as it arrives in ``execute_intents({"signed"})``."""
    data: dict[str, Any] = item.model_dump(mode="json", exclude_none=True)
    return data


def with_signature_byte_flipped(
    item: Nep413Signed, index: int = 0, mask: int = 0x01
) -> dict[str, Any]:
    """The item with one byte of its 64-byte signature changed (still valid base58)."""
    raw = bytearray(b58decode(item.signature.removeprefix("ed25519:")))
    raw[index] ^= mask
    wire = as_wire(item)
    wire["signature"] = "ed25519:" + b58encode(bytes(raw))
    return wire


def with_nonce_byte_flipped(item: Nep413Signed, index: int = 0, mask: int = 0x01) -> dict[str, Any]:
    raw = bytearray(b64decode(item.payload.nonce))
    raw[index] ^= mask
    wire = as_wire(item)
    wire["payload"]["nonce"] = b64encode(bytes(raw))
    return wire


def events(logs: list[str]) -> list[dict[str, Any]]:
    """Parse ``EVENT_JSON:`` log lines; fails if a line has another form."""
    out: list[dict[str, Any]] = []
    for line in logs:
        assert line.startswith("EVENT_JSON:"), line
        body: dict[str, Any] = json.loads(line[len("EVENT_JSON:") :])
        out.append(body)
    return out


def events_of_kind(logs: list[str], kind: str) -> list[dict[str, Any]]:
    return [e for e in events(logs) if e["event"] == kind]


def snapshot(ledger: VerifierLedger) -> tuple[str, int]:
    """What must not change when a batch fails: the state digest and the number of events."""
    return ledger.state_digest(), len(ledger.events)
