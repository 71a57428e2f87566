"""``solver intents``: sign, verify and build nonces for intents (spec 2.10-2.12, 5.3).

The codec of :mod:`solver.protocol` on the command line, for operators and for debugging a peer:

- ``sign``: unsigned payload (2.10) -> signed item (2.11), ``nep413`` or ``raw_ed25519``;
- ``verify``: signed item of any of the three standards -> a JSON report, exit 0 / 1;
- ``nonce``: a fresh 32-byte nonce in the salted (spec 5.3) or versioned layout
  (protocol-notes 3).

Exit codes: 0 success (``verify``: the item is valid), 1 ``verify`` found the item invalid,
2 the input could not be used at all (see :mod:`solver.cli`).
"""

from __future__ import annotations

import argparse
import contextlib
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from solver.cli import print_json, read_json_input, warn
from solver.cli.key_source import add_key_source_arguments, load_key_from_args
from solver.errors import ConfigError, ProtocolError, SolverError
from solver.protocol.amounts import WIRE
from solver.protocol.encoding import b58encode, b64decode
from solver.protocol.ids import is_eth_implicit_account
from solver.protocol.intents import (
    Erc191Signed,
    Nep413Signed,
    RawEd25519Signed,
    UnsignedPayload,
    format_deadline,
    parse_deadline,
    semantic_problem,
)
from solver.protocol.nonce import (
    nonce_to_text,
    parse_nonce,
    parse_salt,
    salted_nonce,
    versioned_nonce,
)
from solver.protocol.signing import (
    first_error,
    intent_hash,
    parse_signed,
    sign_nep413,
    sign_raw_ed25519,
    verify_signed,
)

SIGN_STANDARDS = ("nep413", "raw_ed25519")
SignedItem = Nep413Signed | RawEd25519Signed | Erc191Signed

_PAYLOAD_EXAMPLE = """\
payload example:
  {"signer_id": "solver.near", "verifying_contract": "intents.near",
   "deadline": "2026-11-22T10:00:00.000Z", "nonce": "<base64 of 32 bytes>",
   "intents": [{"intent": "token_diff",
                "diff": {"nep141:usdc.near": "-1000000", "nep141:wnear.near": "250000"}}]}

Amounts are decimal strings. Make a nonce with 'solver intents nonce --salt <current_salt>'.
"""

