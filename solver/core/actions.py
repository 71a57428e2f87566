"""What the desk asks its driver to do (DESIGN "The shape").

The live driver carries these out with sockets, the signer, the journal and RPC calls, and
reports back with events; the backtest driver carries them out against a simulated ledger.
A :class:`~solver.core.quoting.Skip` is an action too (the request ends with that reason), and
so is a :class:`~solver.core.lifecycle.Quote`: sign it under a fresh nonce with its ``salt``,
hand the signature to :attr:`Desk.signed <solver.core.desk.Desk.signed>`, make its
``QuoteOpened`` durable (:func:`~solver.core.facts.opened_fact`), then send the answer
(issue 29: the decision's record is the action, no wrapper built per answer).
"""

from __future__ import annotations

from solver.core.facts import Fact
from solver.core.lifecycle import Quote
from solver.core.pauses import Pause
from solver.core.quoting import Skip
from solver.protocol.values import value


@value
class ShadowQuote:
    """Shadow mode: this quote would have been signed and sent; nothing was reserved."""

    quote: Quote


@value
class Record:
    """Append ``fact`` to the journal (durable before any answer sent after it)."""

    fact: Fact


@value
class PollIntent:
    """Ask ``get_status`` of ``intent_hash``; answer with ``IntentStatusSeen``."""

    intent_hash: str


@value
class CheckNonce:
    """Ask the verifier ``is_nonce_used``; answer with ``NonceChecked``."""

    quote_id: str
    nonce: bytes


@value
class RefreshBalances:
    """Take a balance snapshot now (a settlement moved them)."""


@value
class RefreshSalt:
    """The relay refused an answer for its salt: fetch the salt again now."""


@value
class Alert:
    """Tell a person: ``kind`` (daily_loss, drawdown, reconciliation, stale_data, store_error,
    ...) with ``detail``; ``resolved`` when the condition has cleared."""

    kind: str
    detail: str
    resolved: bool = False


@value
class PauseChanged:
    """A pause began (``active``) or ended."""

    pause: Pause
    active: bool


@value
class OperatorReply:
    """The answer to an operator command: ``ok`` only when it did what was asked; otherwise
    ``message`` says why (for instance which pauses still hold after a resume)."""

    ok: bool
    message: str
    still_paused: tuple[str, ...] = ()


Action = (
    Skip
    | Quote
    | ShadowQuote
    | Record
    | PollIntent
    | CheckNonce
    | RefreshBalances
    | RefreshSalt
    | Alert
    | PauseChanged
    | OperatorReply
)

Decision = Skip | Quote | ShadowQuote
"""A request's one action (:meth:`Desk.decide <solver.core.desk.Desk.decide>`)."""
