"""A desk snapshot made over several turns of the loop (issue 29: no stall of the bot's own).

Written at once, the soak's forced snapshot (3,000 open quotes, 20,000 recently lost) held the
event loop 84 ms on a quiet machine and up to 240 ms on a busy one: ~45 ms making the
document, ~16 ms its JSON text, then the insert. Every answer waited meanwhile.

Here the desk's state is captured at once (:func:`~solver.core.desk_snapshot.capture`: the
long lists copied as values, ~1 ms), at a journal position committed right then
(``snapshot_position``); the long lists are then made documents and text in chunks, a slice
of at most about :data:`SLICE_S` a turn of the upkeep's ticker, and the text is stored with
the position of the capture. The insert (~15–35 ms with that book) and the older snapshots'
deletion (~15 ms) each take a tick of their own (``DeskSnapshots.slice``). The desk goes on
meanwhile: a restart restores the snapshot and applies every fact after that position, which
is the state the desk had then plus what came after. The document is the one
:func:`~solver.core.desk_snapshot.snapshot` makes (tested): the text of each chunk is spliced
into the text of the rest where a marker stands for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

import orjson

from solver.core.desk_snapshot import (
    LONG_PARTS,
    Captured,
    lost_docs,
    quote_docs,
    reservation_docs,
)

SLICE_S = 0.002
"""The loop's time a slice may take (it stops at the first chunk past it)."""
CHUNK = 1_000
"""Entries made a document and text at a time: ~1.5 ms of the soak's recently lost rows."""
_MARK = "\x00desk snapshot part {}\x00"
"""Stands for a long part in the rest's text (no desk value holds a NUL)."""


class SnapshotInSlices:
    """One snapshot's making: :meth:`step` until it returns the text; ``seq`` and ``at`` are
    what it is stored with, the rest is for its log line."""

    def __init__(
        self,
        captured: Captured,
        seq: int,
        at: int,
        facts: int,
        clock: Callable[[], float] = time.perf_counter,
        chunk: int = CHUNK,
    ) -> None:
        self.seq, self.at, self.facts = seq, at, facts
        self.open_quotes = len(captured.quotes)
        self.slices = 0
        self.longest_s = 0.0
        self._clock = clock
        self.started = clock()
        self._work = _text(captured, chunk)

    def step(self, budget_s: float | None = None) -> bytes | None:
        """Make the document for about ``budget_s`` (:data:`SLICE_S`); its text once complete,
        else None."""
        clock = self._clock
        started = clock()
        until = started + (SLICE_S if budget_s is None else budget_s)
        try:
            while True:
                next(self._work)
                if clock() >= until:
                    return None
        except StopIteration as done:
            text: bytes = done.value
            return text
        finally:
            self.slices += 1
            self.longest_s = max(self.longest_s, clock() - started)

    def finish(self) -> bytes:
        """The rest of the work at once (a shutdown's snapshot, or one forced)."""
        text = self.step(float("inf"))
        assert text is not None
        return text

    def took_ms(self) -> float:
        """From the capture to now, in ms."""
        return (self._clock() - self.started) * 1e3


def _text(captured: Captured, per_chunk: int) -> Generator[None, None, bytes]:
    """The document's JSON text, made a chunk per step (a generator: it yields between
    chunks and returns the text)."""
    makers: list[tuple[list[Any], Callable[[list[Any]], list[Any]]]] = [
        (captured.quotes, quote_docs),
        (captured.reservations, reservation_docs),
        (captured.lost, lost_docs),
    ]
    parts: list[list[bytes]] = []
    for entries, make in makers:
        chunks = []
        for start in range(0, len(entries), per_chunk):
            chunks.append(orjson.dumps(make(entries[start : start + per_chunk])))
            yield
        parts.append(chunks)
    rest = captured.rest
    marks = []
    for i, path in enumerate(LONG_PARTS):
        holder = rest
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = _MARK.format(i)
        marks.append(orjson.dumps(_MARK.format(i)))
    text = orjson.dumps(rest)
    pieces: list[bytes | memoryview] = []
    at = 0
    for mark, chunks in zip(marks, parts, strict=True):
        where = text.index(mark, at)
        pieces.append(memoryview(text)[at:where])
        pieces.append(b"[")
        first = True
        for chunk in chunks:
            if len(chunk) > 2:  # "[]": nothing to splice
                if not first:
                    pieces.append(b",")
                pieces.append(memoryview(chunk)[1:-1])
                first = False
        pieces.append(b"]")
        at = where + len(mark)
    pieces.append(memoryview(text)[at:])
    yield
    return b"".join(pieces)
