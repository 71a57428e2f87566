"""Explaining a balance gap before pausing on it (DESIGN "Reconciliation explains before it
pauses"; issue 24).

A snapshot that lies outside what the expected balances and the open quotes allow is not
believed at once. Its gap first looks for an explanation, in this order:

1. **The accepted baseline's doubts** (:class:`~solver.core.reconciliation.Doubt`): settlements
   heard after the accepted snapshot was requested, of quotes that existed then. If taking a
   set of them out makes the snapshot fit, the baseline had counted them twice: a
   ``BaselineCorrected`` fact takes them out (no pause, no second accept).
2. **Missed statuses**: quotes closed LOST without asking the verifier (nobody named them while
   the bot was connected) in the last ``explain_window_s``, whose flows point the way of the
   gap. Their nonces are asked (``is_nonce_used``, the executor's nonce-oracle port, which asks
   32 at a time), at most ``explain_max_checks`` per gap. A used nonce means the quote executed
   and its ``quote_status`` never came: the fill is booked (a ``QuoteMoved`` to SETTLED, as
   every fill), with a fill log line and a ``missed_status`` alert. More candidates than the
   cap: the gap pauses at once, and the reason says so.
3. **A later snapshot**: a gap with nothing left to ask is held once more and confirmed only by
   a snapshot requested after it (a read that raced a settlement does not pause).

While it is held the gap pauses nothing and is not absorbed (``BalancesReconciled.held``). A
gap still there after ``hold_max_s`` pauses (scoped: reconciliation, everything) with the checks
still unanswered named; if they answer later and explain it, the pause lifts itself
(:meth:`solver.core.desk_risk.RiskDesk` states the rule).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any

from solver.core import events as ev
from solver.core import facts as f
from solver.core.actions import Action, Alert, CheckNonce, RefreshBalances
from solver.core.clock import SECOND, Micros, span
from solver.core.inventory import Reservation
from solver.core.lifecycle import Quote, QuoteState
from solver.core.pnl import FillValue, usd_value
from solver.core.recent_lost import RecentLost
from solver.core.reconciliation import Totals, diff_of

if TYPE_CHECKING:
    from solver.core.desk import Desk

MISSED_STATUS = "missed_status"
MISSED_REASON = "nonce used: its quote_status was missed"


class GapDesk:
    """The desk's part that explains gaps: the baseline's doubts, nonce checks of recently
    closed quotes, fills found late; held gaps are confirmed by a later snapshot."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self.settings = desk.settings
        self.balances = desk.balances
        self.stats = desk.stats
        self.pair_book = desk.pair_book
        self.record = desk.record
        self.recent_lost = RecentLost(desk.settings.explain_window_s)
        # Not journaled: a restart asks afresh. quote_id -> when asked / when to ask again.
        self.asking: dict[str, Micros] = {}
        self.retry: dict[str, Micros] = {}
        self.missed_open = False  # a missed_status alert waits for balances that reconcile
        self._retry_after = span(desk.settings.nonce_retry_s)

    def appliers(self) -> dict[type, Callable[[Any], None]]:
        return {f.BaselineCorrected: self._apply_corrected}

    # ------------------------------------------------------------------ deciding

    def on_gap(
        self,
        gaps: Mapping[str, int],
        event: ev.BalancesSeen,
        own: Sequence[Reservation],
        totals: Totals,
        now: Micros,
        actions: list[Action],
    ) -> tuple[bool, str]:
        """A snapshot shows ``gaps`` (beyond tolerance). ``(True, "")``: hold it; ``(False,
        note)``: confirm it (``note`` is added to the pause's reason); after a correction of
        the baseline the snapshot may fit, and confirming it then finds nothing."""
        if self._correct_baseline(gaps, event, own, totals, now, actions):
            gaps = self.balances.compare(event.balances, event.observed, own, totals)
            if not gaps:
                return False, ""
        cap = self.settings.explain_max_checks
        fresh = [
            q
            for q in self.recent_lost.candidates(gaps, now)
            if q.quote_id not in self.asking and q.quote_id not in self.retry
        ]
        waiting = len(self.asking) + len(self.retry)
        if len(fresh) + waiting > cap:
            return False, (
                f"; {len(fresh) + waiting} quotes closed in the last "
                f"{self.settings.explain_window_s:g} s could explain it, more than the "
                f"{cap} nonce checks a gap may ask: not checked"
            )
        for quote in fresh:
            self._ask(quote, now, actions)
        held_at = self.balances.held_at
        if self.asking or self.retry:
            if held_at is not None and now - held_at >= self.settings.hold_max_s * SECOND:
                return False, (
                    f"; {len(self.asking) + len(self.retry)} nonce check(s) of recently closed "
                    f"quotes still unanswered after {self.settings.hold_max_s:g} s (the pause "
                    f"lifts itself if they explain the gap)"
                )
            return True, ""
        if held_at is None:
            actions.append(RefreshBalances())  # confirmed (or not) by a later snapshot
            return True, ""
        return False, ""

    def _correct_baseline(
        self,
        gaps: Mapping[str, int],
        event: ev.BalancesSeen,
        own: Sequence[Reservation],
        totals: Totals,
        now: Micros,
        actions: list[Action],
    ) -> bool:
        """Find the smallest set of doubts whose removal makes the snapshot fit; record it."""
        doubts = list(self.balances.doubts.values())
        balances = self.balances
        for size in range(1, len(doubts) + 1):
            for chosen in combinations(doubts, size):
                adjustment: dict[str, int] = {}
                for doubt in chosen:
                    for asset, delta in doubt.diff.items():
                        adjustment[asset] = adjustment.get(asset, 0) - delta
                if balances.compare(event.balances, event.observed, own, totals, adjustment):
                    continue
                shift = self._value(adjustment)
                keys = tuple(d.key for d in chosen)
                self.record(f.BaselineCorrected(now, adjustment, keys, shift), actions)
                return True
        return False

    def _value(self, amounts: Mapping[str, int]) -> float:
        total = 0.0
        for asset, amount in amounts.items():
            price, decimals = self.desk.price(asset), self.desk.state.decimals.get(asset)
            if price is not None and decimals is not None:
                total += usd_value(amount, decimals, price)
        return total

    def _ask(self, quote: Quote, now: Micros, actions: list[Action]) -> None:
        self.asking[quote.quote_id] = now
        self.retry.pop(quote.quote_id, None)
        actions.append(CheckNonce(quote.quote_id, quote.nonce))

    def stray_status(self, quote_hash: str, now: Micros) -> list[Action]:
        """A ``quote_status`` naming a quote closed LOST without a check: it came late (or it
        is forged): the verifier says which."""
        quote = self.recent_lost.find_hash(quote_hash)
        if quote is None or quote.quote_id in self.asking:
            return []
        actions: list[Action] = []
        self._ask(quote, now, actions)
        return actions

    def due(self, now: Micros, actions: list[Action]) -> None:
        """The clock's part: failed checks asked again after ``nonce_retry_s``."""
        for quote_id, at in list(self.retry.items()):
            quote = self.recent_lost.get(quote_id)
            if quote is None:
                del self.retry[quote_id]
            elif at <= now:
                self._ask(quote, now, actions)

    def nonce_checked(self, event: ev.NonceChecked, now: Micros) -> list[Action]:
        """The answer for a quote no longer in the book (closed LOST without a check)."""
        if self.asking.pop(event.quote_id, None) is None:
            return []
        quote = self.recent_lost.get(event.quote_id)
        if quote is None:
            return []
        if event.used is None:
            self.retry[event.quote_id] = now + self._retry_after
            return []
        if not event.used:
            self.recent_lost.pop(event.quote_id)  # LOST it was: it explains nothing
            if self.balances.held and not (self.asking or self.retry):
                return [RefreshBalances()]  # nothing left to ask: a snapshot decides now
            return []
        actions: list[Action] = []
        p_in, p_out = self.desk.price(quote.asset_in), self.desk.price(quote.asset_out)
        prices = None
        if p_in is not None and p_out is not None:
            value = self.desk.pnl.value(self._fill_value(quote), p_in, p_out)
            prices = f.FillPrices(p_in, p_out, value)
        fact = f.QuoteMoved(quote.quote_id, QuoteState.SETTLED, now, MISSED_REASON, fill=prices)
        self.record(fact, actions)
        readable = self.desk.readable
        detail = (
            f"quote {quote.quote_id} executed on chain but its quote_status never came: "
            f"booked as a fill from its used nonce (got "
            f"{readable.amount(quote.asset_in, quote.amount_in)}, paid "
            f"{readable.amount(quote.asset_out, quote.outflow)})"
        )
        actions.append(Alert(MISSED_STATUS, detail))
        self.missed_open = True
        actions.append(RefreshBalances())
        return actions

    def reconciled(self, actions: list[Action]) -> None:
        """A snapshot reconciled: a missed-status incident is over."""
        if self.missed_open:
            self.missed_open = False
            actions.append(
                Alert(MISSED_STATUS, "balances reconcile with the fills found", resolved=True)
            )

    # ------------------------------------------------------------------ applying

    @staticmethod
    def _fill_value(quote: Quote) -> FillValue:
        return FillValue(
            quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow
        )

    def apply_late_fill(self, fact: f.QuoteMoved) -> None:
        """A ``QuoteMoved`` to SETTLED of a quote closed LOST without a check (LOST → SETTLED:
        a used nonce found later, :mod:`solver.core.lifecycle`)."""
        quote = self.recent_lost.pop(fact.quote_id)
        if quote is None or fact.new != QuoteState.SETTLED:
            return
        quote.state, quote.updated_at, quote.reason = QuoteState.SETTLED, fact.at, fact.reason
        outcomes = self.stats.outcomes
        outcomes["WON"] += 1  # every settled quote counts as won: a user took it
        outcomes["SETTLED"] += 1
        pair = self.pair_book.of(quote.asset_in, quote.asset_out)
        if pair is not None:
            pair.won += 1
            pair.settled += 1
            pair.outcomes["WON"] += 1
            pair.outcomes["SETTLED"] += 1
            if fact.fill is not None:
                pair.realized_usd += fact.fill.realized_usd
                decimals = self.desk.state.decimals.get(quote.asset_in)
                if decimals is not None:
                    pair.volume_usd += usd_value(quote.amount_in, decimals, fact.fill.price_in)
        self.desk.recent_fills.append((quote, fact.fill))
        diff = diff_of(quote.asset_in, quote.amount_in, quote.asset_out, quote.outflow)
        self.balances.late_fill(quote.quote_id, diff, fact.at, quote.created_at)
        if fact.fill is not None:
            self.desk.pnl.record_fill(self._fill_value(quote), fact.at, fact.fill.realized_usd)

    def _apply_corrected(self, fact: f.BaselineCorrected) -> None:
        self.balances.correct(fact.adjustment, fact.quote_ids)
        self.desk.pnl.shift_baseline(fact.equity_shift_usd)
