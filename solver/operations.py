"""Settlement you can trust: fills and PnL, reconciliation, the kill switch, restart recovery,
metrics and the control API (issue 5; DESIGN "Settlement", "Inventory and risk").

:class:`Operations` is fed by the app — every quote transition, every balance snapshot, a
periodic risk tick — and acts on :class:`~solver.core.state.MarketState.paused`: a breach moves
the bot to PAUSED (quotes stop, settlement continues) with the reason logged, stored as an alert
and exposed in metrics and ``solver status``; only ``solver resume`` clears it. It implements
the :class:`~solver.io.control.ControlTarget` protocol.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from solver.core.inventory import Reservation
from solver.core.pnl import PnlTracker, usd_value
from solver.core.risk import (
    GLOBAL,
    Breach,
    Reconciler,
    RiskLimits,
    check_mismatch,
    check_pnl,
    check_stale,
)
from solver.core.settlement import QuoteState, Transition
from solver.io.metrics import Metrics, MetricsSnapshot
from solver.io.store import Store
from solver.io.store_schema import Fill as StoredFill

if TYPE_CHECKING:
    from solver.app import SolverApp

log = logging.getLogger("solver.ops")


class OwnMoves(Protocol):
    """Balance moves of our own that are not quote settlements (a rebalance's deposit, its
    output): what they may still move, and whether balances may show one half done."""

    def open_flows(self) -> list[Reservation]: ...

    def settling(self) -> bool: ...


class Operations:
    def __init__(
        self,
        app: SolverApp,
        *,
        store: Store | None,
        metrics: Metrics,
        limits: RiskLimits,
    ) -> None:
        self.app = app
        self.store = store
        self.metrics = metrics
        self.limits = limits
        self.pnl = PnlTracker(app.state.decimals)
        self.reconciler = Reconciler()
        self.last_reconciliation: dict[str, Any] | None = None
        # Gaps beyond tolerance found since the operator last resumed: the reconciler absorbs
        # a gap at once (so only new moves are reported again), but the operator must still
        # see it in status, /healthz and the mismatch gauge until ``solver resume``.
        self.unresolved_mismatch: dict[str, int] = {}
        # Own settlements heard of (at the datetime) that no snapshot is known to include yet:
        # a snapshot requested before we heard may predate the execution (see on_balances).
        self._unconfirmed: dict[str, tuple[Reservation, datetime]] = {}
        self._snapshot_at: datetime | None = None
        # Moves of our own outside the quote book (the rebalancer, when the app runs one).
        self.own_moves: OwnMoves | None = None
        self.pnl_usd: Decimal | None = None
        self.started = time.monotonic()
        self.symbols = {asset: spec.symbol for asset, spec in app.config.tokens.items()}

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.app.clock

    def _price(self, asset: str) -> float | None:
        ref = self.app.state.prices.get(asset)
        return ref.usd if ref is not None else None

    # ------------------------------------------------------------------ transitions and fills

    def on_transition(self, transition: Transition) -> None:
        self.metrics.inc_outcome(transition.new.value)
        if transition.new is not QuoteState.SETTLED:
            return
        quote = self.app.engine.last_terminal.get(transition.quote_id)
        if quote is None:
            return
        outflow = quote.amount_out + quote.fee
        self.reconciler.on_settled(quote.asset_in, quote.amount_in, quote.asset_out, outflow)
        # Until a snapshot requested after now, the execution may be missing from a snapshot:
        # the reverse of an open quote (asset_in may still lack amount_in, asset_out may still
        # hold the outflow).
        self._unconfirmed[quote.quote_id] = (
            Reservation(
                quote.quote_id, quote.asset_in, quote.amount_in, quote.asset_out, outflow,
                quote.deadline,
            ),
            transition.at,
        )  # fmt: skip
        fill = self.pnl.record_fill(
            quote_id=quote.quote_id,
            at=transition.at,
            asset_in=quote.asset_in,
            amount_in=quote.amount_in,
            asset_out=quote.asset_out,
            amount_out=quote.amount_out,
            fee=quote.fee,
            price=self._price,
        )
        if self.store is not None:
            self.store.record_fill(
                StoredFill.from_quote(
                    quote,
                    transition.at,
                    price_in_usd=fill.price_in if fill else None,
                    price_out_usd=fill.price_out if fill else None,
                    realized_pnl_usd=fill.realized_usd if fill else None,
                )
            )
        log.info(
            "fill %s: +%s %s / -%s %s, edge %s USD",
            quote.quote_id,
            quote.amount_in,
            self.symbols.get(quote.asset_in, quote.asset_in),
            quote.amount_out,
            self.symbols.get(quote.asset_out, quote.asset_out),
            f"{fill.realized_usd:.4f}" if fill else "?",
            extra={
                "quote_id": quote.quote_id,
                "quote_hash": quote.quote_hash,
                "intent_hash": quote.intent_hash,
            },
        )

    # ------------------------------------------------------------------ balances

    def on_balances(self, actual: Mapping[str, int], observed: datetime) -> None:
        """Reconcile a fresh snapshot before the inventory takes it (see core.risk).

        ``observed`` is when the snapshot was requested. Snapshots can land out of order (a
        scheduled and a triggered refresh in flight together): an older one than the last
        reconciled tells nothing new and is skipped, as the inventory skips it. A snapshot
        requested before we heard of an own settlement may or may not include its execution,
        while the expected balances already do: both are accepted.
        """
        if self._snapshot_at is not None and observed < self._snapshot_at:
            return
        self._snapshot_at = observed
        for quote_id, (_, heard_at) in list(self._unconfirmed.items()):
            if heard_at <= observed:
                del self._unconfirmed[quote_id]  # this snapshot, and every later one, has it
        book = self.app.engine.book
        open_quotes = [reverse for reverse, _ in self._unconfirmed.values()]
        if self.own_moves is not None:
            open_quotes += self.own_moves.open_flows()
        expected_before = dict(self.reconciler.expected or actual)
        found = self.reconciler.on_snapshot(
            actual, open_quotes, totals=(book.open_outflow, book.open_inflow)
        )
        breaches = check_mismatch(self.limits, found)
        for asset, gap in found.items():
            if gap and abs(gap) > self.limits.max_mismatch.get(asset, 0):
                self.unresolved_mismatch[asset] = self.unresolved_mismatch.get(asset, 0) + gap
        gaps = {a: g for a, g in found.items() if g} | self.unresolved_mismatch
        self.last_reconciliation = {
            "at": observed.isoformat(timespec="milliseconds"),
            "ok": not self.unresolved_mismatch,
            "mismatches": {a: str(g) for a, g in gaps.items()},
        }
        if self.store is not None:
            self.store.record_balances(observed, actual, expected_before)
        for breach in breaches:
            self._breach(breach, halt=self.limits.halt_on_mismatch)

    def on_own_flow(
        self, key: str, asset_in: str, amount_in: int, asset_out: str, outflow: int
    ) -> None:
        """A settled move of our own outside the quote book (a rebalance's deposit, its
        output or refund): the expected balances follow it as they follow an own settlement,
        and until a later snapshot it may be missing from one."""
        at = self.clock()
        self.reconciler.on_settled(asset_in, amount_in, asset_out, outflow)
        self._unconfirmed[key] = (Reservation(key, asset_in, amount_in, asset_out, outflow, at), at)

    def rebaseline(self) -> None:
        """Take the expected balances afresh from the next snapshot. After a restart the
        warm-up snapshot may or may not include what the recovered quotes did while the bot
        was down, so recovery calls this once it has re-checked them."""
        self.reconciler = Reconciler()
        self._unconfirmed.clear()

    # ------------------------------------------------------------------ the risk tick

    def tick(self) -> None:
        now = self.clock()
        app = self.app
        for fill in self.pnl.due_markouts(now, self._price):
            if self.store is not None:
                self.store.update_markouts(
                    fill.quote_id, {str(h): str(v) for h, v in fill.markouts_usd.items()}
                )
        # While an own move is half seen (value in transit), the balances would mark a loss or
        # a gain that is not one: the last mark stands until a snapshot shows the move done.
        settling = self.own_moves is not None and self.own_moves.settling()
        pnl = self.pnl_usd if settling else self.pnl.mark(now, app.inventory.confirmed, self._price)
        if pnl is not None and not settling:
            self.pnl_usd = pnl
            for breach in check_pnl(
                self.limits, self.pnl.daily_loss_usd(pnl), self.pnl.drawdown_usd(pnl)
            ):
                self._breach(breach, halt=True)
        price_ages = [p.age_s(now) for p in app.state.prices.values()]
        for breach in check_stale(
            self.limits, app.inventory.balance_age_s(now), max(price_ages, default=None)
        ):
            self._breach(breach, halt=True)
        self.metrics.sync_bad_frames(app.ws.counters.bad_frames)
        self.metrics.refresh_gauges(
            MetricsSnapshot(
                free={a: app.inventory.free(a) for a in app.tokens},
                reserved={a: app.inventory.reserved.get(a, 0) for a in app.tokens},
                decimals=dict(app.state.decimals),
                pnl_usd=float(pnl) if pnl is not None else None,
                mismatch={a: int(g) for a, g in self.reconciler.last.items()}
                | self.unresolved_mismatch,
                connected=app.ws.connected,
                paused=GLOBAL in app.state.paused,
                open_quotes=len(app.engine.book.quotes),
            )
        )

    def _breach(self, breach: Breach, *, halt: bool) -> None:
        already = self.app.state.paused.get(GLOBAL)
        if halt and already is None:
            self.app.state.paused[GLOBAL] = f"{breach.kind}: {breach.detail}"
            log.error("PAUSED: %s: %s", breach.kind, breach.detail)
        elif already is None:
            log.warning("alert: %s: %s", breach.kind, breach.detail)
        if self.store is not None and already is None:
            self.store.record_alert(breach.kind, breach.detail, self.clock())

    # ------------------------------------------------------------------ control API

    def _scopes(self, pair: str | None) -> list[str]:
        if pair is None:
            return [GLOBAL]
        by_symbol = {spec.symbol: asset for asset, spec in self.app.config.tokens.items()}
        base_text, _, quote_text = pair.partition("/")
        base = by_symbol.get(base_text, base_text)
        quote = by_symbol.get(quote_text, quote_text)
        scopes = [
            r.key
            for r in self.app.pipeline.routes.values()
            if {r.asset_in, r.asset_out} == {base, quote}
        ]
        if not scopes:
            raise LookupError(f"the bot does not trade {pair}")
        return scopes

    def pause(self, pair: str | None, reason: str) -> None:
        for scope in self._scopes(pair):
            self.app.state.paused[scope] = f"operator: {reason}"
        log.warning("paused %s by operator: %s", pair or "everything", reason)

    def resume(self, pair: str | None) -> None:
        for scope in self._scopes(pair):
            self.app.state.paused.pop(scope, None)
        if pair is None:
            self.unresolved_mismatch.clear()  # acknowledged: the next snapshot reports afresh
            if self.store is not None:
                for kind in ("daily_loss", "drawdown", "reconciliation", "stale_data"):
                    self.store.resolve_alerts(kind, self.clock())
        log.warning("resumed %s by operator", pair or "everything")

    def health(self) -> tuple[bool, list[str]]:
        reasons = []
        app = self.app
        if not app.ws.connected:
            reasons.append("not connected to the bus")
        if app.state.salt is None:
            reasons.append("no salt")
        if self.last_reconciliation is None:
            reasons.append("not reconciled yet")
        elif not self.last_reconciliation["ok"]:
            reasons.append("reconciliation mismatch")
        return (not reasons, reasons)

    def status(self) -> dict[str, Any]:
        app = self.app
        now = self.clock()
        exposure = Decimal(0)
        for asset, amount in app.inventory.reserved.items():
            price = self._price(asset)
            if price is not None:
                exposure += usd_value(amount, app.state.decimals[asset], price)
        doc: dict[str, Any] = {
            "account": app.account,
            "connected": app.ws.connected,
            "state": "PAUSED" if GLOBAL in app.state.paused else "RUNNING",
            "paused": dict(app.state.paused),
            "open_quotes": len(app.engine.book.quotes),
            "open_exposure_usd": float(exposure),
            "reserved": {a: str(v) for a, v in app.inventory.reserved.items()},
            "free": {a: str(app.inventory.free(a)) for a in app.tokens},
            "pnl_usd": float(self.pnl_usd) if self.pnl_usd is not None else None,
            "realized_pnl_usd": float(self.pnl.realized_usd),
            "last_reconciliation": self.last_reconciliation,
            "uptime_s": time.monotonic() - self.started,
        }
        if self.store is not None:
            windows = {}
            for name, seconds in (("1h", 3600.0), ("24h", 86400.0)):
                stats = self.store.stats(seconds, now)
                windows[name] = {
                    "quotes": stats["quotes"],
                    "won": stats["won"],
                    "win_rate": stats["win_rate"],
                    "volume_usd": self._volume_usd(stats["volume_in"]),
                }
            doc["windows"] = windows
        return doc

    def _volume_usd(self, volume_in: Mapping[str, str]) -> float | None:
        total = Decimal(0)
        for asset, amount in volume_in.items():
            price = self._price(asset)
            if price is None or asset not in self.app.state.decimals:
                return None
            total += usd_value(int(amount), self.app.state.decimals[asset], price)
        return float(total)
