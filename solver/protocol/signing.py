"""Signing and verifying intents in the three standards (spec 2.11, 5.2, 5.3; protocol-notes 1).

- ``nep413``: sha256 over the NEP-413 preimage (tag, message, nonce, recipient, callback);
  plain ed25519 over the 32-byte digest; the digest is the intent hash.
- ``raw_ed25519``: ed25519 over the UTF-8 bytes of the payload string; hash = sha256(payload).
- ``erc191``: secp256k1 recoverable signature over keccak256 of the Ethereum signed-message
  prefix + payload; the public key is recovered, the signer is its ``0x`` address.

:func:`verify_signed` checks only the signature and the JSON (the first two verifier checks of
protocol-notes 2) and returns what the verifier needs for the rest.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import coincurve
import orjson
from Crypto.Hash import keccak
from pydantic import BaseModel, ValidationError

from solver.protocol.amounts import WIRE
from solver.protocol.encoding import b58decode, b58encode, b64decode, b64encode
from solver.protocol.errors import ProtocolError, SignatureError
from solver.protocol.intents import (
    SIGNED_INTENT_ADAPTER,
    Erc191Signed,
    IntentMessage,
    Nep413Payload,
    Nep413Signed,
    RawEd25519Signed,
    serialize_message,
    serialize_payload,
)
from solver.protocol.keys import PublicKey, SecretKey, format_signature, parse_signature

NEP413_TAG = struct.pack("<I", (1 << 31) + 413)
SECP_PREFIX = "secp256k1:"


def nep413_preimage(
    message: str, nonce: bytes, recipient: str, callback_url: str | None = None
) -> bytes:
    """The borsh-serialised NEP-413 payload with its tag prefix (protocol-notes 1 table)."""
    if len(nonce) != 32:
        raise ProtocolError("nep413 nonce must be 32 bytes")
    msg = message.encode("utf-8")
    rec = recipient.encode("utf-8")
    parts = [NEP413_TAG, struct.pack("<I", len(msg)), msg, nonce, struct.pack("<I", len(rec)), rec]
    if callback_url is None:
        parts.append(b"\x00")
    else:
        cb = callback_url.encode("utf-8")
        parts += [b"\x01", struct.pack("<I", len(cb)), cb]
    return b"".join(parts)


def nep413_digest(
    message: str, nonce: bytes, recipient: str, callback_url: str | None = None
) -> bytes:
    return hashlib.sha256(nep413_preimage(message, nonce, recipient, callback_url)).digest()


def keccak256(data: bytes) -> bytes:
    return keccak.new(data=data, digest_bits=256).digest()


def erc191_hash(payload: str) -> bytes:
    data = payload.encode("utf-8")
    return keccak256(b"\x19Ethereum Signed Message:\n" + str(len(data)).encode() + data)


def eth_address(uncompressed_public_key: bytes) -> str:
    """``0x`` + the last 20 bytes of keccak256 of the 64-byte public key."""
    return "0x" + keccak256(uncompressed_public_key[-64:])[-20:].hex()


# ---------------------------------------------------------------------------------- signing


def sign_nep413(
    key: SecretKey,
    *,
    signer_id: str,
    verifying_contract: str,
    deadline: datetime,
    nonce: bytes,
    intents: list[BaseModel],
    callback_url: str | None = None,
) -> Nep413Signed:
    """Build the message, hash its exact bytes and sign: the string hashed is the one sent."""
    message = serialize_message(signer_id, deadline, intents)
    return sign_nep413_message(key, message, nonce, verifying_contract, callback_url)


def sign_nep413_message(
    key: SecretKey, message: str, nonce: bytes, recipient: str, callback_url: str | None = None
) -> Nep413Signed:
    digest = nep413_digest(message, nonce, recipient, callback_url)
    return Nep413Signed(
        payload=Nep413Payload(
            message=message, nonce=b64encode(nonce), recipient=recipient, callbackUrl=callback_url
        ),
        public_key=key.public_key.to_text(),
        signature=format_signature(key.sign(digest)),
    )


def sign_raw_ed25519(
    key: SecretKey,
    *,
    signer_id: str,
    verifying_contract: str,
    deadline: datetime,
    nonce: bytes,
    intents: list[BaseModel],
) -> RawEd25519Signed:
    payload = serialize_payload(signer_id, verifying_contract, deadline, b64encode(nonce), intents)
    return RawEd25519Signed(
        payload=payload,
        public_key=key.public_key.to_text(),
        signature=format_signature(key.sign(payload.encode("utf-8"))),
    )


def sign_erc191(
    private_key: bytes,
    *,
    signer_id: str,
    verifying_contract: str,
    deadline: datetime,
    nonce: bytes,
    intents: list[BaseModel],
) -> Erc191Signed:
    """Sign with a secp256k1 private key (used by simulated takers and tests)."""
    payload = serialize_payload(signer_id, verifying_contract, deadline, b64encode(nonce), intents)
    sig = coincurve.PrivateKey(private_key).sign_recoverable(erc191_hash(payload), hasher=None)
    # coincurve gives r‖s‖recid (0/1); Ethereum tooling writes v = 27 + recid.
    return Erc191Signed(
        payload=payload, signature=SECP_PREFIX + b58encode(sig[:64] + bytes([27 + sig[64]]))
    )


def secp256k1_address(private_key: bytes) -> str:
    return eth_address(coincurve.PrivateKey(private_key).public_key.format(compressed=False))


# ---------------------------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class VerifiedItem:
    """A signed item whose signature checks out and whose message parses."""

    standard: str
    intent_hash: bytes
    public_key: str  # "ed25519:…" or "secp256k1:…" (recovered)
    key_owner: str | None  # implicit account that owns the key without registration
    message: IntentMessage
    message_text: str
    nonce: bytes
    recipient: str

    @property
    def intent_hash_text(self) -> str:
        return b58encode(self.intent_hash)


def parse_signed(data: Any) -> Nep413Signed | RawEd25519Signed | Erc191Signed:
    """Validate the wrapper of a signed item (2.11); errors name the field."""
    try:
        return SIGNED_INTENT_ADAPTER.validate_python(data, context=WIRE)
    except ValidationError as exc:
        raise ProtocolError(f"invalid signed intent: {first_error(exc)}") from None


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{where}: {err['msg']}"


def intent_hash(item: Nep413Signed | RawEd25519Signed | Erc191Signed) -> bytes:
    """The intent hash of a signed item, without checking the signature."""
    if isinstance(item, Nep413Signed):
        nonce = b64decode(item.payload.nonce, length=32, what="payload.nonce")
        return nep413_digest(
            item.payload.message, nonce, item.payload.recipient, item.payload.callbackUrl
        )
    if isinstance(item, RawEd25519Signed):
        return hashlib.sha256(item.payload.encode("utf-8")).digest()
    return erc191_hash(item.payload)


def _parse_message(text: str) -> IntentMessage:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ProtocolError("message is not valid JSON") from None
    try:
        return IntentMessage.model_validate(data, context=WIRE)
    except ValidationError as exc:
        raise ProtocolError(f"invalid message: {first_error(exc)}") from None


def verify_signed(item: Nep413Signed | RawEd25519Signed | Erc191Signed) -> VerifiedItem:
    """Check the signature, then the JSON; raise ``SignatureError`` / ``ProtocolError``."""
    digest = intent_hash(item)
    if isinstance(item, Erc191Signed):
        public_key, owner = _recover_secp256k1(item.signature, digest)
        text = item.payload
    else:
        try:
            key = PublicKey.from_text(item.public_key)
            signature = parse_signature(item.signature)
        except ProtocolError as exc:
            raise SignatureError(f"invalid signature: {exc}") from None
        signed_bytes = digest if isinstance(item, Nep413Signed) else item.payload.encode("utf-8")
        if not key.verify(signed_bytes, signature):
            raise SignatureError("invalid signature")
        public_key, owner = key.to_text(), key.implicit_account_id()
        text = item.payload.message if isinstance(item, Nep413Signed) else item.payload
    message = _parse_message(text)
    if isinstance(item, Nep413Signed):
        nonce = b64decode(item.payload.nonce, length=32, what="payload.nonce")
        recipient = item.payload.recipient
    else:
        if message.nonce is None or message.verifying_contract is None:
            raise ProtocolError("invalid message: payload needs nonce and verifying_contract")
        nonce = b64decode(message.nonce, length=32, what="nonce")
        recipient = message.verifying_contract
    return VerifiedItem(item.standard, digest, public_key, owner, message, text, nonce, recipient)


def _recover_secp256k1(signature_text: str, digest: bytes) -> tuple[str, str]:
    if not signature_text.startswith(SECP_PREFIX):
        raise SignatureError("invalid signature: erc191 signature must start with secp256k1:")
    try:
        raw = b58decode(signature_text[len(SECP_PREFIX) :], length=65, what="signature")
    except ProtocolError as exc:
        raise SignatureError(f"invalid signature: {exc}") from None
    v = raw[64] - 27 if raw[64] >= 27 else raw[64]
    if v not in (0, 1):
        raise SignatureError("invalid signature: bad recovery id")
    try:
        pub = coincurve.PublicKey.from_signature_and_message(
            raw[:64] + bytes([v]), digest, hasher=None
        )
    except Exception:  # coincurve raises plain Exception/ValueError on invalid points
        raise SignatureError("invalid signature") from None
    uncompressed = pub.format(compressed=False)
    return SECP_PREFIX + b58encode(uncompressed[1:]), eth_address(uncompressed)
