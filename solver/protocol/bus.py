"""Message-bus objects: the JSON-RPC envelope, quote params and results, publish and status
(spec 2.13, 3.2, 4.7) and the solver side of the bus (protocol-notes 6).

Field names use the spec's neutral ``core`` prefix. A relay that spells the asset fields with
another prefix is handled at the frame boundary by :func:`rename_asset_fields`, so the models
never change with the relay.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from solver.protocol.amounts import U128
from solver.protocol.ids import AssetId
from solver.protocol.intents import SignedIntent

JSONRPC = "2.0"
DEFAULT_MIN_DEADLINE_MS = 60_000
MAX_SOLVER_WAIT_MS = 3_000
_TOLERANT = ConfigDict(extra="ignore", frozen=True)

MAX_MIN_DEADLINE_MS = 86_400_000
MinDeadlineMs = Annotated[int, Field(strict=True, ge=0, le=MAX_MIN_DEADLINE_MS)]


class IntentStatus(StrEnum):
    """Intent status values of the bus (spec 3.2)."""

    PENDING = "PENDING"
    TX_BROADCASTED = "TX_BROADCASTED"
    SETTLED = "SETTLED"
    NOT_FOUND_OR_NOT_VALID = "NOT_FOUND_OR_NOT_VALID"


class PublishStatus(StrEnum):
    OK = "OK"
    FAILED = "FAILED"


def rename_asset_fields(data: dict[str, Any], from_prefix: str, to_prefix: str) -> dict[str, Any]:
    """Rename ``<from>_asset_identifier_in/out`` keys to ``<to>_…`` (one config value)."""
    if from_prefix == to_prefix:
        return data
    out = dict(data)
    for side in ("in", "out"):
        old = f"{from_prefix}_asset_identifier_{side}"
        if old in out:
            out[f"{to_prefix}_asset_identifier_{side}"] = out.pop(old)
    return out


class _ExactAmounts(BaseModel):
    """Exactly one of ``exact_amount_in`` / ``exact_amount_out``, positive, as a string."""

    model_config = _TOLERANT
    core_asset_identifier_in: AssetId
    core_asset_identifier_out: AssetId
    exact_amount_in: U128 | None = None
    exact_amount_out: U128 | None = None
    min_deadline_ms: MinDeadlineMs = DEFAULT_MIN_DEADLINE_MS

    @model_validator(mode="after")
    def _one_exact_side(self) -> _ExactAmounts:
        if (self.exact_amount_in is None) == (self.exact_amount_out is None):
            raise ValueError("exactly one of exact_amount_in and exact_amount_out must be given")
        exact = self.exact_amount_in if self.exact_amount_in is not None else self.exact_amount_out
        if exact == 0:
            raise ValueError("the exact amount must be positive")
        if self.core_asset_identifier_in == self.core_asset_identifier_out:
            raise ValueError("asset in and asset out must differ")
        return self

    @property
    def is_exact_in(self) -> bool:
        return self.exact_amount_in is not None

    @property
    def exact_amount(self) -> int:
        value = self.exact_amount_in if self.exact_amount_in is not None else self.exact_amount_out
        assert value is not None
        return value


class QuoteParams(_ExactAmounts):
    """params[0] of the bus ``quote`` method (spec 2.13, 4.7)."""


class QuoteRequestEvent(_ExactAmounts):
    """``quote`` event data sent to solvers (protocol-notes 6). Extra relay fields such as
    ``min_wait_ms``, ``max_wait_ms``, ``protocol_fee_included`` are tolerated."""

    quote_id: Annotated[str, Field(min_length=1, max_length=256)]


class QuoteResultItem(BaseModel):
    """One element of the ``quote`` result (spec 2.13): all strings."""

    model_config = _TOLERANT
    quote_hash: str
    core_asset_identifier_in: AssetId
    core_asset_identifier_out: AssetId
    amount_in: U128
    amount_out: U128
    expiration_time: str


class QuoteOutput(BaseModel):
    """``{amount_out}`` for an exact-in request, ``{amount_in}`` for exact-out, as the
    reference solver and the official SDK send; py-near's solver sends both amounts
    (protocol-notes 6), so the relay reads either form. Which side must be there, and that both
    agree with the request and the signed diff, is the relay's check: it knows the request."""

    model_config = _TOLERANT
    amount_out: U128 | None = None
    amount_in: U128 | None = None

    @model_validator(mode="after")
    def _some_side(self) -> QuoteOutput:
        if self.amount_in is None and self.amount_out is None:
            raise ValueError("quote_output needs amount_in or amount_out")
        return self


