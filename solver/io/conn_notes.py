"""What a connection error line tells a person (issue 14): which URL, and when the next try is.

``relay ws://127.0.0.1:8760/ws: connect failed (ConnectionRefusedError); next attempt in
0.80 s, at 12:00:01Z``. Pure helpers for the log lines of the websocket's reconnect loop and
the RPC jobs; the URL loses its query, fragment and credentials (a token may ride there).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit


def display_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``: no user, password, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    if ":" in host:
        host = f"[{host}]"  # IPv6
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def next_attempt(delay_s: float, now: datetime | None = None) -> str:
    """``in 0.80 s, at 12:00:01Z`` (UTC wall time, for display only; ``now`` for tests)."""
    when = (now or datetime.now(UTC)) + timedelta(seconds=delay_s)
    return f"in {delay_s:.2f} s, at {when.astimezone(UTC).strftime('%H:%M:%S')}Z"
