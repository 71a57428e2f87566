"""Rate and exposure limits (DESIGN "Inventory and risk"). Pure: time is an argument."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TokenBucket:
    """``rate_per_s`` quotes per second on average, bursts up to ``burst``."""

    rate_per_s: float
    burst: float
    tokens: float = -1.0
    last_s: float | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.burst

    def take(self, now_s: float) -> bool:
        """One token if there is one. Taken once per quote: each field is read once, into a
        local (the same float operations as ``min``/``max`` over the fields, issue 29)."""
        last, tokens = self.last_s, self.tokens
        if last is None:
            self.last_s = now_s
        elif now_s > last:
            refilled = tokens + (now_s - last) * self.rate_per_s
            burst = self.burst
            tokens = refilled if refilled < burst else burst  # min(burst, refilled)
            self.last_s = now_s  # max(last, now_s); an earlier time leaves it
        if tokens >= 1.0:
            self.tokens = tokens - 1.0
            return True
        self.tokens = tokens
        return False
