"""Settling won quotes on the sandbox verifier ledger (:class:`sandbox.ledger.VerifierLedger`).

Every won quote is executed as the verifier would: one batch of two ``token_diff`` items, the
solver's quote ``{asset_in: +amount_in, asset_out: -amount_out}`` and a simulated user's mirror
``{asset_in: -amount_in, asset_out: +amount_out}``. The user account has effectively unlimited
funds (topped up from outside whenever it runs low), so only the solver's side can fail.

Two modes, chosen by ``sign``:

- **signing on** (exactly as live): the quote is signed on the quote path with the live
  :class:`~solver.protocol.quote_signing.QuoteSigner` (NEP-413, ed25519, a salted or versioned
  nonce under the ledger's salt); the user signs its mirror at settlement; the batch goes through
  :meth:`VerifierLedger.execute_intents`, which runs *every* check: signature, JSON, recipient,
  deadline, signer key, nonce salt/expiry/reuse, the intents (fees, balances, overflow), the
  invariant, all-or-nothing.
- **signing off** (the fast path, the default): nothing is signed. The two diffs are applied by
  the verifier's ``token_diff`` rule — the protocol fee ``ceil(|delta| * fee_pips / 1e6)`` on
  every negative delta, debited on top of it and credited to the fee collector; the balance
  (``insufficient balance or overflow``) and u128 overflow checks of the ledger's own
  ``_debit`` / ``_credit`` — under the ledger's undo journal, so a failure rolls the batch back.
  The deadline and the non-zero deltas are checked too; the invariant (deltas net to zero per
  token) holds by construction, as the user's item mirrors the solver's. Not run: signature,
  key, recipient, nonce and salt checks (nothing is signed), and no events are recorded. A test
  holds the balances of both modes equal, fee collector included.

Keys and nonces are derived from the seed, so a signed run is reproducible too. The ledger's
event log is cleared after every batch (the replay never reads it; it would grow with the run).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Mapping
from datetime import datetime

from sandbox.ledger import VerifierLedger
from sandbox.ledger_errors import ERR_DEADLINE, ERR_INVALID_INTENT, LedgerError
from sandbox.ledger_journal import Journal as _Journal
from solver.core.clock import from_micros, micros
from solver.core.lifecycle import Quote
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import NonceLayout, versioned_nonce
from solver.protocol.quote_signing import QuoteSigner, SignedQuote

USER_FUNDS = 2**120
"""What the simulated user holds of every token, restored whenever it falls below half."""


class SettlementFailed(Exception):
    """The ledger refused the batch; ``reason`` is the verifier's error text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _derived_key(seed: int, who: str) -> SecretKey:
    return SecretKey(hashlib.sha256(f"backtest:{seed}:{who}".encode()).digest())


