"""``solver keys``: ed25519 key pairs for signing intents (spec 2.11, 2.12 ``add_public_key``).

A new key's implicit account (64 hex characters, protocol-notes 4) owns it without any
registration; a named account must first sign ``add_public_key`` with a key it already holds.

Secrets: a secret key is read only from an environment variable or an owner-only (0600) file
(:func:`solver.protocol.keys.load_secret_key`), written only to a new 0600 file, and printed only
on an explicit ``--show-secret``. It never appears in an error line: the key-source options
refuse values that look like a key instead of echoing them.

This module also holds the key-source options (``--key-env`` / ``--key-file``) that every
signing command shares.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from solver.cli import print_json
from solver.errors import ConfigError
from solver.protocol.keys import ED25519_PREFIX, SecretKey, load_secret_key, write_secret_key

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def add_key_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--key-env VAR`` or ``--key-file PATH``: exactly one is required."""
    group = parser.add_argument_group("signing key (exactly one)")
    source = group.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--key-env",
        metavar="VAR",
        help="name of the environment variable holding the secret key "
        "(ed25519:<base58 of seed and public key>)",
    )
    source.add_argument(
        "--key-file",
        metavar="PATH",
        help="file holding the secret key; must not be readable by group or others (chmod 600)",
    )


def load_key_from_args(args: argparse.Namespace) -> SecretKey:
    """The secret key named by ``--key-env`` / ``--key-file`` (a :class:`ConfigError` if not)."""
    env: str | None = args.key_env
    if env is not None:
        if not _ENV_NAME.fullmatch(env):
            # Most likely the key itself was pasted here: say so without repeating it.
            raise ConfigError(
                "--key-env takes the NAME of an environment variable holding the key "
                "(letters, digits, underscore), not the key itself"
            )
        return load_secret_key(env=env)
    path: str | None = args.key_file
    if path is None:
        raise ConfigError("give --key-env VAR or --key-file PATH")
    if ED25519_PREFIX in path:
        raise ConfigError("--key-file takes the path of a key file, not the key itself")
    return load_secret_key(path=path)


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
    new.set_defaults(handler=cmd_new)


def cmd_new(args: argparse.Namespace) -> int:
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
