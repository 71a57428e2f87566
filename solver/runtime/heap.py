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

The long-running commands also give every block of a megabyte or more a mapping of its own
(:func:`large_blocks_mapped`): the snapshot is written by the store's checkpointer thread, and
``malloc_trim`` does not trim the top of a thread's own arena.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter: blocks this large or larger get a mapping of their own."""
LARGE_BLOCK = 1 << 20


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the process's own C library
    except OSError:
        return None


def large_blocks_mapped() -> bool:
    """Every block of :data:`LARGE_BLOCK` or more gets a mapping of its own, unmapped when freed,
    in whichever thread (a fixed ``M_MMAP_THRESHOLD``, which also stops glibc from raising the
    threshold after its first large free). False when this C library cannot.

    Why: the store's checkpointer thread writes the desk snapshot, and SQLite copies the 8 MB
    text as it binds it. Served from the thread's own arena, that copy's pages stayed resident
    after it was freed — ``malloc_trim`` trims only the main arena's top — 7.7 MB from the
    second snapshot on (in-process, six snapshots), and the soak's verdict read "growing"
    (+10.6 MB against its 10 MB bound). Mapped, it goes back when freed. Keeping every thread
    in one arena (``M_ARENA_MAX`` 1) did it too, but cost ~4 % of the CPU per answer at
    saturation in-process (6 interleaved pairs; the loop and the checkpointer sharing the
    arena's lock); this costs nothing measurable (3 pairs, 0.98–1.01): the bot allocates
    blocks of a megabyte only for snapshots."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK))


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
