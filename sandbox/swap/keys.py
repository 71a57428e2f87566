"""Secrets of the sandbox swap service: the ed25519 key that signs quotes, the derivation root
of the deposit-account keys, and the HS256 secret of partner tokens (spec 2.2, 5.1).

Each secret comes from the environment variable the config names, or is generated once into an
owner-only file under ``state_dir`` (``swap_service.key``, ``swap_jwt.secret``); a ready partner
token is written to ``swap_partner.jwt`` at start (the sandbox's stand-in for the partner
portal of 5.1.2). Nothing secret is logged or printed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt

from sandbox.swap.http import verify_jwt
from sandbox.swap.rules import deposit_seed
from solver.errors import ConfigError
from solver.io.key_files import load_secret_key, write_secret_key
from solver.protocol.keys import SecretKey

_ROOT_LABEL = b"sandbox-swap:deposit-key-root"


def _write_private(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


class SwapKeys:
    def __init__(
        self,
        state_dir: Path,
        clock: Callable[[], datetime],
        *,
        service_key_env: str | None,
        jwt_secret_env: str | None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.clock = clock
        self.service_key_env = service_key_env
        self.jwt_secret_env = jwt_secret_env
        # Placeholders until load(): an unloaded service still answers, with throwaway keys.
        self.service_key = SecretKey(secrets.token_bytes(32))
        self.jwt_secret = secrets.token_bytes(32)
        self.root = hashlib.sha256(self.service_key.sign(_ROOT_LABEL)).digest()
        self.token_file: Path | None = None

    def load(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.service_key = self._service_key()
            self.jwt_secret = self._jwt_secret()
            token_file = self.state_dir / "swap_partner.jwt"
            _write_private(token_file, self.issue_token("sandbox-partner"))
        except OSError as exc:
            raise ConfigError(f"swap secrets under {self.state_dir}: {exc.strerror}") from None
        self.token_file = token_file
        # Signatures are deterministic: the root is a secret only the service key can make.
        self.root = hashlib.sha256(self.service_key.sign(_ROOT_LABEL)).digest()

    def _service_key(self) -> SecretKey:
        env = self.service_key_env
        if env and os.environ.get(env):
            return load_secret_key(env=env)
        path = self.state_dir / "swap_service.key"
        if path.exists():
            return load_secret_key(path=path)
        key = SecretKey.generate()
        write_secret_key(key, path)
        return key

    def _jwt_secret(self) -> bytes:
        env = self.jwt_secret_env
        if env and os.environ.get(env):
            return os.environ[env].encode("utf-8")
        path = self.state_dir / "swap_jwt.secret"
        if not path.exists():
            _write_private(path, secrets.token_hex(32))
        return path.read_text(encoding="utf-8").strip().encode("utf-8")

    @property
    def public_key(self) -> str:
        return self.service_key.public_key.to_text()

    def sign(self, message: bytes) -> bytes:
        return self.service_key.sign(message)

    def deposit_key(self, correlation_id: str, timestamp: str) -> SecretKey:
        """The key of a quote's deposit account (an implicit account: its id is the key)."""
        return SecretKey(deposit_seed(self.root, correlation_id, timestamp))

    def issue_token(self, subject: str, ttl_s: float | None = None) -> str:
        """A partner token: HS256 with ``sub``, ``iat`` and, given a lifetime, ``exp``."""
        now = self.clock().timestamp()
        claims: dict[str, Any] = {"sub": subject, "iat": int(now)}
        if ttl_s is not None:
            claims["exp"] = int(now + ttl_s)
        return jwt.encode(claims, self.jwt_secret, algorithm="HS256")

    def authorized(self, token: str | None) -> bool:
        """False without a token; True with a valid one; 401 with an invalid one."""
        if token is None:
            return False
        verify_jwt(token, self.jwt_secret)
        return True
