"""``solver keys``: ed25519 key pairs for signing intents (spec 2.11, 2.12 ``add_public_key``).

A new key's implicit account (64 hex characters, protocol-notes 4) owns it without any
registration; a named account must first sign ``add_public_key`` with a key it already holds.

Secrets: a secret key is read only from an environment variable or an owner-only (0600) file
(:func:`solver.io.key_files.load_secret_key`), written only to a new 0600 file, and printed only
on an explicit ``--show-secret``. It never appears in an error line: the key-source options
refuse values that look like a key instead of echoing them.

This module also holds the key-source options (``--key-env`` / ``--key-file``) that every
signing command shares, and the options and runner of the operator commands that sign and
publish intents for the configured account (``keys add`` / ``keys remove`` here, ``withdraw`` /
``transfer`` in :mod:`solver.cli.funds`; the library is :mod:`solver.io.ops_intents`).

Operator commands print one JSON line ``{intent_hash, status, tx_hash?, reason?, deadline}``
and exit 0 when the intent SETTLED (or, with ``--dry-run``, simulated cleanly), 1 when it did not
(FAILED, NOT_FOUND_OR_NOT_VALID, no final status within ``--wait-s``, a failed simulation), 2 on
bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from solver.cli import print_json, warn
from solver.cli import signer as signer_cli
from solver.cli.key_source import add_key_source_arguments, load_key_from_args
from solver.config import BotConfig, load_bot_config, load_signing_key
from solver.errors import ConfigError
from solver.io import ops_build, ops_intents
from solver.io.key_files import write_secret_key
from solver.protocol.ids import validate_account_id
from solver.protocol.intents import RemovePublicKey
from solver.protocol.keys import SecretKey
from solver.runtime.ports import MessageSigner

EXIT_NOT_SETTLED = 1

# ---------------------------------------------------------------- operator commands: shared

OPERATOR_EPILOG = """\
The intent is signed (nep413) for account.id of the config with the current salt from the
ledger and a fresh nonce, published alone on the bus (no solver quote), and followed with
get_status. Output: one JSON line {intent_hash, status, tx_hash?, reason?, deadline}.
status: SETTLED; FAILED (refused at once, reason is the verifier's); NOT_FOUND_OR_NOT_VALID
(accepted, not executed); PENDING / TX_BROADCASTED / UNKNOWN (no final status within --wait-s:
it may still execute until its deadline, so check before sending it again).
--dry-run signs and simulates (simulate_intents) without publishing: status SIMULATED or
SIMULATION_FAILED, with the signed item and the simulation.

Exit status: 0 settled (dry run: simulated cleanly), 1 not settled, 2 bad input.
"""


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, an optional signing-key override, ``--deadline-s``, ``--wait-s``,
    ``--dry-run``: the options every operator command shares."""
    parser.add_argument(
        "--config", required=True, metavar="FILE", help="bot YAML (see config/default.yaml)"
    )
    group = parser.add_argument_group(
        "signing key (default: account.key_env / account.key_file of the config, or the "
        "signer process with signer.mode remote)"
    )
    source = group.add_mutually_exclusive_group()
    source.add_argument(
        "--key-env",
        metavar="VAR",
        help="sign with the key in this environment variable instead (one added with 'keys add')",
    )
    source.add_argument(
        "--key-file", metavar="PATH", help="sign with the key in this 0600 file instead"
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=ops_intents.DEFAULT_DEADLINE_S,
        metavar="S",
        help=f"intent deadline, seconds from now (default {ops_intents.DEFAULT_DEADLINE_S:g})",
    )
    parser.add_argument(
        "--wait-s",
        type=float,
        default=ops_intents.DEFAULT_WAIT_S,
        metavar="S",
        help="how long to follow the status before giving up "
        f"(default {ops_intents.DEFAULT_WAIT_S:g})",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="sign and simulate (simulate_intents) without publishing; prints the signed item",
    )


def operator_key(args: argparse.Namespace, config: BotConfig) -> SecretKey | MessageSigner:
    """The override key (``--key-env`` / ``--key-file``) if given, else the config's key, or
    the signer process when ``signer.mode`` is ``remote`` (its policy must name the intent)."""
    if args.key_env is not None or args.key_file is not None:
        return load_key_from_args(args)
    if config.signer.mode == "remote":
        from solver.signer.client import RemoteIntentSigner

        assert config.signer.socket is not None
        return RemoteIntentSigner(config.signer.socket, config.account.id, config.verifier_contract)
    return load_signing_key(config.account)


def _public_key_of(key: SecretKey | MessageSigner) -> str:
    if isinstance(key, SecretKey):
        return key.public_key.to_text()
    return asyncio.run(key.public_key())


def _seconds(value: float, option: str, limit: float) -> float:
    if not math.isfinite(value) or not 0 < value <= limit:
        raise ConfigError(f"{option} must be a number of seconds in (0, {limit:g}]")
    return value


IntentBuilder = Callable[[BotConfig], list[BaseModel]]
KeyCheck = Callable[[BotConfig, str, list[BaseModel]], None]
"""``(config, the signing key's public half, intents)``."""


def run_operator_command(
    args: argparse.Namespace, build: IntentBuilder, check: KeyCheck | None = None
) -> int:
    """Load the config, build the intents from the options (bad input fails before any secret
    is read), load the key, ``check`` them against it, sign, publish or simulate, print."""
    deadline_s = _seconds(args.deadline_s, "--deadline-s", ops_intents.MAX_DEADLINE_S)
    wait_s = _seconds(args.wait_s, "--wait-s", ops_intents.MAX_WAIT_S)
    config = load_bot_config(args.config)
    intents = build(config)
    key = operator_key(args, config)
    if check is not None:
        check(config, _public_key_of(key), intents)
    result = asyncio.run(
        ops_intents.run_operation(
            config, key, intents, deadline_s=deadline_s, wait_s=wait_s, dry_run=args.dry_run
        )
    )
    if args.dry_run:
        warn(
            "dry run: nothing was published, but the printed signed item is a valid "
            f"authorization until {result.deadline}; anyone holding it can publish it"
        )
    print_json(result.to_json())
    return 0 if result.ok else EXIT_NOT_SETTLED


def input_error(option: str, exc: ValueError) -> ConfigError:
    """A ``ValueError`` from parsing an option, as the one-line usage error (exit code 2)."""
    return ConfigError(f"{option}: {exc}")


# ---------------------------------------------------------------------------------- commands


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = subparsers.add_parser(
        "keys",
        help="create and manage ed25519 signing keys",
        description="Create and manage the ed25519 keys that sign intents.",
    )
    commands = keys.add_subparsers(title="commands", dest="keys_command", metavar="COMMAND")
    commands.required = True

    new = commands.add_parser(
        "new",
        help="generate a key pair; the secret goes to a new 0600 file",
        description=(
            "Generate an ed25519 key pair and print JSON {public_key, account_id, "
            "secret_key_file}. account_id is the key's implicit account (64 hex characters), "
            "which owns the key without registration. The secret is written to a new file with "
            "mode 0600 (default ./<account_id>.key; an existing file is never overwritten) and "
            "is not printed, unless --show-secret is given: then it is printed as secret_key "
            "and no file is written."
        ),
    )
    where = new.add_mutually_exclusive_group()
    where.add_argument(
        "--out", metavar="PATH", help="file for the secret key (default ./<account_id>.key)"
    )
    where.add_argument(
        "--show-secret",
        action="store_true",
        help="print the secret key in the JSON instead of writing a file (it will be in your "
        "terminal and shell scrollback)",
    )
    signer_cli.add_pkcs11_arguments(new)
    new.set_defaults(handler=cmd_new)
    _register_token_commands(commands)

    listing = commands.add_parser(
        "list",
        help="the public keys that may sign for the account (ledger public_keys_of)",
        description=(
            "Print JSON {account_id, public_keys}: the keys the verifier accepts for the "
            "account (an implicit account's own key included until it is removed). "
            "No secret is read."
        ),
    )
    listing.add_argument(
        "--config", required=True, metavar="FILE", help="bot YAML (see config/default.yaml)"
    )
    listing.add_argument(
        "--account", metavar="ID", help="another account to look at (default: account.id)"
    )
    listing.set_defaults(handler=cmd_list)

    add = commands.add_parser(
        "add",
        help="sign and publish add_public_key for the account",
        description=(
            "Let another key sign for the account: an add_public_key intent, signed by the "
            "account's current key. The usual setup is a dedicated quoting key, which can "
            "later be revoked with 'keys remove' without touching funds."
        ),
        epilog=OPERATOR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add.add_argument("--public-key", required=True, metavar="KEY", help="ed25519:<base58>")
    add_operator_arguments(add)
    add.set_defaults(handler=cmd_add)

    remove = commands.add_parser(
        "remove",
        help="sign and publish remove_public_key (revoke a key: the hard stop)",
        description=(
            "Revoke a key: a remove_public_key intent. Intents signed by the key stop "
            "executing once this settles; funds are not touched. Removing the key that signs "
            "this request is refused unless --yes-remove-signing-key is given: if it is the "
            "account's only key, the account is locked out for good."
        ),
        epilog=OPERATOR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    remove.add_argument("--public-key", required=True, metavar="KEY", help="ed25519:<base58>")
    remove.add_argument(
        "--yes-remove-signing-key",
        action="store_true",
        help="allow removing the key that signs this request",
    )
    add_operator_arguments(remove)
    remove.set_defaults(handler=cmd_remove)


def _register_token_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``keys import`` / ``delete`` / ``pin`` of a key in a PKCS#11 token (issue 28)."""
    imported = commands.add_parser(
        "import",
        help="put an existing key into a PKCS#11 token (tests, migration from a key file)",
        description="Import the key of --key-env/--key-file into the token, non-extractable.",
    )
    signer_cli.add_pkcs11_arguments(imported, required=True)
    add_key_source_arguments(imported)
    imported.set_defaults(
        handler=lambda args: signer_cli.cmd_import_to_token(args, load_key_from_args(args))
    )
    delete = commands.add_parser(
        "delete",
        help="delete a key from a PKCS#11 token (the last step of a rotation)",
        description="Destroy both halves of the key labelled --label in the token.",
    )
    signer_cli.add_pkcs11_arguments(delete, required=True)
    delete.set_defaults(handler=signer_cli.cmd_delete_in_token)
    pin = commands.add_parser(
        "pin",
        help="change a PKCS#11 token's user PIN",
        description="Change the user PIN: the old from --pin-env/--pin-file, the new from "
        "--new-pin-env.",
    )
    signer_cli.add_pkcs11_arguments(pin, required=True)
    pin.add_argument("--new-pin-env", required=True, metavar="VAR", help="the new PIN's variable")
    pin.set_defaults(handler=signer_cli.cmd_change_pin)


def cmd_new(args: argparse.Namespace) -> int:
    if args.pkcs11 is not None:
        if args.out is not None or args.show_secret:
            raise ConfigError("--pkcs11 makes the key in the token: no --out or --show-secret")
        return signer_cli.cmd_new_in_token(args)
    key = SecretKey.generate()
    account_id = key.public_key.implicit_account_id()
    result: dict[str, str | None] = {
        "public_key": key.public_key.to_text(),
        "account_id": account_id,
    }
    if args.show_secret:
        result["secret_key_file"] = None
        result["secret_key"] = key.to_text()
    else:
        path = Path(args.out) if args.out is not None else Path(f"{account_id}.key")
        try:
            written = write_secret_key(key, path)
        except FileExistsError:
            raise ConfigError(f"{path} already exists; refusing to overwrite a key file") from None
        except OSError as exc:
            raise ConfigError(f"cannot write key file {path}: {exc.strerror}") from None
        result["secret_key_file"] = str(written)
    print_json(result)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    config = load_bot_config(args.config)
    account: str = args.account or config.account.id
    if args.account is not None:
        try:
            validate_account_id(account)
        except ValueError as exc:
            raise input_error("--account", exc) from None
    keys = asyncio.run(ops_intents.public_keys(config, account))
    print_json({"account_id": account, "public_keys": keys})
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    def build(config: BotConfig) -> list[BaseModel]:
        try:
            return [ops_build.add_public_key(args.public_key)]
        except ValueError as exc:
            raise input_error("--public-key", exc) from None

    return run_operator_command(args, build)


def cmd_remove(args: argparse.Namespace) -> int:
    def build(config: BotConfig) -> list[BaseModel]:
        try:
            return [ops_build.remove_public_key(args.public_key)]
        except ValueError as exc:
            raise input_error("--public-key", exc) from None

    def check(config: BotConfig, signing_key: str, intents: list[BaseModel]) -> None:
        (intent,) = intents
        assert isinstance(intent, RemovePublicKey)
        if intent.public_key == signing_key:
            if not args.yes_remove_signing_key:
                raise ConfigError(
                    f"{intent.public_key} is the key signing this request; removing it leaves "
                    "the account without it, and locked out if it is the only key. Sign with "
                    "another key of the account (--key-env / --key-file), or give "
                    "--yes-remove-signing-key"
                )
            others = [
                k for k in asyncio.run(ops_intents.public_keys(config)) if k != intent.public_key
            ]
            if others:
                warn(
                    f"removing the signing key {intent.public_key}; the account keeps "
                    f"{len(others)} other key(s)"
                )
            else:
                warn(
                    f"removing the signing key {intent.public_key}, the account's ONLY key: "
                    "nothing will be able to sign for it again"
                )

    return run_operator_command(args, build, check)
