"""The handlers of ``solver swap quote``, ``submit`` and ``status`` (spec 4.1, 4.2; the options and
exit statuses are described in :mod:`solver.cli.swap.group`).
"""

from __future__ import annotations

import argparse
import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from solver.cli import print_json, read_json_input, warn
from solver.cli.funds import resolve_amount
from solver.cli.keys import EXIT_NOT_SETTLED, input_error, operator_key
from solver.cli.swap.options import (
    MAX_FOLLOW_S,
    check_seconds,
    follow_status,
    model_json,
    optional_config,
    parse_quote_response,
    swap_client,
)
from solver.config import BotConfig, load_bot_config
from solver.errors import ConfigError, SolverError
from solver.io import ops_build, ops_intents
from solver.io.swap_client import StatusResponse, SwapApiClient
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
)
from solver.runtime.ports import MessageSigner


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
    deadline_s = check_seconds(args.deadline_s, "--deadline-s", ops_intents.MAX_DEADLINE_S)
    wait_s = check_seconds(args.wait_s, "--wait-s", ops_intents.MAX_WAIT_S)
    follow_s = check_seconds(args.follow_s, "--follow-s", MAX_FOLLOW_S)
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
    key: SecretKey | MessageSigner | None,
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
            intent = ops_build.transfer(
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
        out["submit"] = model_json(submitted)
        if not args.follow:
            return out, True
        final = await follow_status(client, address, memo, follow_s, first=submitted)
        out["status"] = model_json(final)
        return out, final.status is SwapStatus.SUCCESS


def cmd_status(args: argparse.Namespace) -> int:
    follow_s = check_seconds(args.follow_s, "--follow-s", MAX_FOLLOW_S)
    config = optional_config(args)
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
    print_json(model_json(answer))
    if args.follow:
        return 0 if answer.status is SwapStatus.SUCCESS else EXIT_NOT_SETTLED
    return 0
