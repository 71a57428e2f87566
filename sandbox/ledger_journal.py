"""Undo journal and event lines of the verifier ledger (spec 7.3; protocol-notes 2, 4).

Split out of :mod:`sandbox.ledger` so that module stays about the verifier's rules:

- :class:`Journal` records the previous value of every mutation so that a failed batch is
  rolled back exactly (all-or-nothing, spec 7.3);
- :func:`event` renders an ``EVENT_JSON:`` log line of standard ``dip4``;
- :func:`deltas_json` renders unmatched deltas as JSON text for error messages, so a client
  reads ``{"nep141:a.sandbox":"-5"}`` and never a Python dict repr.
"""

from __future__ import annotations

import json
from typing import Any

EVENT_STANDARD = "dip4"
EVENT_VERSION = "0.3.0"

_MISSING = object()


class Journal:
    """Undo log: every mutation records the previous value so a batch can be rolled back."""

    def __init__(self) -> None:
        self.entries: list[tuple[dict[Any, Any] | set[Any], Any, Any]] = []

    def set_item(self, mapping: dict[Any, Any], key: Any, value: Any) -> None:
        self.entries.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def setdefault(self, mapping: dict[Any, Any], key: Any, default: Any) -> Any:
        """``mapping.setdefault`` whose insertion is undone by :meth:`rollback`."""
        if key not in mapping:
            self.entries.append((mapping, key, _MISSING))
            mapping[key] = default
        return mapping[key]

    def add(self, target: set[Any], value: Any) -> None:
        if value not in target:
            self.entries.append((target, value, _MISSING))
            target.add(value)

    def discard(self, target: set[Any], value: Any) -> None:
        if value in target:
            self.entries.append((target, value, True))
            target.discard(value)

    def rollback(self) -> None:
        for container, key, old in reversed(self.entries):
            if isinstance(container, set):
                if old is _MISSING:
                    container.discard(key)
                else:
                    container.add(key)
            elif old is _MISSING:
                container.pop(key, None)
            else:
                container[key] = old
        self.entries.clear()


def event(kind: str, data: list[dict[str, Any]]) -> str:
    """One ``EVENT_JSON:`` log line (protocol-notes 4)."""
    body = {"standard": EVENT_STANDARD, "version": EVENT_VERSION, "event": kind, "data": data}
    return "EVENT_JSON:" + json.dumps(body, separators=(",", ":"))


def fmt_deltas(deltas: dict[str, int]) -> dict[str, str]:
    """Per-token sums as i128 strings, sorted by token (the wire form of protocol-notes 4)."""
    return {token: str(total) for token, total in sorted(deltas.items())}


def deltas_json(deltas: dict[str, int] | dict[str, str]) -> str:
    """Unmatched deltas as one-line JSON text, for error messages (never a Python repr)."""
    return json.dumps({t: str(v) for t, v in sorted(deltas.items())}, separators=(",", ":"))
