"""Recorded quote streams, format version 1: write and read (``docs/backtest.md``).

A stream is JSON Lines, optionally gzip, one event per line in time order; the first line is
the header. :class:`StreamWriter` writes one (gzip when the path ends with ``.gz``, rotating to
``PATH.1``, ``PATH.2``, … by size, each part with its own header); :func:`read_stream` reads
one back as :mod:`backtest.events` objects, line by line, so memory stays flat however long the
stream is.

Reading rules:

- the header must be the first line, with ``"v": 1`` (a reader refuses versions it does not
  know) — else :class:`StreamError`; an empty file is ``StreamError("empty stream")``, a header
  alone is a valid stream of zero events;
- an event of an unknown ``kind`` is skipped and counted (newer writers may add kinds);
- a malformed line (bad JSON, a JSON number where an amount string belongs, both or neither
  exact amount, an asset missing from the header's tokens, a missing field, …) is reported in
  :attr:`StreamStats.malformed` with its line number and skipped; with ``strict=True`` the first
  one raises :class:`StreamError` instead;
- a timestamp earlier than the previous event's is ``StreamError("unsorted timestamps at line
  N")`` even when not strict: a replay in the wrong order would be wrong, not merely partial.

The hot path parses with orjson and checks fields by hand with the rules of
:class:`solver.protocol.bus.QuoteRequestEvent` read with ``context=WIRE`` (amounts are u128
decimal strings, never JSON numbers), which is several times faster than a pydantic model per
line.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

import orjson

from backtest.events import (
    FORMAT_VERSION,
    CompetitorEvent,
    Header,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    StreamEvent,
    TokenInfo,
)
from solver.core.market import QuoteRequest
from solver.errors import SolverError
from solver.protocol.amounts import U128_MAX
from solver.protocol.ids import validate_asset_id

GZIP_MAGIC: Final = b"\x1f\x8b"
MAX_MALFORMED_KEPT: Final = 1000
"""How many malformed lines :attr:`StreamStats.malformed` keeps; the total is always counted."""
MAX_LINE_BYTES: Final = 1 << 20
_WRITE_BUFFER: Final = 1 << 16
MAX_QUOTE_ID_LEN: Final = 256
MAX_MIN_DEADLINE_MS: Final = 86_400_000
KINDS: Final = ("quote_request", "price", "competitor", "quote_status")

PathLike = str | os.PathLike[str]

_USD_RE = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_U128_DIGITS = 39


class StreamError(SolverError):
    """A stream that cannot be replayed (or, in strict mode, the first malformed line).

    ``line`` is the 1-based line number when the problem has one; ``path`` the file.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}: " if path else ""
        super().__init__(where + message)
        self.path = path
        self.line = line


class _Malformed(Exception):
    """Internal: one bad line; the message is the reason reported with its line number."""


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


def _u128(value: Any, name: str) -> int:
    """A u128 decimal string (the rule of ``solver.protocol.amounts.parse_u128``)."""
    if type(value) is not str:
        what = "a JSON number" if type(value) in (int, float) else type(value).__name__
        raise _Malformed(f"{name} must be a decimal string, got {what}")
    if (
        not value
        or len(value) > _U128_DIGITS
        or not value.isascii()
        or not value.isdigit()
        or (value[0] == "0" and len(value) > 1)
    ):
        raise _Malformed(f"{name} {value[:50]!r} is not an unsigned decimal integer")
    number = int(value)
    if number > U128_MAX:
        raise _Malformed(f"{name} {value} exceeds u128")
    return number


def _text(data: Mapping[str, Any], name: str, *, max_len: int = 1024) -> str:
    value = data.get(name)
    if value is None:
        raise _Malformed(f"missing {name}")
    if type(value) is not str or not value or len(value) > max_len:
        raise _Malformed(f"{name} must be a non-empty string of at most {max_len} characters")
    return value


