"""What a replay hands back (:class:`ReplayResult`), reports of its progress, and the alert port
that records a halt.

Kept apart from :mod:`backtest.engine` so that the reports and sweeps that read a finished
replay depend on its result, not on the driver (and the desk wiring it imports).
"""

from __future__ import annotations

from dataclasses import dataclass

from backtest.measure.measurements import Measurements
from backtest.stream.events import Header
from backtest.unobserved import Coverage
from solver.core.actions import Alert, PauseChanged
from solver.core.clock import Micros, from_micros
from solver.core.desk import Desk
from solver.core.pauses import RISK_KINDS

__all__ = ["Progress", "ReplayResult", "RiskHalt"]


@dataclass(frozen=True)
class Progress:
    events: int
    requests: int
    quoted: int
    won: int


@dataclass
class ReplayResult:
    measures: Measurements
    desk: Desk
    """The desk as the replay left it: PnL (``desk.pnl``), pauses, counters, open quotes."""
    start_inventory: dict[str, int]
    final_inventory: dict[str, int]
    open_at_end: int
    """Quotes the desk still held open when the replay ended (deadline not passed yet)."""
    halted: dict[str, str] | None
    coverage: Coverage
    """How much competition was observed, what the fills rest on (:mod:`backtest.unobserved`)."""
    header: Header | None = None


class RiskHalt:
    """The replay's alert port: a risk pause (daily loss, drawdown, stale data, reconciliation)
    marks the replay halted (when, and the desk's reason); nobody resumes it, so quoting stays
    paused for the rest of the replay while settlement goes on."""

    def __init__(self) -> None:
        self.halted: dict[str, str] | None = None

    def alert(self, alert: Alert, now: Micros) -> None:
        """Nobody to tell in a replay: a risk pause halts it (below)."""

    def pause_changed(self, change: PauseChanged) -> None:
        pause = change.pause
        if change.active and pause.kind in RISK_KINDS and self.halted is None:
            self.halted = {
                "at": from_micros(pause.at).isoformat(timespec="microseconds"),
                "reason": f"{pause.kind}: {pause.reason}",
            }
