"""A stream's files: their bytes (plain or gzip), the header line, and what a reader saw.

What :mod:`backtest.stream.read` needs before and around the events: opening a part (gzip
detected by its magic bytes), checking its header (the first line: ``"v": 1``, the tokens with
their decimals), merging the headers of a rotated set, and :class:`StreamStats`.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from backtest.stream.events import FORMAT_VERSION, Header, TokenInfo
from backtest.stream.format import GZIP_MAGIC, StreamError, parse_ts
from backtest.stream.records import KIND_NAMES, KIND_TAGS, Record
from solver.protocol.ids import validate_asset_id


@dataclass
class StreamStats:
    """What a reader saw. ``lines`` counts every line read, the header included."""

    lines: int = 0
    events: dict[str, int] = field(default_factory=dict)
    """Events yielded, by kind."""
    unknown_kinds: int = 0
    unknown_by_kind: dict[str, int] = field(default_factory=dict)
    """Skipped lines per unknown kind (at most 100 distinct kinds are named)."""
    blank_lines: int = 0
    malformed: list[tuple[int, str]] = field(default_factory=list)
    """(line number, reason) of the first :data:`MAX_MALFORMED_KEPT` malformed lines."""
    malformed_total: int = 0
    truncated: str | None = None
    """Why the stream ended early, or None: a gzip part cut short, or a last line cut short
    (no line end, and not an event). Reading keeps what came before; ``solver backtest run``
    exits with its own code unless ``--allow-truncated`` (docs/backtest.md)."""

    def count(self, batch: list[Record]) -> None:
        """Count the batch's records by kind (:attr:`events`, the kinds in the order first
        seen): once a batch, not a line (issue 29). The tags as bytes are counted and found in
        C; a ``Counter`` cost twice as much a record."""
        events = self.events
        tags = bytes(map(itemgetter(0), batch))
        for index in sorted(KIND_TAGS.values(), key=tags.find):
            n = tags.count(index)
            if n:
                name = KIND_NAMES[index]
                events[name] = events.get(name, 0) + n

    @property
    def total_events(self) -> int:
        return sum(self.events.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "events": dict(self.events),
            "unknown_kinds": self.unknown_kinds,
            "unknown_by_kind": dict(self.unknown_by_kind),
            "blank_lines": self.blank_lines,
            "malformed_total": self.malformed_total,
            "malformed": [list(item) for item in self.malformed],
            "truncated": self.truncated,
        }


def open_bytes(path: Path) -> io.BufferedReader:
    """The file's decompressed bytes: gzip detected by its magic bytes, not the name."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise StreamError(f"cannot open stream: {exc.strerror}", path=str(path)) from None
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise StreamError(f"cannot read stream: {exc.strerror}", path=str(path)) from None
    if magic != GZIP_MAGIC:
        return raw
    raw.close()
    try:
        # Opened by name, so closing the GzipFile closes the file too.
        compressed = gzip.GzipFile(filename=path, mode="rb")
    except OSError as exc:
        raise StreamError(f"cannot open stream: {exc.strerror}", path=str(path)) from None
    return io.BufferedReader(compressed, buffer_size=1 << 16)


def parse_header(line: bytes, path: str) -> Header:
    def fail(reason: str) -> StreamError:
        return StreamError(f"line 1: {reason}", path=path, line=1)

    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise fail("the first line must be the header, and is not JSON") from None
    if type(obj) is not dict or obj.get("kind") != "header":
        raise fail('the first line must be the header ({"v": 1, "kind": "header", ...})')
    version = obj.get("v")
    if type(version) is not int or version != FORMAT_VERSION:
        raise fail(
            f"unsupported stream version {version!r}: this reader knows version {FORMAT_VERSION}"
        )
    try:
        created = parse_ts(obj.get("created"))
    except ValueError as exc:
        raise fail(f"header created: {exc}") from None
    source = obj.get("source")
    if type(source) is not str:
        raise fail("header source must be a string")
    raw_tokens = obj.get("tokens")
    if type(raw_tokens) is not dict:
        raise fail("header tokens must be an object {asset_id: {symbol, decimals}}")
    tokens: dict[str, TokenInfo] = {}
    for asset, info in raw_tokens.items():
        try:
            validate_asset_id(asset)
        except ValueError as exc:
            raise fail(f"header tokens: {exc}") from None
        if type(info) is not dict:
            raise fail(f"header tokens.{asset} must be an object")
        symbol, decimals = info.get("symbol"), info.get("decimals")
        if type(symbol) is not str or not symbol:
            raise fail(f"header tokens.{asset}.symbol must be a non-empty string")
        if type(decimals) is not int or not 0 <= decimals <= 38:
            raise fail(f"header tokens.{asset}.decimals must be an integer 0..38")
        tokens[asset] = TokenInfo(symbol, decimals)
    share = obj.get("competitor_share")
    if share is not None and (type(share) not in (int, float) or not 0 <= share <= 1):
        raise fail("header competitor_share must be a number 0..1 (or absent)")
    return Header(created, source, tokens, None if share is None else float(share))


def merge_headers(headers: Sequence[Header], paths: Sequence[Path]) -> Header:
    """One header for a rotated set: the first one, with the tokens of all (which must agree)."""
    first = headers[0]
    if len(headers) == 1:
        return first
    tokens = dict(first.tokens)
    for header, path in zip(headers[1:], paths[1:], strict=True):
        for asset, info in header.tokens.items():
            known = tokens.setdefault(asset, info)
            if known != info:
                raise StreamError(
                    f"header tokens.{asset} differs from the first part's ({known} vs {info})",
                    path=str(path),
                    line=1,
                )
    return Header(first.created, first.source, tokens, first.competitor_share)
