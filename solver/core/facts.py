"""What the desk remembers: every change of its state, as a fact to journal (DESIGN
"Persistence is the desk's journal").

The desk decides, writes down what it decided as facts, and changes its state only by applying
facts (:meth:`solver.core.desk.Desk.apply`). The driver appends each fact to the journal before
any answer it caused leaves; on start, applying the journal's facts in order (after the latest
snapshot) rebuilds the desk exactly: open quotes and their claims, reservations, expected
balances, PnL baseline, peak, daily loss and every pause with its reason.

Facts carry what a decision used that is not in the journal (the prices of a fill), so applying
them needs no market input and gives the same state every time. :data:`KINDS` names each fact
in the journal; :mod:`solver.core.fact_codec` writes them as JSON and reads them back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from solver.core.clock import Micros, micros
from solver.core.rebalance_record import RebalanceRecord
from solver.protocol.values import value

if TYPE_CHECKING:
    from solver.core.lifecycle import Quote


@value
class QuoteOpened:
    quote_id: str
    quote_hash: str
    asset_in: str
    asset_out: str
    amount_in: int
    amount_out: int
    fee: int
    deadline: Micros
    nonce: bytes
    created_at: Micros
    exact_in: bool
    partner_id: str | None = None
    signed_data: Mapping[str, Any] | None = dataclasses.field(
        default=None, compare=False, hash=False, repr=False
    )
    """The answer as signed (kept for disputes): written with the fact, in the same journal
    entry; not read back into the desk (:func:`decode` leaves it None: a restart needs none of
    it, and the query tables take it from the entry itself)."""


def opened_fact(quote: Quote, signed_data: Mapping[str, Any] | None) -> QuoteOpened:
    """The ``QuoteOpened`` of an answer :meth:`QuoteLifecycle.signed
    <solver.core.desk_quotes.QuoteLifecycle.signed>` opened: what the journal writes (the row a
    restart applies with ``QuoteLifecycle._apply_opened``) and the observers hear. Beside the
    fact it builds, so the executor needs the facts only, not the desk's part (issue 29)."""
    q = quote
    return QuoteOpened(
        q.quote_id, q.quote_hash, q.asset_in, q.asset_out, q.amount_in, q.amount_out, q.fee,
        q.deadline, q.nonce, q.created_at, q.exact_in, q.partner_id, signed_data,
    )  # fmt: skip


@value
class FillPrices:
    """Reference prices (USD per whole unit) at settlement, and the edge they give."""

    price_in: float
    price_out: float
    realized_usd: float


@value
class QuoteMoved:
    quote_id: str
    new: str  # a QuoteState value
    at: Micros
    reason: str | None = None
    intent_hash: str | None = None
    tx_hash: str | None = None
    fill: FillPrices | None = None  # SETTLED with prices known


@value
class QuotesLost:
    """Quotes past their deadline that nobody named while the bot stayed connected: LOST, one
    fact per tick for all of them (most answers end so; one entry each would cost the quote
    path a journal row per answer again)."""

    quote_ids: tuple[str, ...]
    at: Micros
    reason: str


@value
class ClaimAdded:
    quote_id: str
    intent_hash: str
    tx_hash: str | None
    at: Micros


@value
class ClaimEnded:
    quote_id: str
    intent_hash: str
    status: str
    at: Micros


@value
class BalancesReconciled:
    """A snapshot taken in: the inventory's confirmed balances and the reconciliation."""

    observed: Micros
    balances: dict[str, int]
    own_open: tuple[tuple[str, str, int, str, int], ...] = ()  # (key, out, amount, in, amount)
    own_settling: bool = False
    expected: dict[str, int] | None = None  # what the bookkeeping expected (for people)
    held: bool = False
    """A gap it shows is held, not absorbed: its explanation is being looked for (issue 24).
    Journals written before have none: their gaps were absorbed at once, as they still are."""


@value
class OwnFlow:
    key: str
    asset_in: str
    amount_in: int
    asset_out: str
    outflow: int
    at: Micros


@value
class PnlMarked:
    """The PnL references that must survive a restart: starting equity, peak, day start."""

    at: Micros
    start_equity: float
    peak_pnl: float
    day: str
    day_start_pnl: float


@value
class Markout:
    quote_id: str
    horizon_s: int
    value_usd: float
    at: Micros


@value
class PauseSet:
    scope: str
    kind: str
    reason: str
    at: Micros


@value
class PauseCleared:
    scope: str
    kind: str
    at: Micros
    by: str  # operator | recovered


@value
class BaselineAccepted:
    """The operator acknowledged the balances after a deliberate move."""

    at: Micros
    balances: dict[str, int]
    difference: dict[str, int]  # accepted − expected before, per asset
    equity_shift_usd: float  # taken out of the PnL baseline: a deposit is not a profit


@value
class BaselineCorrected:
    """Settlements the accepted baseline's snapshot already held, counted again when they
    were heard of (issue 24): ``adjustment`` takes them out of the expected balances, and
    ``equity_shift_usd`` out of the PnL baseline the accept moved by them."""

    at: Micros
    adjustment: dict[str, int]
    quote_ids: tuple[str, ...]
    equity_shift_usd: float


@value
class RebalanceStarted:
    """A rebalance holds ``amount_in`` of ``asset_in`` and pauses ``route``."""

    rebalance_id: str
    route: str
    asset_in: str
    amount_in: int
    asset_out: str
    deadline: Micros
    at: Micros


@value
class RebalanceDeposited:
    """The rebalance's deposit executed: its reservation is settled."""

    rebalance_id: str
    at: Micros


@value
class RebalanceEnded:
    """The rebalance ended: its reservation released, its pause lifted."""

    rebalance_id: str
    route: str
    outcome: str
    at: Micros


@value
class RebalanceStepped:
    """A rebalance took a step: ``record`` as it is now, ``detail`` what the step did (the
    ``rebalance_steps`` row). The desk holds the records not finished yet, so a restart takes
    them up from the journal. ``carried``: an older store's unfinished row, brought into the
    journal by migration 10 (its step row exists already: the projection adds none)."""

    record: RebalanceRecord = dataclasses.field(hash=False)
    detail: str | None = None
    carried: bool = False

    @property
    def at(self) -> Micros:
        return micros(self.record.updated_at)


Fact = (
    QuoteOpened
    | QuoteMoved
    | QuotesLost
    | ClaimAdded
    | ClaimEnded
    | BalancesReconciled
    | OwnFlow
    | PnlMarked
    | Markout
    | PauseSet
    | PauseCleared
    | BaselineAccepted
    | BaselineCorrected
    | RebalanceStarted
    | RebalanceDeposited
    | RebalanceEnded
    | RebalanceStepped
)

KINDS: dict[str, type[Any]] = {
    "quote_opened": QuoteOpened,
    "quote_moved": QuoteMoved,
    "quotes_lost": QuotesLost,
    "claim_added": ClaimAdded,
    "claim_ended": ClaimEnded,
    "balances": BalancesReconciled,
    "own_flow": OwnFlow,
    "pnl": PnlMarked,
    "markout": Markout,
    "pause_set": PauseSet,
    "pause_cleared": PauseCleared,
    "baseline_accepted": BaselineAccepted,
    "baseline_corrected": BaselineCorrected,
    "rebalance_started": RebalanceStarted,
    "rebalance_deposited": RebalanceDeposited,
    "rebalance_ended": RebalanceEnded,
    "rebalance_stepped": RebalanceStepped,
}
KIND_OF: dict[type[Any], str] = {cls: kind for kind, cls in KINDS.items()}


def kind_of(fact: Fact) -> str:
    return KIND_OF[type(fact)]
