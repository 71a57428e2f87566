"""A fake :class:`~solver.io.control.ControlTarget` (plain data, no network) and a running
control server around it, shared by the control API and ``solver status`` tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from solver.io.control import ControlServer, create_control_app, serve_control
from solver.io.metrics import Metrics

TOKEN_VAR = "SOLVER_CONTROL_TOKEN"
TOKEN = "test-control-token-0123456789abcdef"
USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"
PAIRS = {"wNEAR/USDC": (WNEAR, USDC)}


@dataclass
class FakeTarget:
    """Records what the API asked; pauses by scope as the bot does (``*`` or ``in->out``)."""

    ready: bool = True
    reasons: list[str] = field(default_factory=list)
    paused: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    health_raises: bool = False
    holds: list[str] = field(default_factory=list)  # what a resume cannot lift

    def _scopes(self, pair: str | None) -> list[str]:
        if pair is None:
            return ["*"]
        if pair not in PAIRS:
            raise LookupError(f"unknown pair {pair}")
        base, quote = PAIRS[pair]
        return [f"{base}->{quote}", f"{quote}->{base}"]

    def status(self) -> dict[str, Any]:
        self.calls.append(("status",))
        return {
            "account": "solver.sandbox",
            "connected": True,
            "state": "PAUSED" if "*" in self.paused else "RUNNING",
            "paused": dict(self.paused),
            "open_quotes": 3,
            "open_exposure_usd": 1234.5,
            "reserved": {USDC: "1500000", WNEAR: "2000000000000000000000000"},
            "windows": {
                "1h": {
                    "requests": 120,
                    "quotes": 40,
                    "won": 10,
                    "win_rate": 0.25,
                    "volume_usd": 512.75,
                },
                "24h": {
                    "requests": 2400,
                    "quotes": 800,
                    "won": 100,
                    "win_rate": 0.125,
                    "volume_usd": 9876.5,
                },
            },
            "pnl_usd": -12.5,
            "last_reconciliation": {"at": "2025-01-02T03:04:05Z", "ok": True, "mismatches": {}},
            "build": "test",
        }

    def pause(self, pair: str | None, reason: str) -> dict[str, Any]:
        self.calls.append(("pause", pair, reason))
        for scope in self._scopes(pair):
            self.paused[scope] = reason
        return {"ok": True, "message": f"paused {pair or 'everything'}"}

    async def resume(self, pair: str | None, accept_balances: bool = False) -> dict[str, Any]:
        """Lifts the pauses of the scope, as the desk does; the ``holds`` (conditions still in
        force, such as a kill-switch breach) stay, and then the answer is not ok."""
        self.calls.append(("resume", pair, accept_balances))
        for scope in self._scopes(pair):
            self.paused.pop(scope, None)
        if self.holds:
            still = [f"everything: {reason}" for reason in self.holds]
            return {
                "ok": False,
                "message": "still paused: " + "; ".join(still),
                "still_paused": still,
            }
        return {"ok": True, "message": f"resumed {pair or 'everything'}", "still_paused": []}

    def health(self) -> tuple[bool, list[str]]:
        if self.health_raises:
            raise RuntimeError("boom")
        return self.ready, list(self.reasons)


@asynccontextmanager
async def running_control(
    target: FakeTarget, metrics: Metrics | None = None, *, listen: str = "127.0.0.1:0"
) -> AsyncIterator[ControlServer]:
    app = create_control_app(target, metrics or Metrics(), token_env=TOKEN_VAR)
    server = await serve_control(app, listen)
    try:
        yield server
    finally:
        await server.stop()
