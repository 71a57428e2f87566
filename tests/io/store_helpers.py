"""Helpers of the store tests: really signed quotes with u128-sized amounts, and the journal
facts that record them (the only way the store is written now)."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from solver.core import facts as f
from solver.core.clock import SECOND, micros
from solver.core.lifecycle import TERMINAL, Quote, QuoteState
from solver.core.market import QuoteRequest
from solver.core.rebalance_record import RebalanceRecord
from solver.io.store.schema import QUOTE_COLUMNS
from solver.io.store.sqlite_store import Store
from solver.protocol.keys import SecretKey
from solver.protocol.nonce import salted_nonce
from solver.protocol.quote_signing import QuoteSigner, SignedQuote

U128_MAX = 2**128 - 1
USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"
ACCOUNT = "solver.sandbox"
SALT = bytes.fromhex("252812b3")
T0 = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
T0_US = micros(T0)
""":data:`T0` on the desk's clock (µs since the epoch, :mod:`solver.core.clock`): the time the
facts and tracked quotes hold. The helpers take datetimes, as the store's queries do."""

_SIGNER = QuoteSigner(SecretKey.generate(), ACCOUNT, "intents.sandbox")

Signed = tuple[Quote, SignedQuote, QuoteRequest]

OPEN_STATES_SQL = (
    "state IN (" + ", ".join(sorted(f"'{s.value}'" for s in QuoteState if s not in TERMINAL)) + ")"
)
"""The quotes still open, for tests reading the query tables (the bot itself keeps them in the
desk, rebuilt from the journal)."""
SELECT_OPEN = QUOTE_COLUMNS + f"WHERE {OPEN_STATES_SQL} ORDER BY created_at"


def signed_quote(
    quote_id: str,
    *,
    at: datetime = T0,
    asset_in: str = USDC,
    asset_out: str = WNEAR,
    amount_in: int = U128_MAX,
    amount_out: int = U128_MAX - 1,
    fee: int = U128_MAX - 2,
    nonce: bytes | None = None,
    exact_in: bool = True,
) -> Signed:
    """A quote signed for real, its tracked form, and the request it answers (its times are
    µs: ``at`` as created, a deadline 60 s later)."""
    created = micros(at)
    deadline = created + 60 * SECOND
    nonce = nonce if nonce is not None else salted_nonce(SALT)
    signed = _SIGNER.sign(
        deadline=deadline,
        nonce=nonce,
        asset_in=asset_in,
        amount_in=amount_in,
        asset_out=asset_out,
        amount_out=amount_out,
    )
    tracked = Quote(
        quote_id,
        asset_in,
        asset_out,
        amount_in,
        amount_out,
        fee,
        deadline,
        quote_hash=signed.quote_hash,
        nonce=nonce,
        created_at=created,
    )
    amount = amount_in if exact_in else amount_out
    request = QuoteRequest(quote_id, asset_in, asset_out, exact_in, amount, 30_000, "partner-1")
    return tracked, signed, request


def opened(quote: Signed) -> f.QuoteOpened:
    """The fact the desk decides when ``quote`` is signed."""
    t, signed, request = quote
    return f.QuoteOpened(
        t.quote_id, t.quote_hash, t.asset_in, t.asset_out, t.amount_in, t.amount_out, t.fee,
        t.deadline, t.nonce, t.created_at, request.exact_in, request.partner_id,
        signed.signed_data,
    )  # fmt: skip


def append_quotes(store: Store, *quotes: Signed) -> None:
    """Append each quote's ``QuoteOpened`` with its signed data (not committed)."""
    for quote in quotes:
        store.journal.append(opened(quote))


def record(store: Store, *quotes: Signed) -> None:
    """Append the quotes and commit them, as the executor's flush does, then derive the query
    tables, as the bot's ticker does (:mod:`solver.io.store.projection`)."""
    append_quotes(store, *quotes)
    store.project()


def move(
    store: Store,
    quote_id: str,
    new: QuoteState,
    at: datetime = T0,
    *,
    reason: str | None = None,
    intent_hash: str | None = None,
    tx_hash: str | None = None,
    fill: f.FillPrices | None = None,
) -> f.QuoteMoved:
    """Append a ``QuoteMoved`` at ``at`` (not committed); the fact is returned."""
    fact = f.QuoteMoved(quote_id, new.value, micros(at), reason, intent_hash, tx_hash, fill)
    store.journal.append(fact)
    return fact


def step(store: Store, record: RebalanceRecord, detail: str | None = None) -> None:
    """A rebalance step as the desk journals it, committed and projected into the tables."""
    store.journal.append(f.RebalanceStepped(record, detail))
    store.commit()
    store.project()


@contextlib.contextmanager
def committed_view(db: Path) -> Iterator[sqlite3.Connection]:
    """A connection to what another process would find in ``db`` if its writer died now: the
    database and its WAL as they are on disk, copied by ``cp`` in a child process, then
    opened here (SQLite recovers the committed frames, as after a crash).

    The store is held by one connection at a time (exclusive locking, issue 24), so a test
    cannot open a second one beside it; and it must not open and close the file itself
    either: closing any descriptor of a file drops every POSIX lock this process holds on
    it, the writer's included."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / db.name
        script = 'cp "$1" "$2" && if [ -e "$1-wal" ]; then cp "$1-wal" "$2-wal"; fi'
        subprocess.run(["sh", "-c", script, "sh", str(db), str(copy)], check=True, timeout=60)
        conn = sqlite3.connect(copy)
        try:
            yield conn
        finally:
            conn.close()


def killed_owner(script: str, db: Path, says: str) -> None:
    """Run ``script`` (Python, the store's path as its argument) in a child process that
    prints ``says`` and kills itself with SIGKILL at the moment the test wants a death."""
    child = subprocess.run(
        [sys.executable, "-c", script, str(db)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert child.stdout.strip() == says and child.returncode == -9, child.stderr


def checkpointed(store: Store, timeout_s: float = 10.0) -> bool:
    """Ask for a checkpoint pass until it runs (a due pass waits for the WAL's flush on the
    store's sync thread first) — True once it ran, False if it never did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if store.checkpoint_if_due():
            return True
        time.sleep(0.002)
    return False
