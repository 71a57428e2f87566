"""The bus connection's state as the client, its receiver and the bot read it: the state names,
the counters and a reply awaited.

Both halves of the bus websocket client move this state: the client
(:class:`~solver.io.bus_ws.BusWsClient`) reports connecting, disconnected and stopped, counts
the connections that fail and registers the replies it awaits; its sans-I/O receiver
(:class:`~solver.io.bus_ws_receive.BusReceiver`) reports connected, counts the frames and takes
the replies. The bot reads the same names and counters (``on_state``, the operator's status).
So they live apart from either half, and a reader of the state imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "CONNECTED",
    "CONNECTING",
    "DISCONNECTED",
    "STOPPED",
    "PendingReply",
    "WsCounters",
]

# Connection states reported to ``on_state``.
CONNECTING: Final = "connecting"
CONNECTED: Final = "connected"  # connected *and* both subscriptions confirmed
DISCONNECTED: Final = "disconnected"
STOPPED: Final = "stopped"


@dataclass
class WsCounters:
    """Plain counters, cheap to bump, read by metrics and tests."""

    connects: int = 0  # sessions that reached CONNECTED
    reconnects: int = 0  # of those, the ones after the first
    connect_failures: int = 0
    disconnects: int = 0
    frames_in: int = 0
    quotes_in: int = 0
    quote_statuses_in: int = 0
    responses_ok: int = 0
    responses_failed: int = 0
    unanswered: int = 0  # sent, no reply before the connection dropped (not a refusal)
    callback_errors: int = 0
    bad_frames: dict[str, int] = field(default_factory=dict)

    def bad(self, reason: str) -> None:
        self.bad_frames[reason] = self.bad_frames.get(reason, 0) + 1


@dataclass(slots=True)
class PendingReply:
    """A request sent whose reply is awaited (by its id in the JSON-RPC frame)."""

    kind: str  # "subscribe" | "quote_response"
    tag: str  # the subscription kind, or the quote_id
