"""How the long-running commands run their event loop.

``uvloop`` (libuv) where it is installed — it roughly halves the event loop's own cost on the
websocket and HTTP paths — else the standard loop. Short CLI commands keep ``asyncio.run``.
Blocks of a megabyte or more get mappings of their own (:func:`heap.large_blocks_mapped`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from solver.runtime import heap

T = TypeVar("T")


def run_service(main: Coroutine[Any, Any, T]) -> T:
    heap.large_blocks_mapped()  # large blocks go back when freed (solver.runtime.heap)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        return asyncio.run(main)
    return uvloop.run(main)
