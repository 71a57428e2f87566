"""Read a stream in another process: parsing on one core, the replay on another.

Reading is a good part of a replay's wall time (gzip, JSON, the checks of
:mod:`backtest.stream.read`). :class:`PrefetchReader` runs the ordinary
:class:`~backtest.stream.read.StreamReader` in a child process (``spawn``), which sends its
records (:mod:`backtest.stream.records`) a batch at a time through a pipe, each request as a
tuple of its fields; the replay rebuilds the ``QuoteRequest`` (:meth:`Replay.run_records`). Same
events, same order, same results as reading in-process. It saves wall time, not CPU: the child's
parsing and both sides' pickling are CPU too (the replay benchmark counts them).

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

from backtest.stream.format import PathLike, StreamError
from backtest.stream.read import StreamStats, read_stream
from backtest.stream.records import REC_REQUEST, Record
from solver.core.market import QuoteRequest

BATCH = 4096
"""Records per message: big enough that a message costs little per record."""


def _records(batch: list[tuple[Any, ...]]) -> list[Record]:
    """The records of a batch as sent: each request rebuilt once, here, by ``tuple.__new__``
    (the named tuple's own ``__new__`` is a Python frame more)."""
    new, request = tuple.__new__, QuoteRequest
    return [(REC_REQUEST, r[1], new(request, r[2:])) if r[0] == REC_REQUEST else r for r in batch]


def _produce(paths: list[str], strict: bool, conn: Connection, batch_size: int) -> None:
    """The child: read, flatten, send batches; then ``("end", stats)`` or ``("error", ...)``."""
    dumps = pickle.dumps
    out: list[tuple[Any, ...]] = []
    try:
        with read_stream(paths, strict=strict) as reader:
            for batch in reader.batches():
                # A request's record as sent: its fields in place of the request (the named
                # tuple unpacked in C; pickled, it would cost its class's reduce per request).
                out.extend(
                    [(REC_REQUEST, r[1], *r[2]) if r[0] == REC_REQUEST else r for r in batch]
                )
                while len(out) >= batch_size:
                    conn.send_bytes(dumps(out[:batch_size], pickle.HIGHEST_PROTOCOL))
                    del out[:batch_size]
            if out:
                conn.send_bytes(dumps(out, pickle.HIGHEST_PROTOCOL))
            conn.send_bytes(dumps(("end", reader.stats), pickle.HIGHEST_PROTOCOL))
    except StreamError as exc:
        if out:
            conn.send_bytes(dumps(out, pickle.HIGHEST_PROTOCOL))
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
                    yield _records(message)
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
