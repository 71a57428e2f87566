"""Where the signer's key lives: an owner-only key file, or a PKCS#11 token (issue 28).

A :class:`KeyHolder` signs a 32-byte NEP-413 digest and says how many signatures it can make at
once. The file-backed holder signs inline (17 µs: cheaper than handing it to a thread); the
token-backed one (:mod:`.hsm`) holds a pool of sessions and signs on threads, because
python-pkcs11 releases the GIL during ``C_Sign`` (~430 µs with SoftHSM2).
"""

from __future__ import annotations

from typing import Protocol

from solver.protocol.keys import PublicKey, SecretKey


class KeyHolder(Protocol):
    """A key that signs NEP-413 digests and never shows its secret."""

    public_key: PublicKey
    parallel: int
    """How many signatures may run at once (1: sign inline on the event loop)."""

    def sign(self, digest: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``digest``; thread-safe when ``parallel`` > 1."""

    def close(self) -> None: ...


class FileKeyHolder:
    """The key read from an owner-only file (or an environment variable) into the signer."""

    __slots__ = ("_key", "parallel", "public_key")

    def __init__(self, key: SecretKey) -> None:
        self._key = key
        self.public_key = key.public_key
        self.parallel = 1

    def sign(self, digest: bytes) -> bytes:
        return self._key.sign(digest)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"FileKeyHolder(public_key={self.public_key.to_text()!r})"
