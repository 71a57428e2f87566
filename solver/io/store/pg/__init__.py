"""The journal on PostgreSQL: several instances of one account share it, one active at a time
under a lease whose epoch fences every group commit (DESIGN "Persistence is the desk's
journal"; docs/operations.md "Two instances")."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    from solver.io.store.pg.store import PgStore


def is_pg(store: object) -> TypeGuard[PgStore]:
    """Whether ``store`` is a PostgreSQL store, without importing its module (nor psycopg):
    until something imported it, nothing can be one. A bot on SQLite never loads either
    (~0.4 s of CPU a start on a slow machine; docs/testing.md, "The time budget")."""
    module = sys.modules.get("solver.io.store.pg.store")
    return module is not None and isinstance(store, module.PgStore)
