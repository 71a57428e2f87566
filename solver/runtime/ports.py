"""The executor's ports: what carrying out the desk's actions needs of the world (DESIGN "The
shape"; STYLE 12).

Each port is a small :class:`typing.Protocol` named for what it does. The live driver gives the
:class:`~solver.runtime.executor.Executor` real ports (``solver/io/``: the signer, the SQLite
journal, the bus websocket, the bus and ledger RPC clients, the notifier, the event loop); the
backtest gives it simulated ones (``backtest/ports.py``: a relay with fill and taker models, a
sandbox ledger, a simulated clock). The executor is the same object in both, so the handling of
every action and every failure is shared and cannot drift.

A port that asks the world something (``get_status``, ``is_nonce_used``) takes a ``reply``
callback: it starts the work and its answer comes back later as a desk event through ``reply``
(live: when the socket answers, from a task; backtest: at simulated time, or at once). A port
that refreshes an input (balances, salt) reports through the driver in the same way, as
``BalancesSeen`` / ``SaltSeen``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from solver.core import events as ev
from solver.core.actions import Alert, PauseChanged
from solver.core.clock import Micros
from solver.core.facts import Fact
from solver.core.lifecycle import Quote
from solver.protocol.quote_signing import SignedQuote

Reply = Callable[[ev.Event], object]
"""How a port's answer reaches the desk: the executor's ``feed``."""


class Signer(Protocol):
    """Signs a quote's ``token_diff`` under ``nonce`` (spec 5.3; NEP-413):
    :class:`~solver.protocol.quote_signing.QuoteSigner` in process."""

    def sign(
        self,
        *,
        deadline: Micros,
        nonce: bytes,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        amount_out: int,
    ) -> SignedQuote:
        """The signed answer, or raise a :class:`~solver.errors.SolverError` (not signed)."""


class DeferredSigner(Protocol):
    """A signer in another process (:class:`~solver.signer.client.RemoteQuoteSigner`): the
    answer comes later through ``reply``, a :class:`SignedQuote` or the reason it was not signed
    (``signer_busy``, ``signer_down``, ``signer_refused:<rule>``); the loop never waits for it.
    ``deferred`` is True (how the executor tells it from a :class:`Signer`)."""

    deferred: bool

    def sign_later(
        self,
        *,
        quote_id: str,
        deadline: Micros,
        nonce: bytes,
        asset_in: str,
        amount_in: int,
        asset_out: str,
        amount_out: int,
        reply: Callable[[SignedQuote | str], None],
    ) -> None: ...


class MessageSigner(Protocol):
    """Signs any other NEP-413 message (operator intents, the rebalancer's deposits): in process
    (:class:`~solver.signer.local.InProcessMessageSigner`) or through the signer process, whose
    policy may refuse it (:class:`~solver.signer.client.RemoteIntentSigner`)."""

    async def sign_message(self, message: str, nonce: bytes, recipient: str) -> tuple[str, bytes]:
        """``(public key text, 64-byte signature)``, or raise a ``SolverError``."""

    async def public_key(self) -> str:
        """The signing key's public half, ``ed25519:…``."""


class NonceSource(Protocol):
    """A fresh nonce for each quote (spec 5.3; protocol-notes 3)."""

    def next(self, salt: bytes, deadline: Micros) -> bytes: ...


class Journal(Protocol):
    """The desk's journal: facts appended, then made durable by one commit per loop turn."""

    def append(self, fact: Fact) -> None:
        """Add ``fact`` to the open transaction, or raise a ``SolverError``."""

    def commit(self) -> None:
        """Make every appended fact durable, or raise a ``SolverError`` (none of them is)."""


class Sender(Protocol):
    """Where answers go: the relay (live: the bus websocket)."""

    def send_answer(self, quote: Quote, signed: SignedQuote) -> None:
        """Send the ``quote_response`` now, or raise a ``SolverError`` (not sent)."""

    def corked(self) -> AbstractContextManager[None]:
        """Answers sent inside the block may leave together at its end (one write)."""


class StatusSource(Protocol):
    """``get_status`` of an intent (spec 3.3): answers ``IntentStatusSeen`` through ``reply``
    (its status None when the question failed)."""

    def get_status(self, intent_hash: str, reply: Reply) -> None: ...


class NonceOracle(Protocol):
    """The verifier's ``is_nonce_used`` (spec 2.13): answers ``NonceChecked`` through ``reply``
    (``used`` None when the question failed)."""

    def is_nonce_used(self, quote_id: str, nonce: bytes, reply: Reply) -> None: ...


class Refresher(Protocol):
    """An input to fetch now rather than at its next period (balances, salt); the answer
    reaches the desk as its usual event (``BalancesSeen``, ``SaltSeen``)."""

    def refresh_now(self) -> None: ...


class Refresh:
    """A :class:`Refresher` over a driver's own step (live: the balance job's trigger, the
    salt's fetch; backtest: the ledger's balances and salt at simulated time)."""

    __slots__ = ("refresh_now",)

    def __init__(self, step: Callable[[], None]) -> None:
        self.refresh_now = step


class AlertSink(Protocol):
    """Telling people: alerts and pause changes."""

    def alert(self, alert: Alert, now: Micros) -> None: ...

    def pause_changed(self, change: PauseChanged) -> None: ...


class QuoteMetrics(Protocol):
    """What the quote path counts and times (live: Prometheus). Answers sent are not counted
    here: the executor's outbox's ``sent_by_pair`` is their one count, which the metrics read."""

    def pair_label(self, asset_in: str, asset_out: str) -> str: ...

    def inc_request(self, pair: str) -> None: ...

    def observe_decision(self, seconds: float) -> None: ...

    def inc_skip(self, reason: str, pair: str) -> None: ...

    def count_quotes_from(self, sent: Mapping[str, int]) -> None:
        """Show ``sent`` (the outbox's live ``pair -> answers sent``) as the quotes sent."""

    def observe_response(self, seconds: float) -> None: ...


class LoopTurn(Protocol):
    """When deferred work runs: the group commit at the end of this loop turn (``call_soon``)
    and a retry of a failed commit (``call_later``)."""

    def call_soon(self, callback: Callable[[], None]) -> None: ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class Ports:
    """Everything the executor talks to. ``journal`` None: nothing is journaled (shadow mode,
    a backtest that keeps no journal)."""

    signer: Signer | DeferredSigner
    nonces: NonceSource
    journal: Journal | None
    sender: Sender
    statuses: StatusSource
    nonce_oracle: NonceOracle
    balances: Refresher
    salt: Refresher
    alerts: AlertSink
    metrics: QuoteMetrics | None
    """None: nothing counted or timed (a backtest measures itself)."""
    loop: LoopTurn
    clock: Callable[[], Micros]
    shadow: Callable[[Quote, Micros], None] | None = None
    """Shadow mode's paper book: whether a simulated user takes a quote never sent."""