_VERIFY_DESCRIPTION = """\
Check a signed intent (standard nep413, raw_ed25519 or erc191) and print a JSON report:
valid, standard, intent_hash (base58), signer_id, public_key (recovered for erc191),
key_owner (the implicit account of that key: 64 hex, or the 0x address for erc191),
signer_is_key_owner, recipient, deadline, nonce and error.

Only the signature and the message are checked (the first two checks of the verifier).
Whether signer_id holds the key is a ledger matter and is NOT checked: an implicit account
(signer_is_key_owner true) owns its key, any other account must have registered the key with
add_public_key. Deadline, nonce salt and reuse, and balances are not checked either.
For erc191 the key is recovered from the signature, so an altered payload recovers another
key: when signer_id is an implicit 0x account, a signature that recovers to any other address
is invalid (that is the only key the account can hold without add_public_key, and the
verifier rejects it); for a named signer, key_owner and signer_is_key_owner show the address.

Exit status: 0 valid, 1 invalid (bad signature, bad message; the report says why),
2 unreadable input (not JSON, not an object, unknown standard, missing fields).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    intents = subparsers.add_parser(
        "intents",
        help="sign and verify intents, make nonces",
        description="Sign and verify intents and make nonces (spec 2.10-2.12, 5.3).",
    )
    commands = intents.add_subparsers(title="commands", dest="intents_command", metavar="COMMAND")
    commands.required = True

    sign = commands.add_parser(
        "sign",
        help="sign an unsigned payload (2.10) and print the signed item (2.11)",
        description=(
            "Read an unsigned payload {signer_id, verifying_contract, deadline, nonce, intents}\n"
            "as JSON from FILE or standard input and print the signed item (spec 2.11) as one\n"
            "line of JSON. Problems the verifier would reject (a zero delta, a past deadline)\n"
            "are warned about on stderr; the item is still signed."
        ),
        epilog=_PAYLOAD_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_key_source_arguments(sign)
    sign.add_argument(
        "--standard",
        choices=SIGN_STANDARDS,
        default="nep413",
        help="signature standard (default nep413, the one the spec names)",
    )
    sign.add_argument(
        "input", nargs="?", default="-", metavar="FILE", help="payload file, or - for stdin"
    )
    sign.set_defaults(handler=cmd_sign)

    verify = commands.add_parser(
        "verify",
        help="check a signed item's signature and message (not key ownership)",
        description=_VERIFY_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument(
        "input", nargs="?", default="-", metavar="FILE", help="signed item file, or - for stdin"
    )
    verify.set_defaults(handler=cmd_verify)

    nonce = commands.add_parser(
        "nonce",
        help="print a fresh base64 nonce for the current salt",
        description=(
            "Print a fresh 32-byte nonce, base64. salted (the spec's layout, 5.3): salt then 28 "
            "random bytes. versioned (the deployed verifier's, protocol-notes 3): magic, "
            "version, salt, the deadline in nanoseconds and 15 random bytes; it needs "
            "--deadline, which must equal the intent's deadline."
        ),
    )
    nonce.add_argument(
        "--salt",
        required=True,
        metavar="HEX",
        help="the verifier's current salt, 8 hex characters (current_salt)",
    )
    nonce.add_argument(
        "--layout", choices=("salted", "versioned"), default="salted", help="default salted"
    )
    nonce.add_argument(
        "--deadline",
        metavar="ISO",
        help="intent deadline with a time zone, e.g. 2026-11-22T10:00:00Z "
        "(required with --layout versioned, refused with salted)",
    )
    nonce.set_defaults(handler=cmd_nonce)


# ---------------------------------------------------------------------------------- sign


def cmd_sign(args: argparse.Namespace) -> int:
    key = load_key_from_args(args)
    payload = _parse_unsigned(read_json_input(args.input, "unsigned payload"))
    nonce = b64decode(payload.nonce, length=32, what="nonce")
    for problem in payload_problems(payload, nonce, datetime.now(UTC)):
        warn(problem)
    intents: list[BaseModel] = list(payload.intents)
    common: dict[str, Any] = {
        "signer_id": payload.signer_id,
        "verifying_contract": payload.verifying_contract,
        "deadline": payload.deadline,
        "nonce": nonce,
        "intents": intents,
    }
    signed: SignedItem
    if args.standard == "raw_ed25519":
        signed = sign_raw_ed25519(key, **common)
    else:
        signed = sign_nep413(key, **common)
    print_json(signed.model_dump(mode="json", exclude_none=True))
    return 0


def _parse_unsigned(data: Any) -> UnsignedPayload:
    if not isinstance(data, dict):
        raise ConfigError("the unsigned payload must be a JSON object")
    try:
        return UnsignedPayload.model_validate(data, context=WIRE)
    except ValidationError as exc:
        raise ProtocolError(f"invalid unsigned payload: {first_error(exc)}") from None


def payload_problems(payload: UnsignedPayload, nonce: bytes, now: datetime) -> list[str]:
    """What the verifier would reject in a well-formed payload (protocol-notes 2, 3).

    Signing goes ahead (a test may want exactly such an item); the caller warns.
    """
    problems = []
    for index, intent in enumerate(payload.intents):
        problem = semantic_problem(intent, payload.signer_id)
        if problem is not None:
            problems.append(
                f"intents[{index}]: {problem}: the verifier rejects it (invalid intent)"
            )
    if payload.deadline <= now:
        problems.append(
            f"deadline {format_deadline(payload.deadline)} has passed: "
            "the verifier rejects it (deadline has expired)"
        )
    parsed = parse_nonce(nonce)
    if parsed.layout == "versioned" and parsed.deadline_ns is not None:
        nonce_deadline = parsed.deadline
        if nonce_deadline is not None and nonce_deadline < payload.deadline:
            problems.append(
                "the versioned nonce's deadline is before the intent deadline: "
                "the verifier rejects it"
            )
    return problems


# ---------------------------------------------------------------------------------- verify


def cmd_verify(args: argparse.Namespace) -> int:
    data = read_json_input(args.input, "signed intent")
    if not isinstance(data, dict):
        raise ConfigError("a signed intent must be a JSON object")
    item = parse_signed(data)  # unknown standard, missing wrapper fields: exit 2
    report = verify_report(item)
    print_json(report)
    return 0 if report["valid"] else 1


def verify_report(item: SignedItem) -> dict[str, Any]:
    """The JSON report of ``solver intents verify``: every field that could be worked out."""
    report: dict[str, Any] = {
        "valid": False,
        "standard": item.standard,
        "intent_hash": None,
        "signer_id": None,
        "public_key": None if isinstance(item, Erc191Signed) else item.public_key,
        "key_owner": None,
        "signer_is_key_owner": None,
        "recipient": item.payload.recipient if isinstance(item, Nep413Signed) else None,
        "deadline": None,
        "nonce": item.payload.nonce if isinstance(item, Nep413Signed) else None,
        "error": None,
    }
    with contextlib.suppress(ProtocolError):  # a malformed nep413 nonce: reported below
        report["intent_hash"] = b58encode(intent_hash(item))
    try:
        verified = verify_signed(item)
    except SolverError as exc:
        report["error"] = str(exc)
        report["signer_id"] = _loose_signer_id(item)
        return report
    message = verified.message
    if (
        isinstance(item, Erc191Signed)
        and is_eth_implicit_account(message.signer_id)
        and verified.key_owner != message.signer_id
    ):
        report.update(
            intent_hash=verified.intent_hash_text,
            signer_id=message.signer_id,
            public_key=verified.public_key,
            key_owner=verified.key_owner,
            signer_is_key_owner=False,
            error=(
                f"invalid signature: it recovers to {verified.key_owner}, not to the signer "
                f"{message.signer_id} (an implicit 0x account is signed for by its own key only)"
            ),
        )
        return report
    report.update(
        valid=True,
        intent_hash=verified.intent_hash_text,
        signer_id=message.signer_id,
        public_key=verified.public_key,
        key_owner=verified.key_owner,
        signer_is_key_owner=verified.key_owner == message.signer_id,
        recipient=verified.recipient,
        deadline=format_deadline(message.deadline),
        nonce=nonce_to_text(verified.nonce),
    )
    return report


def _loose_signer_id(item: SignedItem) -> str | None:
    """``signer_id`` from a message that failed the checks, when it can still be read."""
    text = item.payload.message if isinstance(item, Nep413Signed) else item.payload
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    signer = data.get("signer_id") if isinstance(data, dict) else None
    return signer if isinstance(signer, str) else None


# ---------------------------------------------------------------------------------- nonce


def cmd_nonce(args: argparse.Namespace) -> int:
    salt = parse_salt(args.salt)
    if len(salt) != 4:  # parse_salt lets "ab cd ef" through as 3 bytes
        raise ProtocolError("salt must be 8 hex characters")
    if args.layout == "versioned":
        if args.deadline is None:
            raise ConfigError(
                "--layout versioned needs --deadline: the nonce carries the intent's deadline "
                "(protocol-notes 3), and no default is assumed"
            )
        deadline = _deadline_arg(args.deadline)
        if deadline <= datetime.now(UTC):
            warn(f"deadline {format_deadline(deadline)} has passed: the verifier rejects the nonce")
        raw = versioned_nonce(salt, deadline)
    else:
        if args.deadline is not None:
            raise ConfigError(
                "--deadline applies to --layout versioned only: a salted nonce has no deadline"
            )
        raw = salted_nonce(salt)
    print(nonce_to_text(raw))
    return 0


def _deadline_arg(text: str) -> datetime:
    try:
        return parse_deadline(text)
    except ValueError as exc:
        raise ConfigError(f"--deadline: {exc}") from None
