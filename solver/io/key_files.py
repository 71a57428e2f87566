"""Secret keys in files and environment variables: where the bot, the operator commands and the
sandbox read and write their ``ed25519:`` keys (the key type itself is pure,
:mod:`solver.protocol.keys`).

A key is read only from an environment variable or from a file that group and others cannot
read, and a key file is created owner-only from the start. No error repeats the secret.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from solver.errors import ConfigError, SignatureError
from solver.protocol.keys import SecretKey


def load_secret_key(*, env: str | None = None, path: str | Path | None = None) -> SecretKey:
    """Read a secret key from an environment variable or an owner-only file.

    Files readable by group or others are refused, as ssh does: a key that others could read
    is already compromised.
    """
    if env:
        text = os.environ.get(env)
        if not text:
            raise ConfigError(f"environment variable {env} is not set or empty")
        try:
            return SecretKey.from_text(text)
        except SignatureError as exc:
            raise ConfigError(f"environment variable {env}: {exc}") from None
    if path:
        file = Path(path)
        try:
            mode = file.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(
                    f"key file {file} must not be readable by group or others (chmod 600)"
                )
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read key file {file}: {exc.strerror}") from None
        try:
            return SecretKey.from_text(text)
        except SignatureError as exc:
            raise ConfigError(f"key file {file}: {exc}") from None
    raise ConfigError("no key source given: set an environment variable or a key file")


def write_secret_key(key: SecretKey, path: str | Path) -> Path:
    """Write the key file with mode 0600 from the start (never world-readable, even briefly)."""
    file = Path(path)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(key.to_text() + "\n")
    return file
