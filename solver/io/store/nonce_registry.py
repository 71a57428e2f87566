"""The store's nonce registers (spec 5.3: a nonce is never signed twice): the prefixes of the
quote nonce sequences, one claimed at each start of the bot, so no quote nonce repeats across
restarts without a row per nonce; and the nonces of rebalance deposits, each registered before
it is signed, whose reuse is refused (:class:`NonceRegistry`, a part of
:class:`~solver.io.store.sqlite_store.Store`).

A module of its own since issue 29: the store's file was over the project's size (609 lines),
and these methods are one role. A mixin, as :class:`~solver.io.store.queries.StoreQueries` is:
PostgreSQL's store (:class:`~solver.io.store.pg.store.PgStore`) is a
:class:`~solver.io.store.sqlite_store.Store`, reads the registers with these queries and
overrides the two writes (its errors name a constraint differently).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from solver.io.store.queries import reads
from solver.io.store.schema import INSERT_NONCE, NonceReusedError, StoreError, ts
from solver.protocol.nonce import PREFIX_LEN

INSERT_NONCE_PREFIX = (
    "INSERT OR IGNORE INTO nonce_prefixes (account, prefix, claimed_at) VALUES (?, ?, ?)"
)


class NonceRegistry:
    """The nonce-prefix and deposit-nonce registers of one store."""

    # What the store gives this part (:class:`~solver.io.store.sqlite_store.Store`).
    path: Path
    _conn: Any
    account: str
    _write: Callable[[Iterable[tuple[str, tuple[Any, ...]]]], int]

    def claim_nonce_prefix(self, at: datetime) -> bytes:
        """A nonce-sequence prefix for :attr:`account` never handed out before by this store,
        registered durably before it is returned (:class:`~solver.protocol.nonce.NonceSequence`;
        one per start of the bot)."""
        if not self.account:
            raise StoreError("the store has no account to claim a nonce prefix for")
        for _ in range(8):  # a prefix drawn before (2^-56 a time) inserts nothing: draw again
            prefix = os.urandom(PREFIX_LEN)
            if self._write([(INSERT_NONCE_PREFIX, (self.account, prefix, ts(at)))]):
                return prefix
        raise StoreError(f"cannot claim a fresh nonce prefix in {self.path}")

    @reads
    def nonce_prefixes(self, account: str) -> set[bytes]:
        """Every nonce-sequence prefix claimed for ``account``."""
        sql = "SELECT prefix FROM nonce_prefixes WHERE account = ?"
        return {bytes(row[0]) for row in self._conn.execute(sql, (account,))}

    @reads
    def nonce_used_before(self, account: str, nonce: bytes) -> bool:
        """Whether ``nonce`` is recorded as signed by ``account`` (rebalance deposits, and quotes
        signed before schema 8); a quote nonce is unique by its claimed prefix instead."""
        sql = "SELECT 1 FROM nonces WHERE account = ? AND nonce = ?"
        return self._conn.execute(sql, (account, nonce.hex())).fetchone() is not None

    def register_nonce(self, account: str, nonce: bytes, at: datetime) -> None:
        """Record ``nonce`` as signed by ``account``, durably, before it is signed (a rebalance
        deposit: :func:`solver.io.ops_intents.sign_operation`); one recorded before, in this
        run or an earlier one, is refused with :class:`NonceReusedError` and nothing is
        signed."""
        try:
            self._write([(INSERT_NONCE, (account, nonce.hex(), None, ts(at)))])
        except StoreError as exc:
            if "nonces." in str(exc):
                raise NonceReusedError(
                    f"nonce {nonce.hex()} of {account} was signed before: not signed again"
                ) from None
            raise