def usd_text(value: str | float | int) -> str:
    """A positive decimal string for a price (``"3.0412"``): no exponent, no sign."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = format(Decimal(repr(value)), "f")
    else:
        text = str(value)
    if not _USD_RE.fullmatch(text) or not any(c in "123456789" for c in text):
        raise ValueError(f"price {text[:40]!r} is not a positive decimal string")
    return text


# ---------------------------------------------------------------------------------- writer


def _header_line(header: Header) -> bytes:
    return orjson.dumps(
        {
            "v": FORMAT_VERSION,
            "kind": "header",
            "created": format_ts(header.created),
            "source": header.source,
            "tokens": {
                asset: {"symbol": info.symbol, "decimals": info.decimals}
                for asset, info in header.tokens.items()
            },
        }
    )


def event_to_json(event: StreamEvent) -> dict[str, Any]:
    """The JSON object of one event line (amounts as strings, ``ts`` with ms and ``Z``)."""
    ts = format_ts(event.ts)
    if isinstance(event, RequestEvent):
        request = event.request
        data: dict[str, Any] = {
            "quote_id": request.quote_id,
            "core_asset_identifier_in": request.asset_in,
            "core_asset_identifier_out": request.asset_out,
            ("exact_amount_in" if request.exact_in else "exact_amount_out"): str(request.amount),
            "min_deadline_ms": request.min_deadline_ms,
        }
        meta = {"partner_id": request.partner_id} if request.partner_id is not None else {}
        return {"v": FORMAT_VERSION, "ts": ts, "kind": "quote_request", "data": data, "meta": meta}
    if isinstance(event, PriceEvent):
        return {
            "v": FORMAT_VERSION,
            "ts": ts,
            "kind": "price",
            "data": {"asset": event.asset, "usd": event.usd},
        }
    if isinstance(event, CompetitorEvent):
        return {
            "v": FORMAT_VERSION,
            "ts": ts,
            "kind": "competitor",
            "data": {"quote_id": event.quote_id, "best_amount": str(event.best_amount)},
        }
    if isinstance(event, StatusEvent):
        return {
            "v": FORMAT_VERSION,
            "ts": ts,
            "kind": "quote_status",
            "data": {
                "quote_hash": event.quote_hash,
                "intent_hash": event.intent_hash,
                "tx_hash": event.tx_hash,
            },
        }
    raise TypeError(f"not a stream event: {type(event).__name__}")


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


class StreamWriter:
    """Writes a stream: ``write(event)`` per event, in time order; ``close()`` at the end.

    Gzip when ``path`` ends with ``.gz``. With ``rotate_bytes``, once a part holds at least that
    many bytes on disk (for gzip: compressed bytes flushed so far, which lag the compressor's
    buffer) the next event starts ``PATH.1``, then ``PATH.2``, …, each with the same header.
    Not thread-safe: use it from one thread at a time.
    """

    def __init__(self, path: PathLike, header: Header, *, rotate_bytes: int | None = None) -> None:
        if rotate_bytes is not None and rotate_bytes <= 0:
            raise ValueError("rotate_bytes must be positive")
        self.path = Path(path)
        self.header = header
        self.rotate_bytes = rotate_bytes
        self.gzip = self.path.name.endswith(".gz")
        self.paths: list[Path] = []
        self.events_written = 0
        self.bytes_closed = 0  # on-disk bytes of the parts already closed
        self._header = _header_line(header) + b"\n"
        self._raw: IO[bytes] | None = None
        self._gz: gzip.GzipFile | None = None
        self._out: IO[bytes] | None = None
        self._part_bytes = 0
        self._last_ts: datetime | None = None
        self._closed = False
        self._open_part()

    def _open_part(self) -> None:
        target = part_path(self.path, len(self.paths))
        target.parent.mkdir(parents=True, exist_ok=True)
        raw = open(target, "wb")  # noqa: SIM115 - closed in _close_part
        self._raw = raw
        if self.gzip:
            # mtime=0 and no file name: the same events give byte-identical files. The
            # BufferedWriter batches lines: one compressor call per 64 KiB, not per line.
            self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            self._out = io.BufferedWriter(self._gz, buffer_size=_WRITE_BUFFER)
        else:
            self._out = raw
        self.paths.append(target)
        self._out.write(self._header)
        self._part_bytes = len(self._header)

    def _close_part(self) -> None:
        if self._out is not None:
            self._out.close()  # for gzip: flushes into the GzipFile and writes its trailer
        if self._gz is not None and not self._gz.closed:
            self._gz.close()
        if self._raw is not None:
            if not self._raw.closed:
                self._raw.close()
            self.bytes_closed += self.paths[-1].stat().st_size
        self._out = self._raw = self._gz = None

    def _disk_bytes(self) -> int:
        if self.gzip:
            assert self._raw is not None
            return self._raw.tell()
        return self._part_bytes

    @property
    def bytes_written(self) -> int:
        """Bytes on disk so far, all parts (approximate for the open gzip part)."""
        return self.bytes_closed + (self._disk_bytes() if self._raw is not None else 0)

    def write(self, event: StreamEvent) -> None:
        """Append one event. Raises ``ValueError`` if it is earlier than the previous one."""
        if self._closed:
            raise ValueError("the stream writer is closed")
        line = orjson.dumps(event_to_json(event)) + b"\n"  # refuses a naive ts first
        last = self._last_ts
        if last is not None and event.ts < last:
            raise ValueError(
                f"events must be written in time order: {format_ts(event.ts)} after "
                f"{format_ts(last)}"
            )
        if (
            self.rotate_bytes is not None
            and self._part_bytes > len(self._header)
            and self._disk_bytes() >= self.rotate_bytes
        ):
            self._close_part()
            self._open_part()
        assert self._out is not None
        self._out.write(line)
        self._part_bytes += len(line)
        self._last_ts = event.ts
        self.events_written += 1

    def write_all(self, events: Iterable[StreamEvent]) -> None:
        for event in events:
            self.write(event)

    def flush(self) -> None:
        """Push what was written to the OS: a reader sees every complete line (for gzip, a
        sync flush of the compressor, so the part decompresses up to here)."""
        if self._out is not None:
            self._out.flush()
        if self._gz is not None:
            self._gz.flush()
        if self._raw is not None:
            self._raw.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close_part()

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def write_stream(path: PathLike, header: Header, events: Iterable[StreamEvent]) -> Path:
    """Write a whole stream in one call; returns the path."""
    with StreamWriter(path, header) as writer:
        writer.write_all(events)
    return Path(path)


# ---------------------------------------------------------------------------------- reader


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
        }


def _open_bytes(path: Path) -> IO[bytes]:
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


def _parse_header(line: bytes, path: str) -> Header:
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
    return Header(created=created, source=source, tokens=tokens)


class StreamReader(Iterator[StreamEvent]):
    """Iterates the events of one stream file (or of a rotated set, in order).

    Open it with :func:`read_stream`. :attr:`header` is read at once; :attr:`stats` grows as
    events are read. The file is closed when the iteration ends, on :meth:`close`, or at the
    end of a ``with`` block.
    """

    def __init__(self, paths: Sequence[Path], *, strict: bool = False) -> None:
        if not paths:
            raise StreamError("no stream file given")
        self.paths = list(paths)
        self.strict = strict
        self.stats = StreamStats()
        headers = [self._read_header(path) for path in self.paths]
        self.header = _merge_headers(headers, self.paths)
        self._tokens = self.header.tokens
        self._current = str(self.paths[0])
        self._prefix = len(self.paths) > 1
        self._last_ts: datetime | None = None
        self._file: IO[bytes] | None = None
        self._part = 0  # index of the next part to open
        self._number = 0  # line number in the open part
        self._base = 0  # lines of the parts already read
        self._done = False

    @staticmethod
    def _read_header(path: Path) -> Header:
        with _open_bytes(path) as stream:
            try:
                first = stream.readline(MAX_LINE_BYTES)
                while first and not first.strip():
                    first = stream.readline(MAX_LINE_BYTES)
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
                raise StreamError(f"cannot read stream: {exc}", path=str(path)) from None
        if not first:
            raise StreamError("empty stream", path=str(path), line=0)
        return _parse_header(first, str(path))

    def _open_next(self) -> bool:
        """Open the next part, positioned after its header; False when none is left."""
        if self._part >= len(self.paths):
            return False
        path = self.paths[self._part]
        self._part += 1
        self._current = str(path)
        file = _open_bytes(path)
        number = 0
        try:
            for line in file:  # the header: the first non-blank line (checked at open)
                number += 1
                if line.strip():
                    break
                self.stats.blank_lines += 1
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            file.close()
            raise StreamError(f"cannot read stream: {exc}", path=str(path)) from None
        self._file, self._number = file, number
        self.stats.lines = self._base + number
        return True

    def _end_part(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._base += self._number
        self._number = 0

    def __iter__(self) -> StreamReader:
        return self

    def __next__(self) -> StreamEvent:
        if self._done:
            raise StopIteration
        stats = self.stats
        events = stats.events
        loads = orjson.loads
        fromisoformat = datetime.fromisoformat
        parsers = _PARSERS
        while True:
            file = self._file
            if file is None:
                if not self._open_next():
                    self._done = True
                    raise StopIteration
                continue
            number = self._number
            try:
                for line in file:
                    number += 1
                    try:
                        # The hot path, inlined: a line -> an event (or None), else _Malformed.
                        try:
                            obj = loads(line)
                        except orjson.JSONDecodeError:
                            if not line.strip():
                                stats.blank_lines += 1
                                continue
                            raise _Malformed("invalid JSON") from None
                        if type(obj) is not dict:
                            raise _Malformed("not a JSON object")
                        kind: Any = obj.get("kind")
                        parser = parsers.get(kind) if type(kind) is str else None
                        if parser is None:
                            self._other_kind(kind)
                            continue
                        version = obj.get("v")
                        if type(version) is not int or version != FORMAT_VERSION:
                            raise _Malformed(f"unsupported event version {version!r}")
                        text = obj.get("ts")
                        if type(text) is str and text[-1:] == "Z":
                            try:
                                ts = fromisoformat(text)
                            except ValueError:
                                raise _Malformed(f"ts {text[:40]!r} is not ISO 8601") from None
                        else:
                            try:
                                ts = parse_ts(text)
                            except ValueError as exc:
                                raise _Malformed(str(exc)) from None
                        last = self._last_ts
                        if last is not None and ts < last:
                            self._unsorted(number, ts, last)
                        self._last_ts = ts
                        data = obj.get("data")
                        if type(data) is not dict:
                            raise _Malformed(f"{kind}: data must be an object")
                        event = parser(self, ts, data, obj)
                    except _Malformed as bad:
                        self._malformed(number, bad)
                        continue
                    events[kind] = events.get(kind, 0) + 1
                    self._number = number
                    return event
            except EOFError:
                # A gzip part cut short (a recorder killed mid-write): keep what was read.
                self._number = number
                self._malformed(number + 1, _Malformed("truncated gzip stream: the file ends here"))
            except (OSError, gzip.BadGzipFile, zlib.error) as exc:
                path = self._current
                self.close()
                raise StreamError(
                    f"cannot read stream after line {number}: {exc}", path=path, line=number
                ) from None
            finally:
                stats.lines = self._base + number
            self._number = number
            self._end_part()

    def _malformed(self, number: int, bad: _Malformed) -> None:
        if self.strict:
            path = self._current
            self.close()
            raise StreamError(f"malformed line {number}: {bad}", path=path, line=number) from None
        stats = self.stats
        stats.malformed_total += 1
        if len(stats.malformed) < MAX_MALFORMED_KEPT:
            reason = f"{self._current}: {bad}" if self._prefix else str(bad)
            stats.malformed.append((number, reason))

    def _unsorted(self, number: int, ts: datetime, last: datetime) -> None:
        path = self._current
        self.close()
        raise StreamError(
            f"unsorted timestamps at line {number}: {format_ts(ts)} is earlier than the "
            f"previous event's {format_ts(last)} (sort the stream by ts)",
            path=path,
            line=number,
        )

    def _other_kind(self, kind: Any) -> None:
        """A line whose kind has no parser: a second header is malformed, the rest skipped."""
        if type(kind) is not str:
            raise _Malformed("missing kind")
        if kind == "header":
            raise _Malformed("a second header inside the stream")
        self._unknown(kind)

    def _unknown(self, kind: str) -> None:
        stats = self.stats
        stats.unknown_kinds += 1
        key = kind[:64]
        if key in stats.unknown_by_kind or len(stats.unknown_by_kind) < 100:
            stats.unknown_by_kind[key] = stats.unknown_by_kind.get(key, 0) + 1

    def _asset(self, data: Mapping[str, Any], name: str) -> str:
        value = data.get(name)
        if value is None:
            raise _Malformed(f"missing {name}")
        if type(value) is not str:
            raise _Malformed(f"{name} must be a string")
        if value not in self._tokens:
            raise _Malformed(f"unknown asset {value[:80]} ({name} is not in the header's tokens)")
        return value

    def _quote_request(
        self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]
    ) -> RequestEvent:
        get = data.get
        quote_id = get("quote_id")
        asset_in = get("core_asset_identifier_in")
        asset_out = get("core_asset_identifier_out")
        raw_in = get("exact_amount_in")
        raw_out = get("exact_amount_out")
        deadline = get("min_deadline_ms")
        tokens = self._tokens
        raw = raw_in if raw_out is None else raw_out if raw_in is None else None
        # Fast path: every check of _quote_request_checked, in one expression.
        if (
            type(quote_id) is str
            and 0 < len(quote_id) <= MAX_QUOTE_ID_LEN
            and type(asset_in) is str
            and type(asset_out) is str
            and asset_in in tokens
            and asset_out in tokens
            and asset_in != asset_out
            and type(raw) is str
            and 0 < len(raw) <= _U128_DIGITS
            and raw[0] != "0"
            and raw.isdigit()
            and raw.isascii()
            and type(deadline) is int
            and 0 <= deadline <= MAX_MIN_DEADLINE_MS
        ):
            amount = int(raw)
            meta = obj.get("meta")
            partner = meta.get("partner_id") if type(meta) is dict else None
            if (
                amount <= U128_MAX
                and (meta is None or type(meta) is dict)
                and (partner is None or type(partner) is str)
            ):
                request = QuoteRequest(
                    quote_id, asset_in, asset_out, raw_in is not None, amount, deadline, partner
                )
                return RequestEvent(ts, request)
        return self._quote_request_checked(ts, data, obj)

    def _quote_request_checked(
        self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]
    ) -> RequestEvent:
        """The same checks one at a time, each failure naming its field."""
        quote_id = _text(data, "quote_id", max_len=MAX_QUOTE_ID_LEN)
        asset_in = self._asset(data, "core_asset_identifier_in")
        asset_out = self._asset(data, "core_asset_identifier_out")
        if asset_in == asset_out:
            raise _Malformed("asset in and asset out must differ")
        raw_in, raw_out = data.get("exact_amount_in"), data.get("exact_amount_out")
        if (raw_in is None) == (raw_out is None):
            raise _Malformed("exactly one of exact_amount_in and exact_amount_out must be given")
        exact_in = raw_in is not None
        amount = _u128(
            raw_in if exact_in else raw_out, "exact_amount_in" if exact_in else "exact_amount_out"
        )
        if amount == 0:
            raise _Malformed("the exact amount must be positive")
        deadline = data.get("min_deadline_ms")
        if deadline is None:
            raise _Malformed("missing min_deadline_ms")
        if type(deadline) is not int or not 0 <= deadline <= MAX_MIN_DEADLINE_MS:
            raise _Malformed(f"min_deadline_ms must be an integer 0..{MAX_MIN_DEADLINE_MS}")
        meta = obj.get("meta")
        partner: str | None = None
        if meta is not None:
            if type(meta) is not dict:
                raise _Malformed("meta must be an object")
            partner_value = meta.get("partner_id")
            if partner_value is not None:
                if type(partner_value) is not str:
                    raise _Malformed("meta.partner_id must be a string")
                partner = partner_value
        return RequestEvent(
            ts, QuoteRequest(quote_id, asset_in, asset_out, exact_in, amount, deadline, partner)
        )

    def _price(self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]) -> PriceEvent:
        asset = self._asset(data, "asset")
        usd = data.get("usd")
        if usd is None:
            raise _Malformed("missing usd")
        if type(usd) is not str:
            raise _Malformed(
                "usd must be a decimal string, got a JSON number"
                if type(usd) in (int, float)
                else "usd must be a decimal string"
            )
        if len(usd) > 64 or not _USD_RE.fullmatch(usd) or not any(c in "123456789" for c in usd):
            raise _Malformed(f"usd {usd[:40]!r} is not a positive decimal string")
        return PriceEvent(ts, asset, usd)

    def _competitor(
        self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]
    ) -> CompetitorEvent:
        quote_id = _text(data, "quote_id", max_len=MAX_QUOTE_ID_LEN)
        if data.get("best_amount") is None:
            raise _Malformed("missing best_amount")
        return CompetitorEvent(ts, quote_id, _u128(data["best_amount"], "best_amount"))

    def _status(self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]) -> StatusEvent:
        quote_hash = _text(data, "quote_hash")
        intent_hash = _text(data, "intent_hash")
        tx_hash = data.get("tx_hash")
        if tx_hash is not None and type(tx_hash) is not str:
            raise _Malformed("tx_hash must be a string or null")
        return StatusEvent(ts, quote_hash, intent_hash, tx_hash)

    def close(self) -> None:
        """Stop reading and close the file (idempotent)."""
        self._done = True
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __del__(self) -> None:
        # An abandoned reader closes its file quietly (no ResourceWarning).
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_Parser = Callable[[StreamReader, datetime, dict[str, Any], dict[str, Any]], StreamEvent]
_PARSERS: dict[str, _Parser] = {
    "quote_request": StreamReader._quote_request,
    "price": StreamReader._price,
    "competitor": StreamReader._competitor,
    "quote_status": StreamReader._status,
}


def _merge_headers(headers: Sequence[Header], paths: Sequence[Path]) -> Header:
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
    return Header(created=first.created, source=first.source, tokens=tokens)


def read_stream(path: PathLike | Sequence[PathLike], *, strict: bool = False) -> StreamReader:
    """Open a stream for reading; iterate the result for its events.

    ``path`` is one file (plain or gzip, detected by its magic bytes) or a sequence of files
    read in order as one stream (the parts of a rotated recording, see :func:`stream_parts`;
    their headers must agree on tokens, and line numbers in reports are prefixed with the file).
    Raises :class:`StreamError` at once for an unreadable or empty file or a bad header.
    """
    if isinstance(path, str | os.PathLike):
        return StreamReader([Path(path)], strict=strict)
    return StreamReader([Path(p) for p in path], strict=strict)