class LedgerSettler:
    def __init__(
        self,
        *,
        contract: str,
        solver_account: str,
        user_account: str,
        fee_pips: int,
        sign: bool,
        nonce_layout: NonceLayout = "salted",
        seed: int = 0,
    ) -> None:
        self.ledger = VerifierLedger(contract, fee_pips=fee_pips, seed=seed)
        self.solver = solver_account
        self.user = user_account
        self.signing = sign
        self.nonce_layout = nonce_layout
        self._rng = random.Random(seed)
        self.salt = bytes.fromhex(self.ledger.current_salt())
        self.signer: QuoteSigner | None = None
        self._user_signer: QuoteSigner | None = None
        if sign:
            solver_key, user_key = _derived_key(seed, "solver"), _derived_key(seed, "user")
            self.ledger.register_key(solver_account, solver_key.public_key.to_text())
            self.ledger.register_key(user_account, user_key.public_key.to_text())
            self.signer = QuoteSigner(solver_key, solver_account, contract)
            self._user_signer = QuoteSigner(user_key, user_account, contract)

    @property
    def fee_pips(self) -> int:
        return self.ledger.fee_pips

    def fund(self, balances: Mapping[str, int], tokens: Iterable[str]) -> None:
        """Deposit the solver's starting balances and the user's (unlimited) funds."""
        for asset, amount in balances.items():
            if amount:
                self.ledger.deposit(self.solver, asset, amount)
        for asset in tokens:
            self.ledger.deposit(self.user, asset, USER_FUNDS)

    def balance(self, asset: str) -> int:
        return self.ledger.mt_balance_of(self.solver, asset)

    def balances(self, assets: Iterable[str]) -> dict[str, int]:
        return {asset: self.balance(asset) for asset in assets}

    # ------------------------------------------------------------------ quote path

    def _nonce(self, deadline: int) -> bytes:
        if self.nonce_layout == "versioned":
            return versioned_nonce(self.salt, from_micros(deadline), self._rng.randbytes(15))
        return self.salt + self._rng.randbytes(28)

    def sign(self, quote: Quote) -> SignedQuote | None:
        """Sign a quote as the live engine does (None with signing off)."""
        if self.signer is None:
            return None
        return self.signer.sign(
            deadline=quote.deadline,
            nonce=self._nonce(quote.deadline),
            asset_in=quote.asset_in,
            amount_in=quote.amount_in,
            asset_out=quote.asset_out,
            amount_out=quote.amount_out,
        )

    # ------------------------------------------------------------------ settlement

    def settle(self, quote: Quote, signed: SignedQuote | None, at: datetime) -> int:
        """Execute the quote and the user's mirror at ``at``; return the fee the solver paid.

        Raises :class:`SettlementFailed` (state unchanged) when the ledger refuses the batch.
        """
        asset_in, asset_out = quote.asset_in, quote.asset_out
        user_balances = self.ledger.balances.get(self.user, {})
        if user_balances.get(asset_in, 0) < USER_FUNDS // 2:
            self.ledger.deposit(self.user, asset_in, USER_FUNDS)
        before = self.balance(asset_out)
        try:
            if self._user_signer is not None and signed is not None:
                mirror = self._user_signer.sign(
                    deadline=quote.deadline,
                    nonce=self._nonce(quote.deadline),
                    asset_in=asset_out,
                    amount_in=quote.amount_out,
                    asset_out=asset_in,
                    amount_out=quote.amount_in,
                )
                try:
                    self.ledger.execute_intents([signed.signed_data, mirror.signed_data], at)
                finally:
                    self.ledger.events.clear()
            else:
                self._apply_unsigned(quote, at)
        except LedgerError as exc:
            raise SettlementFailed(exc.text) from None
        return before - self.balance(asset_out) - quote.amount_out

    def _apply_unsigned(self, quote: Quote, at: datetime) -> None:
        """The two ``token_diff`` items without signatures (see the module docstring).

        The verifier's ``token_diff`` rule, item by item: a negative delta debits ``|delta|``
        plus ``ceil(|delta| * fee_pips / 1e6)`` from the signer (``insufficient balance``
        otherwise) and credits the fee to the fee collector; a positive delta credits the signer
        (u128 overflow checked). Balance changes go through the ledger's own ``_debit`` /
        ``_credit`` under its undo journal; the invariant is checked over the deltas. A test holds
        the result equal to :meth:`VerifierLedger.execute_intents` on signed items.
        """
        deadline = quote.deadline
        signed_deadline = deadline - deadline % 1000
        if signed_deadline < micros(
            at
        ):  # a signed deadline has whole milliseconds (format_deadline)
            raise LedgerError(ERR_DEADLINE, 0)
        asset_in, asset_out = quote.asset_in, quote.asset_out
        amount_in, amount_out = quote.amount_in, quote.amount_out
        if amount_in <= 0 or amount_out <= 0:
            raise LedgerError(f"{ERR_INVALID_INTENT}: token_diff with a zero delta", 0)
        ledger = self.ledger
        fee_pips, collector = ledger.fee_pips, ledger.fee_collector
        journal = _Journal()
        try:
            for index, (signer, credit_token, credit, debit_token, debit) in enumerate(
                (
                    (self.solver, asset_in, amount_in, asset_out, amount_out),
                    (self.user, asset_out, amount_out, asset_in, amount_in),
                )
            ):
                fee = (debit * fee_pips + 999_999) // 1_000_000
                ledger._credit(signer, credit_token, credit, journal, index)
                ledger._debit(signer, debit_token, debit + fee, journal, index)
                if fee:
                    ledger._credit(collector, debit_token, fee, journal, index)
            # The invariant holds by construction (the user mirrors the solver exactly).
        except BaseException:
            journal.rollback()
            raise
