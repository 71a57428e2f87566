"""The store through the running bot's control API (issue 24).

The bot holds its store alone (exclusive locking, :mod:`solver.io.store.owner`), so while it
runs ``solver history``, ``solver store export`` and ``solver store backup`` ask it instead of
opening the file; it reads its own store, on its event loop, between quotes. All three need the
control token, like pause and resume.

``GET /control/store/history?kind=fills|quotes|pairs&since=ISO&base=ID&quote=ID&limit=N``
    ``{"rows": [...], "totals": [...], "lost_quote_sample_rate": r}``: the records of
    :mod:`solver.io.store.records` (rows: fills or quotes, newest first, a quote with its
    weight; totals per pair, with the bot's token decimals for USD), and the rate at which lost
    quotes keep a row (issue 29).
``GET /control/store/export?table=NAME&format=csv|jsonl``
    ``{"rows": N, "text": "...", "lost_quote_sample_rate": r}``: the whole table (built in
    memory: meant for the tables people export, not for a store of many gigabytes — back that
    up, export from the copy).
``POST /control/store/backup`` ``{"path": "/absolute/new/file"}``
    :meth:`~solver.io.store.sqlite_store.Store.backup` to a new file on the bot's host, as the
    bot's user: ``{"path", "bytes", "seconds"}``. The bot holds the event loop while it copies.

A store error is ``503`` with its message (the bot goes on; its status says the same).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Query
from fastapi.params import Depends
from pydantic import BaseModel, ConfigDict, Field

from solver.io.store.records import fill_record, quote_record, totals_doc
from solver.io.store.schema import TABLES, StoreError
from solver.io.store.sqlite_store import Store

log = logging.getLogger("solver.control")


class BackupBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: Annotated[str, Field(min_length=2, max_length=4096)]


def add_store_routes(
    app: FastAPI, store: Store, guarded: Sequence[Depends], decimals: Mapping[str, int]
) -> None:
    """Add the three routes to ``app`` (the token checked by ``guarded``)."""

    @app.get("/control/store/history", dependencies=list(guarded))
    async def history(
        kind: Literal["fills", "quotes", "pairs"] = "fills",
        since: str | None = None,
        base: str | None = None,
        quote: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 50,
    ) -> dict[str, Any]:
        try:
            when = datetime.fromisoformat(since) if since else None
        except ValueError:
            raise HTTPException(400, f"since: not an ISO time: {since!r}") from None
        if when is not None and when.tzinfo is None:
            raise HTTPException(400, "since: give a time with its offset (UTC: +00:00)")
        if (base is None) != (quote is None):
            raise HTTPException(400, "give both base and quote, or neither")
        pair = (base, quote) if base is not None and quote is not None else None
        try:
            totals = [totals_doc(t) for t in store.pair_totals(when, pair, decimals)]
            rows: list[dict[str, Any]] = []
            if kind == "fills":
                rows = [fill_record(f) for f in store.fills_since(when, pair, limit)]
            elif kind == "quotes":
                quotes = store.weighted_quotes_since(when, pair, limit)
                rows = [quote_record(q, weight) for q, weight in quotes]
            rate = store.lost_sample_rate()
        except StoreError as exc:
            raise HTTPException(503, str(exc)) from None
        return {"rows": rows, "totals": totals, "lost_quote_sample_rate": rate}

    @app.get("/control/store/export", dependencies=list(guarded))
    async def export(table: str, format: Literal["csv", "jsonl"]) -> dict[str, Any]:
        if table not in TABLES:
            raise HTTPException(400, f"unknown table {table!r}")
        out = io.StringIO()
        try:
            rows = store.export(table, format, out)
            rate = store.lost_sample_rate()
        except StoreError as exc:
            raise HTTPException(503, str(exc)) from None
        return {"rows": rows, "text": out.getvalue(), "lost_quote_sample_rate": rate}

    @app.post("/control/store/backup", dependencies=list(guarded))
    async def backup(body: BackupBody) -> dict[str, Any]:
        dest = Path(body.path)
        if not dest.is_absolute():
            raise HTTPException(400, "path: give an absolute path on the bot's host")
        started = time.perf_counter()
        try:
            size = store.backup(dest)
        except StoreError as exc:
            raise HTTPException(503, str(exc)) from None
        seconds = time.perf_counter() - started
        log.warning(
            "store backed up to %s via the control API (%d bytes, %.3f s)", dest, size, seconds
        )
        return {"path": str(dest), "bytes": size, "seconds": seconds}
