"""``solver history`` and ``solver store export``: read the bot's SQLite store.

``solver history`` shows recent fills or quotes, newest first, or totals per pair
(``--kind pairs``: quotes, won, win rate, fills, amounts, volume and realized PnL), as a table,
CSV or JSON; the fills and quotes tables end with the totals per pair too. The store is the
config's ``storage.path`` (``--config``) or ``--db``. The config is read only for that path,
token symbols and decimals (the table shows whole units, ``1,234.5 wNEAR``) and the pairs
(named ``BASE/QUOTE`` as configured); the signing key is never loaded. CSV and JSON keep raw
amounts in the smallest unit, as strings.

Lost quotes keep a row only when sampled (``storage.lost_quote_sample_rate``, issue 29): the
quotes listed are every other quote and that sample, each with its ``weight`` (how many quotes
it stands for); the totals count every quote (``quote_counts``), from the start of the minute
of ``--since``. Both outputs say so when the rate is below 1 (CSV and JSON on standard error).

``solver store export`` streams a whole table as CSV or JSON Lines, values as stored
(``quotes`` with its ``weight`` column; ``quote_counts`` the counts).

``solver store backup`` makes a consistent copy (:mod:`solver.cli.store_access`).

The running bot holds its store alone: while it runs, all three ask it through its control API
(it reads its own store); while it is stopped they open the file (:mod:`solver.cli.store_access`).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from rich.console import Console, JustifyMethod
from rich.table import Table

from solver.cli import EXIT_OK, print_json
from solver.cli.store_access import add_store_arguments, open_or_bot, register_backup, target
from solver.cli.store_copy import register_copy
from solver.config import TokenSpec
from solver.core.lifecycle import Quote
from solver.errors import ConfigError
from solver.io.store.records import fill_record, quote_record, totals_from_doc
from solver.io.store.schema import TABLES
from solver.io.store.sqlite_store import Fill, Store
from solver.io.store.totals import PairTotals
from solver.protocol.amounts import format_units

_RELATIVE = re.compile(r"-?(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    history = subparsers.add_parser(
        "history",
        help="show recent fills or quotes from the store",
        description=(
            "Show recent fills or quotes from the bot's store, newest first. The store is the "
            "config's storage.path, or --db. The signing key is not needed."
        ),
    )
    add_store_arguments(history)
    history.add_argument(
        "--since",
        metavar="WHEN",
        help="only rows at or after WHEN: an ISO time (UTC if no offset) or a relative "
        "time such as -90s, -30m, -1h, -24h, -7d",
    )
    history.add_argument(
        "--pair",
        metavar="BASE/QUOTE",
        help="only this pair, both directions; token symbols from the config or asset ids",
    )
    # argparse takes "-1h" for an option unless it looks like a negative number: widen the
    # pattern so ``--since -1h`` works as written (no option of this parser starts with a digit).
    history._negative_number_matcher = re.compile(r"^-\d+(?:\.\d+)?[smhdw]?$|^-\d*\.\d+$")
    history.add_argument(
        "--kind",
        choices=("fills", "quotes", "pairs"),
        default="fills",
        help="what to list: fills, quotes, or totals per pair (default fills)",
    )
    history.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (whole units, symbols), or csv / json (raw amounts as strings)",
    )
    history.add_argument(
        "--limit", type=_positive_int, default=50, metavar="N", help="at most N rows (50)"
    )
    history.set_defaults(handler=cmd_history)

    store = subparsers.add_parser(
        "store",
        help="maintain the bot's SQLite store",
        description="Maintain the bot's SQLite store (quotes, fills, balances, alerts).",
    )
    commands = store.add_subparsers(title="commands", dest="store_command", metavar="COMMAND")
    commands.required = True
    export = commands.add_parser(
        "export",
        help="stream a table as CSV or JSON Lines",
        description=(
            "Write every row of a table as CSV (with a header) or JSON Lines, values as stored: "
            "amounts as decimal strings, times in ISO 8601 UTC, nonces in hex."
        ),
    )
    add_store_arguments(export)
    export.add_argument("--table", choices=TABLES, required=True)
    export.add_argument("--format", choices=("csv", "jsonl"), required=True)
    export.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    export.set_defaults(handler=cmd_export)
    register_backup(commands)
    register_copy(commands)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# ---------------------------------------------------------------------------------- inputs


def parse_since(text: str, now: datetime) -> datetime:
    """``-1h`` / ``-30m`` / ``-7d`` (before ``now``) or an ISO time, naive ones read as UTC."""
    match = _RELATIVE.fullmatch(text.strip())
    if match is not None:
        return now - timedelta(seconds=float(match.group(1)) * _UNIT_S[match.group(2)])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: give an ISO time (2025-01-31T12:00:00Z) or -30m, -1h, -7d"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_pair(text: str, tokens: dict[str, TokenSpec]) -> tuple[str, str]:
    """``BASE/QUOTE`` of symbols (case-insensitive) or asset ids, resolved through ``tokens``."""
    by_symbol = {spec.symbol.lower(): asset for asset, spec in tokens.items()}

    def resolve(name: str) -> str | None:
        return name if name in tokens else by_symbol.get(name.lower())

    cuts = [i for i, c in enumerate(text) if c == "/"]
    for cut in cuts:  # asset ids may hold "/": prefer a cut where both sides are known
        base, quote = resolve(text[:cut]), resolve(text[cut + 1 :])
        if base is not None and quote is not None:
            return base, quote
    if len(cuts) != 1 or not text[: cuts[0]] or not text[cuts[0] + 1 :]:
        raise ConfigError(f"--pair {text!r}: give BASE/QUOTE, as symbols or asset ids")
    base_text, quote_text = text[: cuts[0]], text[cuts[0] + 1 :]
    return resolve(base_text) or base_text, resolve(quote_text) or quote_text


# ---------------------------------------------------------------------------------- rows


def format_amount(amount: str, asset: str, tokens: dict[str, TokenSpec]) -> str:
    """Whole units and symbol when the config knows the token (exact: no float)."""
    spec = tokens.get(asset)
    if spec is None:
        return f"{amount} {asset}"
    return format_units(int(amount), spec.decimals, spec.symbol)


def pair_name(
    assets: tuple[str, str], pairs: list[tuple[str, str]], tokens: dict[str, TokenSpec]
) -> str:
    """``BASE/QUOTE`` as configured (symbols), else the two asset ids as stored."""
    a, b = assets
    base, quote = next(((x, y) for x, y in pairs if {x, y} == {a, b}), (a, b))
    names = [tokens[x].symbol if x in tokens else x for x in (base, quote)]
    return "/".join(names)


def _plain(value: Decimal) -> str:
    """``1.5`` for Decimal("1.5000000"); never exponent notation."""
    return format(value.normalize(), "f") if value else "0"


def totals_record(
    row: PairTotals, pairs: list[tuple[str, str]], tokens: dict[str, TokenSpec]
) -> dict[str, Any]:
    return {
        "pair": pair_name(row.assets, pairs, tokens),
        "assets": list(row.assets),
        "quotes": row.quotes,
        "won": row.won,
        "win_rate": row.win_rate,
        "settled": row.settled,
        "fills": row.fills,
        "received": {a: str(v) for a, v in sorted(row.received.items())},
        "paid": {a: str(v) for a, v in sorted(row.paid.items())},
        "volume_usd": None if row.volume_usd is None else _plain(row.volume_usd),
        "realized_pnl_usd": _plain(row.realized_pnl_usd),
    }


# ---------------------------------------------------------------------------------- commands


def cmd_history(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    where = target(args)
    tokens, pairs = where.tokens, where.pairs
    since = parse_since(args.since, now) if args.since else None
    pair = parse_pair(args.pair, tokens) if args.pair else None
    source = open_or_bot(args, where)
    if isinstance(source, Store):
        with source:
            decimals = {asset: spec.decimals for asset, spec in tokens.items()}
            sums = source.pair_totals(since, pair, decimals)
            rate = source.lost_sample_rate()
            if args.kind == "fills":
                rows = [fill_record(f) for f in source.fills_since(since, pair, args.limit)]
            elif args.kind == "quotes":
                quotes = source.weighted_quotes_since(since, pair, args.limit)
                rows = [quote_record(q, weight) for q, weight in quotes]
            else:
                rows = []
    else:  # the running bot reads its own store
        query: dict[str, str | int] = {"kind": args.kind, "limit": args.limit}
        if since is not None:
            query["since"] = since.isoformat()
        if pair is not None:
            query["base"], query["quote"] = pair
        doc = source.request("GET", "/control/store/history?" + urlencode(query))
        rows = list(doc["rows"])
        sums = [totals_from_doc(t) for t in doc["totals"]]
        rate = doc.get("lost_quote_sample_rate")
    totals = [totals_record(row, pairs, tokens) for row in sums]
    note = sample_note(rate) if args.kind == "quotes" else None
    if args.kind == "pairs":
        rows = totals
    if args.format in ("json", "csv") and note is not None:
        print(f"note: {note}", file=sys.stderr)
    if args.format == "json":
        print_json(rows)
    elif args.format == "csv":
        _write_csv(rows, args.kind)
    else:
        if args.kind != "pairs":
            _print_table(rows, args.kind, since, tokens, note)
        _print_totals(totals, since, tokens)
    return EXIT_OK


def sample_note(rate: float | None) -> str | None:
    """What a list of quote rows must say when lost quotes are sampled (None: every row)."""
    if rate is None or rate >= 1:
        return None
    return (
        f"lost quotes are sampled at rate {rate:g}: a lost row stands for {1 / rate:g} lost "
        "quotes (its weight); every other quote has its row, and totals count every quote"
    )


def _write_csv(rows: list[dict[str, Any]], kind: str) -> None:
    fields = list(rows[0] if rows else _empty_record(kind))
    writer = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                k: orjson.dumps(v).decode() if isinstance(v, dict | list) else v
                for k, v in row.items()
            }
        )
    sys.stdout.flush()


def _empty_record(kind: str) -> dict[str, Any]:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    if kind == "pairs":
        return totals_record(PairTotals(("", "")), [], {})
    if kind == "fills":
        return fill_record(Fill("", "", epoch, "", 0, "", 0, 0))
    return quote_record(Quote("", "", "", 0, 0, 0, 0), 1.0)


def _print_table(
    rows: list[dict[str, Any]],
    kind: str,
    since: datetime | None,
    tokens: dict[str, TokenSpec],
    note: str | None = None,
) -> None:
    when = f"since {since.isoformat(timespec='seconds')}" if since else "all time"
    table = Table(title=f"{kind}, {when}, newest first", title_justify="left")
    time_key = "at" if kind == "fills" else "created_at"
    columns = ["time", "quote_id"] + (["state"] if kind == "quotes" else [])
    columns += ["in", "out", "fee"]
    columns += ["px in USD", "px out USD", "PnL USD", "tx"] if kind == "fills" else ["reason"]
    numeric = {"in", "out", "fee", "px in USD", "px out USD", "PnL USD"}
    for name in columns:
        justify: JustifyMethod = "right" if name in numeric else "left"
        table.add_column(name, justify=justify, overflow="fold")
    for row in rows:
        cells = [row[time_key][:19].replace("T", " "), row["quote_id"]]
        if kind == "quotes":
            cells.append(row["state"])
        cells += [
            format_amount(row["amount_in"], row["asset_in"], tokens),
            format_amount(row["amount_out"], row["asset_out"], tokens),
            format_amount(row["fee"], row["asset_out"], tokens),
        ]
        if kind == "fills":
            cells += [row["price_in_usd"] or "", row["price_out_usd"] or ""]
            cells += [row["realized_pnl_usd"] or "", row["tx_hash"] or ""]
        else:
            cells.append(row["reason"] or "")
        table.add_row(*cells)
    if not rows:
        table.caption = f"no {kind}"
    if note is not None:
        table.caption = f"{table.caption}; {note}" if table.caption else note
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)


def _print_totals(
    rows: list[dict[str, Any]], since: datetime | None, tokens: dict[str, TokenSpec]
) -> None:
    when = f"since {since.isoformat(timespec='minutes')}" if since else "all time"
    table = Table(title=f"totals per pair, {when}", title_justify="left")
    columns = ("pair", "quotes", "won", "win rate", "fills", "received", "paid")
    for name in (*columns, "volume USD", "PnL USD"):
        table.add_column(name, justify="left" if name == "pair" else "right", overflow="fold")

    def amounts(values: dict[str, str]) -> str:
        return "\n".join(format_amount(v, a, tokens) for a, v in values.items()) or "-"

    for row in rows:
        rate = row["win_rate"]
        volume = row["volume_usd"]
        table.add_row(
            row["pair"],
            f"{row['quotes']:,}",
            f"{row['won']:,}",
            "-" if rate is None else f"{rate:.1%}",
            f"{row['fills']:,}",
            amounts(row["received"]),
            amounts(row["paid"]),
            "unknown" if volume is None else f"{Decimal(volume):,.2f}",
            f"{Decimal(row['realized_pnl_usd']):+,.2f}",
        )
    if not rows:
        table.caption = "no quotes"
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)


def cmd_export(args: argparse.Namespace) -> int:
    source = open_or_bot(args, target(args))
    if isinstance(source, Store):
        with source:
            _export_note(args.table, source.lost_sample_rate())
            if args.out is None:
                source.export(args.table, args.format, sys.stdout)
                sys.stdout.flush()
                return EXIT_OK
            try:
                with open(args.out, "w", encoding="utf-8", newline="") as out:
                    source.export(args.table, args.format, out)
            except OSError as exc:
                raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
        return EXIT_OK
    query = urlencode({"table": args.table, "format": args.format})
    doc = source.request("GET", "/control/store/export?" + query)
    _export_note(args.table, doc.get("lost_quote_sample_rate"))
    text = str(doc["text"])
    if args.out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return EXIT_OK
    try:
        Path(args.out).write_text(text, encoding="utf-8", newline="")
    except OSError as exc:
        raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
    return EXIT_OK


def _export_note(table: str, rate: float | None) -> None:
    """The ``quotes`` table holds a sample of the lost quotes: said on standard error."""
    note = sample_note(rate) if table == "quotes" else None
    if note is not None:
        print(f"note: {note} (quote_counts)", file=sys.stderr)
