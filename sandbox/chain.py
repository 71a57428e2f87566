"""The sandbox chain: one :class:`~sandbox.ledger.VerifierLedger` plus what a node adds around
it — block heights, transaction hashes, the wall clock, and the table of view methods that the
ledger RPC node serves (spec 4.6; protocol-notes 4–5).

The servers and the simulated takers share one ``SandboxChain``; all calls run on one asyncio
loop, so the ledger needs no lock (each call is synchronous and atomic).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sandbox.ledger import ExecutionResult, VerifierLedger, utc_now
from sandbox.ledger_errors import LedgerError
from solver.protocol.encoding import b58encode
from solver.protocol.ids import validate_account_id

MAX_BLOCK_TIMES = 100_000


class ViewError(Exception):
    """A contract panic inside a view call: served as HTTP 200 with ``result.error``."""


class SandboxChain:
    def __init__(self, ledger: VerifierLedger, clock: Callable[[], datetime] = utc_now) -> None:
        self.ledger = ledger
        self.clock = clock
        self.block_height = 1
        self._tx_counter = 0
        # When each block was made (the ledger RPC's ``block`` and ``status`` report it); the
        # oldest are forgotten past MAX_BLOCK_TIMES, and the first one is the genesis.
        self.genesis_time = clock()
        self.block_times: OrderedDict[int, datetime] = OrderedDict({1: self.genesis_time})

    def block_hash(self, height: int | None = None) -> str:
        """The hash of block ``height`` (default: the latest), derived from its height."""
        number = self.block_height if height is None else height
        return b58encode(hashlib.sha256(f"block:{number}".encode()).digest())

    def next_tx_hash(self) -> str:
        self._tx_counter += 1
        return b58encode(
            hashlib.sha256(f"tx:{self._tx_counter}:{self.block_height}".encode()).digest()
        )

    def execute(self, signed: list[dict[str, Any]]) -> ExecutionResult:
        """Execute a batch in a new block; raises :class:`LedgerError` (state unchanged)."""
        now = self.clock()
        result = self.ledger.execute_intents(signed, now)
        self.block_height += 1
        self.block_times[self.block_height] = now
        while len(self.block_times) > MAX_BLOCK_TIMES:
            self.block_times.popitem(last=False)
        return result

    def view(self, method: str, args: dict[str, Any]) -> Any:
        """Dispatch a view method by name, as the contract would; panics become ViewError."""
        handler = self._views().get(method)
        if handler is None:
            raise ViewError(f"wasm execution failed with error: MethodNotFound: {method}")
        try:
            return handler(args)
        except ViewError:
            raise
        except LedgerError as exc:
            raise ViewError(f"Smart contract panicked: {exc.text}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise ViewError(f"Smart contract panicked: failed to deserialize args: {exc}") from None

    def _views(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        ledger = self.ledger
        return {
            "current_salt": lambda a: ledger.current_salt(),
            "fee": lambda a: ledger.fee(),
            "mt_balance_of": lambda a: str(
                ledger.mt_balance_of(_account(a, "account_id"), _str(a, "token_id"))
            ),
            "mt_batch_balance_of": lambda a: [
                str(v)
                for v in ledger.mt_batch_balance_of(
                    _account(a, "account_id"), _str_list(a, "token_ids")
                )
            ],
            "is_nonce_used": lambda a: ledger.is_nonce_used(
                _account(a, "account_id"), _str(a, "nonce")
            ),
            "public_keys_of": lambda a: ledger.public_keys_of(_account(a, "account_id")),
            "has_public_key": lambda a: ledger.has_public_key(
                _account(a, "account_id"), _str(a, "public_key")
            ),
            "simulate_intents": lambda a: ledger.simulate_intents(_signed_list(a), self.clock()),
        }


def _str(args: dict[str, Any], name: str) -> str:
    value = args[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    return value


def _account(args: dict[str, Any], name: str) -> str:
    return validate_account_id(_str(args, name))


def _str_list(args: dict[str, Any], name: str) -> list[str]:
    value = args[name]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings")
    return value


def _signed_list(args: dict[str, Any]) -> list[dict[str, Any]]:
    value = args["signed"]
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError("signed must be a list of signed intents")
    return value
