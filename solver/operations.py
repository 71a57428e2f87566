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
from typing import TYPE_CHECKING, Any

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
        self.reconciler.on_settled(
            quote.asset_in, quote.amount_in, quote.asset_out, quote.amount_out + quote.fee
        )
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
        """Reconcile a fresh snapshot before the inventory takes it (see core.risk)."""
        open_quotes = [
            Reservation(
                q.quote_id, q.asset_out, q.amount_out + q.fee, q.asset_in, q.amount_in, q.deadline
            )
            for q in self.app.engine.book.quotes.values()
        ]
        expected_before = dict(self.reconciler.expected or actual)
        found = self.reconciler.on_snapshot(actual, open_quotes)
        breaches = check_mismatch(self.limits, found)
        self.last_reconciliation = {
            "at": observed.isoformat(timespec="milliseconds"),
            "ok": not breaches,
            "mismatches": {a: str(g) for a, g in found.items() if g},
        }
        if self.store is not None:
            self.store.record_balances(observed, actual, expected_before)
        for breach in breaches:
            self._breach(breach, halt=self.limits.halt_on_mismatch)

    # ------------------------------------------------------------------ the risk tick

    def tick(self) -> None:
        now = self.clock()
        app = self.app
        for fill in self.pnl.due_markouts(now, self._price):
            if self.store is not None:
                self.store.update_markouts(
                    fill.quote_id, {str(h): str(v) for h, v in fill.markouts_usd.items()}
                )
        pnl = self.pnl.mark(now, app.inventory.confirmed, self._price)
        if pnl is not None:
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
                mismatch={a: int(g) for a, g in (self.reconciler.last or {}).items()},
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
        if pair is None and self.store is not None:
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
