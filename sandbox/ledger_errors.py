"""The verifier's error texts and the error a refused batch raises (protocol-notes 2).

Split out of :mod:`sandbox.ledger`: the callers that only need to recognise a refusal (the bus,
its settlement, the swap API's executor, the backtest's settlement) and tests that match the
texts read them here, and :mod:`sandbox.ledger_intents` raises them without importing the
state machine. The nonce rules' texts (``invalid salt``, ...) live with those rules in
:mod:`sandbox.nonce_policy`.
"""

from __future__ import annotations

from typing import Any

# The verifier's error texts (protocol-notes 2), matched by callers and tests.
ERR_SIGNATURE = "invalid signature"
ERR_JSON = "invalid JSON"
ERR_RECIPIENT = "wrong verifying_contract"
ERR_DEADLINE = "deadline has expired"
ERR_NONCE_USED = "nonce was already used"
ERR_BALANCE = "insufficient balance or overflow"
ERR_INVALID_INTENT = "invalid intent"
ERR_INVARIANT = "invariant violated"


def err_no_key(public_key: str, account: str) -> str:
    return f"public key '{public_key}' doesn't exist for account '{account}'"


def err_key_exists(public_key: str, account: str) -> str:
    return f"public key '{public_key}' already exists for account '{account}'"


class LedgerError(Exception):
    """A batch was refused; ``text`` is the verifier's error, ``index`` the failing item."""

    def __init__(self, text: str, index: int | None = None, detail: dict[str, Any] | None = None):
        super().__init__(text if index is None else f"item {index}: {text}")
        self.text = text
        self.index = index
        self.detail = detail or {}
