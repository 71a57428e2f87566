"""Secrets never live in the config file: find anything shaped like one (refused, without
repeating it) and redact what is printed or logged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from solver.config.fields import Loc

if TYPE_CHECKING:
    from solver.config.bot import BotConfig


_B58 = "1-9A-HJ-NP-Za-km-z"
_SECRET_KEY_RE = re.compile(rf"ed25519:[{_B58}]{{80,}}")
_REDACT_RE = re.compile(rf"(?:ed25519:)?[{_B58}]{{40,}}")
_SECRET_NAME_RE = re.compile(
    r"(?:^|_)(?:secret|private|priv|seed|mnemonic|password|passwd|passphrase)(?:_|$)"
    r"|^(?:(?:signing|api|access|auth|bearer)_)?(?:key|token)$|^sk$"
)
_NAME_SUFFIXES = ("_env", "_file", "_path", "_name")
_KEYLIKE_RE = re.compile(r"(?:ed25519|secp256k1):\S+|(?:0x)?[0-9a-fA-F]{64,}|[A-Za-z0-9+/=_-]{32,}")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    """Hide anything shaped like a key or signature (long base58 runs) in an error line."""
    return _REDACT_RE.sub(REDACTED, text)


def _secret_named(name: str) -> bool:
    norm = name.strip().lower().replace("-", "_")
    return not norm.endswith(_NAME_SUFFIXES) and bool(_SECRET_NAME_RE.search(norm))


def find_secrets(data: Any, loc: Loc = ()) -> list[Loc]:
    """Paths in raw YAML data holding what looks like a secret key (never the values).

    A string (value or mapping key) containing ``ed25519:`` and 80+ base58 characters is the
    text form of a secret key; a key-like string under a name such as ``secret``, ``key`` or
    ``private_key`` is one too.
    """
    found: list[Loc] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            name = str(key)
            if _SECRET_KEY_RE.search(name):
                found.append((*loc, REDACTED))
                continue
            here = (*loc, name)
            if (
                _secret_named(name)
                and isinstance(value, str)
                and _KEYLIKE_RE.fullmatch(value.strip())
            ):
                found.append(here)
            else:
                found.extend(find_secrets(value, here))
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            found.extend(find_secrets(value, (*loc, index)))
    elif isinstance(data, str) and _SECRET_KEY_RE.search(data):
        found.append(loc)
    return found


PASTED_KEY_HINT = (
    "looks like a secret key; secrets never go in the config file: put the key in the "
    "environment variable named by account.key_env, or in a 0600 file named by account.key_file"
)


_ENV_NAME_FIELDS = frozenset({"key_env", "api_key_env", "headers_env", "token_env", "urls_env"})


def redacted_dump(config: BotConfig) -> dict[str, Any]:
    """The configuration as JSON-ready data, safe to print or log.

    Environment variable names are shown as ``$NAME``: the value is read at run time and never
    shown. No secret values exist in a valid config; long key-shaped strings are redacted anyway.
    """

    def walk(value: Any, name: str | None) -> Any:
        if isinstance(value, dict):
            return {redact(str(k)): walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, None) for v in value]
        if isinstance(value, str):
            if name in _ENV_NAME_FIELDS:
                return f"${value}"
            return redact(value)
        return value

    dumped = walk(config.model_dump(mode="json"), None)
    assert isinstance(dumped, dict)
    return dumped
