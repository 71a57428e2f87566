"""The verifier contract as a pure state machine (spec 2.10–2.12, 4.6, 5.3, 7; protocol-notes 2–4).

Nothing here does I/O or reads the clock: ``now`` is an argument. The servers of the sandbox
wrap one :class:`VerifierLedger`; the backtest settles simulated fills on one.

Checks per signed item, in the verifier's order (the first failure is the error reported):
signature → JSON → recipient → deadline → signer holds the key → nonce salt/expiry (under the
nonce policy of :mod:`sandbox.nonce_policy`: ``spec`` or ``deployed``) → nonce unused → the
intents in order. After the whole batch, the invariant: per token, the
``token_diff`` deltas of the batch net to zero. Any failure rolls back the whole batch
(all-or-nothing, spec 7.3) through an undo journal, so a failed batch leaves the state exactly
as it was (:meth:`VerifierLedger.state_digest` is unchanged).

Beside this module, by role: what each intent does, with the protocol fee
(:mod:`sandbox.ledger_intents`); the error texts and :class:`~sandbox.ledger_errors.LedgerError`
(:mod:`sandbox.ledger_errors`); the undo journal and the event lines
(:mod:`sandbox.ledger_journal`); the nonce rules (:mod:`sandbox.nonce_policy`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from sandbox.ledger_errors import (
    ERR_BALANCE,
    ERR_DEADLINE,
    ERR_INVARIANT,
    ERR_JSON,
    ERR_NONCE_USED,
    ERR_RECIPIENT,
    ERR_SIGNATURE,
    LedgerError,
    err_no_key,
)
from sandbox.ledger_intents import apply_intent
from sandbox.ledger_journal import Journal, deltas_json, event, fmt_deltas
from sandbox.nonce_policy import NONCE_POLICIES, NoncePolicy, nonce_problem
from solver.errors import ProtocolError, SignatureError
from solver.protocol.amounts import U128_MAX
from solver.protocol.encoding import b58encode, b64decode, b64encode
from solver.protocol.ids import is_eth_implicit_account, is_implicit_account, validate_account_id
from solver.protocol.intents import (
    Erc191Signed,
    Nep413Signed,
    RawEd25519Signed,
    format_deadline,
)
from solver.protocol.nonce import datetime_to_ns, parse_nonce
from solver.protocol.signing import VerifiedItem, parse_signed, verify_signed

SignedItem = Nep413Signed | RawEd25519Signed | Erc191Signed
# A VerifiedItem is an item whose signature and JSON the caller has already checked with
# verify_signed (the bus does when an answer arrives): its checks are not run twice.
LedgerItem = SignedItem | dict[str, Any] | VerifiedItem
# The sandbox's wNEAR (config/sandbox.yaml ``wrapped_native``): what ``storage_deposit`` and an
# ``ft_withdraw`` storage deposit are paid with (spec 2.12).
DEFAULT_WRAPPED_NATIVE = "nep141:wrap.sandbox"


@dataclass(frozen=True, slots=True)
class ExecutedIntent:
    intent_hash: str
    account_id: str
    nonce: str


@dataclass(slots=True)
class ExecutionResult:
    """What one batch did: per-item intent hashes, events, and unmatched deltas (simulation)."""

    executed: list[ExecutedIntent]
    logs: list[str]
    min_deadline: datetime | None
    unmatched_deltas: dict[str, int] = field(default_factory=dict)

    @property
    def intent_hashes(self) -> list[str]:
        return [e.intent_hash for e in self.executed]


class VerifierLedger:
    """Balances, keys, nonces, salts, fees and events of one verifier contract."""

    def __init__(
        self,
        contract_id: str = "intents.sandbox",
        *,
        fee_pips: int = 0,
        fee_collector: str | None = None,
        wrapped_native: str = DEFAULT_WRAPPED_NATIVE,
        nonce_policy: NoncePolicy = "spec",
        seed: int | None = None,
    ) -> None:
        if not 0 <= fee_pips < 1_000_000:
            raise ValueError("fee_pips must be in [0, 1e6)")
        if nonce_policy not in NONCE_POLICIES:
            raise ValueError(f"nonce_policy must be one of {', '.join(NONCE_POLICIES)}")
        self.nonce_policy: NoncePolicy = nonce_policy
        self.contract_id = contract_id
        self.fee_pips = fee_pips
        self.fee_collector = fee_collector or f"fees.{contract_id}"
        self.wrapped_native = wrapped_native
        self._rng = random.Random(seed)
        self.balances: dict[str, dict[str, int]] = {}
        self.keys: dict[str, set[str]] = {}
        self.revoked_implicit: set[str] = set()  # implicit accounts whose own key was removed
        self.used_nonces: dict[str, set[bytes]] = {}
        self.salts: list[bytes] = [self._new_salt()]
        self.events: list[str] = []

    # ------------------------------------------------------------------ admin (sandbox only)

    def deposit(self, account_id: str, token_id: str, amount: int) -> None:
        """Credit tokens from outside (funding accounts in the sandbox and tests)."""
        validate_account_id(account_id)
        if amount < 0:
            raise ValueError("deposit amount must be non-negative")
        account = self.balances.setdefault(account_id, {})
        new = account.get(token_id, 0) + amount
        if new > U128_MAX:
            raise ValueError(ERR_BALANCE)
        account[token_id] = new

    def register_key(self, account_id: str, public_key: str) -> None:
        """Give a named account a key without an intent (how the sandbox bootstraps accounts)."""
        validate_account_id(account_id)
        self.keys.setdefault(account_id, set()).add(public_key)

    def rotate_salt(self) -> str:
        """Make a new salt current; older salts stay valid until invalidated (protocol-notes 3)."""
        self.salts.append(self._new_salt())
        return self.current_salt()

    def invalidate_salts(self, salts: Iterable[str]) -> None:
        """Invalidate old salts; the current salt cannot be invalidated (rotate first)."""
        drop = {bytes.fromhex(s) for s in salts}
        current = self.salts[-1]
        self.salts = [s for s in self.salts if s not in drop or s == current]

    # ------------------------------------------------------------------ views (spec 4.6, pn 4)

    def current_salt(self) -> str:
        return self.salts[-1].hex()

    def mt_balance_of(self, account_id: str, token_id: str) -> int:
        return self.balances.get(account_id, {}).get(token_id, 0)

    def mt_batch_balance_of(self, account_id: str, token_ids: Sequence[str]) -> list[int]:
        account = self.balances.get(account_id, {})
        return [account.get(t, 0) for t in token_ids]

    def is_nonce_used(self, account_id: str, nonce: str | bytes) -> bool:
        raw = b64decode(nonce, length=32, what="nonce") if isinstance(nonce, str) else nonce
        return raw in self.used_nonces.get(account_id, set())

    def public_keys_of(self, account_id: str) -> list[str]:
        found = set(self.keys.get(account_id, set()))
        if is_implicit_account(account_id) and account_id not in self.revoked_implicit:
            found.add("ed25519:" + b58encode(bytes.fromhex(account_id)))
        return sorted(found)

    def has_public_key(self, account_id: str, public_key: str) -> bool:
        return public_key in self.public_keys_of(account_id) or self._owns_implicitly(
            account_id, public_key, None
        )

    def fee(self) -> int:
        return self.fee_pips

    def total_supply(self, token_id: str) -> int:
        return sum(acc.get(token_id, 0) for acc in self.balances.values())

    def state_digest(self) -> str:
        """sha256 of the canonical state: equal digests mean byte-for-byte equal state."""
        state = {
            "balances": {
                a: {t: str(v) for t, v in sorted(b.items())}
                for a, b in sorted(self.balances.items())
            },
            "keys": {a: sorted(k) for a, k in sorted(self.keys.items())},
            "revoked": sorted(self.revoked_implicit),
            "nonces": {a: sorted(n.hex() for n in s) for a, s in sorted(self.used_nonces.items())},
            "salts": [s.hex() for s in self.salts],
            "events": self.events,
            "fee": self.fee_pips,
        }
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()

    # ------------------------------------------------------------------ execution

    def execute_intents(self, signed: Sequence[LedgerItem], now: datetime) -> ExecutionResult:
        """Execute a batch all-or-nothing; raise :class:`LedgerError` with the verifier's text."""
        journal = Journal()
        try:
            result = self._run(signed, now, journal)
            if result.unmatched_deltas:
                raise LedgerError(
                    f"{ERR_INVARIANT}: unmatched deltas {deltas_json(result.unmatched_deltas)}",
                    detail={"unmatched_deltas": fmt_deltas(result.unmatched_deltas)},
                )
        except BaseException:
            journal.rollback()
            raise
        self.events.extend(result.logs)
        return result

    def simulate_intents(self, signed: Sequence[LedgerItem], now: datetime) -> dict[str, Any]:
        """Dry-run: same checks, no state change; the output shape of protocol-notes 4.

        An unbalanced batch is not an error here: it is reported as ``invariant_violated``
        (that is how a solver's single quote is checked for affordability).
        """
        journal = Journal()
        try:
            result = self._run(signed, now, journal)
        finally:
            journal.rollback()
        out: dict[str, Any] = {
            "intents_executed": [
                {"intent_hash": e.intent_hash, "account_id": e.account_id, "nonce": e.nonce}
                for e in result.executed
            ],
            "logs": result.logs,
            "min_deadline": format_deadline(result.min_deadline) if result.min_deadline else None,
            "state": {"fee": self.fee_pips, "current_salt": self.current_salt()},
        }
        if result.unmatched_deltas:
            out["invariant_violated"] = {
                "error": "unmatched_deltas",
                "unmatched_deltas": fmt_deltas(result.unmatched_deltas),
            }
        return out

    def _run(
        self, signed: Sequence[LedgerItem], now: datetime, journal: Journal
    ) -> ExecutionResult:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        executed: list[ExecutedIntent] = []
        logs: list[str] = []
        sums: dict[str, int] = {}
        min_deadline: datetime | None = None
        for index, raw_item in enumerate(signed):
            item = self._verify(raw_item, index)
            self._check_item(item, now, index)
            message = item.message
            signer = message.signer_id
            journal.add(journal.setdefault(self.used_nonces, signer, set()), item.nonce)
            for intent in message.intents:
                apply_intent(
                    self, intent, signer, item.intent_hash_text, journal, logs, sums, index
                )
            nonce_text = b64encode(item.nonce)
            executed.append(ExecutedIntent(item.intent_hash_text, signer, nonce_text))
            logs.append(
                event(
                    "intents_executed",
                    [
                        {
                            "intent_hash": item.intent_hash_text,
                            "account_id": signer,
                            "nonce": nonce_text,
                        }
                    ],
                )
            )
            if min_deadline is None or message.deadline < min_deadline:
                min_deadline = message.deadline
        unmatched = {token: total for token, total in sums.items() if total != 0}
        return ExecutionResult(executed, logs, min_deadline, unmatched)

    def _verify(self, raw_item: LedgerItem, index: int) -> VerifiedItem:
        if isinstance(raw_item, VerifiedItem):
            return raw_item
        try:
            item = raw_item if isinstance(raw_item, BaseModel) else parse_signed(raw_item)
            return verify_signed(item)
        except SignatureError as exc:
            raise LedgerError(ERR_SIGNATURE, index, {"detail": str(exc)}) from None
        except ProtocolError as exc:
            raise LedgerError(f"{ERR_JSON}: {exc}", index) from None

    def _check_item(self, item: VerifiedItem, now: datetime, index: int) -> None:
        message = item.message
        if item.recipient != self.contract_id:
            raise LedgerError(ERR_RECIPIENT, index)
        if message.deadline < now:
            raise LedgerError(ERR_DEADLINE, index)
        signer = message.signer_id
        if not self._holds_key(signer, item):
            raise LedgerError(err_no_key(item.public_key, signer), index)
        problem = nonce_problem(
            parse_nonce(item.nonce),
            self.nonce_policy,
            self.salts,
            datetime_to_ns(now),
            datetime_to_ns(message.deadline),
        )
        if problem is not None:
            raise LedgerError(problem, index)
        if item.nonce in self.used_nonces.get(signer, set()):
            raise LedgerError(ERR_NONCE_USED, index)

    def _holds_key(self, account_id: str, item: VerifiedItem) -> bool:
        if item.public_key in self.keys.get(account_id, set()):
            return True
        return self._owns_implicitly(account_id, item.public_key, item.key_owner)

    def _owns_implicitly(self, account_id: str, public_key: str, owner: str | None) -> bool:
        if account_id in self.revoked_implicit:
            return False
        if owner is not None and owner == account_id:
            return is_implicit_account(account_id) or is_eth_implicit_account(account_id)
        if is_implicit_account(account_id) and public_key.startswith("ed25519:"):
            return "ed25519:" + b58encode(bytes.fromhex(account_id)) == public_key
        return False

    def _debit(
        self, account_id: str, token: str, amount: int, journal: Journal, index: int
    ) -> None:
        balances = journal.setdefault(self.balances, account_id, {})
        current = balances.get(token, 0)
        if amount > current:
            raise LedgerError(ERR_BALANCE, index, {"token": token, "account_id": account_id})
        journal.set_item(balances, token, current - amount)

    def _credit(
        self, account_id: str, token: str, amount: int, journal: Journal, index: int
    ) -> None:
        balances = journal.setdefault(self.balances, account_id, {})
        new = balances.get(token, 0) + amount
        if new > U128_MAX:
            raise LedgerError(ERR_BALANCE, index, {"token": token, "account_id": account_id})
        journal.set_item(balances, token, new)

    def _new_salt(self) -> bytes:
        while True:
            salt = self._rng.getrandbits(32).to_bytes(4, "big")
            if salt not in getattr(self, "salts", []):
                return salt


def utc_now() -> datetime:
    """The one wall-clock read of the sandbox servers (the ledger itself never reads it)."""
    return datetime.now(UTC)
