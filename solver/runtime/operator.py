"""What an operator sees and does with the running bot: status, health, pause and resume
(the control API's :class:`~solver.io.control.ControlTarget`), and the metrics gauges.

Everything is read from the desk; pause and resume are desk events, and the desk's
:class:`~solver.core.actions.OperatorReply` is the answer: ``resume`` never reports success
while the bot stays paused — it says which pauses still hold and why.

The operator is given :class:`OperatorPorts` — exactly what it reads and the one door it acts
through — rather than the bot: its types give it no way to the signer, the sender or the desk
itself, and it can be built (and tested) from a desk, an executor and a config alone.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from solver.core import events as ev
from solver.core.actions import Action, OperatorReply
from solver.core.clock import Micros, from_micros
from solver.core.pnl import usd_value
from solver.errors import SolverError
from solver.io.metrics_gauges import MetricsSnapshot
from solver.runtime.status_extra import merge_pair_rows, status_extra

if TYPE_CHECKING:
    from solver.config import PairSpec, TokenSpec
    from solver.core.view import DeskView
    from solver.io.bus_state import WsCounters
    from solver.io.metrics import Metrics
    from solver.io.notify import Notifier
    from solver.io.store.sqlite_store import Store
    from solver.runtime.paper import PaperBook

log = logging.getLogger("solver.bot")
T = TypeVar("T")


class AnswersSent(Protocol):
    """What the executor's outbox counted of the answers sent (the summary)."""

    @property
    def sent(self) -> int: ...

    @property
    def response_us(self) -> Sequence[float]: ...


class OperatorDoor(Protocol):
    """The executor as the operator needs it: the door for a pause or a resume (the desk's
    answer lands in ``replies``), and its outbox's counts of the answers sent."""

    @property
    def replies(self) -> list[OperatorReply]: ...

    @property
    def outbox(self) -> AnswersSent: ...

    def feed(self, event: ev.Event, now: Micros | None = None) -> list[Action]: ...


class BusLink(Protocol):
    """What the operator reads of the bus websocket (live: the ``BusWsClient``)."""

    @property
    def connected(self) -> bool: ...

    @property
    def counters(self) -> WsCounters: ...


@dataclass(frozen=True)
class OperatorPorts:
    """Everything the :class:`Operator` uses; it is also the status page's
    :class:`~solver.runtime.status_extra.StatusSources`."""

    account: str
    shadow: bool
    view: DeskView
    tokens: Mapping[str, TokenSpec]
    """``config.tokens``: symbol and decimals by asset id."""
    pairs: Sequence[PairSpec]
    """``config.pairs``."""
    assets: list[str]
    """The configured asset ids, sorted."""
    store: Store | None
    """The query tables (windows, fills, gauges); None: no store (shadow mode, or none asked
    for)."""
    paper: PaperBook | None
    """Shadow mode's paper book; None: live."""
    executor: OperatorDoor
    bus: BusLink
    notifier: Notifier
    metrics: Metrics
    refresh_balances: Callable[[], Awaitable[None]]
    """A balance snapshot now (``resume --accept-balances`` takes one before the baseline)."""
    clock: Callable[[], Micros]


