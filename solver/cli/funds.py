"""``solver withdraw`` and ``solver transfer``: move the account's funds (spec 2.12).

- ``withdraw``: ``ft_withdraw`` of a nep141 token out of the verifier to a ledger account
  (``ft_transfer``, or ``ft_transfer_call`` with ``--msg``), optionally paying a storage deposit
  on the token contract for the receiver from the wrapped native token (never refunded).
- ``transfer``: ``transfer`` of a token to another account inside the verifier.

Amounts: ``--amount`` is a decimal integer in the token's smallest unit; ``--amount-whole`` is
a whole-token amount such as ``1.5``, converted exactly with the token's decimals from
``tokens`` of the config (more precision than the decimals allow is refused, never rounded).

Signing, publishing, output and exit codes are those of every operator command
(:func:`solver.cli.keys.run_operator_command`).
"""

from __future__ import annotations

import argparse

from pydantic import BaseModel

from solver.cli.keys import (
    OPERATOR_EPILOG,
    add_operator_arguments,
    input_error,
    run_operator_command,
)
from solver.config import BotConfig
from solver.errors import ConfigError
from solver.io import ops_build
from solver.protocol.ids import validate_asset_id


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    withdraw = subparsers.add_parser(
        "withdraw",
        help="sign and publish ft_withdraw: a nep141 token out of the verifier",
        description=(
            "Withdraw a nep141 token from the account's balance in the verifier to a ledger "
            "account (ft_withdraw). --token is the asset id (nep141:<contract>) or the bare "
            "token contract."
        ),
        epilog=OPERATOR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    withdraw.add_argument("--token", required=True, metavar="ASSET_ID", help="nep141:<contract>")
    _add_amount_arguments(withdraw)
    withdraw.add_argument("--to", required=True, metavar="ACCOUNT", help="receiving account")
    withdraw.add_argument("--memo", help="memo of the token transfer")
    withdraw.add_argument(
        "--msg", help="use ft_transfer_call with this msg (for a contract receiver)"
    )
    withdraw.add_argument(
        "--storage-deposit",
        metavar="AMOUNT",
        help="wrapped native token (smallest unit) paid for the receiver's storage on the token "
        "contract; taken from the account, never refunded",
    )
    add_operator_arguments(withdraw)
    withdraw.set_defaults(handler=cmd_withdraw)

    transfer = subparsers.add_parser(
        "transfer",
        help="sign and publish transfer: a token to another account inside the verifier",
        description="Transfer a token to another account inside the verifier (transfer).",
        epilog=OPERATOR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    transfer.add_argument(
        "--token",
        required=True,
        metavar="ASSET_ID",
        help="nep141:<contract>, nep171:... or nep245:...",
    )
    _add_amount_arguments(transfer)
    transfer.add_argument("--to", required=True, metavar="ACCOUNT", help="receiving account")
    transfer.add_argument("--memo", help="memo of the transfer")
    add_operator_arguments(transfer)
    transfer.set_defaults(handler=cmd_transfer)


def _add_amount_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("amount (exactly one)")
    amount = group.add_mutually_exclusive_group(required=True)
    amount.add_argument(
        "--amount", metavar="AMOUNT", help="decimal integer in the token's smallest unit"
    )
    amount.add_argument(
        "--amount-whole",
        metavar="N.N",
        help="whole tokens, like 1.5; converted exactly with the token's decimals from the config",
    )


def resolve_amount(args: argparse.Namespace, config: BotConfig, asset_id: str) -> int:
    """``--amount`` as given, or ``--amount-whole`` scaled by the token's configured decimals."""
    if args.amount is not None:
        try:
            return ops_build.parse_amount(args.amount)
        except ValueError as exc:
            raise input_error("--amount", exc) from None
    token = config.tokens.get(asset_id)
    if token is None:
        raise ConfigError(
            f"--amount-whole needs the decimals of {asset_id}, which is not in tokens of "
            f"{args.config}; give --amount in the smallest unit instead"
        )
    try:
        return ops_build.parse_whole_amount(args.amount_whole, token.decimals)
    except ValueError as exc:
        raise input_error("--amount-whole", exc) from None


def cmd_withdraw(args: argparse.Namespace) -> int:
    def build(config: BotConfig) -> list[BaseModel]:
        try:
            contract = ops_build.nep141_contract(args.token)
        except ValueError as exc:
            raise input_error("--token", exc) from None
        amount = resolve_amount(args, config, f"nep141:{contract}")
        storage: int | None = None
        if args.storage_deposit is not None:
            try:
                storage = ops_build.parse_amount(args.storage_deposit)
            except ValueError as exc:
                raise input_error("--storage-deposit", exc) from None
        try:
            intent = ops_build.ft_withdraw(
                contract,
                amount,
                args.to,
                memo=args.memo,
                msg=args.msg,
                storage_deposit=storage,
            )
        except ValueError as exc:
            raise input_error("--to", exc) from None
        return [intent]

    return run_operator_command(args, build)


def cmd_transfer(args: argparse.Namespace) -> int:
    def build(config: BotConfig) -> list[BaseModel]:
        try:
            validate_asset_id(args.token)
        except ValueError as exc:
            raise input_error("--token", exc) from None
        amount = resolve_amount(args, config, args.token)
        try:
            intent = ops_build.transfer(
                config.account.id, args.token, amount, args.to, memo=args.memo
            )
        except ValueError as exc:
            raise input_error("--to", exc) from None
        return [intent]

    return run_operator_command(args, build)
