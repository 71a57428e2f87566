"""``solver swap …``: move inventory by hand through the swap API (docs/rebalance.md).

- ``swap quote``: ``POST /v0/quote`` (spec 4.1) for the configured account (deposit, refund and
  recipient inside the verifier, ``INTENTS``, unless told otherwise); prints the answer exactly
  as received, service signature included: keep it, it is the record for a dispute (2.2).
  ``--dry`` asks for pricing only (no deposit address).
- ``swap submit``: pay a quote's deposit with a ``transfer`` intent to its deposit address
  (signed and published as every operator intent, :mod:`solver.io.ops_intents`), then report it
  with ``POST /v0/deposit/submit`` (4.2); ``--follow`` polls the status to the end. With
  ``--tx-hash`` it only reports a deposit made some other way.
- ``swap status``: ``GET /v0/status`` of a deposit address (``--follow`` to the end).
- ``swap rebalances``: the rebalancer's records in the store, newest first (``--id`` for one,
  with its steps).

Output is one JSON line (``rebalances``: one per record). Exit status: 0 done (``submit``: the
deposit settled and was reported; with ``--follow``, the swap succeeded), 1 not done (the
deposit did not settle, the report failed, the swap was refunded or failed, or no final status
in time), 2 bad input or an unusable answer.

This module builds the parsers; the handlers are in :mod:`solver.cli.swap.handlers` and
:mod:`solver.cli.swap.rebalances`, their shared helpers in :mod:`solver.cli.swap.options`.
"""

from __future__ import annotations

import argparse

from solver.cli.keys import add_operator_arguments
from solver.cli.swap.handlers import cmd_quote, cmd_status, cmd_submit
from solver.cli.swap.options import DEFAULT_FOLLOW_S
from solver.cli.swap.rebalances import cmd_rebalances
from solver.protocol.swap import (
    DepositType,
    RecipientType,
    RefundType,
    SwapType,
)

DEFAULT_SWAP_DEADLINE_S = 1800.0


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
