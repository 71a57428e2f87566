"""Reading recorded quote streams, format version 1 (``docs/backtest.md``).

A stream is JSON Lines, optionally gzip, one event per line in time order; the first line is
the header. :func:`read_stream` reads one (and its rotation parts, written by
:class:`backtest.stream.write.StreamWriter`) back a batch of lines at a time, so memory stays
flat however long the stream is: as :mod:`backtest.stream.events` objects (iterate the reader)
or as the replay's compact records (:meth:`StreamReader.batches`, :mod:`backtest.stream.records`).

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

An error comes after every event read before it (the batch it ends is handed out first).

The reader finds, opens and closes the parts and hands the records out; the lines themselves
are read by its :class:`~backtest.stream.line_parser.LineParser` (the hot loop and the checks of
a line that does not take the short way), which keeps the line numbers and the stats.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from backtest.stream.events import StreamEvent
from backtest.stream.files import StreamStats, merge_headers, open_bytes, parse_header
from backtest.stream.format import MAX_LINE_BYTES, PathLike, StreamError
from backtest.stream.line_parser import LineParser
from backtest.stream.records import Record, event

__all__ = ["StreamReader", "StreamStats", "read_stream"]

_open_bytes = open_bytes  # the sweep's segments read a stream's tail with it


class StreamReader(Iterator[StreamEvent]):
    """Iterates the events of one stream file (or of a rotated set, in order).

    Open it with :func:`read_stream`. :attr:`header` is read at once; :attr:`stats` grows as
    lines are read (a batch ahead of the events handed out). The file is closed when the
    iteration ends, on :meth:`close`, or at the end of a ``with`` block.
    """

    def __init__(self, paths: Sequence[Path], *, strict: bool = False) -> None:
        if not paths:
            raise StreamError("no stream file given")
        self.paths = list(paths)
        headers = [self._read_header(path) for path in self.paths]
        self.header = merge_headers(headers, self.paths)
        self._lines = LineParser(self.paths, self.header.tokens, strict=strict)
        self.strict = strict
        self.stats: StreamStats = self._lines.stats
        self._part = 0  # index of the next part to open
        self._source = self._parse()
        self._pending: list[Record] = []  # records parsed, not handed out as events yet
        self._index = 0

    @staticmethod
    def _read_header(path: Path) -> Any:
        with open_bytes(path) as stream:
            try:
                first = stream.readline(MAX_LINE_BYTES)
                while first and not first.strip():
                    first = stream.readline(MAX_LINE_BYTES)
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
                raise StreamError(f"cannot read stream: {exc}", path=str(path)) from None
        if not first:
            raise StreamError("empty stream", path=str(path), line=0)
        return parse_header(first, str(path))

    def _open_next(self) -> bool:
        """Open the next part, positioned after its header; False when none is left."""
        if self._part >= len(self.paths):
            return False
        path = self.paths[self._part]
        self._part += 1
        file = open_bytes(path)
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
        self._lines.start_part(file, str(path), number)
        return True

    # ------------------------------------------------------------------ the two ways to read

    def __iter__(self) -> StreamReader:
        return self

    def __next__(self) -> StreamEvent:
        pending, index = self._pending, self._index
        while index >= len(pending):
            self._pending = pending = []  # nothing kept once handed out
            pending, index = next(self._source), 0  # StopIteration ends the events too
            self._pending = pending
        self._index = index + 1
        return event(pending[index])

    def batches(self) -> Iterator[list[Record]]:
        """The rest of the stream as compact records (:mod:`backtest.stream.records`), those of
        a chunk of its bytes (:data:`~backtest.stream.line_parser.CHUNK`) at a time: what the
        replay reads. Never an empty list."""
        pending, index = self._pending, self._index
        if index < len(pending):
            self._pending, self._index = [], 0
            yield pending[index:]
        yield from self._source

    # ------------------------------------------------------------------ the lines

    def _parse(self) -> Iterator[list[Record]]:
        """Batches of records from the lines; an error after the batch it cuts short."""
        lines = self._lines
        while not lines.done:
            if not lines.in_part:
                if not self._open_next():
                    break
                continue
            yield from lines.part_batches()
            lines.end_part()
        self.close()

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Stop reading and close the file (idempotent)."""
        self._lines.close()

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
