"""The desk: every decision the bot makes, in one sans-I/O state machine (DESIGN "The shape").

Modelled on python-websockets' ``Protocol``: the desk is fed events with the time and read for
actions; it owns no socket, no clock and no task. It is the only owner of the quote book and each
quote's lifecycle, the reservations, the expected balances and the reconciliation, PnL and risk,
the rebalancer's hold, and every pause (one writer; a pause has a scope and a reason). The live
driver and the backtest run it through the same executor (:mod:`solver.runtime.executor`), so
they cannot drift.

It is composed of parts by role, each with its own event handlers and fact appliers, over the
state they share (the inventory, the pauses, the market state, the PnL book):

- :class:`~solver.core.desk_quotes.QuoteLifecycle` — the quote path, the book, the relay's
  replies, deadlines and the quotes lost past them;
- :class:`~solver.core.desk_settlement.Settlement` — claims and their polls, statuses, nonce
  checks, and every move of a quote's state with what it settles;
- :class:`~solver.core.desk_risk.RiskDesk` — balance snapshots and the reconciliation, the kill
  switch, pauses and the operator's commands;
- :class:`~solver.core.desk_gaps.GapDesk` — a gap's explanation before any pause: the
  accepted baseline's doubts, nonce checks of quotes closed without one, fills found late;
- :class:`~solver.core.desk_pnl.PnlMarks` — PnL marked to market, markouts;
- :class:`~solver.core.desk_market.MarketInputs` — prices (with their sources), salt, fee;
- :class:`~solver.core.rebalancing.Rebalancing` — the rebalancer's reservation and pause.

Every change of state is a fact (:mod:`solver.core.facts`): handlers decide, write the facts
down as :class:`~solver.core.actions.Record` actions, and change state only through
:meth:`Desk.apply` — the same code that rebuilds the desk from the journal after a restart.
Market inputs (prices, salt, fee) and the quote path's rate limiter are not journaled: they are
refreshed at start.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, Record
from solver.core.clock import Micros
from solver.core.desk_gaps import GapDesk
from solver.core.desk_market import MarketInputs
from solver.core.desk_pnl import PnlMarks
from solver.core.desk_quotes import QuoteLifecycle
from solver.core.desk_risk import RiskDesk
from solver.core.desk_settlement import Settlement
from solver.core.inventory import Inventory
from solver.core.lifecycle import Quote, QuoteBook
from solver.core.pair_stats import PairBook, PairStats
from solver.core.pauses import Pauses
from solver.core.pnl import MARKOUT_HORIZONS_S, PnlBook
from solver.core.quoting import PipelineSettings, QuotePipeline, Route
from solver.core.readable import Readable
from solver.core.rebalancing import Rebalancing
from solver.core.reconciliation import Reconciliation
from solver.core.risk import RiskLimits
from solver.core.state import MarketState

__all__ = ["Desk", "DeskSettings", "DeskStats"]


@dataclass(frozen=True)
class DeskSettings:
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    limits: RiskLimits = field(default_factory=lambda: RiskLimits(1e12, 1e12, {}))
    kill_switch: bool = True
    shadow: bool = False
    deadline_grace_s: float = 2.0
    """A transaction included just before the deadline must reach finality before its nonce
    tells the truth."""
    claim_timeout_s: float = 60.0
    """A claim still pending this long after the deadline no longer holds back the nonce check."""
    nonce_retry_s: float = 5.0
    poll_initial_s: float = 0.1
    poll_max_s: float = 5.0
    pnl_record_every_s: float = 1.0
    markout_horizons_s: tuple[int, ...] = MARKOUT_HORIZONS_S
    history_size: int = 512
    explain_window_s: float = 600.0
    """Quotes closed LOST without a nonce check stay candidates of a gap's explanation this
    long (issue 24: a relay may lose a ``quote_status`` while the bot is connected)."""
    explain_max_checks: int = 256
    """At most this many nonce checks for one gap; more candidates pause at once, saying so."""
    hold_max_s: float = 30.0
    """A gap held while its explanation is looked for pauses after this long."""


@dataclass
class DeskStats:
    requests: int = 0
    shadow_quotes: int = 0
    rejected: int = 0
    stray_statuses: int = 0
    duplicate_statuses: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    pairs: dict[str, PairStats] = field(default_factory=dict)
    """Per configured pair (``wNEAR/USDC``): see :mod:`solver.core.pair_stats`."""


class Desk:
    """``routes``: the pairs quoted; ``pairs``: the configured ``(base, quote)`` pairs, which
    name the per-pair stats; ``timer``: the strategy budget's clock (the replay's returns 0)."""

    def __init__(
        self,
        settings: DeskSettings,
        routes: Mapping[tuple[str, str], Route],
        decimals: Mapping[str, int],
        *,
        floors: Mapping[str, int] | None = None,
        symbols: Mapping[str, str] | None = None,
        pairs: Iterable[tuple[str, str]] = (),
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self.limits = settings.limits
        # What the parts share.
        self.state = MarketState(decimals=dict(decimals), history_size=settings.history_size)
        self.inventory = Inventory(floors=dict(floors or {}))
        self.pauses = Pauses()
        self.pipeline = QuotePipeline(
            settings.pipeline, routes, self.inventory, self.state, self.pauses, timer=timer
        )
        self.book = QuoteBook()
        self.pnl = PnlBook(decimals, settings.markout_horizons_s)
        self.balances = Reconciliation(settings.limits)
        self.symbols = dict(symbols or {})
        self.readable = Readable(self.symbols, self.state.decimals)  # amounts for people
        self.stats = DeskStats()
        self.pair_book = PairBook(pairs, routes, self.symbols)
        self.stats.pairs = self.pair_book.stats
        # The last fills, for people (the fill log line, status): display only, never decided on.
        self.recent_fills: deque[tuple[Quote, f.FillPrices | None]] = deque(maxlen=64)
        # The parts, by role.
        self.market = MarketInputs(self.state)
        self.pnl_marks = PnlMarks(self)
        self.gaps = GapDesk(self)
        self.risk = RiskDesk(self)
        self.quotes = QuoteLifecycle(self)
        self.settlement = Settlement(self)
        self.rebalancing = Rebalancing(self.inventory, self.pauses)
        parts = (
            self.quotes, self.settlement, self.risk, self.pnl_marks, self.market,
            self.rebalancing,
        )  # fmt: skip
        self._handlers: dict[type, Callable[[Any, Micros], list[Action]]] = {}
        self._appliers: dict[type, Callable[[Any], None]] = dict(self.gaps.appliers())
        for part in parts:
            self._handlers.update(part.handlers())
            self._appliers.update(part.appliers())
        self.signed = self.quotes.signed
        """The quote path's way back from the signer: ``signed(quote, quote_hash, nonce,
        now)`` opens the answer's quote as its ``QuoteOpened`` would, which the executor
        builds for the journal (:meth:`QuoteLifecycle.signed`,
        :func:`~solver.core.facts.opened_fact`; the part's method itself, no call
        between)."""
        self.decide = self.quotes.decide
        """The quote path's decision: ``decide(request, now)`` is the one action a request
        gets, as :meth:`receive` of the request would list it (:meth:`QuoteLifecycle.decide`;
        no handler lookup or list per request, issue 29)."""

    # ------------------------------------------------------------------ the interface

    def receive(self, event: ev.Event, now: Micros) -> list[Action]:
        """Take in one event at ``now``; what the driver must do, in order."""
        return self._handlers[type(event)](event, now)

    def tick(self, now: Micros) -> list[Action]:
        """What is due at ``now``: intent polls, deadline checks, markouts, PnL and the kill
        switch. The live driver calls it every 20 ms; the backtest at its own times."""
        actions: list[Action] = []
        self.settlement.due(now, actions)
        self.quotes.due(now, actions)
        self.gaps.due(now, actions)
        self.pnl_marks.markouts(now, actions)
        self.risk.mark(now, actions)
        return actions

    def apply(self, fact: f.Fact) -> None:
        """Change state by one fact: live, as it is decided; on start, from the journal."""
        self._appliers[type(fact)](fact)

    def record(self, fact: f.Fact, actions: list[Action]) -> None:
        """Apply ``fact`` and ask for it to be journaled (the parts' one way to change state)."""
        self.apply(fact)
        actions.append(Record(fact))

    # ------------------------------------------------------------------ reading

    def price(self, asset: str) -> float | None:
        ref = self.state.prices.get(asset)  # inline: the markouts and fills call it often
        return ref.usd if ref is not None else None

    def risk_paused(self) -> bool:
        return self.risk.paused()
