"""What the desk is told (DESIGN "The shape"): every input of a decision, as a plain value.

A driver turns sockets, RPC answers and timers into these and hands them to
:meth:`solver.core.desk.Desk.receive` with the time; the desk never reads a clock or a socket.
Market inputs (prices, salt, fee) are events too, so the backtest feeds the desk exactly as the
live bot does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from solver.core.clock import Micros
from solver.core.inventory import Reservation
from solver.core.market import QuoteRequest
from solver.core.rebalance_record import RebalanceRecord
from solver.protocol.values import value


@value
class QuoteNotSent:
    """The answer never left (signing failed, no connection, or its record failed): nobody can
    use it. ``store_error`` marks a failed durable record, which pauses quoting."""

    quote_id: str
    reason: str
    store_error: bool = False


@value
class StoreWorks:
    """The store committed again after failing, with every fact it had refused now in it: a
    ``store_error`` pause has lost its cause (issue 24: a storage fault needs no operator)."""

    detail: str


@value
class RelayReplied:
    """The relay's reply to a ``quote_response``: ``OK``, or an explicit error (its reason)."""

    quote_id: str
    ok: bool
    reason: str | None = None


@value
class ConnectionLost:
    """The bus connection dropped: ``quote_status`` events may be missed from now on."""


@value
class ConnectionRestored:
    """Connected and subscribed again."""


@value
class QuoteStatusSeen:
    """A ``quote_status`` event: the quote ``quote_hash`` was named by ``intent_hash``."""

    quote_hash: str
    intent_hash: str
    tx_hash: str | None = None


@value
class IntentStatusSeen:
    """A ``get_status`` answer (spec 3.2), or ``status=None`` when the poll failed."""

    intent_hash: str
    status: str | None
    tx_hash: str | None = None


@value
class NonceChecked:
    """``is_nonce_used`` for an open quote past its deadline; ``used=None``: the check failed."""

    quote_id: str
    used: bool | None


@value
class BalancesSeen:
    """An on-chain snapshot, ``observed`` before it was requested (so it includes all up to
    then). ``own_open`` and ``own_settling``: moves of our own outside the quote book (the
    rebalancer's) that may be half done in the snapshot."""

    balances: Mapping[str, int]
    observed: Micros
    own_open: tuple[Reservation, ...] = ()
    own_settling: bool = False


@value
class PriceSeen:
    """A reference price from one source (``prices.sources[i]``'s name): the desk combines the
    fresh sources of an asset by median, with a divergence guard (:mod:`solver.core.state`)."""

    asset: str
    usd: float
    observed: Micros
    source: str = ""


@value
class RebalanceStarting:
    """The rebalancer asks to start ``record`` (PLANNED): hold its input and stop quoting its
    route until it ends (:mod:`solver.core.rebalancing`); ``detail`` describes the plan.
    Also how a deposit in flight from a store older than these facts gets its input held."""

    record: RebalanceRecord = dataclasses.field(hash=False)
    deadline: Micros
    detail: str | None = None


@value
class RebalanceStepping:
    """A rebalance took a step: ``record`` as it is now (its deposit executed: DEPOSITED; it
    ended: a terminal state), ``detail`` what the step did."""

    record: RebalanceRecord = dataclasses.field(hash=False)
    detail: str | None = None


@value
class SaltSeen:
    salt: bytes
    observed: Micros


@value
class FeeSeen:
    fee_pips: int


@value
class OwnFlowSettled:
    """A settled move of our own outside the quote book (a rebalance's deposit or output)."""

    key: str
    asset_in: str
    amount_in: int
    asset_out: str
    outflow: int


@value
class OperatorPause:
    """``solver pause [--pair BASE/QUOTE]``: ``pair`` None pauses everything."""

    pair: str | None
    reason: str


@value
class OperatorResume:
    """``solver resume [--pair] [--accept-balances]``.

    ``accept_balances``: the operator moved funds on purpose; the last snapshot becomes the new
    reconciliation baseline and the move is not counted as profit or loss."""

    pair: str | None
    accept_balances: bool = False


@value
class ShutdownStarted:
    """Stop quoting: the process is about to exit (the journal keeps what is open)."""


Event = (
    QuoteRequest
    | QuoteNotSent
    | StoreWorks
    | RelayReplied
    | ConnectionLost
    | ConnectionRestored
    | QuoteStatusSeen
    | IntentStatusSeen
    | NonceChecked
    | BalancesSeen
    | PriceSeen
    | SaltSeen
    | FeeSeen
    | OwnFlowSettled
    | OperatorPause
    | OperatorResume
    | ShutdownStarted
    | RebalanceStarting
    | RebalanceStepping
)
"""Every event of the desk. A bus ``quote`` (protocol-notes 6) is the
:class:`~solver.core.market.QuoteRequest` itself: no wrapper is built per request, and nothing
says when it arrived (the bot decides in the loop turn it reads the request)."""
