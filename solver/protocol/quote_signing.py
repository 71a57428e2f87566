"""The hot-path signer of a solver's quote: a ``token_diff`` under NEP-413 (spec 2.10–2.12,
5.3; protocol-notes 1, 6).

It writes the message string directly instead of going through pydantic models: the result is
byte-identical to :func:`solver.protocol.intents.serialize_message` (a test holds them equal)
but several times cheaper, which matters at thousands of quotes per second. The string that is
hashed is the string that is sent.
"""

from __future__ import annotations

import binascii
import hashlib
import struct
from datetime import datetime
from typing import Any

import orjson

from solver.protocol.encoding import b58encode
from solver.protocol.intents import format_deadline, format_deadline_us
from solver.protocol.keys import SecretKey
from solver.protocol.signing import NEP413_TAG
from solver.protocol.values import value

_json_cache: dict[str, str] = {}
"""An id -> its JSON string (``orjson``'s escaping). Asset ids come from the bot's own
configuration, but a nep245 token id may hold any character, so each is escaped once."""
_JSON_CACHE_MAX = 4096
_HEAD = struct.Struct("<II").pack  # NEP413_TAG and the message's length (borsh u32)
_TAG = struct.unpack("<I", NEP413_TAG)[0]


def _json_str(value: str) -> str:
    cached = _json_cache.get(value)
    if cached is None:
        if len(_json_cache) >= _JSON_CACHE_MAX:
            _json_cache.clear()
        cached = _json_cache[value] = orjson.dumps(value).decode("utf-8")
    return cached


def _message(
    deadline: str, asset_in: str, amount_in: int, asset_out: str, amount_out: int, tail: str
) -> str:
    """The one template of the signed message; ``tail`` closes the diff and carries the
    signer: ``"}}],"signer_id":<json>}`` (:func:`_tail`)."""
    get = _json_cache.get
    return (
        f'{{"deadline":"{deadline}","intents":[{{"intent":"token_diff","diff":{{'
        f'{get(asset_in) or _json_str(asset_in)}:"{amount_in}",'
        f'{get(asset_out) or _json_str(asset_out)}:"-{amount_out}{tail}'
    )


def _tail(signer_id: str) -> str:
    return '"}}],"signer_id":' + _json_str(signer_id) + "}"


def token_diff_message(
    signer_id: str,
    deadline: datetime,
    asset_in: str,
    amount_in: int,
    asset_out: str,
    amount_out: int,
) -> str:
    """The solver's mirror diff ``{asset_in: "+amount_in", asset_out: "-amount_out"}``, one line,
    keys ``deadline, intents, signer_id`` (positive deltas are written without a sign)."""
    return _message(
        format_deadline(deadline), asset_in, amount_in, asset_out, amount_out, _tail(signer_id)
    )


@value
class SignedQuote:
    """A signed solver quote: the wire ``signed_data`` and its intent hash (= quote_hash)."""

    signed_data: dict[str, Any]
    quote_hash: str
    nonce: bytes
    message: str
    signer_id: str = ""


class QuoteSigner:
    """Signs quotes for one account and verifying contract with one key."""

    def __init__(self, key: SecretKey, signer_id: str, verifying_contract: str) -> None:
        self._key = key
        self._sign = key.sign
        self.signer_id = signer_id
        self.verifying_contract = verifying_contract
        self.public_key = key.public_key.to_text()
        self._tail = _tail(signer_id)
        recipient = verifying_contract.encode("utf-8")
        self._suffix = struct.pack("<I", len(recipient)) + recipient + b"\x00"

    def sign(
        self,
        *,
        deadline: int,
        nonce: bytes,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        amount_out: int,
    ) -> SignedQuote:
        """``deadline`` in µs since the epoch (the desk's clock, :mod:`solver.core.clock`)."""
        message = _message(
            format_deadline_us(deadline), asset_in, amount_in, asset_out, amount_out, self._tail
        )
        raw = message.encode("utf-8")
        # The NEP-413 preimage in one copy: tag and length, message, nonce, recipient, no
        # callback (protocol-notes 1).
        digest = hashlib.sha256(
            b"".join((_HEAD(_TAG, len(raw)), raw, nonce, self._suffix))
        ).digest()
        signed = {
            "standard": "nep413",
            "payload": {
                "message": message,
                "nonce": binascii.b2a_base64(nonce, newline=False).decode("ascii"),  # b64encode
                "recipient": self.verifying_contract,
            },
            "public_key": self.public_key,
            "signature": "ed25519:" + b58encode(self._sign(digest)),
        }
        return SignedQuote(signed, b58encode(digest), nonce, message, self.signer_id)

    def __repr__(self) -> str:
        return f"QuoteSigner(signer_id={self.signer_id!r}, public_key={self.public_key!r})"
