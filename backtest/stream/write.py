"""Writing recorded quote streams, format version 1 (``docs/backtest.md``).

:class:`StreamWriter` writes one stream: JSON Lines, one event per line in time order after
the header line; gzip when the path ends with ``.gz``; rotating to ``PATH.1``, ``PATH.2``, … by
size, each part with its own header. :func:`write_stream` writes a whole one in one call.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

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
)
from backtest.stream.format import PathLike, format_ts, part_path

_WRITE_BUFFER: Final = 1 << 16


def _header_line(header: Header) -> bytes:
    line: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "kind": "header",
        "created": format_ts(header.created),
        "source": header.source,
        "tokens": {
            asset: {"symbol": info.symbol, "decimals": info.decimals}
            for asset, info in header.tokens.items()
        },
    }
    if header.competitor_share is not None:  # unsaid: the bytes of a stream before issue 25
        line["competitor_share"] = header.competitor_share
    return orjson.dumps(line)


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
    if isinstance(event, InformedEvent):
        return {
            "v": FORMAT_VERSION,
            "ts": ts,
            "kind": "informed",
            "data": {"quote_id": event.quote_id},
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
