"""How the long-running commands run their event loop.

``uvloop`` (libuv) where it is installed — it roughly halves the event loop's own cost on the
websocket and HTTP paths — else the standard loop. Short CLI commands keep ``asyncio.run``.
Every thread of a long-running command allocates from one malloc arena (:func:`heap.one_arena`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from solver.runtime import heap

T = TypeVar("T")


def run_service(main: Coroutine[Any, Any, T]) -> T:
    heap.one_arena()  # before the store's threads start (solver.runtime.heap)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        return asyncio.run(main)
    return uvloop.run(main)
