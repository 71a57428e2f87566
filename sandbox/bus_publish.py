"""Publishing to the message bus and the intent statuses (spec 3.2, 4.7; protocol-notes 6).

Split out of :mod:`sandbox.bus`, which keeps the connections and the quote auction: a publish
reads the auction's valid quotes by ``quote_hash`` and nothing else of it, so the publish rules
read on their own here.

Publish flow: the user's item and the quoted solver items run as one batch. It is simulated at
once (a failure answers ``FAILED`` with the verifier's reason), then :mod:`sandbox.settlement`
moves it PENDING → TX_BROADCASTED → executed on the ledger → SETTLED, and only then sends
``quote_status`` to each solver whose quote was used (NOT_FOUND_OR_NOT_VALID and no
notification if execution fails). ``get_status`` answers from the intents kept here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sandbox.bus_records import MAX_RECORDS, BusRpcError, BusStats, IntentRecord, QuoteRecord
from sandbox.chain import SandboxChain
from sandbox.ledger_errors import ERR_INVARIANT, LedgerError
from sandbox.ledger_journal import deltas_json
from sandbox.quote_answers import Leniency
from sandbox.settlement import Settlement
from solver.protocol import bus as wire
from solver.protocol.amounts import WIRE
from solver.protocol.encoding import b58encode
from solver.protocol.signing import first_error, intent_hash


@dataclass
class IntentPublisher:
    """``publish_intent``, ``publish_intents`` and ``get_status`` over the bus's tables: the
    quotes the auction accepted and the intents published (both owned by the bus)."""

    chain: SandboxChain
    stats: BusStats
    quotes: OrderedDict[str, QuoteRecord]
    intents: OrderedDict[str, IntentRecord]
    settlement: Settlement
    spawn: Callable[[Any], None]
    lenient: Leniency

    def _note_null_quotes(self, raw_params: Any) -> None:
        if isinstance(raw_params, dict) and raw_params.get("quote_hashes", []) is None:
            self.lenient.note("quote_hashes", "null read as no quotes (py-near's transfer)")

    async def publish_intent(self, raw_params: Any) -> dict[str, Any]:
        self._note_null_quotes(raw_params)
        try:
            params = wire.PublishIntentParams.model_validate(raw_params, context=WIRE)
        except ValidationError as exc:
            raise BusRpcError(wire.INVALID_PARAMS, f"invalid params: {first_error(exc)}") from None
        result = self._publish(params.quote_hashes, [params.signed_data])
        hashes = result.pop("intent_hashes")
        if hashes:
            result["intent_hash"] = hashes[0]
        return result

    async def publish_intents(self, raw_params: Any) -> dict[str, Any]:
        self._note_null_quotes(raw_params)
        try:
            params = wire.PublishIntentsParams.model_validate(raw_params, context=WIRE)
        except ValidationError as exc:
            raise BusRpcError(wire.INVALID_PARAMS, f"invalid params: {first_error(exc)}") from None
        if not params.signed_datas:
            raise BusRpcError(wire.INVALID_PARAMS, "signed_datas must not be empty")
        return self._publish(params.quote_hashes, list(params.signed_datas))

    def _publish(self, quote_hashes: list[str], user_items: list[Any]) -> dict[str, Any]:
        user_hashes = [b58encode(intent_hash(item)) for item in user_items]
        failed = self._check_publish(quote_hashes, user_hashes)
        if failed:
            self.stats.count(self.stats.publish_failed, failed)
            return {"status": "FAILED", "reason": failed, "intent_hashes": user_hashes}
        records = [self.quotes[h] for h in quote_hashes]
        batch = [r.signed_data for r in records] + [
            item.model_dump(mode="json", exclude_none=True) for item in user_items
        ]
        try:
            simulated = self.chain.ledger.simulate_intents(batch, self.chain.clock())
        except LedgerError as exc:
            self.stats.count(self.stats.publish_failed, exc.text)
            return {"status": "FAILED", "reason": exc.text, "intent_hashes": user_hashes}
        if "invariant_violated" in simulated:
            unmatched = simulated["invariant_violated"]["unmatched_deltas"]
            reason = f"{ERR_INVARIANT}: unmatched deltas {deltas_json(unmatched)}"
            self.stats.count(self.stats.publish_failed, reason)
            return {"status": "FAILED", "reason": reason, "intent_hashes": user_hashes}
        for record in records:
            record.used = True
        intent_records = []
        for user_hash in user_hashes:
            rec = IntentRecord(user_hash, wire.IntentStatus.PENDING, list(quote_hashes))
            self._store_intent(user_hash, rec)
            intent_records.append(rec)
        for record in records:  # a solver may also follow its own quote hash
            self._store_intent(record.quote_hash, intent_records[0])
        self.stats.published += 1
        self.spawn(self.settlement.settle(batch, records, intent_records))
        return {"status": "OK", "intent_hashes": user_hashes}

    def _check_publish(self, quote_hashes: list[str], user_hashes: list[str]) -> str | None:
        now = self.chain.clock()
        for user_hash in user_hashes:
            if user_hash in self.intents:
                return "already processed"
        for quote_hash in quote_hashes:
            record = self.quotes.get(quote_hash)
            if record is None:
                return f"unknown quote hash {quote_hash}"
            if record.used:
                return "already processed"
            if record.expiration < now:
                return "expired"
        if len(set(quote_hashes)) != len(quote_hashes):
            return "duplicate quote hash"
        return None

    def _store_intent(self, key: str, record: IntentRecord) -> None:
        self.intents[key] = record
        while len(self.intents) > MAX_RECORDS:
            self.intents.popitem(last=False)

    def get_status(self, raw_params: Any) -> dict[str, Any]:
        try:
            params = wire.GetStatusParams.model_validate(raw_params, context=WIRE)
        except ValidationError as exc:
            raise BusRpcError(wire.INVALID_PARAMS, f"invalid params: {first_error(exc)}") from None
        record = self.intents.get(params.intent_hash)
        if record is None:
            return {
                "intent_hash": params.intent_hash,
                "status": wire.IntentStatus.NOT_FOUND_OR_NOT_VALID.value,
            }
        out: dict[str, Any] = {"intent_hash": params.intent_hash, "status": record.status.value}
        if record.tx_hash:
            out["data"] = {"hash": record.tx_hash}
        if record.reason is not None:
            # Failed in execution (not merely unknown): clients such as the official SDK stop
            # polling on ``status_details: FAILED`` instead of waiting for a settlement.
            out["status_details"] = "FAILED"
            out["reason"] = record.reason
        return out
