"""Field types and validators shared by the sections: amounts, names, URLs, units.

Each type says what YAML may hold and refuses the usual mistakes with a message that says what
to write instead (a float amount, a secret pasted where a variable name belongs).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
)

from solver.protocol.amounts import U128

STRICT = ConfigDict(extra="forbid", frozen=True)

Loc = tuple[str | int, ...]


def _no_float_amount(value: Any) -> Any:
    if isinstance(value, float):
        raise ValueError(
            "amounts are whole numbers in the token's smallest unit: write a quoted decimal "
            'string such as "1000000" (YAML read a float, which cannot hold large amounts)'
        )
    return value


Amount = Annotated[U128, BeforeValidator(_no_float_amount)]
"""A u128 amount: a quoted decimal string or an int in YAML; a float is refused."""

PositiveAmount = Annotated[Amount, Field(gt=0)]

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.fullmatch(value):
        # Never echo the value: a pasted secret is the likely cause.
        raise ValueError(
            "must be the NAME of an environment variable (letters, digits, underscore), "
            "not its value"
        )
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
"""The name of an environment variable (its value is read at run time, never stored here)."""


def _url_validator(*schemes: str) -> AfterValidator:
    def check(value: str) -> str:
        try:
            parts = urlsplit(value)
            ok = parts.scheme in schemes and bool(parts.hostname)
            _ = parts.port  # raises ValueError on a bad port
        except ValueError:
            ok = False
        if not ok or any(c.isspace() for c in value):
            raise ValueError(f"must be a {' or '.join(s + '://' for s in schemes)} URL with a host")
        return value

    return AfterValidator(check)


HttpUrl = Annotated[str, _url_validator("http", "https")]
WsUrl = Annotated[str, _url_validator("ws", "wss")]

Usd = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A positive, finite amount of US dollars."""

Millis = Annotated[int, Field(ge=1, le=86_400_000)]
"""A positive duration in milliseconds (at most a day)."""

_STRATEGY_RE = re.compile(
    r"[a-z_][a-z0-9_]*"  # a built-in, by name
    r"|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"  # module:Class
)


def strategy_ref(value: str) -> str:
    if not _STRATEGY_RE.fullmatch(value):
        raise ValueError(
            'must be a built-in strategy name (like "spread") or "package.module:ClassName"'
        )
    return value


_JSON_PATH_RE = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def json_path(value: str) -> str:
    if not _JSON_PATH_RE.fullmatch(value):
        raise ValueError(
            'must be a dot path of keys and list indexes, like "data.price" or "0.usd"'
        )
    return value


def upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP (``127.0.0.0/8``, ``::1``); a wildcard is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_address(value: str | None) -> str | None:
    """``metrics.listen``: ``host:port`` on loopback, or None. The one rule of ``config check``
    and ``run`` (the control server refuses the same hosts): the control API can pause the
    bot and ``/metrics`` shows its inventory, so it is never served to the network."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError('must be "host:port" (port 0-65535), or null to disable')
    if not is_loopback(host):
        raise ValueError(
            f"{host} is not a loopback address: the control API is served on loopback only "
            "(127.0.0.1, ::1, localhost); put an authenticated proxy in front for remote access"
        )
    return value


NonNegativeUsd = Annotated[float, Field(ge=0, allow_inf_nan=False)]