class QuoteResponseParams(BaseModel):
    """params[0] of the solver's ``quote_response`` (protocol-notes 6). ``signed_data`` takes
    every standard ``publish_intent`` takes: the relay's docs give a quote's ``signed_data``
    the format of ``publish_intent``'s, and the verifier accepts all of them."""

    model_config = _TOLERANT
    quote_id: str
    quote_output: QuoteOutput
    signed_data: SignedIntent
    other_quote_hashes: list[str] | None = None


def quote_response(
    quote_id: str, exact_in: bool, amount_in: int, amount_out: int, signed_data: dict[str, Any]
) -> dict[str, Any]:
    """The wire shape of :class:`QuoteResponseParams`, built without validation for the quote
    path: ``quote_output`` carries the side the request left open (``amount_out`` for an
    exact-in request, ``amount_in`` for exact-out; protocol-notes 6)."""
    output = {"amount_out": str(amount_out)} if exact_in else {"amount_in": str(amount_in)}
    return {"quote_id": quote_id, "quote_output": output, "signed_data": signed_data}


class QuoteStatusEvent(BaseModel):
    """``quote_status`` event data: the solver's quote was used in ``intent_hash``."""

    model_config = _TOLERANT
    quote_hash: str
    intent_hash: str
    tx_hash: str | None = None


def _no_quotes(value: Any) -> Any:
    """``quote_hashes: null`` is a publish without quotes: py-near sends it for a transfer."""
    return [] if value is None else value


QuoteHashes = Annotated[list[str], BeforeValidator(_no_quotes)]


class PublishIntentParams(BaseModel):
    model_config = _TOLERANT
    quote_hashes: QuoteHashes
    signed_data: SignedIntent


class PublishIntentsParams(BaseModel):
    model_config = _TOLERANT
    quote_hashes: QuoteHashes
    signed_datas: list[SignedIntent]


class PublishResult(BaseModel):
    """Result of ``publish_intent`` (spec 4.7, 7.1)."""

    model_config = _TOLERANT
    status: PublishStatus
    intent_hash: str | None = None
    reason: str | None = None


class PublishManyResult(BaseModel):
    model_config = _TOLERANT
    status: PublishStatus
    intent_hashes: list[str] = Field(default_factory=list)
    reason: str | None = None


class GetStatusParams(BaseModel):
    model_config = _TOLERANT
    intent_hash: str


class StatusData(BaseModel):
    model_config = _TOLERANT
    hash: str


class StatusResult(BaseModel):
    """Result of ``get_status`` (spec 4.7, 3.2)."""

    model_config = _TOLERANT
    intent_hash: str
    status: IntentStatus
    data: StatusData | None = None


class JsonRpcRequest(BaseModel):
    """Envelope of a request (spec 4.7): ``params`` is an array holding one object."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    jsonrpc: Literal["2.0"]
    id: int | str | None = None
    method: Annotated[str, Field(min_length=1, max_length=64)]
    params: list[Any] | dict[str, Any] = Field(default_factory=list)

    def first_param(self) -> Any:
        if isinstance(self.params, list):
            return self.params[0] if self.params else None
        return self.params


class JsonRpcErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    code: int
    message: str
    data: Any = None


def rpc_request(method: str, params: Any, request_id: int | str) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "method": method, "params": [params]}


def rpc_result(request_id: int | str | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def rpc_error(
    request_id: int | str | None, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": JSONRPC, "id": request_id, "error": error}


# JSON-RPC 2.0 error codes used by the bus and the sandbox.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


def unwrap_event(params: Any) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """Split an ``event`` frame's params into (subscription, data, metadata).

    Accepts both envelopes of protocol-notes 6: ``{subscription, data, metadata}`` and the flat
    form where the event fields sit directly in ``params``.
    """
    if not isinstance(params, dict):
        raise ValueError("event params must be an object")
    subscription = params.get("subscription")
    sub = subscription if isinstance(subscription, str) else None
    data = params.get("data")
    if isinstance(data, dict):
        meta = params.get("metadata")
        return sub, data, meta if isinstance(meta, dict) else {}
    flat = {k: v for k, v in params.items() if k not in ("subscription", "metadata")}
    meta = params.get("metadata")
    return sub, flat, meta if isinstance(meta, dict) else {}
