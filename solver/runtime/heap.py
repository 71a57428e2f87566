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
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_back() -> bool:
    """Return the C heap's free pages to the system; False when this C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
