"""The NEAR RPC read methods that real clients call at start-up (protocol-notes 5).

The spec's ledger node only needs ``query`` / ``call_function`` (spec 4.6). RPC clients ask
more before anything else: py-near's ``Account.startup`` calls ``status`` (its ``chain_id``),
near-api-js providers call ``status``, ``block``, ``gas_price`` and the ``query`` kinds
``view_account``, ``view_access_key`` and ``view_access_key_list`` (found by running both
against the sandbox: ``tests/interop/near_rpc.mjs``), and py-near also exposes ``validators``
(issue 23). This module answers them with the shapes of the NEAR RPC documentation, from the
sandbox chain's state:

- blocks: the chain's height grows by one per executed batch; hashes derive from the height,
  the time of a block is when its batch ran (the genesis is the sandbox's start);
- accounts: the verifier contract (with code), every account the ledger knows (balances, keys
  or used nonces) and every implicit (64-hex) account exist. They hold no native NEAR
  (``amount`` ``"0"``): balances live inside the verifier (``mt_balance_of``);
- access keys: the account's keys on the verifier (``public_keys_of``), each ``FullAccess``
  with nonce 0 (the sandbox takes no transactions, so nonces never advance); a key asked
  without its curve prefix is an ED25519 key, as nearcore reads it;
- validators: one, the block author (see :func:`validators`).

Errors are the RPC's structured ones: :class:`RpcReadError` carries ``name`` (``HANDLER_ERROR``
or ``REQUEST_VALIDATION_ERROR``), the ``cause`` name and info, and a message.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sandbox.chain import SandboxChain
from solver.protocol.encoding import b58encode
from solver.protocol.errors import ProtocolError
from solver.protocol.ids import is_implicit_account
from solver.protocol.keys import ED25519_PREFIX, PublicKey
from solver.protocol.signing import SECP_PREFIX as SECP256K1_PREFIX

CHAIN_ID = "sandbox"
PROTOCOL_VERSION = 73
GAS_PRICE = "100000000"
STORAGE_AMOUNT_PER_BYTE = "10000000000000000000"
EMPTY_CODE_HASH = "11111111111111111111111111111111"
CONTRACT_CODE_HASH = b58encode(hashlib.sha256(b"sandbox verifier contract").digest())
FINALITIES = ("optimistic", "near-final", "final")
NODE_PUBLIC_KEY = "ed25519:" + b58encode(hashlib.sha256(b"sandbox node").digest())


class RpcReadError(Exception):
    """A structured RPC error: ``{name, cause: {name, info}, code, message, data}``."""

    def __init__(self, name: str, cause: str, info: dict[str, Any], message: str) -> None:
        super().__init__(message)
        self.name = name
        self.cause = cause
        self.info = info
        self.message = message


def _bad_request(message: str) -> RpcReadError:
    return RpcReadError(
        "REQUEST_VALIDATION_ERROR", "PARSE_ERROR", {"error_message": message}, message
    )


def _hash(text: str) -> str:
    return b58encode(hashlib.sha256(text.encode()).digest())


def _nanos(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def _iso_nanos(moment: datetime) -> str:
    """``2026-03-01T12:00:00.123456000Z``: the RPC's time form (nanoseconds)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"


# ---------------------------------------------------------------------------------- blocks


def resolve_block(chain: SandboxChain, params: Any) -> int:
    """The height a block reference names: ``{"finality"}``, ``{"block_id"}`` (height or
    hash), ``[height | hash | null]`` (the positional form), or nothing (the latest)."""
    if isinstance(params, list):
        if len(params) > 1:
            raise _bad_request("expected [block_id] or [null]")
        reference: Any = params[0] if params else None
    elif isinstance(params, dict):
        if "finality" in params:
            if params["finality"] not in FINALITIES:
                raise _bad_request(f"finality must be one of {', '.join(FINALITIES)}")
            return chain.block_height
        reference = params.get("block_id")
    elif params is None:
        reference = None
    else:
        raise _bad_request("params must be an object or an array")
    if reference is None:
        return chain.block_height
    height: int | None = None
    if isinstance(reference, int) and not isinstance(reference, bool):
        height = reference
    elif isinstance(reference, str):
        height = next((h for h in chain.block_times if chain.block_hash(h) == reference), None)
    else:
        raise _bad_request("block_id must be a block height or a block hash")
    if height is None or height not in chain.block_times:
        raise RpcReadError(
            "HANDLER_ERROR",
            "UNKNOWN_BLOCK",
            {"block_reference": {"block_id": reference}},
            f"DB Not Found Error: BLOCK: {reference}",
        )
    return height


