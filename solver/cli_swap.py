"""``solver swap …``: move inventory by hand through the swap API; ``solver backtest
import-history``: a recorded stream from the history API (docs/rebalance.md).

- ``swap quote``: ``POST /v0/quote`` (spec 4.1) for the configured account (deposit, refund and
  recipient inside the verifier, ``INTENTS``, unless told otherwise); prints the answer exactly
  as received, service signature included: keep it, it is the record for a dispute (2.2).
  ``--dry`` asks for pricing only (no deposit address).
- ``swap submit``: pay a quote's deposit with a ``transfer`` intent to its deposit address
  (signed and published as every operator intent, :mod:`solver.ops_intents`), then report it
  with ``POST /v0/deposit/submit`` (4.2); ``--follow`` polls the status to the end. With
  ``--tx-hash`` it only reports a deposit made some other way.
- ``swap status``: ``GET /v0/status`` of a deposit address (``--follow`` to the end).
- ``swap rebalances``: the rebalancer's records in the store, newest first (``--id`` for one,
  with its steps).

Output is one JSON line (``rebalances``: one per record). Exit status: 0 done (``submit``: the
deposit settled and was reported; with ``--follow``, the swap succeeded), 1 not done (the
deposit did not settle, the report failed, the swap was refunded or failed, or no final status
in time), 2 bad input or an unusable answer.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from solver import ops_intents
from solver.cli import print_json, read_json_input, warn
from solver.cli_funds import resolve_amount
from solver.cli_keys import EXIT_NOT_SETTLED, add_operator_arguments, input_error, operator_key
from solver.config import BotConfig, load_bot_config
from solver.errors import ConfigError, ProtocolError, SolverError
from solver.io.store import Store
from solver.io.store_schema import RebalanceRecord
from solver.io.swap_client import HistoryApiClient, StatusResponse, SwapApiClient
from solver.protocol.history import DEFAULT_HISTORY_STATUSES, MAX_HISTORY_LIMIT, TransactionsQuery
from solver.protocol.ids import validate_account_id, validate_asset_id
from solver.protocol.keys import SecretKey
from solver.protocol.signing import first_error
from solver.protocol.swap import (
    DepositSubmitRequest,
    DepositType,
    QuoteRequest,
    QuoteResponse,
    RecipientType,
    RefundType,
    SwapStatus,
    SwapType,
    from_wire,
    parse_timestamp,
)

DEFAULT_SWAP_DEADLINE_S = 1800.0
DEFAULT_FOLLOW_S = 600.0
MAX_FOLLOW_S = 86_400.0
FINAL_STATUSES = frozenset({SwapStatus.SUCCESS, SwapStatus.REFUNDED, SwapStatus.FAILED})


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    swap = subparsers.add_parser(
        "swap",
        help="move inventory by hand through the swap API: quote, pay and submit, status",
        description=(
            "Move inventory by hand through the swap API (spec 4.1, 4.2): 'quote' asks for a "
            "quote and prints it as received (keep it: it carries the service's signature); "
            "'submit' pays its deposit with a transfer intent and reports it; 'status' follows "
            "the swap; 'rebalances' lists what the rebalancer did. See docs/rebalance.md."
        ),
    )
    commands = swap.add_subparsers(title="swap commands", dest="swap_command", metavar="COMMAND")
    commands.required = True

    quote = commands.add_parser(
        "quote",
        help="ask the swap API for a quote (POST /v0/quote) and print it as received",
        description=(
            "Ask for a quote for the configured account: deposit, refund and output inside the "
            "verifier (INTENTS) unless told otherwise. Prints the answer exactly as received, "
            "with the service's signature: keep it (spec 2.2). Nothing is paid."
        ),
    )
    _add_api_arguments(quote, config_required=True)
    quote.add_argument("--from", dest="asset_in", required=True, metavar="ASSET", help="origin")
    quote.add_argument("--to", dest="asset_out", required=True, metavar="ASSET", help="destination")
    _add_amount_arguments(quote)
    quote.add_argument(
        "--swap-type",
        choices=[t.value for t in SwapType],
        default=SwapType.EXACT_INPUT.value,
        help="what --amount fixes (default EXACT_INPUT: the input; EXACT_OUTPUT: the output)",
    )
    quote.add_argument(
        "--slippage-bps",
        type=float,
        help="slippage tolerance in basis points (default rebalance.slippage_bps of the config)",
    )
    quote.add_argument("--dry", action="store_true", help="pricing only: no deposit address")
    quote.add_argument(
        "--deadline-s",
        type=float,
        default=DEFAULT_SWAP_DEADLINE_S,
        metavar="S",
        help="swap deadline from now: refunds begin after it "
        f"(default {DEFAULT_SWAP_DEADLINE_S:g})",
    )
    quote.add_argument("--recipient", metavar="ACCOUNT", help="default: account.id")
    quote.add_argument("--refund-to", metavar="ACCOUNT", help="default: account.id")
    for option, enum in (
        ("--deposit-type", DepositType),
        ("--refund-type", RefundType),
        ("--recipient-type", RecipientType),
    ):
        quote.add_argument(option, choices=[v.value for v in enum], default="INTENTS")
    quote.set_defaults(handler=cmd_quote)

    submit = commands.add_parser(
        "submit",
        help="pay a quote's deposit with a transfer intent and report it (deposit/submit)",
        description=(
            "Pay the deposit of a quote printed by 'solver swap quote' (an INTENTS deposit): a "
            "transfer of the input to its deposit address, signed for account.id and published "
            "on the bus, followed to settlement; then report it with POST /v0/deposit/submit. "
            "--dry-run signs and simulates the transfer only. --tx-hash reports a deposit made "
            "another way (nothing is paid)."
        ),
    )
    add_operator_arguments(submit)
    _add_api_arguments(submit, config_required=None)
    submit.add_argument(
        "--quote", metavar="FILE", help="the quote response JSON (file, or - for stdin)"
    )
    submit.add_argument("--tx-hash", help="report this deposit transaction instead of paying")
    submit.add_argument("--deposit-address", help="with --tx-hash and no --quote")
    submit.add_argument("--memo", help="with --tx-hash and no --quote: the deposit memo")
    _add_follow_arguments(submit)
    submit.set_defaults(handler=cmd_submit)

    status = commands.add_parser(
        "status",
        help="the status of a swap by its deposit address (GET /v0/status)",
        description="Print the swap's status and details (GET /v0/status?depositAddress=...).",
    )
    _add_api_arguments(status, config_required=False)
    status.add_argument("--deposit-address", help="the quote's deposit address")
    status.add_argument("--memo", help="the deposit memo, when the quote has one")
    status.add_argument("--quote", metavar="FILE", help="take the address from this quote JSON")
    _add_follow_arguments(status)
    status.set_defaults(handler=cmd_status)

    rebalances = commands.add_parser(
        "rebalances",
        help="the rebalancer's records in the store, newest first",
        description=(
            "List the rebalances of the store (storage.path of --config, or --db), newest "
            "first, one JSON line each; --id shows one with every step."
        ),
    )
    where = rebalances.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", metavar="FILE", help="bot YAML (for storage.path)")
    where.add_argument("--db", metavar="PATH", help="the SQLite store")
    rebalances.add_argument("--id", help="one rebalance, with its steps")
    rebalances.add_argument("--open", action="store_true", help="unfinished ones only")
    rebalances.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    rebalances.set_defaults(handler=cmd_rebalances)

    _register_import_history(subparsers)


def _register_import_history(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """``solver backtest import-history`` (top-level ``solver import-history`` without the
    ``backtest`` group)."""
    help_text = "write a recorded quote stream from the history API (past swaps)"
    description = (
        "Walk GET /api/v0/transactions with its cursor between --from and --to (exclusive "
        "bounds, spec 4.5) and write a recorded stream (docs/backtest.md): per past swap, "
        "the prices it implied, an exact-input quote_request, and for a SUCCESS the output "
        "the user got as the best competing answer. Prints a JSON summary."
    )
    try:
        from solver.cli_backtest import add_backtest_command, backtest_group
    except ImportError:  # pragma: no cover - the backtest commands ship together with this
        parser = subparsers.add_parser("import-history", help=help_text, description=description)
    else:
        group = backtest_group(subparsers)
        parser = add_backtest_command(group, "import-history", help_text, description)
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


def _add_api_arguments(parser: argparse.ArgumentParser, *, config_required: bool | None) -> None:
    """``--config`` (unless the caller added it), ``--base-url``, ``--token-env``, ``--timeout``."""
    if config_required is not None:
        parser.add_argument(
            "--config",
            required=config_required,
            metavar="FILE",
            help="bot YAML (swap_api, account, tokens; see config/default.yaml)",
        )
    parser.add_argument("--base-url", help="{base_url} of the swap API (default swap_api.base_url)")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="variable holding the bearer JWT (default swap_api.token_env; none: the 0.2 %% "
        "platform fee applies)",
    )
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request")


def _add_amount_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("amount (exactly one)")
    amount = group.add_mutually_exclusive_group(required=True)
    amount.add_argument("--amount", help="decimal integer in the token's smallest unit")
    amount.add_argument(
        "--amount-whole", metavar="N.N", help="whole tokens, converted with the config's decimals"
    )


def _add_follow_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--follow", action="store_true", help="poll the status until SUCCESS, REFUNDED or FAILED"
    )
    parser.add_argument(
        "--follow-s",
        type=float,
        default=DEFAULT_FOLLOW_S,
        metavar="S",
        help=f"how long --follow polls (default {DEFAULT_FOLLOW_S:g})",
    )


# ---------------------------------------------------------------------------------- clients


def _seconds(value: float, option: str, limit: float) -> float:
    if not math.isfinite(value) or not 0 < value <= limit:
        raise ConfigError(f"{option} must be a number of seconds in (0, {limit:g}]")
    return value


def _timeout(value: float) -> float:
    return _seconds(value, "--timeout", 600.0)


def swap_client(args: argparse.Namespace, config: BotConfig | None) -> SwapApiClient:
    """The swap API of ``--base-url`` / ``--token-env``, else of the config's ``swap_api``."""
    spec = config.swap_api if config is not None else None
    base_url = args.base_url or (str(spec.base_url) if spec is not None else None)
    if base_url is None:
        raise ConfigError("no swap API: give --base-url, or a swap_api section in the config")
    token_env = args.token_env or (spec.token_env if spec is not None else None)
    client = SwapApiClient.from_env(base_url, token_env, timeout_s=_timeout(args.timeout))
    if token_env is None:
        warn("no swap API token (swap_api.token_env): the 0.2 % platform fee applies")
    return client


