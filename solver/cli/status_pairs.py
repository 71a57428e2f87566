"""``solver status``: the per-pair table (issue 14), below the bot's two-column status.

One row per configured pair from the status document's ``pairs`` (the desk's counters since the
bot started): requests, quotes, won, win rate, settled, volume, realized PnL, and the quotes
open now with the USD value of the outflow they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

COLUMNS = (
    ("requests", "requests"),
    ("quotes", "quotes"),
    ("won", "won"),
    ("win rate", "win_rate"),
    ("settled", "settled"),
    ("volume USD", "volume_usd"),
    ("PnL USD", "realized_pnl_usd"),
    ("open", "open_quotes"),
    ("exposure USD", "open_exposure_usd"),
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if key == "win_rate":
        return f"{value:.1%}"
    if key == "realized_pnl_usd":
        return f"{value:+,.2f}"
    if key.endswith("_usd"):
        return f"{value:,.2f}"
    return f"{value:,}"


def pairs_table(doc: Mapping[str, Any]) -> Table | None:
    """The table of ``doc["pairs"]``; None when the bot sent none (an older bot)."""
    pairs = doc.get("pairs")
    if not isinstance(pairs, Mapping) or not pairs:
        return None
    table = Table(title="per pair, since the bot started", title_justify="left")
    table.add_column("pair", style="bold")
    for label, _ in COLUMNS:
        table.add_column(label, justify="right")
    for name, row in sorted(pairs.items()):
        if isinstance(row, Mapping):
            table.add_row(str(name), *(_cell(key, row.get(key)) for _, key in COLUMNS))
    return table
