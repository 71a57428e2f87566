"""The signing policy: what the signer signs whatever the bot asks (issue 28; STYLE 14).

A compromised bot can ask for anything; these rules bound what it gets. A quote is a
``token_diff`` whose recipient is the verifier, whose deadline is no further than
``quote_max_deadline_ms``, whose nonce carries a salt the ledger currently accepts, and whose
outflow (the negative delta) stays under its token's cap per quote and per hour. Any other
message is signed only when every intent in it is of a kind the policy names, within that kind's
caps and receivers. A token without a cap may not flow out at all.

The hourly caps count what was *signed*, not what settled: the signer cannot see fills, and a
signed quote may be used by anyone who holds it until its deadline. They are counted in
one-minute buckets (an hour is the last 60 of them), so the book stays small at thousands of
signatures a second.

Pure: time is an argument (STYLE 3); the server feeds it the salts it fetched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, Field, ValidationError

from solver.config.fields import STRICT, Amount
from solver.protocol.ids import AccountId, AssetId
from solver.protocol.intents import IntentMessage
from solver.protocol.nonce import NONCE_LEN, VERSIONED_MAGIC

OtherKind = Literal[
    "transfer",
    "ft_withdraw",
    "add_public_key",
    "remove_public_key",
    "storage_deposit",
    "token_diff",
]
OTHER_KINDS = (
    "transfer",
    "ft_withdraw",
    "add_public_key",
    "remove_public_key",
    "storage_deposit",
    "token_diff",
)
"""Intent kinds outside quotes that a policy may name."""

BUCKET_S = 60
HOUR_BUCKETS = 60


class TokenCap(BaseModel):
    """How much of one token may flow out: per request and per hour (smallest units)."""

    model_config = STRICT
    per_request: Amount
    per_hour: Amount


class IntentRule(BaseModel):
    """One kind of intent the signer may sign besides quotes."""

    model_config = STRICT
    caps: dict[AssetId, TokenCap] = Field(default_factory=dict)
    """Outflow caps per token; a token not named may not flow out through this kind."""
    receivers: list[AccountId] | None = None
    """``transfer`` / ``ft_withdraw``: the only receivers allowed; None: any."""
    public_keys: list[str] | None = None
    """``add_public_key`` / ``remove_public_key``: the only keys allowed; None: any."""
    max_deadline_ms: Annotated[int, Field(ge=1, le=86_400_000)] = 600_000
    """How far ahead the message's deadline may be."""


class PolicySpec(BaseModel):
    """The ``policy:`` section of the signer's YAML."""

    model_config = STRICT
    quote_max_deadline_ms: Annotated[int, Field(ge=1, le=3_600_000)] = 120_000
    """A quote's deadline may be at most this far ahead of the signer's clock."""
    quote_caps: dict[AssetId, TokenCap] = Field(default_factory=dict)
    """Outflow caps of quotes per token; a token not named is never quoted out."""
    intents: dict[OtherKind, IntentRule] = Field(default_factory=dict)
    """Other intent kinds the signer may sign (none by default), each with its own rule."""
    native_token: AssetId = "nep141:wrap.near"
    """The wrapped native token that storage deposits are paid in (spec 2.12)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not signed: the ``rule`` it broke (a stable word) and a detail."""

    rule: str
    detail: str


class _HourBook:
    """Outflows signed in the last hour, per key, in one-minute buckets."""

    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        self._buckets: dict[str, dict[int, int]] = {}

    def used(self, key: str, now_s: float) -> int:
        buckets = self._buckets.get(key)
        if not buckets:
            return 0
        oldest = int(now_s) // BUCKET_S - HOUR_BUCKETS + 1
        for minute in [m for m in buckets if m < oldest]:
            del buckets[minute]
        return sum(buckets.values())

    def add(self, key: str, amount: int, now_s: float) -> None:
        minute = int(now_s) // BUCKET_S
        buckets = self._buckets.setdefault(key, {})
        buckets[minute] = buckets.get(minute, 0) + amount


def nonce_salt(nonce: bytes) -> bytes | None:
    """The salt a nonce carries (protocol-notes 3): bytes 5–8 of a versioned nonce, 0–3 of a
    salted one; None when the nonce is not 32 bytes."""
    if len(nonce) != NONCE_LEN:
        return None
    if nonce[:4] == VERSIONED_MAGIC:
        return nonce[5:9]
    return nonce[:4]


