"""``solver signer serve`` and the keys in a PKCS#11 token (issue 28).

``solver signer serve --config signer.yaml`` runs the signer process (:mod:`solver.signer`).
The token's keys are made and managed with ``solver keys new --pkcs11 …`` (a non-extractable
key made in the token), ``keys import --pkcs11 …`` (an existing key moved into it: tests and
migration), ``keys delete --pkcs11 …`` (the old key after a rotation) and ``keys pin --pkcs11
…`` (the user PIN changed); their options are registered here and on ``solver keys``. PINs come
from an environment variable or an owner-only file, never from the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from solver.cli import print_json
from solver.errors import ConfigError
from solver.signer.config import Pkcs11Spec, load_signer_config, read_pin


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    signer = subparsers.add_parser(
        "signer",
        help="the signer process: the key out of the bot, behind a policy",
        description="Run the signer that holds the account's key (docs/operations.md).",
    )
    commands = signer.add_subparsers(title="commands", dest="signer_command", metavar="COMMAND")
    commands.required = True
    serve = commands.add_parser(
        "serve",
        help="sign for the bot on an owner-only Unix socket, within the policy",
        description=(
            "Hold the key (an owner-only key file or a PKCS#11 token) and sign what the bot "
            "asks on the socket of the YAML, when the policy allows it; every signature and "
            "refusal goes to the audit log. Prints 'signer ready <public key> <socket>' once "
            "it listens; stops on SIGTERM or SIGINT."
        ),
    )
    serve.add_argument("--config", required=True, metavar="FILE", help="signer YAML")
    serve.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from solver.signer.server import serve

    config = load_signer_config(args.config)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per salt refresh
    asyncio.run(serve(config))
    return 0


# ------------------------------------------------------------------ keys in a token


def add_pkcs11_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--pkcs11 MODULE --token LABEL --label KEY (--pin-env VAR | --pin-file PATH)``."""
    group = parser.add_argument_group("PKCS#11 token")
    group.add_argument(
        "--pkcs11",
        metavar="MODULE",
        required=required,
        help="the PKCS#11 library (e.g. /usr/lib/softhsm/libsofthsm2.so): the key is in a token",
    )
    group.add_argument("--token", metavar="LABEL", help="the token's label")
    group.add_argument("--label", metavar="KEY", help="the key's label in the token")
    group.add_argument("--pin-env", metavar="VAR", help="environment variable holding the PIN")
    group.add_argument("--pin-file", metavar="PATH", help="owner-only file holding the PIN")


def token_spec(args: argparse.Namespace, *, need_label: bool = True) -> Pkcs11Spec:
    """The token options as a :class:`Pkcs11Spec` (validated; errors name the option)."""
    missing = [
        name
        for name, value in (("--token", args.token), ("--label", args.label))
        if value is None and (need_label or name != "--label")
    ]
    if missing:
        raise ConfigError(f"--pkcs11 needs {' and '.join(missing)}")
    if (args.pin_env is None) == (args.pin_file is None):
        raise ConfigError("--pkcs11 needs exactly one of --pin-env or --pin-file")
    return Pkcs11Spec(
        module=Path(args.pkcs11),
        token_label=args.token,
        key_label=args.label or "-",
        pin_env=args.pin_env,
        pin_file=Path(args.pin_file) if args.pin_file else None,
    )


def _pin(spec: Pkcs11Spec) -> str:
    return read_pin(spec, "--pin-env" if spec.pin_env else "--pin-file")


def cmd_new_in_token(args: argparse.Namespace) -> int:
    from solver.signer.hsm import generate_key

    spec = token_spec(args)
    public = generate_key(str(spec.module), spec.token_label, spec.key_label, _pin(spec))
    print_json(_described(public.to_text(), public.implicit_account_id(), spec))
    return 0


def cmd_import_to_token(args: argparse.Namespace, secret_key: object) -> int:
    from solver.protocol.keys import SecretKey
    from solver.signer.hsm import import_key

    assert isinstance(secret_key, SecretKey)
    spec = token_spec(args)
    seed = secret_key._secret[:32]  # libsodium layout: seed ‖ public key
    public = import_key(
        str(spec.module), spec.token_label, spec.key_label, _pin(spec), seed, secret_key.public_key
    )
    print_json(_described(public.to_text(), public.implicit_account_id(), spec))
    return 0


def cmd_delete_in_token(args: argparse.Namespace) -> int:
    from solver.signer.hsm import delete_key

    spec = token_spec(args)
    removed = delete_key(str(spec.module), spec.token_label, spec.key_label, _pin(spec))
    if removed == 0:
        raise ConfigError(
            f"--label: no key labelled {spec.key_label!r} in token {spec.token_label!r}"
        )
    print_json({"token": spec.token_label, "key_label": spec.key_label, "objects_removed": removed})
    return 0


def cmd_change_pin(args: argparse.Namespace) -> int:
    import os

    from solver.signer.hsm import change_pin

    spec = token_spec(args, need_label=False)
    new = os.environ.get(args.new_pin_env or "", "")
    if not new:
        raise ConfigError(f"--new-pin-env: environment variable {args.new_pin_env} is not set")
    change_pin(str(spec.module), spec.token_label, _pin(spec), new)
    print_json({"token": spec.token_label, "pin_changed": True})
    return 0


def _described(public_key: str, account_id: str, spec: Pkcs11Spec) -> dict[str, str]:
    return {
        "public_key": public_key,
        "account_id": account_id,
        "token": spec.token_label,
        "key_label": spec.key_label,
        "module": str(spec.module),
    }
