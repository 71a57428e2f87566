"""Operator intents: sign and publish account operations for the configured account (spec 2.12).

``add_public_key`` / ``remove_public_key`` (key rotation, and the hard stop: revoke a dedicated
quoting key without touching funds), ``transfer`` and ``ft_withdraw``, built and checked by
:mod:`solver.io.ops_build` (with the operator's amounts). Each operation is one
signed item published *alone* (``quote_hashes`` empty: no solver quote is involved), then
followed with ``get_status`` until a final status or a bounded wait.

Signing follows spec 5.3: ``nep413`` over the message, the current salt fetched from the ledger
just before, a fresh nonce of the configured layout (protocol-notes 3) and a deadline
``deadline_s`` ahead.

Outcome (:class:`OperationResult`), as the CLI prints it:

- ``SETTLED``: executed on the ledger;
- ``FAILED``: the bus refused it at once (``reason`` is the verifier's, from its simulation);
- ``NOT_FOUND_OR_NOT_VALID``: accepted, then not executed; the bus's ``get_status`` gives no
  reason, so ``reason`` reports what simulating the item *now* says (the likely cause);
- ``PENDING`` / ``TX_BROADCASTED`` / ``UNKNOWN``: no final status within the wait. The item may
  still execute until its deadline (``reason`` says until when): check before resending.
- dry runs: ``SIMULATED`` or ``SIMULATION_FAILED``, nothing published.

Before reporting anything but ``SETTLED``, the ledger is asked whether the item's nonce is used:
a used nonce means the item executed, whatever the bus said (the ledger is the truth).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from pydantic import BaseModel

from solver.config import BotConfig
from solver.errors import ConfigError, ProtocolError, RemoteError, TransportError
from solver.io.bus_rpc import BusRpcClient
from solver.io.ledger_client import LedgerClient
from solver.protocol.bus import IntentStatus, PublishStatus
from solver.protocol.encoding import b58encode, b64encode
from solver.protocol.intents import Nep413Payload, Nep413Signed, format_deadline, serialize_message
from solver.protocol.keys import SecretKey, format_signature
from solver.protocol.nonce import NonceLayout, new_nonce
from solver.protocol.signing import intent_hash
from solver.runtime.ports import MessageSigner
from solver.signer.local import InProcessMessageSigner

DEFAULT_DEADLINE_S = 120.0
MAX_DEADLINE_S = 86_400.0
DEFAULT_WAIT_S = 60.0
MAX_WAIT_S = 3_600.0
NOT_FOUND_GRACE_S = 2.0
"""A NOT_FOUND_OR_NOT_VALID seen before any other status this soon after publishing is read as
"the relay does not know it yet" and polled again."""

SETTLED = IntentStatus.SETTLED.value
NOT_FOUND = IntentStatus.NOT_FOUND_OR_NOT_VALID.value
FAILED = PublishStatus.FAILED.value
SIMULATED = "SIMULATED"
SIMULATION_FAILED = "SIMULATION_FAILED"
UNKNOWN = "UNKNOWN"


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class OperationResult:
    """What happened to one operator intent (see the module docstring for the statuses)."""

    intent_hash: str
    status: str
    tx_hash: str | None = None
    reason: str | None = None
    deadline: str | None = None
    signed_data: dict[str, Any] | None = field(default=None, repr=False)
    simulation: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """Settled, or (dry run) simulated without error."""
        return self.status in (SETTLED, SIMULATED)

    def to_json(self) -> dict[str, Any]:
        """``{intent_hash, status, tx_hash?, reason?, ...}``: absent fields left out."""
        out: dict[str, Any] = {"intent_hash": self.intent_hash, "status": self.status}
        for name in ("tx_hash", "reason", "deadline", "signed_data", "simulation"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


# ------------------------------------------------------------------------------ signing


@dataclass(frozen=True, slots=True)
class SignedOperation:
    """A signed item and what the follow-up needs to know about it."""

    item: Nep413Signed
    intent_hash: str
    signer_id: str
    nonce: bytes
    deadline: datetime

    def wire(self) -> dict[str, Any]:
        return self.item.model_dump(mode="json", exclude_none=True)


async def sign_operation(
    ledger: LedgerClient,
    key: SecretKey | MessageSigner,
    *,
    signer_id: str,
    intents: list[BaseModel],
    deadline_s: float = DEFAULT_DEADLINE_S,
    layout: NonceLayout = "salted",
    now: datetime | None = None,
    register: Callable[[str, bytes, datetime], None] | None = None,
) -> SignedOperation:
    """Sign ``intents`` for ``signer_id`` (nep413) with the ledger's current salt (spec 5.3).

    ``register(signer_id, nonce, now)``: record the nonce durably before it is signed, and
    raise if it was recorded before (the rebalancer's deposits:
    :meth:`solver.io.store.sqlite_store.Store.register_nonce`): a nonce is never signed twice,
    whatever the random source does.

    ``key``: the account's key in process, or a :class:`MessageSigner` (the signer process,
    whose policy may refuse the intents: a ``RemoteError`` naming the rule)."""
    if not 0 < deadline_s <= MAX_DEADLINE_S:
        raise ConfigError(f"deadline must be within (0, {MAX_DEADLINE_S:g}] seconds")
    salt = await ledger.current_salt()
    moment = (now or datetime.now(UTC)) + timedelta(seconds=deadline_s)
    deadline = moment.replace(microsecond=moment.microsecond // 1000 * 1000)  # the signed ms
    nonce = new_nonce(layout, salt, deadline)
    if register is not None:
        register(signer_id, nonce, now or datetime.now(UTC))
    signer = InProcessMessageSigner(key) if isinstance(key, SecretKey) else key
    message = serialize_message(signer_id, deadline, intents)
    recipient = ledger.verifier_contract
    public_key, signature = await signer.sign_message(message, nonce, recipient)
    item = Nep413Signed(
        payload=Nep413Payload(message=message, nonce=b64encode(nonce), recipient=recipient),
        public_key=public_key,
        signature=format_signature(signature),
    )
    return SignedOperation(item, b58encode(intent_hash(item)), signer_id, nonce, deadline)


# ------------------------------------------------------------------------------ simulating


async def simulate_operation(ledger: LedgerClient, op: SignedOperation) -> OperationResult:
    """Dry-run the item with ``simulate_intents``; nothing is published or changed."""
    signed = op.wire()
    try:
        simulation = await ledger.simulate_intents([signed])
    except RemoteError as exc:
        return OperationResult(
            op.intent_hash,
            SIMULATION_FAILED,
            reason=exc.reason,
            deadline=format_deadline(op.deadline),
            signed_data=signed,
        )
    violated = simulation.get("invariant_violated")
    return OperationResult(
        op.intent_hash,
        SIMULATION_FAILED if violated else SIMULATED,
        reason=f"invariant violated: {violated}" if violated else None,
        deadline=format_deadline(op.deadline),
        signed_data=signed,
        simulation=simulation,
    )


async def _simulation_reason(ledger: LedgerClient, op: SignedOperation) -> str | None:
    """Why the verifier would refuse the item now (its text), or None if it would not."""
    try:
        result = await ledger.simulate_intents([op.wire()])
    except RemoteError as exc:
        return exc.reason
    except (TransportError, ProtocolError):
        return None
    violated = result.get("invariant_violated")
    return f"invariant violated: {violated}" if violated else None


async def _nonce_used(ledger: LedgerClient, op: SignedOperation) -> bool:
    try:
        return await ledger.is_nonce_used(op.signer_id, op.nonce)
    except (TransportError, RemoteError, ProtocolError):
        return False


# ------------------------------------------------------------------------------ publishing


async def publish_operation(
    bus: BusRpcClient,
    ledger: LedgerClient,
    op: SignedOperation,
    *,
    wait_s: float = DEFAULT_WAIT_S,
    poll_s: float = 0.1,
    max_poll_s: float = 1.0,
) -> OperationResult:
    """Publish the item alone (``quote_hashes`` empty) and follow it to a final status.

    The wait is bounded by ``wait_s``; polling starts every ``poll_s`` and slows to
    ``max_poll_s``. A transport failure while publishing does not prove the bus never got the
    item, so the status of its (locally computed) hash is followed all the same.
    """
    if not 0 < wait_s <= MAX_WAIT_S:
        raise ConfigError(f"wait must be within (0, {MAX_WAIT_S:g}] seconds")
    deadline_text = format_deadline(op.deadline)
    started = time.monotonic()
    publish_error: str | None = None
    try:
        published = await bus.publish_intent([], op.item)
    except TransportError as exc:
        publish_error = f"publish_intent got no answer ({exc})"
    except RemoteError as exc:  # a JSON-RPC error: the bus did not take it
        return OperationResult(op.intent_hash, FAILED, reason=exc.reason, deadline=deadline_text)
    else:
        hash_text = published.intent_hash or op.intent_hash
        if published.status == PublishStatus.FAILED:
            return OperationResult(
                hash_text, FAILED, reason=published.reason or "refused", deadline=deadline_text
            )
        if hash_text != op.intent_hash:
            raise ProtocolError(
                f"bus publish_intent: intent_hash {hash_text} differs from the signed item's "
                f"{op.intent_hash}"
            )

    status: str | None = None
    tx_hash: str | None = None
    seen_other = False
    delay = poll_s
    while True:
        try:
            answer = await bus.get_status(op.intent_hash)
        except (TransportError, RemoteError, ProtocolError):
            answer = None  # keep following until the wait ends; the ledger is asked last
        if answer is not None:
            status = answer.status.value
            if answer.data is not None:
                tx_hash = answer.data.hash
            if status == SETTLED:
                return OperationResult(op.intent_hash, SETTLED, tx_hash, deadline=deadline_text)
            if status == NOT_FOUND:
                early = time.monotonic() - started < NOT_FOUND_GRACE_S
                if seen_other or not early or publish_error is not None:
                    break
            else:
                seen_other = True
        if time.monotonic() - started >= wait_s:
            break
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, max_poll_s)

    # The ledger is the truth: a used nonce means the item executed.
    if await _nonce_used(ledger, op):
        return OperationResult(op.intent_hash, SETTLED, tx_hash, deadline=deadline_text)
    if status == NOT_FOUND:
        why = await _simulation_reason(ledger, op)
        if publish_error is not None:
            reason = publish_error
        elif why is not None:
            reason = f"not executed; the verifier now says: {why}"
        else:
            reason = "not executed (the bus reports it not found, expired or failed)"
        return OperationResult(op.intent_hash, NOT_FOUND, tx_hash, reason, deadline_text)
    reason = (
        f"no final status after {wait_s:g} s; it may still execute until its deadline "
        f"{deadline_text}: check its status before sending it again"
    )
    if publish_error is not None:
        reason = f"{publish_error}; {reason}"
    return OperationResult(op.intent_hash, status or UNKNOWN, tx_hash, reason, deadline_text)


# ------------------------------------------------------------------------------ one call


@dataclass
class OperatorClients:
    """The ledger and bus clients of one configuration, sharing one HTTP client."""

    config: BotConfig
    http: httpx.AsyncClient
    ledger: LedgerClient
    bus: BusRpcClient

    @classmethod
    def open(cls, config: BotConfig) -> OperatorClients:
        timeout_s = config.chain.timeout_ms / 1000
        api_key = os.environ.get(config.bus.api_key_env) if config.bus.api_key_env else None
        http = httpx.AsyncClient(timeout=timeout_s)
        ledger = LedgerClient(
            str(config.chain.rpc_url), config.verifier_contract, client=http, timeout_s=timeout_s
        )
        bus = BusRpcClient(
            str(config.bus.rpc_url),
            api_key=api_key,
            asset_field_prefix=config.bus.asset_field_prefix,
            client=http,
        )
        return cls(config, http, ledger, bus)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> OperatorClients:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def run_operation(
    config: BotConfig,
    key: SecretKey | MessageSigner,
    intents: list[BaseModel],
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
    wait_s: float = DEFAULT_WAIT_S,
    dry_run: bool = False,
    poll_s: float = 0.1,
) -> OperationResult:
    """Sign ``intents`` as ``config.account.id`` and publish them (or, dry, simulate them)."""
    async with OperatorClients.open(config) as clients:
        op = await sign_operation(
            clients.ledger,
            key,
            signer_id=config.account.id,
            intents=intents,
            deadline_s=deadline_s,
            layout=config.nonce.layout,
        )
        if dry_run:
            return await simulate_operation(clients.ledger, op)
        return await publish_operation(
            clients.bus, clients.ledger, op, wait_s=wait_s, poll_s=poll_s
        )


async def public_keys(config: BotConfig, account_id: str | None = None) -> list[str]:
    """The keys that may sign for the account (``public_keys_of``)."""
    async with OperatorClients.open(config) as clients:
        return await clients.ledger.public_keys_of(account_id or config.account.id)
