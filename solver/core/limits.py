"""Rate and exposure limits (DESIGN "Inventory and risk"). Pure: time is an argument."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
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
        if self.last_s is not None and now_s > self.last_s:
            self.tokens = min(self.burst, self.tokens + (now_s - self.last_s) * self.rate_per_s)
        self.last_s = now_s if self.last_s is None else max(self.last_s, now_s)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