class PolicyGuard:
    """The policy with its memory (hourly outflows, salts seen): ``check_*`` answer a
    :class:`Refusal` or None, and book the outflow of what they pass."""

    def __init__(self, spec: PolicySpec, *, account: str, verifier: str) -> None:
        self.spec = spec
        self.account = account
        self.verifier = verifier
        self.salts: frozenset[bytes] | None = None
        """Salts the ledger accepts now; None: not known, the salt rule is not enforced."""
        self._book = _HourBook()

    def set_salts(self, salts: frozenset[bytes]) -> None:
        self.salts = salts

    # ------------------------------------------------------------------ common rules

    def _common(
        self, recipient: str, nonce: bytes, deadline: datetime, max_ms: int, now: datetime
    ) -> Refusal | None:
        if recipient != self.verifier:
            return Refusal("recipient", f"recipient {recipient!r} is not the verifier")
        ahead_ms = (deadline - now).total_seconds() * 1000
        if ahead_ms > max_ms:
            return Refusal(
                "deadline_too_far", f"deadline {ahead_ms:.0f} ms ahead, at most {max_ms}"
            )
        if ahead_ms < 0:
            return Refusal("deadline_past", "deadline has passed")
        salt = nonce_salt(nonce)
        if salt is None:
            return Refusal("nonce", "nonce must be 32 bytes")
        if self.salts is not None and salt not in self.salts:
            return Refusal("nonce_salt", f"nonce salt {salt.hex()} is not a current salt")
        return None

    def _caps(
        self,
        scope: str,
        caps: Mapping[str, TokenCap],
        outflows: Mapping[str, int],
        now_s: float,
    ) -> Refusal | None:
        for token, amount in outflows.items():
            cap = caps.get(token)
            if cap is None:
                return Refusal("token_not_allowed", f"{scope}: {token} may not flow out")
            if amount > cap.per_request:
                return Refusal(
                    "cap_per_request", f"{scope}: {amount} {token} over {cap.per_request}"
                )
            used = self._book.used(scope + token, now_s)
            if used + amount > cap.per_hour:
                return Refusal(
                    "cap_per_hour",
                    f"{scope}: {used} + {amount} {token} over {cap.per_hour} an hour",
                )
        for token, amount in outflows.items():
            self._book.add(scope + token, amount, now_s)
        return None

    # ------------------------------------------------------------------ quotes

    def check_quote(
        self,
        *,
        recipient: str,
        nonce: bytes,
        deadline: datetime,
        asset_out: str,
        amount_out: int,
        amount_in: int,
        now: datetime,
    ) -> Refusal | None:
        """A quote's ``token_diff`` (built by the signer itself, so it is one by
        construction): recipient, deadline, salt, amounts, then the caps of ``asset_out``."""
        refusal = self._common(recipient, nonce, deadline, self.spec.quote_max_deadline_ms, now)
        if refusal is not None:
            return refusal
        if amount_out <= 0 or amount_in <= 0:
            return Refusal("amount", "quote amounts must be positive")
        return self._caps("quote", self.spec.quote_caps, {asset_out: amount_out}, now.timestamp())

    # ------------------------------------------------------------------ other intents

    def check_message(
        self, *, message: str, recipient: str, nonce: bytes, now: datetime
    ) -> Refusal | None:
        """Any other NEP-413 message: parsed as the verifier would; signed only when every
        intent is of a kind the policy names, within its rule."""
        try:
            parsed = IntentMessage.model_validate(orjson.loads(message))
        except (orjson.JSONDecodeError, ValidationError):
            return Refusal("message", "not an intent message the verifier accepts")
        if parsed.signer_id != self.account:
            return Refusal("signer", f"signer_id {parsed.signer_id!r} is not this account")
        if not parsed.intents:
            return Refusal("message", "no intents")
        rules: dict[str, IntentRule] = {str(k): v for k, v in self.spec.intents.items()}
        kinds: list[str] = [intent.intent for intent in parsed.intents]
        for kind in kinds:
            if kind not in rules:
                return Refusal("intent_not_allowed", f"{kind} is not named by the policy")
        max_ms = min(rules[kind].max_deadline_ms for kind in kinds)
        refusal = self._common(recipient, nonce, parsed.deadline, max_ms, now)
        if refusal is not None:
            return refusal
        pending: list[tuple[str, IntentRule, dict[str, int]]] = []
        for intent in parsed.intents:
            rule = rules[intent.intent]
            refusal = _receiver_and_key(intent, rule)
            if refusal is not None:
                return refusal
            pending.append((intent.intent, rule, _outflows(intent, self.spec.native_token)))
        # Check every cap before booking any (a refusal books nothing).
        for scope, rule, outflows in pending:
            for token, amount in outflows.items():
                cap = rule.caps.get(token)
                if cap is None:
                    return Refusal("token_not_allowed", f"{scope}: {token} may not flow out")
                if amount > cap.per_request:
                    return Refusal(
                        "cap_per_request", f"{scope}: {amount} {token} over {cap.per_request}"
                    )
        for scope, rule, outflows in pending:
            refusal = self._caps(scope, rule.caps, outflows, now.timestamp())
            if refusal is not None:
                return refusal
        return None


def _receiver_and_key(intent: Any, rule: IntentRule) -> Refusal | None:
    receiver = getattr(intent, "receiver_id", None)
    if receiver is not None and rule.receivers is not None and receiver not in rule.receivers:
        return Refusal("receiver", f"{intent.intent} to {receiver} is not allowed")
    key = getattr(intent, "public_key", None)
    if key is not None and rule.public_keys is not None and key not in rule.public_keys:
        return Refusal("public_key", f"{intent.intent} of {key} is not allowed")
    return None


def _outflows(intent: Any, native: str) -> dict[str, int]:
    """What an intent takes out of the account, per asset id (storage paid in ``native``)."""
    kind = intent.intent
    out: dict[str, int] = {}
    if kind == "transfer":
        out = {token: int(amount) for token, amount in intent.tokens.items()}
    elif kind == "ft_withdraw":
        out = {"nep141:" + intent.token: int(intent.amount)}
        if intent.storage_deposit:
            out[native] = out.get(native, 0) + int(intent.storage_deposit)
    elif kind == "token_diff":
        out = {token: -int(delta) for token, delta in intent.diff.items() if int(delta) < 0}
    elif kind == "storage_deposit" and int(intent.amount):
        out = {native: int(intent.amount)}
    return out