def _config(args: argparse.Namespace) -> BotConfig | None:
    return load_bot_config(args.config) if getattr(args, "config", None) else None


def _json(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


# ---------------------------------------------------------------------------------- quote


def cmd_quote(args: argparse.Namespace) -> int:
    config = load_bot_config(args.config)
    for option, asset in (("--from", args.asset_in), ("--to", args.asset_out)):
        try:
            validate_asset_id(asset)
        except ValueError as exc:
            raise input_error(option, exc) from None
    swap_type = SwapType(args.swap_type)
    fixed = args.asset_out if swap_type is SwapType.EXACT_OUTPUT else args.asset_in
    amount = resolve_amount(args, config, fixed)
    slippage = args.slippage_bps if args.slippage_bps is not None else config.rebalance.slippage_bps
    if not math.isfinite(slippage) or not 0 <= slippage <= 10_000:
        raise ConfigError("--slippage-bps must be within 0..10000")
    if not math.isfinite(args.deadline_s) or not 0 < args.deadline_s <= 7 * 86_400:
        raise ConfigError("--deadline-s must be a number of seconds in (0, 604800]")
    try:
        request = QuoteRequest(
            dry=args.dry,
            swap_type=swap_type,
            slippage_tolerance=int(slippage) if float(slippage).is_integer() else slippage,
            origin_asset=args.asset_in,
            deposit_type=DepositType(args.deposit_type),
            destination_asset=args.asset_out,
            amount=amount,
            refund_to=args.refund_to or config.account.id,
            refund_type=RefundType(args.refund_type),
            recipient=args.recipient or config.account.id,
            recipient_type=RecipientType(args.recipient_type),
            deadline=datetime.now(UTC) + timedelta(seconds=args.deadline_s),
        )
    except ValidationError as exc:
        raise ConfigError(f"invalid quote request: {first_error(exc)}") from None
    client = swap_client(args, config)

    async def run() -> dict[str, Any]:
        async with client:
            _, body = await client.quote_with_body(request)
            return body

    print_json(asyncio.run(run()))
    return 0


# ---------------------------------------------------------------------------------- submit


def parse_quote_response(data: Any) -> QuoteResponse:
    if not isinstance(data, dict):
        raise ConfigError("the quote must be a JSON object (the output of 'solver swap quote')")
    try:
        return from_wire(QuoteResponse, data)
    except ValidationError as exc:
        raise ProtocolError(f"invalid quote response: {first_error(exc)}") from None


def deposit_problem(response: QuoteResponse, now: datetime) -> str | None:
    """Why this quote's deposit cannot be paid with a ``transfer`` now, or ``None``."""
    request, quote = response.quote_request, response.quote
    if request.dry:
        return "a dry quote has no deposit address: quote again without --dry"
    if request.deposit_type is not DepositType.INTENTS:
        return (
            f"depositType {request.deposit_type.value}: pay it on the origin chain, then report "
            "it with --tx-hash"
        )
    if not quote.deposit_address:
        return "the quote has no depositAddress"
    try:
        validate_account_id(quote.deposit_address)
    except ValueError:
        return f"depositAddress {quote.deposit_address[:70]!r} is not an account of the verifier"
    for name, moment in (
        ("timeWhenInactive", quote.time_when_inactive),
        ("deadline", quote.deadline),
    ):
        if moment is not None and moment <= now:
            return f"the quote's {name} {moment.isoformat()} has passed: quote again"
    if deposit_amount(response) is None:
        return "the quote states no amountIn to pay"
    return None


def deposit_amount(response: QuoteResponse) -> int | None:
    """What to pay: the quote's ``amountIn``, or the requested input of an exact-input quote."""
    if response.quote.amount_in is not None:
        return response.quote.amount_in
    request = response.quote_request
    return request.amount if request.swap_type is SwapType.EXACT_INPUT else None


def cmd_submit(args: argparse.Namespace) -> int:
    deadline_s = _seconds(args.deadline_s, "--deadline-s", ops_intents.MAX_DEADLINE_S)
    wait_s = _seconds(args.wait_s, "--wait-s", ops_intents.MAX_WAIT_S)
    follow_s = _seconds(args.follow_s, "--follow-s", MAX_FOLLOW_S)
    config = load_bot_config(args.config)
    response: QuoteResponse | None = None
    if args.quote is not None:
        response = parse_quote_response(read_json_input(args.quote, "quote response"))
    if args.tx_hash is None:
        if response is None:
            raise ConfigError("give --quote FILE (the deposit to pay), or --tx-hash to report one")
        problem = deposit_problem(response, datetime.now(UTC))
        if problem is not None:
            raise ConfigError(problem)
    address = args.deposit_address or (response.quote.deposit_address if response else None)
    memo = args.memo or (response.quote.deposit_memo if response else None)
    if address is None:
        raise ConfigError("--tx-hash needs --deposit-address or --quote")
    client = swap_client(args, config)
    key = operator_key(args, config) if args.tx_hash is None else None
    out, ok = asyncio.run(
        _submit(args, config, client, response, key, address, memo, deadline_s, wait_s, follow_s)
    )
    print_json(out)
    return 0 if ok else EXIT_NOT_SETTLED


async def _submit(
    args: argparse.Namespace,
    config: BotConfig,
    client: SwapApiClient,
    response: QuoteResponse | None,
    key: SecretKey | None,
    address: str,
    memo: str | None,
    deadline_s: float,
    wait_s: float,
    follow_s: float,
) -> tuple[dict[str, Any], bool]:
    out: dict[str, Any] = {"deposit_address": address}
    tx_hash: str | None = args.tx_hash
    async with client, ops_intents.OperatorClients.open(config) as clients:
        if tx_hash is None:
            assert response is not None and key is not None
            amount = deposit_amount(response)
            assert amount is not None
            intent = ops_intents.transfer(
                config.account.id, response.quote_request.origin_asset, amount, address, memo=memo
            )
            op = await ops_intents.sign_operation(
                clients.ledger,
                key,
                signer_id=config.account.id,
                intents=[intent],
                deadline_s=deadline_s,
                layout=config.nonce.layout,
            )
            if args.dry_run:
                simulated = await ops_intents.simulate_operation(clients.ledger, op)
                warn("dry run: the deposit was simulated, not paid, and nothing was submitted")
                out["deposit"] = simulated.to_json()
                return out, simulated.ok
            paid = await ops_intents.publish_operation(
                clients.bus, clients.ledger, op, wait_s=wait_s
            )
            out["deposit"] = paid.to_json()
            if paid.status != ops_intents.SETTLED:
                return out, False
            tx_hash = paid.tx_hash or paid.intent_hash
        request = DepositSubmitRequest(
            tx_hash=tx_hash,
            deposit_address=address,
            near_sender_account=config.account.id,
            memo=memo,
        )
        try:
            submitted = await client.submit_deposit(request)
        except SolverError as exc:
            # The deposit may be paid already: say so rather than fail without a word of it.
            out["submit_error"] = str(exc)
            warn(f"deposit/submit failed ({exc}); follow it with 'solver swap status'")
            return out, False
        out["submit"] = _json(submitted)
        if not args.follow:
            return out, True
        final = await follow_status(client, address, memo, follow_s, first=submitted)
        out["status"] = _json(final)
        return out, final.status is SwapStatus.SUCCESS


async def follow_status(
    client: SwapApiClient,
    address: str,
    memo: str | None,
    follow_s: float,
    *,
    first: StatusResponse | None = None,
    poll_s: float = 0.5,
    max_poll_s: float = 5.0,
) -> StatusResponse:
    """Poll ``GET /v0/status`` until a final status or ``follow_s``; the last answer."""
    started = time.monotonic()
    current = first or await client.status(address, memo)
    delay = poll_s
    while current.status not in FINAL_STATUSES and time.monotonic() - started < follow_s:
        await asyncio.sleep(min(delay, max(0.0, follow_s - (time.monotonic() - started))))
        delay = min(delay * 1.5, max_poll_s)
        try:
            current = await client.status(address, memo)
        except SolverError as exc:
            warn(f"status failed, still following: {exc}")
    return current


# ---------------------------------------------------------------------------------- status


def cmd_status(args: argparse.Namespace) -> int:
    follow_s = _seconds(args.follow_s, "--follow-s", MAX_FOLLOW_S)
    config = _config(args)
    address, memo = args.deposit_address, args.memo
    if args.quote is not None:
        response = parse_quote_response(read_json_input(args.quote, "quote response"))
        address = address or response.quote.deposit_address
        memo = memo or response.quote.deposit_memo
    if not address:
        raise ConfigError("give --deposit-address (or --quote with a non-dry quote)")
    client = swap_client(args, config)

    async def run() -> StatusResponse:
        async with client:
            if args.follow:
                return await follow_status(client, address, memo, follow_s)
            return await client.status(address, memo)

    answer = asyncio.run(run())
    print_json(_json(answer))
    if args.follow:
        return 0 if answer.status is SwapStatus.SUCCESS else EXIT_NOT_SETTLED
    return 0


# ---------------------------------------------------------------------------------- rebalances


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


# ---------------------------------------------------------------------------------- history


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
    from backtest.events import Header, TokenInfo
    from backtest.history_import import import_records
    from backtest.stream import StreamWriter

    config = _config(args)
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
    client = HistoryApiClient.from_env(api_url, token_env, timeout_s=_timeout(args.timeout))
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
