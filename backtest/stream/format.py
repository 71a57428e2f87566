"""Recorded quote streams, format version 1: what the writer and the reader share
(``docs/backtest.md``) — the limits, the errors, timestamps, amounts and the paths of the
rotation parts. Writing is :mod:`backtest.stream.write`, reading :mod:`backtest.stream.read`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from solver.errors import SolverError
from solver.protocol.amounts import decimal_u128

GZIP_MAGIC: Final = b"\x1f\x8b"
MAX_MALFORMED_KEPT: Final = 1000
"""How many malformed lines :attr:`StreamStats.malformed` keeps; the total is always counted."""
MAX_LINE_BYTES: Final = 1 << 20
MAX_QUOTE_ID_LEN: Final = 256
MAX_MIN_DEADLINE_MS: Final = 86_400_000
KINDS: Final = ("quote_request", "price", "competitor", "quote_status")

PathLike = str | os.PathLike[str]

USD_RE = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")


class StreamError(SolverError):
    """A stream that cannot be replayed (or, in strict mode, the first malformed line).

    ``line`` is the 1-based line number when the problem has one; ``path`` the file.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}: " if path else ""
        super().__init__(where + message)
        self.path = path
        self.line = line


class Malformed(Exception):
    """One bad line (raised and caught by the reader); the message is the reason reported
    with its line number."""


# ---------------------------------------------------------------------------------- values


def format_ts(ts: datetime) -> str:
    """``2025-01-01T00:00:00.123Z``: UTC, milliseconds (truncated), ``Z``. Naive is refused."""
    offset = ts.utcoffset()
    if offset is None:
        raise ValueError("stream timestamps must be timezone-aware (UTC)")
    if offset:
        ts = ts.astimezone(UTC)
    return (
        f"{ts.year:04d}-{ts.month:02d}-{ts.day:02d}T{ts.hour:02d}:{ts.minute:02d}:"
        f"{ts.second:02d}.{ts.microsecond // 1000:03d}Z"
    )


def parse_ts(value: Any) -> datetime:
    """An ISO 8601 timestamp with a zone (``Z`` or an offset) → an aware UTC datetime."""
    if type(value) is not str:
        raise ValueError(f"ts must be an ISO 8601 string, got {type(value).__name__}")
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"ts {value[:40]!r} is not ISO 8601") from None
    offset = ts.utcoffset()
    if offset is None:
        raise ValueError(f"ts {value[:40]!r} has no time zone (write Z for UTC)")
    return ts.astimezone(UTC) if offset else ts


def u128_field(value: Any, name: str) -> int:
    """A u128 decimal string (:func:`~solver.protocol.amounts.decimal_u128`), as Malformed."""
    try:
        return decimal_u128(value, name)
    except ValueError as exc:
        raise Malformed(str(exc)) from None


def text_field(data: Mapping[str, Any], name: str, *, max_len: int = 1024) -> str:
    value = data.get(name)
    if value is None:
        raise Malformed(f"missing {name}")
    if type(value) is not str or not value or len(value) > max_len:
        raise Malformed(f"{name} must be a non-empty string of at most {max_len} characters")
    return value


def usd_text(value: str | float | int) -> str:
    """A positive decimal string for a price (``"3.0412"``): no exponent, no sign."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = format(Decimal(repr(value)), "f")
    else:
        text = str(value)
    if not USD_RE.fullmatch(text) or not any(c in "123456789" for c in text):
        raise ValueError(f"price {text[:40]!r} is not a positive decimal string")
    return text


def part_path(path: PathLike, index: int) -> Path:
    """The path of rotation part ``index``: ``PATH`` for 0, then ``PATH.1``, ``PATH.2``, …"""
    base = Path(path)
    return base if index == 0 else base.with_name(f"{base.name}.{index}")


def stream_parts(path: PathLike) -> list[Path]:
    """``PATH`` and the rotation parts ``PATH.1``, ``PATH.2``, … that exist, in order."""
    parts: list[Path] = []
    while True:
        candidate = part_path(path, len(parts))
        if not candidate.exists():
            return parts
        parts.append(candidate)
