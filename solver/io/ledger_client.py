"""Read the verifier contract through the ledger node's JSON-RPC (spec 4.6; protocol-notes 3–5).

Every view is a ``query`` / ``call_function`` with ``args_base64`` = base64 of the JSON args;
the answer's ``result.result`` holds the bytes of the method's JSON return. Three ways to fail,
mapped here and nowhere else (STYLE 7):

- no answer (connect error, timeout, HTTP 5xx / 429) → :class:`TransportError`;
- the node or the contract said no: a JSON-RPC ``error`` object (``{name, cause, code,
  message, data}``) or a contract panic (HTTP 200 with ``result.error``) →
  :class:`RemoteError` carrying the remote's text;
- an answer of the wrong shape → :class:`ProtocolError` naming the method.

The client never trusts the node: every typed method checks the shape of what came back.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx
import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from solver.errors import ProtocolError, RemoteError
from solver.io._http import JsonRpcHttp, same_id
from solver.protocol.amounts import parse_u128
from solver.protocol.encoding import b64encode
from solver.protocol.nonce import NONCE_LEN, parse_salt
from solver.protocol.signing import first_error

Finality = Literal["final", "optimistic"]


class _ExecutedShape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    intent_hash: str
    account_id: str
    nonce: str


class _SimulationShape(BaseModel):
    """What ``simulate_intents`` must look like (protocol-notes 4); extra keys are allowed."""

    model_config = ConfigDict(extra="allow", strict=True)
    intents_executed: list[_ExecutedShape]
    logs: list[str]
    state: dict[str, Any] | None = None
    invariant_violated: dict[str, Any] | None = None


class LedgerClient:
    """Typed views of the verifier contract at ``verifier_contract`` via the node at ``url``."""

    def __init__(
        self,
        url: str,
        verifier_contract: str,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 5.0,
        *,
        finality: Finality = "final",
    ) -> None:
        self.verifier_contract = verifier_contract
        self.finality = finality
        self._rpc = JsonRpcHttp(url, client=client, timeout_s=timeout_s, name="ledger")

    @property
    def url(self) -> str:
        return self._rpc.url

    async def aclose(self) -> None:
        await self._rpc.aclose()

    async def __aenter__(self) -> LedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ the one call

    async def view(self, method: str, args: Mapping[str, Any] | None = None) -> Any:
        """Call a view method; return its decoded JSON value (protocol-notes 5)."""
        try:
            args_json = orjson.dumps(dict(args or {}))
        except TypeError as exc:
            raise ProtocolError(f"ledger {method}: arguments are not JSON: {exc}") from None
        request_id = self._rpc.next_id()
        payload = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "query",
            "params": {
                "request_type": "call_function",
                "finality": self.finality,
                "account_id": self.verifier_contract,
                "method_name": method,
                "args_base64": base64.b64encode(args_json).decode("ascii"),
            },
        }
        status, body = await self._rpc.post(payload, method)
        if not isinstance(body, dict):
            raise ProtocolError(f"ledger {method}: answer is not a JSON object")
        error = body.get("error")
        if error is not None:
            raise _rpc_error(error, status)
        if status != 200:
            raise RemoteError(f"HTTP {status}", code=status)
        if not same_id(body, request_id):
            raise ProtocolError(f"ledger {method}: answer id does not match the request")
        result = body.get("result")
        if not isinstance(result, dict):
            raise ProtocolError(f"ledger {method}: result is not an object")
        panic = result.get("error")
        if panic is not None:
            raise RemoteError(panic if isinstance(panic, str) else orjson.dumps(panic).decode())
        raw = result.get("result")
        if not isinstance(raw, list):
            raise ProtocolError(f"ledger {method}: result.result is not a list of bytes")
        try:
            data = bytes(raw)
        except (TypeError, ValueError):
            raise ProtocolError(f"ledger {method}: result.result is not a list of bytes") from None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"ledger {method}: returned bytes are not JSON") from None

    # ------------------------------------------------------------------ typed views

    async def current_salt(self) -> bytes:
        """The current 4-byte salt (spec 4.6: a JSON string of 8 hex characters)."""
        value = await self.view("current_salt")
        if not isinstance(value, str):
            raise ProtocolError(f"ledger current_salt: expected a string, got {_kind(value)}")
        try:
            return parse_salt(value)
        except ProtocolError as exc:
            raise ProtocolError(f"ledger current_salt: {exc}") from None

    async def mt_balance_of(self, account_id: str, token_id: str) -> int:
        value = await self.view("mt_balance_of", {"account_id": account_id, "token_id": token_id})
        return _u128("mt_balance_of", value)

    async def mt_batch_balance_of(self, account_id: str, token_ids: Sequence[str]) -> list[int]:
        """Balances of ``token_ids`` in order; the answer must have exactly one per token."""
        ids = list(token_ids)
        value = await self.view("mt_batch_balance_of", {"account_id": account_id, "token_ids": ids})
        if not isinstance(value, list):
            raise ProtocolError(f"ledger mt_batch_balance_of: expected a list, got {_kind(value)}")
        if len(value) != len(ids):
            raise ProtocolError(
                f"ledger mt_batch_balance_of: {len(value)} balances for {len(ids)} tokens"
            )
        return [_u128("mt_batch_balance_of", item) for item in value]

    async def is_nonce_used(self, account_id: str, nonce: bytes) -> bool:
        if len(nonce) != NONCE_LEN:
            raise ProtocolError(f"nonce must be {NONCE_LEN} bytes, got {len(nonce)}")
        value = await self.view(
            "is_nonce_used", {"account_id": account_id, "nonce": b64encode(nonce)}
        )
        return _bool("is_nonce_used", value)

    async def has_public_key(self, account_id: str, public_key: str) -> bool:
        value = await self.view(
            "has_public_key", {"account_id": account_id, "public_key": public_key}
        )
        return _bool("has_public_key", value)

    async def public_keys_of(self, account_id: str) -> list[str]:
        value = await self.view("public_keys_of", {"account_id": account_id})
        if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
            raise ProtocolError(
                f"ledger public_keys_of: expected a list of strings, got {_kind(value)}"
            )
        return value

    async def simulate_intents(self, signed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Dry-run signed intents; the answer's shape is checked, then returned as is.

        An unbalanced batch is not an error: it comes back with ``invariant_violated``. An
        intent the verifier refuses (bad salt, used nonce, no balance) is a contract panic,
        raised as :class:`RemoteError` with the verifier's text.
        """
        value = await self.view("simulate_intents", {"signed": [dict(item) for item in signed]})
        if not isinstance(value, dict):
            raise ProtocolError(f"ledger simulate_intents: expected an object, got {_kind(value)}")
        try:
            _SimulationShape.model_validate(value)
        except ValidationError as exc:
            raise ProtocolError(f"ledger simulate_intents: {first_error(exc)}") from None
        return value

    async def fee(self) -> int:
        """The verifier's fee in pips (1e-6)."""
        value = await self.view("fee")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1_000_000:
            raise ProtocolError(f"ledger fee: expected pips in [0, 1e6), got {_kind(value)}")
        return value


def _rpc_error(error: Any, status: int) -> RemoteError:
    """``{name, cause: {name, info}, code, message, data}`` → RemoteError("CAUSE: text")."""
    if not isinstance(error, dict):
        return RemoteError(str(error)[:500], code=status if status != 200 else None)
    code = error.get("code")
    cause = error.get("cause")
    cause_name = cause.get("name") if isinstance(cause, dict) else None
    data, message = error.get("data"), error.get("message")
    text = data if isinstance(data, str) and data else message
    if not isinstance(text, str):
        text = "error"
    if isinstance(cause_name, str) and cause_name:
        text = f"{cause_name}: {text}"
    return RemoteError(text, code=code if isinstance(code, int) else None)


def _u128(method: str, value: Any) -> int:
    try:
        return parse_u128(value)
    except ValueError as exc:
        raise ProtocolError(f"ledger {method}: {exc}") from None


def _bool(method: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"ledger {method}: expected a boolean, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