def block(chain: SandboxChain, params: Any) -> dict[str, Any]:
    """``block``: a header in the RPC's shape; a sandbox block has no chunks."""
    height = resolve_block(chain, params)
    moment = chain.block_times[height]
    previous = max(height - 1, 1)
    nanos = _nanos(moment)
    header: dict[str, Any] = {
        "height": height,
        "prev_height": previous if height > 1 else None,
        "epoch_id": EMPTY_CODE_HASH,
        "next_epoch_id": EMPTY_CODE_HASH,
        "hash": chain.block_hash(height),
        "prev_hash": chain.block_hash(previous) if height > 1 else EMPTY_CODE_HASH,
        "prev_state_root": _hash(f"state:{previous}"),
        "block_body_hash": _hash(f"body:{height}"),
        "chunk_receipts_root": _hash("empty"),
        "chunk_headers_root": _hash("empty"),
        "chunk_tx_root": _hash("empty"),
        "outcome_root": _hash("empty"),
        "chunks_included": 0,
        "challenges_root": _hash("empty"),
        "timestamp": nanos,
        "timestamp_nanosec": str(nanos),
        "random_value": _hash(f"random:{height}"),
        "validator_proposals": [],
        "chunk_mask": [],
        "gas_price": GAS_PRICE,
        "block_ordinal": height,
        "rent_paid": "0",
        "validator_reward": "0",
        "total_supply": "0",
        "challenges_result": [],
        "last_final_block": chain.block_hash(height),
        "last_ds_final_block": chain.block_hash(height),
        "next_bp_hash": _hash("bp"),
        "block_merkle_root": _hash(f"merkle:{height}"),
        "epoch_sync_data_hash": None,
        "approvals": [],
        "signature": "ed25519:" + b58encode(hashlib.sha512(f"sig:{height}".encode()).digest()),
        "latest_protocol_version": PROTOCOL_VERSION,
    }
    return {"author": chain.ledger.contract_id, "header": header, "chunks": []}


def gas_price(chain: SandboxChain, params: Any) -> dict[str, Any]:
    """``gas_price``: one constant price (``[null]``, ``[height]``, ``[hash]`` or an object)."""
    resolve_block(chain, params)
    return {"gas_price": GAS_PRICE}


def status(chain: SandboxChain, params: Any) -> dict[str, Any]:
    """``status``: the node's identity and its latest block (py-near reads ``chain_id``)."""
    del params  # clients send [], {} or {"finality": …}; status takes none of them
    latest = chain.block_height
    genesis = _hash("genesis")
    return {
        "chain_id": CHAIN_ID,
        "genesis_hash": genesis,
        "latest_protocol_version": PROTOCOL_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "node_key": None,
        "node_public_key": NODE_PUBLIC_KEY,
        "rpc_addr": None,
        "validator_account_id": None,
        "validator_public_key": None,
        "validators": [],
        "uptime_sec": max(0, int((chain.clock() - chain.genesis_time).total_seconds())),
        "version": {"version": "sandbox", "build": "intents-solver", "rustc_version": ""},
        "sync_info": {
            "earliest_block_hash": chain.block_hash(1),
            "earliest_block_height": 1,
            "earliest_block_time": _iso_nanos(chain.genesis_time),
            "epoch_id": EMPTY_CODE_HASH,
            "epoch_start_height": 1,
            "latest_block_hash": chain.block_hash(latest),
            "latest_block_height": latest,
            "latest_block_time": _iso_nanos(chain.block_times.get(latest, chain.genesis_time)),
            "latest_state_root": _hash(f"state:{latest}"),
            "syncing": False,
        },
    }


def protocol_config(chain: SandboxChain, params: Any) -> dict[str, Any]:
    """``EXPERIMENTAL_protocol_config``: what near-api-js reads for account balances."""
    resolve_block(chain, params)
    return {
        "chain_id": CHAIN_ID,
        "protocol_version": PROTOCOL_VERSION,
        "genesis_height": 1,
        "genesis_time": _iso_nanos(chain.genesis_time),
        "epoch_length": 43_200,
        "min_gas_price": GAS_PRICE,
        "max_gas_price": GAS_PRICE,
        "runtime_config": {
            "storage_amount_per_byte": STORAGE_AMOUNT_PER_BYTE,
            "account_creation_config": {"min_allowed_top_level_account_length": 0},
        },
    }


