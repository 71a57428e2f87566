"""Where a CLI command takes its signing key from: ``--key-env VAR`` or ``--key-file PATH``
(docs/protocol.md, "The CLI").

Apart from :mod:`solver.cli.keys` so that ``solver intents sign`` and ``verify`` start without
what the key-management commands import (the config models, the signer's client, the
operator's intents): ~0.5 s of CPU a start on a slow machine (docs/testing.md).
"""

from __future__ import annotations

import argparse
import re

from solver.errors import ConfigError
from solver.io.key_files import load_secret_key
from solver.protocol.keys import ED25519_PREFIX, SecretKey

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