class Operator:
    def __init__(self, ports: OperatorPorts) -> None:
        self.ports = ports
        self.started = time.monotonic()
        self._store_errors: dict[str, str] = {}  # the gauges' store reads failing, said once
        # What the journal replayed at start (outcomes, quotes and wins of the previous runs):
        # the summary's "since start" counts subtract it (issue 24).
        self._outcomes_at_start: Counter[str] = Counter()
        self._pairs_at_start: dict[str, tuple[int, int]] = {}

    def _reply(self, event: ev.OperatorPause | ev.OperatorResume) -> OperatorReply:
        executor = self.ports.executor
        executor.replies.clear()
        executor.feed(event)
        replies = list(executor.replies)
        executor.replies.clear()
        if not replies:  # pragma: no cover - every operator event is answered
            return OperatorReply(False, "no answer from the desk")
        return replies[-1]

    def pause(self, pair: str | None, reason: str) -> dict[str, Any]:
        reply = self._reply(ev.OperatorPause(pair, reason))
        if not reply.ok:
            raise LookupError(reply.message)
        return {"ok": True, "message": reply.message}

    async def resume(self, pair: str | None, accept_balances: bool = False) -> dict[str, Any]:
        """Resume; ``accept_balances`` first takes a fresh snapshot, then makes it the new
        reconciliation baseline (a deliberate move is neither a mismatch nor a loss)."""
        ports = self.ports
        if pair is not None:
            ports.view.scopes(pair)  # LookupError (404) for a pair the bot does not trade
        if accept_balances:
            await ports.refresh_balances()
        reply = self._reply(ev.OperatorResume(pair, accept_balances))
        return {"ok": reply.ok, "message": reply.message, "still_paused": list(reply.still_paused)}

    def health(self) -> tuple[bool, list[str]]:
        view = self.ports.view
        reasons = []
        if not self.ports.bus.connected:
            reasons.append("not connected to the bus")
        if view.salt is None:
            reasons.append("no salt")
        report = view.reconciliation.report
        if report is None:
            reasons.append("not reconciled yet")
        elif not report["ok"]:
            reasons.append("reconciliation mismatch")
        return (not reasons, reasons)

    def status(self) -> dict[str, Any]:
        ports, view = self.ports, self.ports.view
        now = ports.clock()
        state = "PAUSED" if view.pauses.globally_paused() else "RUNNING"
        doc: dict[str, Any] = {
            "account": ports.account,
            "connected": ports.bus.connected,
            "mode": "SHADOW" if ports.shadow else "LIVE",
            "state": state,
            "paused": view.pauses.as_dict(),
            "open_quotes": len(view.open_quotes),
            "open_exposure_usd": view.open_exposure_usd(),
            "reserved": {a: str(v) for a, v in view.inventory.reserved.items()},
            "free": {a: str(view.inventory.free(a)) for a in ports.assets},
            "pnl_usd": view.pnl.pnl,
            "realized_pnl_usd": view.pnl.realized_usd,
            "last_reconciliation": view.reconciliation.report,
            "pairs": self.pairs(),
            "tokens": {
                asset: {"symbol": token.symbol, "decimals": token.decimals}
                for asset, token in ports.tokens.items()
            },
            "alerts": {
                "open": ports.notifier.tracker.open_incidents(),
                **ports.notifier.stats.as_dict(),
            },
            "uptime_s": time.monotonic() - self.started,
        }
        if ports.store is not None:
            try:
                doc["windows"] = self._windows(ports.store, now)
            except SolverError as exc:
                # The rest comes from memory: the status answers while the store fails.
                doc["store_error"] = str(exc)
        doc.update(status_extra(ports))  # decimals, symbols, recent_fills, paper (, store_error)
        merge_pair_rows(
            doc["pairs"], ports, from_micros(now)
        )  # state, strategy, 24 h fills, paper per pair
        return doc

    def _windows(self, store: Store, now: Micros) -> dict[str, Any]:
        windows = {}
        for name, seconds in (("1h", 3600.0), ("24h", 86400.0)):
            stats = store.stats(seconds, from_micros(now))
            windows[name] = {
                "quotes": stats["quotes"],
                "won": stats["won"],
                "win_rate": stats["win_rate"],
                "volume_usd": self._volume_usd(stats["volume_in"]),
            }
        return windows

    def pairs(self) -> dict[str, dict[str, Any]]:
        """Per configured pair (``wNEAR/USDC``): the desk's counters since start, plus the
        quotes open now and the USD value of the outflow they hold (None: no price)."""
        view = self.ports.view
        doc: dict[str, dict[str, Any]] = {}
        for label, stats in view.stats.pairs.items():
            doc[label] = stats.as_dict() | {"open_quotes": 0, "open_exposure_usd": 0.0}
        for quote in view.open_quotes.values():
            open_label = view.pairs.label(quote.asset_in, quote.asset_out)
            if open_label is None:
                continue
            row = doc[open_label]
            row["open_quotes"] += 1
            price, decimals = view.price(quote.asset_out), view.decimals.get(quote.asset_out)
            if price is None or decimals is None or row["open_exposure_usd"] is None:
                row["open_exposure_usd"] = None
            else:
                row["open_exposure_usd"] += usd_value(quote.outflow, decimals, price)
        return doc

    def _volume_usd(self, volume_in: Mapping[str, str]) -> float | None:
        view = self.ports.view
        total = 0.0
        for asset, amount in volume_in.items():
            price = view.price(asset)
            if price is None or asset not in view.decimals:
                return None
            total += usd_value(int(amount), view.decimals[asset], price)
        return total

    def sync_pair_metrics(self, *, baseline: bool = False) -> None:
        """Outcomes and volume per pair, from the desk's per-pair stats (``baseline``: at
        start, after the journal was replayed: those happened before this process)."""
        view, metrics = self.ports.view, self.ports.metrics
        if baseline:
            self._outcomes_at_start = Counter(view.stats.outcomes)
            self._pairs_at_start = {k: (p.quotes, p.won) for k, p in view.stats.pairs.items()}
        metrics.sync_outcomes(view.pairs.outcome_totals(), baseline=baseline)
        volume = {label: s.volume_usd for label, s in view.stats.pairs.items()}
        metrics.sync_volume(volume, baseline=baseline)

    def refresh_metrics(self) -> None:
        ports, view = self.ports, self.ports.view
        metrics = ports.metrics
        metrics.sync_bad_frames(ports.bus.counters.bad_frames)
        metrics.sync_notifications(ports.notifier.stats.as_dict())
        self.sync_pair_metrics()
        metrics.refresh_gauges(
            MetricsSnapshot(
                free={a: view.inventory.free(a) for a in ports.assets},
                reserved={a: view.inventory.reserved.get(a, 0) for a in ports.assets},
                decimals=dict(view.decimals),
                pnl_marked_usd=view.pnl.pnl,
                pnl_realized_usd=view.pnl.realized_usd,
                mismatch=dict(view.reconciliation.found) | dict(view.reconciliation.unresolved),
                connected=ports.bus.connected,
                paused=view.pauses.globally_paused(),
                shadow=ports.shadow,
                open_quotes=len(view.open_quotes),
                query_tables_behind=self._query_tables_behind(),
                **self._disk_usage(),
            )
        )

    def _disk_usage(self) -> dict[str, int | None]:
        store = self.ports.store
        if store is None:
            return {}
        usage = self._read_store("disk", store.disk_usage)
        if usage is None:
            return {}
        size, free = usage
        return {"store_bytes": size, "store_disk_free_bytes": free}

    def _query_tables_behind(self) -> int:
        store = self.ports.store
        if store is None:
            return 0
        return self._read_store("behind", store.unprojected) or 0

    def _read_store(self, what: str, read: Callable[[], T]) -> T | None:
        """One of the gauges' reads of the store; a failure is said once (not at every refresh,
        ten a second) until the read works again, and the gauge is left unknown."""
        try:
            value = read()
        except SolverError as exc:
            if self._store_errors.get(what) != str(exc):
                log.warning("%s", exc)
            self._store_errors[what] = str(exc)
            return None
        self._store_errors.pop(what, None)
        return value

    def summary(self) -> str:
        ports, view = self.ports, self.ports.view
        s = view.stats
        ordered = sorted(ports.executor.outbox.response_us)
        p50 = ordered[len(ordered) // 2] if ordered else 0.0
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0
        skipped = ",".join(f"{k}={v}" for k, v in s.skipped.most_common(6)) or "-"
        readable = view.readable
        free = ", ".join(readable.amount(a, view.inventory.free(a)) for a in ports.assets)
        pnl = view.pnl.pnl
        marked = "unknown" if pnl is None else f"{pnl:+,.2f} USD"
        before = self._pairs_at_start
        pairs = "; ".join(
            f"{label} req={p.requests} quoted={p.quotes - before.get(label, (0, 0))[0]} "
            f"won={p.won - before.get(label, (0, 0))[1]}"
            for label, p in s.pairs.items()
        )
        outcomes = dict(+(s.outcomes - self._outcomes_at_start))
        # Three groups, each labelled: counts of this process, the state now, and what the
        # journal carries over restarts (PnL). Mixing them read as "0 requests, 1 LOST".
        return (
            f"since start: requests={s.requests} quoted={ports.executor.outbox.sent} "
            f"skipped[{skipped}] outcomes={outcomes} response_us p50={p50:.0f} p99={p99:.0f} "
            f"pairs[{pairs}]; now: open={len(view.open_quotes)} "
            f"connected={ports.bus.connected} free: {free}; "
            f"lifetime: pnl={marked} realized={view.pnl.realized_usd:+,.2f} USD"
        )
