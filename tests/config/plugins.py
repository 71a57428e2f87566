"""A third-party strategy whose own constructor refuses to start (config validation must report
it as a problem of the pair, not crash)."""

from __future__ import annotations

from strategies.base import StrategyConfig
from tests.strategies.broken import HonestHalf


class RefusesToStart(HonestHalf):
    def __init__(self, config: StrategyConfig | None = None) -> None:
        super().__init__(config)
        raise RuntimeError("no market data directory")
