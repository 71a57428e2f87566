"""Read a stream in another process: parsing on one core, the replay on another.

Reading is about a third of a replay's time (JSON, timestamps, the checks of
:mod:`backtest.stream.read`, one dataclass per event). :class:`PrefetchReader` runs the ordinary
:class:`~backtest.stream.read.StreamReader` in a child process (``spawn``), which sends the events
as compact tuples (:meth:`backtest.engine.Replay.run_records`), a batch at a time through a
pipe; the replay rebuilds only what the pipeline needs (a ``QuoteRequest`` and a ``datetime``
per request). Same events, same order, same results as reading in-process.

Memory stays flat: the child blocks on the pipe while the parent is busy, so at most a batch or
two are in flight. Every rule of :func:`~backtest.stream.read.read_stream` holds (the child *is* a
``StreamReader``): a malformed line is skipped and counted, or with ``strict`` stops the
stream; unsorted timestamps stop it; the :class:`~backtest.stream.format.StreamError` is raised
again here with its message, path and line. :attr:`PrefetchReader.stats` is the child's
``StreamStats``, complete once the iteration ended.

Use it where a core is free (``solver backtest run`` on a 2-core machine); a sweep already
keeps every core busy with one replay each and reads in-process.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from backtest.engine import (
    REC_COMPETITOR,
    REC_INFORMED,
    REC_PRICE,
    REC_REQUEST,
    REC_STATUS,
    Record,
    micros,
)
from backtest.stream.events import (
    CompetitorEvent,
    InformedEvent,
    PriceEvent,
    RequestEvent,
    StreamEvent,
)
from backtest.stream.format import PathLike, StreamError
from backtest.stream.read import StreamStats, read_stream

BATCH = 4096
"""Records per message: big enough that a message costs little per record."""


def record(event: StreamEvent) -> Record:
    """The compact tuple of an event (see :meth:`backtest.engine.Replay.run_records`)."""
    t_us = micros(event.ts)
    kind = type(event)
    if kind is RequestEvent:
        r = event.request  # type: ignore[union-attr]
        return (
            REC_REQUEST, t_us, r.quote_id, r.asset_in, r.asset_out, r.exact_in, r.amount,
            r.min_deadline_ms, r.partner_id,
        )  # fmt: skip
    if kind is CompetitorEvent:
        return (REC_COMPETITOR, t_us, event.quote_id, event.best_amount)  # type: ignore[union-attr]
    if kind is PriceEvent:
        return (REC_PRICE, t_us, event.asset, event.usd)  # type: ignore[union-attr]
    if kind is InformedEvent:
        return (REC_INFORMED, t_us, event.quote_id)  # type: ignore[union-attr]
    return (REC_STATUS, t_us)


def _produce(paths: list[str], strict: bool, conn: Connection, batch_size: int) -> None:
    """The child: read, convert, send batches; then ``("end", stats)`` or ``("error", ...)``."""
    dumps = pickle.dumps
    try:
        with read_stream(paths, strict=strict) as reader:
            batch: list[Record] = []
            append = batch.append
            for event in reader:
                append(record(event))
                if len(batch) >= batch_size:
                    conn.send_bytes(dumps(batch, pickle.HIGHEST_PROTOCOL))
                    batch = []
                    append = batch.append
            if batch:
                conn.send_bytes(dumps(batch, pickle.HIGHEST_PROTOCOL))
            conn.send_bytes(dumps(("end", reader.stats), pickle.HIGHEST_PROTOCOL))
    except StreamError as exc:
        conn.send_bytes(dumps(("error", str(exc), exc.path, exc.line)))
    except (BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # the parent stopped reading
    finally:
        conn.close()


class PrefetchReader:
    """Iterate for batches of records (:meth:`Replay.run_records` takes them as they are).

    ``header`` is read at once, here (a bad or missing stream fails before any child starts);
    ``stats`` is complete after the last batch. Close it (or use it as a context manager) to
    stop the child early.
    """

    def __init__(
        self, path: PathLike | Sequence[PathLike], *, strict: bool = False, batch_size: int = BATCH
    ) -> None:
        paths: list[PathLike] = [path] if isinstance(path, str | os.PathLike) else list(path)
        with read_stream(paths, strict=strict) as reader:
            self.header = reader.header
        self.paths = [str(p) for p in paths]
        self.stats = StreamStats()
        context = multiprocessing.get_context("spawn")
        receive, send = context.Pipe(duplex=False)
        self._conn: Connection | None = receive
        self._process: Any = context.Process(
            target=_produce,
            args=(self.paths, strict, send, batch_size),
            name="stream-prefetch",
            daemon=True,
        )
        self._process.start()
        send.close()
        self._done = False

    def __iter__(self) -> Iterator[list[Record]]:
        conn = self._conn
        if conn is None or self._done:
            return
        loads = pickle.loads
        try:
            while True:
                try:
                    message = loads(conn.recv_bytes())
                except EOFError:
                    raise StreamError("the stream reader process ended unexpectedly") from None
                if type(message) is list:
                    yield message
                    continue
                if message[0] == "end":
                    self.stats = message[1]
                    return
                _, text, path, line = message
                prefix = f"{path}: " if path else ""
                raise StreamError(text.removeprefix(prefix), path=path, line=line)
        finally:
            self._done = True
            self.close()

    def close(self) -> None:
        """Stop the child (if still running) and release the pipe (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        process = self._process
        if process.is_alive():
            process.join(timeout=1.0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5.0)

    def __enter__(self) -> PrefetchReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
