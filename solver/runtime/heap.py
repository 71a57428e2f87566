"""Freed memory given back to the system after the bot's one large transient, the desk snapshot
(issue 29).

A snapshot builds the desk's document and its JSON text at once: with the soak's book (3,000
open quotes, 20,000 recently lost) ~23 MB of objects and 11 MB of text, freed a moment later.
glibc's ``malloc`` keeps freed memory for the process, and after its first large ``free`` it
serves blocks of that size from the heap instead of fresh mappings; the heap came back
fragmented, so each forced snapshot left more resident memory behind: in-process at 1,000
requests/s, RSS 127 → 151 → 164 → 166 → 167 → 177 → 182 MB over six snapshots, while Python's
own objects stayed within 0.3 MB (tracemalloc). ``malloc_trim(0)`` after each snapshot returns
the free pages (~1 ms): 127 → 141–145 MB over the same six, and 128 → 130–135 MB once SQLite
no longer kept a copy of the body too (:meth:`SqliteJournal.write_snapshot`).

Elsewhere (musl, macOS) there is no ``malloc_trim``: :func:`give_back` does nothing.

The long-running commands also keep every thread in one malloc arena (:func:`one_arena`): the
snapshot is written by the store's checkpointer thread, and ``malloc_trim`` does not trim the
top of a thread's own arena.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter: the most malloc arenas the process may have."""


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own C library
    except OSError:
        return None


def one_arena() -> bool:
    """Every thread allocates from the main arena (``M_ARENA_MAX`` 1); call it before any
    thread starts. False when this C library cannot.

    Why: the store's checkpointer thread writes the desk snapshot, and SQLite copies the 8 MB
    text as it binds it. In an arena of the thread's own that copy's pages stayed resident
    after it was freed — ``malloc_trim`` trims only the main arena's top — 7.7 MB from the
    second snapshot on (in-process, six snapshots), and the soak's verdict read "growing"
    (+10.6 MB against its 10 MB bound). In one arena :func:`give_back` returns them. The
    other threads (the checkpointer, PostgreSQL's projector, the signer's worker) allocate
    little, mostly while holding the GIL: the one arena's lock is hardly contended."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, 1))


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trimmed: Callable[[int], int] = trim
    return trimmed


def give_back() -> bool:
    """Return the C heap's free pages to the system; False when this C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
