"""The counters of one ``solver record`` run (:mod:`backtest.stream.record`).

Their own module (issue 29's split by role, STYLE.md 15): the recorder's callbacks and its write
queue (:mod:`backtest.stream.record_queue`) both count into one :class:`RecordStats`, and the CLI
prints its progress line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RecordStats:
    """Counters of one recording (``requests`` … ``competitors``: events queued)."""

    requests: int = 0
    statuses: int = 0
    prices: int = 0
    competitors: int = 0
    dropped: int = 0
    """Events lost because the write queue was full."""
    unknown_asset: int = 0
    """``quote`` events naming an asset outside the configuration's tokens (not recorded)."""
    own_probes: int = 0
    """Our own competitor probes seen coming back as ``quote`` events (not recorded)."""
    probes: int = 0
    probes_failed: int = 0
    probes_empty: int = 0
    probes_skipped: int = 0
    """Sampled requests not probed because ``max_probes`` were already in flight."""
    written: int = 0
    clamped: int = 0
    bytes: int = 0
    files: int = 0
    connected: bool = False
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    def line(self) -> str:
        """The one-line progress report."""
        return (
            f"record: {self.elapsed_s:.0f} s  {'connected' if self.connected else 'DISCONNECTED'}"
            f"  requests {self.requests}  prices {self.prices}  statuses {self.statuses}"
            f"  competitors {self.competitors}  dropped {self.dropped}"
            f"  unknown_asset {self.unknown_asset}  written {self.written}"
            f"  files {self.files} ({self.bytes / 1e6:.1f} MB)"
        )
