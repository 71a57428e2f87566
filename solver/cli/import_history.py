"""``solver backtest import-history``: a recorded quote stream from the history API (spec 4.3-4.5;
the stream format is in docs/backtest.md).
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from solver.cli import print_json
from solver.cli.backtest.streams import add_backtest_command, backtest_group
from solver.cli.swap.options import check_timeout, optional_config
from solver.errors import ConfigError
from solver.io.swap_client import HistoryApiClient
from solver.protocol.history import DEFAULT_HISTORY_STATUSES, MAX_HISTORY_LIMIT, TransactionsQuery
from solver.protocol.signing import first_error
from solver.protocol.swap import parse_timestamp


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``import-history`` to the ``backtest`` group (created here if it is not there yet)."""
    parser = add_backtest_command(
        backtest_group(subparsers),
        "import-history",
        "write a recorded quote stream from the history API (past swaps)",
        "Walk GET /api/v0/transactions with its cursor between --from and --to (exclusive "
        "bounds, spec 4.5) and write a recorded stream (docs/backtest.md): per past swap, "
        "the prices it implied, an exact-input quote_request, and for a SUCCESS the output "
        "the user got as the best competing answer. Prints a JSON summary.",
    )
    parser.add_argument("--config", metavar="FILE", help="bot YAML: history_api and tokens")
    parser.add_argument("--api-url", help="{api_url} of the history API (default history_api)")
    parser.add_argument(
        "--token-env", metavar="VAR", help="variable holding the bearer JWT (default history_api)"
    )
    parser.add_argument("--from", dest="start", required=True, metavar="ISO", help="start")
    parser.add_argument("--to", dest="end", required=True, metavar="ISO", help="end")
    parser.add_argument("--out", required=True, metavar="STREAM", help=".jsonl or .jsonl.gz")
    parser.add_argument(
        "--statuses",
        default=",".join(s.value for s in DEFAULT_HISTORY_STATUSES),
        help="comma-separated swap statuses to import (default: the API's default)",
    )
    parser.add_argument(
        "--page-size",
        type=int,
        default=MAX_HISTORY_LIMIT,
        help=f"records per request, 1..{MAX_HISTORY_LIMIT} (default {MAX_HISTORY_LIMIT})",
    )
    parser.add_argument("--max-pages", type=int, help="stop after this many pages")
    parser.add_argument(
        "--min-deadline-ms",
        type=int,
        default=60_000,
        help="min_deadline_ms of the requests (the history does not say; default 60000)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per request")
    parser.set_defaults(handler=cmd_import_history)


def parse_moment(text: str, option: str) -> datetime:
    """An ISO 8601 time with a zone, or a bare date (midnight UTC)."""
    value = text.strip()
    if len(value) == 10 and value[4] == "-" and value[7] == "-":
        value += "T00:00:00Z"
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def cmd_import_history(args: argparse.Namespace) -> int:
    from backtest.stream.events import Header, TokenInfo
    from backtest.stream.history_import import import_records
    from backtest.stream.write import StreamWriter

    config = optional_config(args)
    spec = config.history_api if config is not None else None
    api_url = args.api_url or (str(spec.api_url) if spec is not None else None)
    token_env = args.token_env or (spec.token_env if spec is not None else None)
    if api_url is None or token_env is None:
        raise ConfigError("give --api-url and --token-env, or a config with a history_api section")
    start, end = parse_moment(args.start, "--from"), parse_moment(args.end, "--to")
    if end <= start:
        raise ConfigError("--to must be later than --from")
    if args.max_pages is not None and args.max_pages < 1:
        raise ConfigError("--max-pages must be at least 1")
    if not 1 <= args.min_deadline_ms <= 86_400_000:
        raise ConfigError("--min-deadline-ms must be within 1..86400000")
    try:
        query = TransactionsQuery(
            number_of_transactions=args.page_size,
            statuses=args.statuses,
            start_timestamp=start,
            end_timestamp=end,
        )
    except ValidationError as exc:
        raise ConfigError(f"invalid history query: {first_error(exc)}") from None
    client = HistoryApiClient.from_env(api_url, token_env, timeout_s=check_timeout(args.timeout))
    known = (
        {a: TokenInfo(t.symbol, t.decimals) for a, t in config.tokens.items()}
        if config is not None
        else {}
    )

    async def walk() -> list[Any]:
        async with client:
            return [r async for r in client.iter_transactions(query, max_pages=args.max_pages)]

    records = asyncio.run(walk())
    result = import_records(records, known=known, min_deadline_ms=args.min_deadline_ms)
    header = Header(
        created=datetime.now(UTC),
        source=f"history-api {api_url} from {start.isoformat()} to {end.isoformat()}",
        tokens=result.tokens,
    )
    events = result.sorted_events()
    with StreamWriter(args.out, header) as writer:
        writer.write_all(events)
    print_json(
        {
            "out": str(args.out),
            "records": result.records,
            "events": len(events),
            "skipped": dict(result.skipped),
            "tokens": sorted(result.tokens),
        }
    )
    return 0
