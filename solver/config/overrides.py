"""Dotted-key overrides of raw YAML data: ``--set a.b=c`` on the command line, sweeps, and
:meth:`BotConfig.with_overrides <solver.config.bot.BotConfig.with_overrides>`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from solver.config.secrets import redact
from solver.errors import ConfigError

_SEGMENT_RE = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


def _split_dotted(key: str) -> list[str]:
    segments: list[str] = []
    pos = 0
    while pos < len(key):
        match = _SEGMENT_RE.match(key, pos)
        if match is None:
            raise ConfigError(f"override {redact(key)!r}: cannot parse the key path")
        segments.append(match.group(1) if match.group(1) is not None else match.group(2))
        pos = match.end()
        if pos < len(key):
            if key[pos] == ".":
                pos += 1
                if pos == len(key):
                    raise ConfigError(f"override {redact(key)!r}: ends with a dot")
            elif key[pos] != "[":
                raise ConfigError(f"override {redact(key)!r}: cannot parse the key path")
    if not segments:
        raise ConfigError("override with an empty key")
    return segments


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``data`` with each dotted key of ``overrides`` set to its value.

    ``bus.ws_url``, ``pairs.0.params.spread_bps`` (digits index lists). Keys containing dots,
    like asset ids, go in brackets: ``risk.floors[nep141:usdc.near]``; a dotted run that names a
    key already present is also found without them. Missing mappings on the way are created.
    """
    result: dict[str, Any] = copy.deepcopy(dict(data))
    for dotted, value in overrides.items():
        segments = _split_dotted(dotted)
        node: Any = result
        i = 0
        while True:
            if isinstance(node, list):
                segment = segments[i]
                if not segment.isdigit() or int(segment) >= len(node):
                    raise ConfigError(
                        f"override {redact(dotted)!r}: {segment!r} is not an index of the "
                        f"list at {'.'.join(segments[:i]) or '(top level)'} "
                        f"({len(node)} items)"
                    )
                key: Any = int(segment)
                step = 1
            elif isinstance(node, dict):
                # The longest run of segments naming an existing key (asset ids hold dots).
                step = 1
                for j in range(len(segments), i + 1, -1):
                    if ".".join(segments[i:j]) in node:
                        step = j - i
                        break
                key = ".".join(segments[i : i + step])
            else:
                raise ConfigError(
                    f"override {redact(dotted)!r}: {'.'.join(segments[:i])} is not a mapping "
                    "or a list"
                )
            i += step
            if i == len(segments):
                node[key] = copy.deepcopy(value)
                break
            if isinstance(node, dict) and (key not in node or node[key] is None):
                node[key] = {}
            node = node[key]
    return result
