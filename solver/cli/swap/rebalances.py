"""``solver swap rebalances``: the rebalancer's records in the store, newest first, one JSON line
each (``--id``: one, with every step).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from solver.cli import print_json
from solver.config import load_bot_config
from solver.core.rebalance_record import RebalanceRecord
from solver.errors import ConfigError
from solver.io.store.sqlite_store import Store


def rebalance_json(record: RebalanceRecord, *, full: bool = False) -> dict[str, Any]:
    """A stored rebalance as one JSON object (``full``: the quote and signed deposit too)."""
    out: dict[str, Any] = {
        "id": record.id,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "state": record.state,
        "asset": record.asset,
        "asset_in": record.asset_in,
        "amount_in": str(record.amount_in),
        "asset_out": record.asset_out,
        "amount_out": None if record.amount_out is None else str(record.amount_out),
        "deposit_address": record.deposit_address,
        "deposit_intent_hash": record.deposit_intent_hash,
        "swap_status": record.swap_status,
        "reason": record.reason,
        "finished_at": None if record.finished_at is None else record.finished_at.isoformat(),
    }
    if full:
        out.update(
            plan=record.plan,
            quote_request=record.quote_request,
            quote_response=record.quote_response,
            deposit_signed=record.deposit_signed,
            status_response=record.status_response,
        )
    return out


def cmd_rebalances(args: argparse.Namespace) -> int:
    path = Path(args.db) if args.db else load_bot_config(args.config).storage.path
    if not 1 <= args.limit <= 10_000:
        raise ConfigError("--limit must be within 1..10000")
    with Store(path, create=False, checkpoint_every_s=None) as store:
        if args.id is not None:
            found = [r for r in store.rebalances(limit=10_000) if r.id == args.id]
            if not found:
                raise ConfigError(f"no rebalance {args.id} in {path}")
            steps = [
                {"at": at.isoformat(), "state": state, "detail": detail}
                for at, state, detail in store.rebalance_steps(args.id)
            ]
            print_json({**rebalance_json(found[0], full=True), "steps": steps})
            return 0
        records = store.open_rebalances() if args.open else store.rebalances(limit=args.limit)
        for record in records[: args.limit]:
            print_json(rebalance_json(record))
    return 0