def validators(chain: SandboxChain, params: Any) -> dict[str, Any]:
    """``validators``: the sandbox's one block producer, in the RPC docs' ``EpochValidatorInfo``.

    py-near exposes it (``get_validators``, ``[null]``); near-api-js sends ``{"latest": null}``,
    ``{"block_id"}`` or ``{"epoch_id"}``. The sandbox runs one epoch and has no staking: the
    producer is the block author (the verifier contract) with the node's key and no stake, and
    it produced every block so far. A real localnet also lists one validator; its stake is
    not zero, which no client of the sandbox reads.
    """
    if isinstance(params, dict) and "epoch_id" in params:
        if params["epoch_id"] != EMPTY_CODE_HASH:
            raise RpcReadError(
                "HANDLER_ERROR",
                "UNKNOWN_EPOCH",
                {},
                f"Epoch not found: {str(params['epoch_id'])[:80]}",
            )
        height = chain.block_height
    elif isinstance(params, dict) and "latest" in params:
        height = chain.block_height
    else:
        height = resolve_block(chain, params)
    producer = {
        "account_id": chain.ledger.contract_id,
        "public_key": NODE_PUBLIC_KEY,
        "is_slashed": False,
        "stake": "0",
        "shards": [0],
        "num_produced_blocks": height,
        "num_expected_blocks": height,
        "num_produced_chunks": 0,
        "num_expected_chunks": 0,
    }
    return {
        "current_validators": [producer],
        "next_validators": [
            {k: producer[k] for k in ("account_id", "public_key", "stake", "shards")}
        ],
        "current_fishermen": [],
        "next_fishermen": [],
        "current_proposals": [],
        "prev_epoch_kickout": [],
        "epoch_start_height": 1,
        "epoch_height": 1,
    }


# ---------------------------------------------------------------------------------- accounts


def account_exists(chain: SandboxChain, account_id: str) -> bool:
    ledger = chain.ledger
    return (
        account_id == ledger.contract_id
        or account_id in ledger.balances
        or account_id in ledger.keys
        or account_id in ledger.used_nonces
        or is_implicit_account(account_id)
    )


def _account_id(chain: SandboxChain, params: dict[str, Any], height: int) -> str:
    account_id = params.get("account_id")
    if not isinstance(account_id, str) or not account_id:
        raise _bad_request("account_id must be a non-empty string")
    if not account_exists(chain, account_id):
        raise RpcReadError(
            "HANDLER_ERROR",
            "UNKNOWN_ACCOUNT",
            {
                "requested_account_id": account_id,
                "block_height": height,
                "block_hash": chain.block_hash(height),
            },
            f"account {account_id} does not exist while viewing",
        )
    return account_id


def _public_key(value: Any) -> str:
    """The key in its canonical text form, ``ed25519:`` + base58.

    nearcore reads a key written without a curve prefix as ED25519 (py-near sends it bare in
    ``view_access_key``) and answers a key it cannot parse with a parse error; the verifier's
    keys are stored with the prefix, so the bare form is completed before comparing.
    """
    if not isinstance(value, str) or not value:
        raise _bad_request("public_key must be a non-empty string")
    if value.startswith(SECP256K1_PREFIX):
        return value
    try:
        return PublicKey.from_text(value if ":" in value else ED25519_PREFIX + value).to_text()
    except ProtocolError as exc:
        raise _bad_request(f"invalid public_key {value[:80]!r}: {exc}") from None


def _access_key() -> dict[str, Any]:
    return {"nonce": 0, "permission": "FullAccess"}


def query(chain: SandboxChain, params: dict[str, Any]) -> dict[str, Any]:
    """``query`` kinds beyond ``call_function``: the account and its access keys."""
    height = resolve_block(
        chain, {k: v for k, v in params.items() if k in ("finality", "block_id")} or None
    )
    where = {"block_height": height, "block_hash": chain.block_hash(height)}
    kind = params.get("request_type")
    account_id = _account_id(chain, params, height)
    if kind == "view_account":
        contract = account_id == chain.ledger.contract_id
        return {
            "amount": "0",
            "locked": "0",
            "code_hash": CONTRACT_CODE_HASH if contract else EMPTY_CODE_HASH,
            "storage_usage": 0,  # nothing is stored outside the verifier, so nothing to pay
            "storage_paid_at": 0,
            **where,
        }
    keys = chain.ledger.public_keys_of(account_id)
    if kind == "view_access_key_list":
        return {
            "keys": [{"public_key": k, "access_key": _access_key()} for k in keys],
            **where,
        }
    if kind == "view_access_key":
        public_key = _public_key(params.get("public_key"))
        if public_key not in keys:
            raise RpcReadError(
                "HANDLER_ERROR",
                "UNKNOWN_ACCESS_KEY",
                {"public_key": public_key, **where},
                f"Access key for public key {public_key} does not exist while viewing",
            )
        return {**_access_key(), **where}
    raise _bad_request(
        f"request_type {kind!r} is not served: call_function, view_account, view_access_key "
        "and view_access_key_list are"
    )


READ_METHODS = {
    "status": status,
    "block": block,
    "gas_price": gas_price,
    "EXPERIMENTAL_protocol_config": protocol_config,
    "validators": validators,
}
QUERY_KINDS = ("view_account", "view_access_key", "view_access_key_list")
