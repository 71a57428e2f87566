"""Identifiers: account ids, asset ids and chain ids (spec 2, 4.5; protocol-notes 4)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator

_ACCOUNT_RE = re.compile(r"(?:[a-z0-9]+[-_])*[a-z0-9]+(?:\.(?:[a-z0-9]+[-_])*[a-z0-9]+)*")
ASSET_STANDARDS = ("nep141", "nep171", "nep245")


def validate_account_id(value: str) -> str:
    """Account ids: 2–64 chars of ``a-z 0-9 - _ .``, no leading, trailing or double separator."""
    if not isinstance(value, str) or not 2 <= len(value) <= 64 or not _ACCOUNT_RE.fullmatch(value):
        raise ValueError(f"invalid account id {str(value)[:70]!r}")
    return value


def is_implicit_account(account_id: str) -> bool:
    """A 64-hex id is the implicit account of the ed25519 key with those bytes."""
    return len(account_id) == 64 and all(c in "0123456789abcdef" for c in account_id)


def is_eth_implicit_account(account_id: str) -> bool:
    """``0x`` + 40 lowercase hex: the implicit account of a secp256k1 key (erc191 signers)."""
    return (
        len(account_id) == 42
        and account_id.startswith("0x")
        and all(c in "0123456789abcdef" for c in account_id[2:])
    )


def validate_asset_id(value: str) -> str:
    """``nep141:<contract>``, or ``nep171:`` / ``nep245:`` ``<contract>:<token_id>``."""
    if not isinstance(value, str) or len(value) > 256:
        raise ValueError("asset id must be a string of at most 256 characters")
    standard, sep, rest = value.partition(":")
    if not sep or standard not in ASSET_STANDARDS:
        raise ValueError(
            f"asset id {value[:70]!r} must start with one of {', '.join(ASSET_STANDARDS)}:"
        )
    if standard == "nep141":
        validate_account_id(rest)
        return value
    contract, sep, token_id = rest.partition(":")
    if not sep or not token_id:
        raise ValueError(f"asset id {value[:70]!r} needs <contract>:<token_id>")
    validate_account_id(contract)
    return value


def asset_contract(asset_id: str) -> str:
    """The token contract of an asset id (what ``ft_withdraw.token`` names, spec 2.12)."""
    return asset_id.split(":")[1]


AccountId = Annotated[str, AfterValidator(validate_account_id)]
AssetId = Annotated[str, AfterValidator(validate_asset_id)]


class ChainId(StrEnum):
    """Chain ids of the history filters (spec 4.5)."""

    NEAR = "near"
    ETH = "eth"
    BASE = "base"
    ARB = "arb"
    BTC = "btc"
    SOL = "sol"
    TON = "ton"
    DOGE = "doge"
    XRP = "xrp"
    ZEC = "zec"
    GNOSIS = "gnosis"
    BERA = "bera"
    BSC = "bsc"
    POL = "pol"
    TRON = "tron"
    SUI = "sui"
    OP = "op"
    AVAX = "avax"
    CARDANO = "cardano"
    STELLAR = "stellar"
    APTOS = "aptos"
    LTC = "ltc"
    MONAD = "monad"
    XLAYER = "xlayer"
    STARKNET = "starknet"
    BCH = "bch"
    ADI = "adi"
    PLASMA = "plasma"
    SCROLL = "scroll"
    ALEO = "aleo"
    DASH = "dash"
