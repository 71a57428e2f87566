"""A stream line's envelope checked one field at a time: the long way of the line parser.

:class:`~backtest.stream.line_parser.LineParser` takes the usual line (an object with a known
kind, ``"v": 1``, a timestamp in the writer's form, a data object) the short way, inline in its
loop (issue 29: a call per line is a good part of a line's cost). Any other line is read again
here, field by field, so that the first problem raises :class:`Malformed` naming it; the line's
data is then checked by its kind's parser (:mod:`backtest.stream.kinds`). What these checks need
of the reader is its stats (blank lines and unknown kinds are counted, not malformed) and its
:class:`~backtest.stream.records.Timestamps`; the order of the times, which stops the reader,
stays with the parser. The reading rules are described in :mod:`backtest.stream.read`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from backtest.stream.events import FORMAT_VERSION
from backtest.stream.files import StreamStats
from backtest.stream.format import Malformed, parse_ts
from backtest.stream.records import KIND_TAGS, Timestamps
from solver.core.clock import micros

__all__ = ["read_envelope"]


def read_envelope(
    line: bytes, stats: StreamStats, timestamps: Timestamps
) -> tuple[int, int, dict[str, Any]] | None:
    """A line's kind (its record tag), time and object, checked one at a time (the first
    problem raises :class:`Malformed` naming it); None for a line to skip (blank, unknown kind).
    The object's ``data`` is not checked here: a line with a valid time moves the reader's last
    time even when its data turns out malformed."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        if not line.strip():
            stats.blank_lines += 1
            return None
        raise Malformed("invalid JSON") from None
    if type(obj) is not dict:
        raise Malformed("not a JSON object")
    kind: Any = obj.get("kind")
    index = KIND_TAGS.get(kind) if type(kind) is str else None
    if index is None:
        _other_kind(kind, stats)
        return None
    version = obj.get("v")
    if type(version) is not int or version != FORMAT_VERSION:
        raise Malformed(f"unsupported event version {version!r}")
    text = obj.get("ts")
    t_us = timestamps.micros(text) if type(text) is str else None
    if t_us is None:
        t_us = _slow_micros(text)
    return index, t_us, obj


def _other_kind(kind: Any, stats: StreamStats) -> None:
    """A line whose kind has no parser: a second header is malformed, the rest skipped."""
    if type(kind) is not str:
        raise Malformed("missing kind")
    if kind == "header":
        raise Malformed("a second header inside the stream")
    stats.unknown_kinds += 1
    key = kind[:64]
    if key in stats.unknown_by_kind or len(stats.unknown_by_kind) < 100:
        stats.unknown_by_kind[key] = stats.unknown_by_kind.get(key, 0) + 1


def _slow_micros(text: Any) -> int:
    """A timestamp not in the writer's own form: the full ISO 8601 parser's value or reason."""
    if type(text) is str and text[-1:] == "Z":
        try:
            return micros(datetime.fromisoformat(text))
        except ValueError:
            raise Malformed(f"ts {text[:40]!r} is not ISO 8601") from None
    try:
        return micros(parse_ts(text))
    except ValueError as exc:
        raise Malformed(str(exc)) from None
