"""Operator intents built from the operator's input: amounts read exactly, and the items
(``add_public_key``, ``remove_public_key``, ``transfer``, ``ft_withdraw``, spec 2.12) checked
before anything is signed.

A module of its own since issue 29: :mod:`solver.io.ops_intents` was over the project's size
(494 lines), and this part is one role, pure and without I/O: turning what the CLI and the
rebalancer were given into valid intent models, with errors that fit an error line. Signing,
publishing and following them stays in :mod:`solver.io.ops_intents`.
"""

from __future__ import annotations

import re
from decimal import Decimal

from solver.errors import ProtocolError
from solver.protocol.amounts import U128_MAX, parse_u128
from solver.protocol.ids import asset_contract, validate_account_id, validate_asset_id
from solver.protocol.intents import AddPublicKey, FtWithdraw, RemovePublicKey, Transfer
from solver.protocol.keys import PublicKey

# ------------------------------------------------------------------------------ amounts


_WHOLE_RE = re.compile(r"[0-9]{1,80}(?:\.[0-9]{1,80})?")


def parse_amount(text: str) -> int:
    """A positive amount in the token's smallest unit: a plain decimal integer string, u128.

    Raises ``ValueError`` with a message that fits an error line (``--amount-whole`` is the way
    to give a whole-token amount such as ``1.5``).
    """
    if not isinstance(text, str):
        raise ValueError("amount must be a string")
    if "." in text or "e" in text.lower():
        raise ValueError(
            f"amount {text[:50]!r} is not a whole number of the token's smallest unit; "
            "give a whole-token amount such as 1.5 with --amount-whole"
        )
    if text.startswith("-"):
        raise ValueError(f"amount {text[:50]!r} is negative")
    value = parse_u128(text)
    if value == 0:
        raise ValueError("amount must be positive")
    return value


def parse_whole_amount(text: str, decimals: int) -> int:
    """``1.5`` whole tokens → smallest units (``decimals`` of the token), exactly.

    Decimal arithmetic on the digits (no float, no context rounding); more fractional digits than
    ``decimals`` allow are refused, not rounded (``1.50`` with one decimal is fine: it is exact).
    """
    if not isinstance(text, str) or not _WHOLE_RE.fullmatch(text):
        raise ValueError(
            f"whole amount {str(text)[:50]!r} must be digits with an optional fraction, like 1.5 "
            "(no sign, exponent or separators)"
        )
    if not 0 <= decimals <= 38:
        raise ValueError("decimals must be in 0..38")
    _, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int)  # finite: the pattern admits no NaN or Infinity
    coefficient = int("".join(map(str, digits)))
    shift = exponent + decimals
    if shift >= 0:
        value = coefficient * int(10**shift)
    else:
        value, rest = divmod(coefficient, int(10**-shift))
        if rest:
            raise ValueError(
                f"whole amount {text} has more precision than the token's {decimals} decimals"
            )
    if value == 0:
        raise ValueError("amount must be positive")
    if value > U128_MAX:
        raise ValueError(f"whole amount {text} exceeds u128 in the smallest unit")
    return value


# ------------------------------------------------------------------------------ intents


def add_public_key(public_key: str) -> AddPublicKey:
    """``add_public_key``; the key is checked to be a well-formed ``ed25519:`` key."""
    return AddPublicKey(public_key=_ed25519_key(public_key))


def remove_public_key(public_key: str) -> RemovePublicKey:
    return RemovePublicKey(public_key=_ed25519_key(public_key))


def _ed25519_key(text: str) -> str:
    try:
        return PublicKey.from_text(text).to_text()
    except ProtocolError:
        # Never repeat the value: a pasted secret key is a likely mistake.
        raise ValueError(
            "public key must be ed25519:<base58 of 32 bytes> (a public key, not a secret key)"
        ) from None


def transfer(
    signer_id: str, asset_id: str, amount: int, receiver_id: str, memo: str | None = None
) -> Transfer:
    """``transfer`` of one token inside the verifier to another account."""
    validate_asset_id(asset_id)
    validate_account_id(receiver_id)
    if receiver_id == signer_id:
        raise ValueError("a transfer to the signing account itself is invalid")
    return Transfer(receiver_id=receiver_id, tokens={asset_id: amount}, memo=memo)


def nep141_contract(token: str) -> str:
    """The token contract for ``ft_withdraw``: from ``nep141:<contract>`` or ``<contract>``."""
    if ":" in token:
        validate_asset_id(token)
        if not token.startswith("nep141:"):
            raise ValueError(f"ft_withdraw withdraws nep141 tokens only, not {token[:70]!r}")
        return asset_contract(token)
    return validate_account_id(token)


def ft_withdraw(
    token: str,
    amount: int,
    receiver_id: str,
    *,
    memo: str | None = None,
    msg: str | None = None,
    storage_deposit: int | None = None,
) -> FtWithdraw:
    """``ft_withdraw`` (spec 2.12): ``token`` is ``nep141:<contract>`` or the bare contract."""
    contract = nep141_contract(token)
    validate_account_id(receiver_id)
    return FtWithdraw(
        token=contract,
        receiver_id=receiver_id,
        amount=amount,
        memo=memo,
        msg=msg,
        storage_deposit=storage_deposit or None,
    )
