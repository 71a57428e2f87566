"""What the ``solver swap`` commands and ``solver backtest import-history`` share: option checks,
the swap API client from options or config, JSON of the answers, following a swap's status.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from typing import Any

from pydantic import ValidationError

from solver.cli import warn
from solver.config import BotConfig, load_bot_config
from solver.errors import ConfigError, ProtocolError, SolverError
from solver.io.swap_client import StatusResponse, SwapApiClient
from solver.protocol.signing import first_error
from solver.protocol.swap import QuoteResponse, SwapStatus, from_wire

DEFAULT_FOLLOW_S = 600.0
MAX_FOLLOW_S = 86_400.0
FINAL_STATUSES = frozenset({SwapStatus.SUCCESS, SwapStatus.REFUNDED, SwapStatus.FAILED})


def check_seconds(value: float, option: str, limit: float) -> float:
    """``value`` when it is a finite number of seconds in ``(0, limit]``; else a usage error."""
    if not math.isfinite(value) or not 0 < value <= limit:
        raise ConfigError(f"{option} must be a number of seconds in (0, {limit:g}]")
    return value


def check_timeout(value: float) -> float:
    return check_seconds(value, "--timeout", 600.0)


def swap_client(args: argparse.Namespace, config: BotConfig | None) -> SwapApiClient:
    """The swap API of ``--base-url`` / ``--token-env``, else of the config's ``swap_api``."""
    spec = config.swap_api if config is not None else None
    base_url = args.base_url or (str(spec.base_url) if spec is not None else None)
    if base_url is None:
        raise ConfigError("no swap API: give --base-url, or a swap_api section in the config")
    token_env = args.token_env or (spec.token_env if spec is not None else None)
    client = SwapApiClient.from_env(base_url, token_env, timeout_s=check_timeout(args.timeout))
    if token_env is None:
        warn("no swap API token (swap_api.token_env): the 0.2 % platform fee applies")
    return client


def optional_config(args: argparse.Namespace) -> BotConfig | None:
    """The bot config of ``--config`` when given (the API options can stand in for it)."""
    return load_bot_config(args.config) if getattr(args, "config", None) else None


def model_json(model: Any) -> dict[str, Any]:
    """An API model as its wire JSON (camelCase aliases, no nulls), as the service sent it."""
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def parse_quote_response(data: Any) -> QuoteResponse:
    if not isinstance(data, dict):
        raise ConfigError("the quote must be a JSON object (the output of 'solver swap quote')")
    try:
        return from_wire(QuoteResponse, data)
    except ValidationError as exc:
        raise ProtocolError(f"invalid quote response: {first_error(exc)}") from None


async def follow_status(
    client: SwapApiClient,
    address: str,
    memo: str | None,
    follow_s: float,
    *,
    first: StatusResponse | None = None,
    poll_s: float = 0.5,
    max_poll_s: float = 5.0,
) -> StatusResponse:
    """Poll ``GET /v0/status`` until a final status or ``follow_s``; the last answer."""
    started = time.monotonic()
    current = first or await client.status(address, memo)
    delay = poll_s
    while current.status not in FINAL_STATUSES and time.monotonic() - started < follow_s:
        await asyncio.sleep(min(delay, max(0.0, follow_s - (time.monotonic() - started))))
        delay = min(delay * 1.5, max_poll_s)
        try:
            current = await client.status(address, memo)
        except SolverError as exc:
            warn(f"status failed, still following: {exc}")
    return current
