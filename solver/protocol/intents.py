"""Intents, the intent message and signed items (spec 2.10–2.12, 5.3; protocol-notes 1–2).

The models are *structural*: they reject wrong types, numbers where amount strings belong,
amounts outside u128/i128 and malformed ids, naming the field. Semantic rules that the verifier
reports as ``invalid intent`` (an empty diff, a zero delta, a transfer to oneself) are checked
by :func:`semantic_problem`, which the verifier calls at execution time in the spec's order.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
)

from solver.protocol.amounts import I128, U128
from solver.protocol.ids import AccountId, AssetId

_WIRE = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = _EPOCH.toordinal()
_MILLIS = [f".{ms:03d}Z" for ms in range(1000)]
_SECONDS: dict[int, str] = {}
"""Epoch second -> ``YYYY-MM-DDTHH:MM:SS``: the quotes of one second share it. Cleared when
full, so a long run's distinct seconds do not pile up."""
_SECONDS_MAX = 4096


def second_text(second: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of an epoch second (UTC), from the per-second cache: the
    deadlines of one second and the query tables' times of one second share it."""
    text = _SECONDS.get(second)
    if text is None:
        if len(_SECONDS) >= _SECONDS_MAX:
            _SECONDS.clear()
        text = _SECONDS[second] = (_EPOCH + timedelta(seconds=second)).isoformat()[:19]
    return text


def format_deadline(moment: datetime) -> str:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-11-22T10:00:00.000Z`` (protocol-notes 2).

    The text of ``moment.isoformat(timespec="milliseconds")`` (truncated, not rounded) with
    ``Z`` for ``+00:00``, built from the integer second and a per-second cache: 0.5 µs instead
    of 1.7 (``isoformat`` with a ``timespec`` is slow; one per answer; a test holds the texts
    equal).
    """
    tz = moment.tzinfo
    if tz is not UTC:
        if tz is None:
            raise ValueError("deadline must be timezone-aware")
        moment = moment.astimezone(UTC)
    second = (
        (moment.toordinal() - _EPOCH_DAY) * 86400
        + moment.hour * 3600
        + moment.minute * 60
        + moment.second
    )
    return (_SECONDS.get(second) or second_text(second)) + _MILLIS[moment.microsecond // 1000]


def format_deadline_us(us: int) -> str:
    """:func:`format_deadline` of a time in integer µs since the Unix epoch (the desk's clock,
    :mod:`solver.core.clock`), with no ``datetime`` built."""
    second, rest = divmod(us, 1_000_000)
    return (_SECONDS.get(second) or second_text(second)) + _MILLIS[rest // 1_000]


def parse_deadline(text: str) -> datetime:
    """Parse an ISO 8601 timestamp with a zone (``Z`` accepted); naive times are refused."""
    if not isinstance(text, str):
        raise ValueError("deadline must be an ISO 8601 string")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"deadline {text[:40]!r} is not ISO 8601") from None
    if moment.tzinfo is None:
        raise ValueError("deadline must carry a time zone")
    return moment


def _check_key_text(value: str) -> str:
    if not isinstance(value, str) or not value.startswith(("ed25519:", "secp256k1:")):
        raise ValueError("public key must start with ed25519: or secp256k1:")
    return value


PublicKeyText = Annotated[str, AfterValidator(_check_key_text)]


class AddPublicKey(BaseModel):
    model_config = _WIRE
    intent: Literal["add_public_key"] = "add_public_key"
    public_key: PublicKeyText


class RemovePublicKey(BaseModel):
    model_config = _WIRE
    intent: Literal["remove_public_key"] = "remove_public_key"
    public_key: PublicKeyText


class Transfer(BaseModel):
    model_config = _WIRE
    intent: Literal["transfer"] = "transfer"
    receiver_id: AccountId
    tokens: dict[AssetId, U128]
    memo: str | None = None


class FtWithdraw(BaseModel):
    model_config = _WIRE
    intent: Literal["ft_withdraw"] = "ft_withdraw"
    token: AccountId
    receiver_id: AccountId
    amount: U128
    memo: str | None = None
    msg: str | None = None
    storage_deposit: U128 | None = None


class StorageDeposit(BaseModel):
    model_config = _WIRE
    intent: Literal["storage_deposit"] = "storage_deposit"
    contract_id: AccountId
    account_id: AccountId = Field(
        validation_alias=AliasChoices("account_id", "deposit_for_account_id")
    )
    amount: U128


class TokenDiff(BaseModel):
    model_config = _WIRE
    intent: Literal["token_diff"] = "token_diff"
    diff: dict[AssetId, I128]
    memo: str | None = None
    referral: AccountId | None = None


Intent = Annotated[
    AddPublicKey | RemovePublicKey | Transfer | FtWithdraw | StorageDeposit | TokenDiff,
    Field(discriminator="intent"),
]
INTENT_TYPES = (
    "add_public_key",
    "remove_public_key",
    "transfer",
    "ft_withdraw",
    "storage_deposit",
    "token_diff",
)


def semantic_problem(intent: BaseModel, signer_id: str) -> str | None:
    """Why the verifier would call this intent ``invalid intent`` (protocol-notes 2), or None."""
    if isinstance(intent, TokenDiff):
        if not intent.diff:
            return "token_diff with an empty diff"
        if any(delta == 0 for delta in intent.diff.values()):
            return "token_diff with a zero delta"
    if isinstance(intent, Transfer):
        if not intent.tokens:
            return "transfer with no tokens"
        if intent.receiver_id == signer_id:
            return "transfer to oneself"
        if any(amount == 0 for amount in intent.tokens.values()):
            return "transfer of a zero amount"
    if isinstance(intent, FtWithdraw) and intent.amount == 0:
        return "ft_withdraw of a zero amount"
    return None


class IntentMessage(BaseModel):
    """The signed message of 2.10: signer, deadline and intents (plus, in raw_ed25519 and
    erc191 payloads, ``verifying_contract`` and ``nonce``, which nep413 carries in its wrapper)."""

    model_config = _WIRE
    signer_id: AccountId
    deadline: datetime
    intents: list[Intent]
    verifying_contract: str | None = None
    nonce: str | None = None

    @field_validator("deadline", mode="plain")
    @classmethod
    def _deadline(cls, value: Any) -> datetime:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError("deadline must be timezone-aware")
            return value
        return parse_deadline(value)


def intent_to_wire(intent: BaseModel) -> dict[str, Any]:
    """The JSON object of one intent, ``intent`` first, absent optionals left out."""
    return intent.model_dump(mode="json", exclude_none=True, by_alias=False)


def serialize_message(signer_id: str, deadline: datetime, intents: list[BaseModel]) -> str:
    """One-line JSON with keys in the spec's order ``deadline, intents, signer_id`` (2.10).

    The returned string is what gets hashed *and* sent: callers must never re-serialise it.
    """
    body = {
        "deadline": format_deadline(deadline),
        "intents": [intent_to_wire(i) for i in intents],
        "signer_id": signer_id,
    }
    return orjson.dumps(body).decode("utf-8")


def serialize_payload(
    signer_id: str,
    verifying_contract: str,
    deadline: datetime,
    nonce_b64: str,
    intents: list[BaseModel],
) -> str:
    """The self-contained payload of raw_ed25519 / erc191 (protocol-notes 1)."""
    body = {
        "signer_id": signer_id,
        "verifying_contract": verifying_contract,
        "deadline": format_deadline(deadline),
        "nonce": nonce_b64,
        "intents": [intent_to_wire(i) for i in intents],
    }
    return orjson.dumps(body).decode("utf-8")


class UnsignedPayload(BaseModel):
    """The unsigned payload of spec 2.10, as the ``solver intents sign`` command reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    signer_id: AccountId
    verifying_contract: AccountId
    deadline: datetime
    nonce: str
    intents: list[Intent]

    @field_validator("deadline", mode="plain")
    @classmethod
    def _deadline(cls, value: Any) -> datetime:
        return IntentMessage._deadline(value)


class Nep413Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    message: str
    nonce: str
    recipient: str
    callbackUrl: str | None = None


class Nep413Signed(BaseModel):
    """A signed item of standard ``nep413`` (2.11)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    standard: Literal["nep413"] = "nep413"
    payload: Nep413Payload
    public_key: str
    signature: str


class RawEd25519Signed(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    standard: Literal["raw_ed25519"] = "raw_ed25519"
    payload: str
    public_key: str
    signature: str


class Erc191Signed(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    standard: Literal["erc191"] = "erc191"
    payload: str
    signature: str


SignedIntent = Annotated[
    Nep413Signed | RawEd25519Signed | Erc191Signed, Field(discriminator="standard")
]
SIGNED_INTENT_ADAPTER: TypeAdapter[Nep413Signed | RawEd25519Signed | Erc191Signed] = TypeAdapter(
    SignedIntent
)
SIGNED_STANDARDS = ("nep413", "raw_ed25519", "erc191")
