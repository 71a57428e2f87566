"""Helpers of the config tests: a minimal valid config, YAML files, error-line access."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from solver.config import BotConfigError, validate_bot_config

REPO = Path(__file__).resolve().parents[2]
DEFAULT_YAML = REPO / "config" / "default.yaml"
EXAMPLES = sorted((REPO / "config" / "examples").glob("*.yaml"))

USDC = "nep141:usdc.sandbox"
WNEAR = "nep141:wrap.sandbox"
ETH = "nep141:eth.sandbox"

_MINIMAL: dict[str, Any] = {
    "account": {"id": "solver.sandbox", "key_env": "SOLVER_TEST_SIGNING_KEY"},
    "verifier_contract": "intents.sandbox",
    "bus": {"ws_url": "ws://127.0.0.1:8760/ws", "rpc_url": "http://127.0.0.1:8760/rpc"},
    "chain": {"rpc_url": "http://127.0.0.1:8761/"},
    "tokens": {
        USDC: {"symbol": "USDC", "decimals": 6},
        WNEAR: {"symbol": "wNEAR", "decimals": 24},
        ETH: {"symbol": "ETH", "decimals": 18},
    },
    "pairs": [
        {
            "base": WNEAR,
            "quote": USDC,
            "strategy": "spread",
            "params": {"spread_bps": 25},
            "max_notional_usd": 1000.0,
        }
    ],
    "prices": {"sources": [{"kind": "sandbox", "url": "http://127.0.0.1:8762/prices"}]},
}


def minimal() -> dict[str, Any]:
    """A fresh copy of the smallest valid configuration (every other key defaulted)."""
    return copy.deepcopy(_MINIMAL)


def problems_of(data: Any) -> list[str]:
    """The ``path: message`` lines of an invalid configuration (fails if it is valid)."""
    try:
        validate_bot_config(data, source="test")
    except BotConfigError as exc:
        assert exc.lines() == [f"test: {p}" for p in exc.problems]
        return list(exc.problems)
    raise AssertionError("the configuration was accepted")


def paths_of(data: Any) -> list[str]:
    """The YAML paths of the problems of an invalid configuration."""
    return [problem.split(": ", 1)[0] for problem in problems_of(data)]


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
