"""What each intent does to the verifier ledger's state (spec 2.12; protocol-notes 2, 4).

Split out of :mod:`sandbox.ledger`, which keeps the state, the views and the checks per signed
item: once an item has passed them, :func:`apply_intent` runs each of its intents — a
``token_diff`` with the protocol fee, ``transfer``, ``ft_withdraw``, ``storage_deposit``, adding
and removing a public key — and writes its event line. It is part of the ledger, not a client
of it: every balance moves through the ledger's ``_debit`` / ``_credit`` and every other change
through the batch's undo :class:`~sandbox.ledger_journal.Journal`, so a refused batch is rolled
back exactly (spec 7.3).

Protocol fee (protocol-notes 2): ``fee_pips`` (1 pip = 1e-6, default 0 as in the spec) is
charged on every negative ``token_diff`` delta as ``ceil(|delta| * fee / 1e6)``, debited from the
signer on top of the delta and credited to ``fee_collector``; the invariant is over the deltas,
and total supply is conserved because the fee only moves between accounts.

``ft_withdraw`` and ``storage_deposit`` debit the signer and record an event: there is no
external chain to pay out to in the sandbox. Storage is paid in ``wrapped_native``, the
sandbox's own wNEAR (``config/sandbox.yaml``), which the sandbox funds like any other token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from sandbox.ledger_errors import ERR_INVALID_INTENT, LedgerError, err_key_exists, err_no_key
from sandbox.ledger_journal import Journal, event
from solver.protocol.intents import (
    AddPublicKey,
    FtWithdraw,
    RemovePublicKey,
    StorageDeposit,
    TokenDiff,
    Transfer,
    semantic_problem,
)

if TYPE_CHECKING:
    from sandbox.ledger import VerifierLedger


def apply_intent(
    ledger: VerifierLedger,
    intent: BaseModel,
    signer: str,
    intent_hash: str,
    journal: Journal,
    logs: list[str],
    sums: dict[str, int],
    index: int,
) -> None:
    """Run one intent of item ``index``, signed by ``signer``, under ``journal``: move the
    balances or keys, add a ``token_diff``'s deltas to ``sums`` (the batch's invariant) and
    append its event line to ``logs``; raise :class:`LedgerError` with the verifier's text."""
    problem = semantic_problem(intent, signer)
    if problem:
        raise LedgerError(f"{ERR_INVALID_INTENT}: {problem}", index)
    if isinstance(intent, TokenDiff):
        fees: dict[str, int] = {}
        for token, delta in intent.diff.items():
            if delta < 0:
                fee = (-delta * ledger.fee_pips + 999_999) // 1_000_000  # ceil
                ledger._debit(signer, token, -delta + fee, journal, index)
                if fee:
                    ledger._credit(ledger.fee_collector, token, fee, journal, index)
                    fees[token] = fee
            else:
                ledger._credit(signer, token, delta, journal, index)
            sums[token] = sums.get(token, 0) + delta
        logs.append(
            event(
                "token_diff",
                [
                    {
                        "intent_hash": intent_hash,
                        "account_id": signer,
                        "diff": {t: str(d) for t, d in intent.diff.items()},
                        "fees_collected": {t: str(f) for t, f in fees.items()},
                    }
                ],
            )
        )
    elif isinstance(intent, Transfer):
        for token, amount in intent.tokens.items():
            ledger._debit(signer, token, amount, journal, index)
            ledger._credit(intent.receiver_id, token, amount, journal, index)
        logs.append(
            event(
                "transfer",
                [
                    {
                        "intent_hash": intent_hash,
                        "account_id": signer,
                        "receiver_id": intent.receiver_id,
                        "tokens": {t: str(a) for t, a in intent.tokens.items()},
                        "memo": intent.memo,
                    }
                ],
            )
        )
    elif isinstance(intent, FtWithdraw):
        ledger._debit(signer, f"nep141:{intent.token}", intent.amount, journal, index)
        if intent.storage_deposit:
            ledger._debit(signer, ledger.wrapped_native, intent.storage_deposit, journal, index)
        logs.append(
            event(
                "ft_withdraw",
                [
                    {
                        "intent_hash": intent_hash,
                        "account_id": signer,
                        "token": intent.token,
                        "receiver_id": intent.receiver_id,
                        "amount": str(intent.amount),
                        "storage_deposit": str(intent.storage_deposit)
                        if intent.storage_deposit
                        else None,
                        "msg": intent.msg,
                        "memo": intent.memo,
                    }
                ],
            )
        )
    elif isinstance(intent, StorageDeposit):
        ledger._debit(signer, ledger.wrapped_native, intent.amount, journal, index)
        logs.append(
            event(
                "storage_deposit",
                [
                    {
                        "intent_hash": intent_hash,
                        "account_id": signer,
                        "contract_id": intent.contract_id,
                        "deposit_for_account_id": intent.account_id,
                        "amount": str(intent.amount),
                    }
                ],
            )
        )
    elif isinstance(intent, AddPublicKey):
        if intent.public_key in ledger.public_keys_of(signer):
            raise LedgerError(err_key_exists(intent.public_key, signer), index)
        journal.add(journal.setdefault(ledger.keys, signer, set()), intent.public_key)
        logs.append(
            event("public_key_added", [{"account_id": signer, "public_key": intent.public_key}])
        )
    elif isinstance(intent, RemovePublicKey):
        _remove_key(ledger, signer, intent.public_key, journal, index)
        logs.append(
            event("public_key_removed", [{"account_id": signer, "public_key": intent.public_key}])
        )
    else:  # pragma: no cover - the discriminated union has no other members
        raise LedgerError(ERR_INVALID_INTENT, index)


def _remove_key(
    ledger: VerifierLedger, signer: str, public_key: str, journal: Journal, index: int
) -> None:
    keys = ledger.keys.get(signer, set())
    if public_key in keys:
        journal.discard(keys, public_key)
    elif ledger._owns_implicitly(signer, public_key, None):
        journal.add(ledger.revoked_implicit, signer)
    else:
        raise LedgerError(err_no_key(public_key, signer), index)
