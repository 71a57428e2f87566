"""Settling a published batch, in the real relay's order of events (protocol-notes 6; spec 4.7).

The order, for a batch published at ``t`` with ``settlement_delay_ms = d``:

1. ``t``: ``publish_intent(s)`` answers ``OK``; ``get_status`` answers PENDING.
2. ``t + d/2``: the transaction is broadcast: ``get_status`` answers TX_BROADCASTED with its
   ``data.hash``. No notification yet: nothing has moved on the ledger.
3. ``t + d``: the batch executes on the ledger. On success ``get_status`` answers SETTLED and
   **then** each solver whose quote was used gets its ``quote_status`` (``quote_hash``,
   ``intent_hash``, ``tx_hash``): a solver that re-reads its balances on the notification sees
   them moved, as the relay's docs promise ("your quote was executed"). On failure
   ``get_status`` answers NOT_FOUND_OR_NOT_VALID with ``status_details: FAILED`` and the reason,
   and no ``quote_status`` is sent.

Until issue 23 the notification went out at step 2, before execution: the reference AMM solver,
which derives its nonce from its reserves and re-reads them on ``quote_status``, read them
unmoved, kept a nonce the batch then used up, and had most of its answers refused.

Tests can drop or delay chosen notifications through :class:`sandbox.notify_faults.NotifyFaults`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from sandbox.chain import SandboxChain
from sandbox.ledger_errors import LedgerError
from sandbox.notify_faults import NotifyFaults
from solver.protocol import bus as wire

if TYPE_CHECKING:
    from sandbox.bus import SolverConnection
    from sandbox.bus_records import BusStats, IntentRecord, QuoteRecord

log = logging.getLogger("sandbox.bus")


@dataclass
class Settlement:
    """Runs each published batch through broadcast, execution and notification."""

    chain: SandboxChain
    stats: BusStats
    connection: Callable[[str], SolverConnection | None]
    spawn: Callable[[Any], None]
    delay_s: float
    faults: NotifyFaults

    async def settle(
        self, batch: list[dict[str, Any]], quotes: list[QuoteRecord], intents: list[IntentRecord]
    ) -> None:
        await asyncio.sleep(self.delay_s / 2)
        tx_hash = self.chain.next_tx_hash()
        for rec in intents:
            rec.status, rec.tx_hash = wire.IntentStatus.TX_BROADCASTED, tx_hash
        await asyncio.sleep(self.delay_s / 2)
        try:
            self.chain.execute(batch)
        except LedgerError as exc:
            for rec in intents:
                rec.status, rec.reason = wire.IntentStatus.NOT_FOUND_OR_NOT_VALID, exc.text
            self.stats.count(self.stats.settlement_failed, exc.text)
            log.info("settlement of %s failed: %s", intents[0].intent_hash, exc.text)
            return
        for rec in intents:
            rec.status = wire.IntentStatus.SETTLED
        self.stats.settled += 1
        for quote in quotes:
            self._notify(quote, intents[0].intent_hash, tx_hash)

    def _notify(self, quote: QuoteRecord, user_hash: str, tx_hash: str) -> None:
        rule = self.faults.verdict(_signer_of(quote.signed_data), quote.quote_hash)
        if rule is None:
            self.send_quote_status(quote, user_hash, tx_hash)
        elif rule.action == "drop":
            self.stats.quote_status_dropped += 1
            log.info("quote_status of %s dropped by a test's fault rule", quote.quote_hash)
        else:
            self.spawn(self._send_later(rule.delay_s, quote, user_hash, tx_hash))

    async def _send_later(
        self, delay_s: float, quote: QuoteRecord, user_hash: str, tx_hash: str
    ) -> None:
        await asyncio.sleep(delay_s)
        self.send_quote_status(quote, user_hash, tx_hash)

    def send_quote_status(self, quote: QuoteRecord, user_hash: str, tx_hash: str) -> None:
        """Push one ``quote_status`` event to the solver's connection, if it still subscribes."""
        conn = self.connection(quote.conn_id)
        sub_id = conn.subscription_for("quote_status") if conn else None
        if conn is None or sub_id is None:
            self.stats.quote_status_undeliverable += 1
            return
        frame = {
            "jsonrpc": "2.0",
            "method": "event",
            "params": {
                "subscription": sub_id,
                "data": {
                    "quote_hash": quote.quote_hash,
                    "intent_hash": user_hash,
                    "tx_hash": tx_hash,
                },
                "metadata": {},
            },
        }
        conn.push(orjson.dumps(frame).decode("utf-8"))
        self.stats.quote_status_sent += 1


def _signer_of(signed_data: dict[str, Any]) -> str:
    """The ``signer_id`` of a stored (already verified) quote, for fault rules by solver.

    NEP-413 carries the message JSON in ``payload.message``; the other standards carry it as
    the payload itself. An unreadable message gives "" (matches only rules without a solver).
    """
    payload = signed_data.get("payload")
    text = payload.get("message") if isinstance(payload, dict) else payload
    try:
        message = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return ""
    signer = message.get("signer_id") if isinstance(message, dict) else None
    return signer if isinstance(signer, str) else ""
