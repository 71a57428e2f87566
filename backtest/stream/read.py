"""Reading recorded quote streams, format version 1 (``docs/backtest.md``).

A stream is JSON Lines, optionally gzip, one event per line in time order; the first line is
the header. :func:`read_stream` reads one (and its rotation parts, written by
:class:`backtest.stream.write.StreamWriter`) back as :mod:`backtest.stream.events` objects, line by
line, so memory stays flat however long the stream is.

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
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import orjson

from backtest.stream.events import (
    FORMAT_VERSION,
    CompetitorEvent,
    Header,
    InformedEvent,
    PriceEvent,
    RequestEvent,
    StatusEvent,
    StreamEvent,
    TokenInfo,
)
from backtest.stream.format import (
    GZIP_MAGIC,
    MAX_LINE_BYTES,
    MAX_MALFORMED_KEPT,
    MAX_QUOTE_ID_LEN,
    USD_RE,
    Malformed,
    PathLike,
    StreamError,
    format_ts,
    parse_ts,
    text_field,
    u128_field,
)
from solver.protocol.ids import validate_asset_id
from solver.protocol.quote_request import BadQuoteRequest, QuoteRequestParser


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
    share = obj.get("competitor_share")
    if share is not None and (type(share) not in (int, float) or not 0 <= share <= 1):
        raise fail("header competitor_share must be a number 0..1 (or absent)")
    return Header(created, source, tokens, None if share is None else float(share))


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
        self._requests = QuoteRequestParser(assets=self._tokens)
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
                        # The hot path, inlined: a line -> an event (or None), else Malformed.
                        try:
                            obj = loads(line)
                        except orjson.JSONDecodeError:
                            if not line.strip():
                                stats.blank_lines += 1
                                continue
                            raise Malformed("invalid JSON") from None
                        if type(obj) is not dict:
                            raise Malformed("not a JSON object")
                        kind: Any = obj.get("kind")
                        parser = parsers.get(kind) if type(kind) is str else None
                        if parser is None:
                            self._other_kind(kind)
                            continue
                        version = obj.get("v")
                        if type(version) is not int or version != FORMAT_VERSION:
                            raise Malformed(f"unsupported event version {version!r}")
                        text = obj.get("ts")
                        if type(text) is str and text[-1:] == "Z":
                            try:
                                ts = fromisoformat(text)
                            except ValueError:
                                raise Malformed(f"ts {text[:40]!r} is not ISO 8601") from None
                        else:
                            try:
                                ts = parse_ts(text)
                            except ValueError as exc:
                                raise Malformed(str(exc)) from None
                        last = self._last_ts
                        if last is not None and ts < last:
                            self._unsorted(number, ts, last)
                        self._last_ts = ts
                        data = obj.get("data")
                        if type(data) is not dict:
                            raise Malformed(f"{kind}: data must be an object")
                        event = parser(self, ts, data, obj)
                    except Malformed as bad:
                        if line[-1:] != b"\n":  # the last line, cut short mid-write
                            self._truncated(number, f"the last line ({number}) is cut short")
                        self._malformed(number, bad)
                        continue
                    events[kind] = events.get(kind, 0) + 1
                    self._number = number
                    return event
            except EOFError:
                # A gzip part cut short (a recorder killed mid-write): keep what was read.
                self._number = number
                self._truncated(number, f"the gzip stream is cut short after line {number}")
                self._malformed(number + 1, Malformed("truncated gzip stream: the file ends here"))
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

    def _malformed(self, number: int, bad: Malformed) -> None:
        if self.strict:
            path = self._current
            self.close()
            raise StreamError(f"malformed line {number}: {bad}", path=path, line=number) from None
        stats = self.stats
        stats.malformed_total += 1
        if len(stats.malformed) < MAX_MALFORMED_KEPT:
            reason = f"{self._current}: {bad}" if self._prefix else str(bad)
            stats.malformed.append((number, reason))

    def _truncated(self, number: int, why: str) -> None:
        stats = self.stats
        if stats.truncated is None:
            where = f"{self._current}: " if self._prefix else ""
            stats.truncated = f"{where}{why}"

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
            raise Malformed("missing kind")
        if kind == "header":
            raise Malformed("a second header inside the stream")
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
            raise Malformed(f"missing {name}")
        if type(value) is not str:
            raise Malformed(f"{name} must be a string")
        if value not in self._tokens:
            raise Malformed(f"unknown asset {value[:80]} ({name} is not in the header's tokens)")
        return value

    def _quote_request(
        self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]
    ) -> RequestEvent:
        """The request by the bus's own parser (:mod:`solver.protocol.quote_request`), with the
        header's tokens as the assets it accepts; the relay's partner from ``meta``."""
        meta = obj.get("meta")
        partner: str | None = None
        if meta is not None:
            if type(meta) is not dict:
                raise Malformed("meta must be an object")
            partner_value = meta.get("partner_id")
            if partner_value is not None:
                if type(partner_value) is not str:
                    raise Malformed("meta.partner_id must be a string")
                partner = partner_value
        try:
            return RequestEvent(ts, self._requests.parse(data, partner))
        except BadQuoteRequest as exc:
            raise Malformed(str(exc)) from None

    def _price(self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]) -> PriceEvent:
        asset = self._asset(data, "asset")
        usd = data.get("usd")
        if usd is None:
            raise Malformed("missing usd")
        if type(usd) is not str:
            raise Malformed(
                "usd must be a decimal string, got a JSON number"
                if type(usd) in (int, float)
                else "usd must be a decimal string"
            )
        if len(usd) > 64 or not USD_RE.fullmatch(usd) or not any(c in "123456789" for c in usd):
            raise Malformed(f"usd {usd[:40]!r} is not a positive decimal string")
        return PriceEvent(ts, asset, usd)

    def _competitor(
        self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]
    ) -> CompetitorEvent:
        quote_id = text_field(data, "quote_id", max_len=MAX_QUOTE_ID_LEN)
        if data.get("best_amount") is None:
            raise Malformed("missing best_amount")
        return CompetitorEvent(ts, quote_id, u128_field(data["best_amount"], "best_amount"))

    def _informed(self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]) -> InformedEvent:
        return InformedEvent(ts, text_field(data, "quote_id", max_len=MAX_QUOTE_ID_LEN))

    def _status(self, ts: datetime, data: dict[str, Any], obj: dict[str, Any]) -> StatusEvent:
        quote_hash = text_field(data, "quote_hash")
        intent_hash = text_field(data, "intent_hash")
        tx_hash = data.get("tx_hash")
        if tx_hash is not None and type(tx_hash) is not str:
            raise Malformed("tx_hash must be a string or null")
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
    "informed": StreamReader._informed,
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
    return Header(first.created, first.source, tokens, first.competitor_share)


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
