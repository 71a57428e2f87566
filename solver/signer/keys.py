"""Where the signer's key lives: an owner-only key file, or a PKCS#11 token (issue 28).

A :class:`KeyHolder` signs a 32-byte NEP-413 digest and says whether to sign inline. The
file-backed holder signs inline on the signer's loop (17 µs: cheaper than handing it to a
thread); the token-backed one (:mod:`.hsm`) signs on a worker thread, because a token signature
takes 250–450 µs with SoftHSM2 and python-pkcs11 releases the GIL during ``C_Sign``.
"""

from __future__ import annotations

from typing import Protocol

from solver.protocol.keys import PublicKey, SecretKey


class KeyHolder(Protocol):
    """A key that signs NEP-413 digests and never shows its secret."""

    public_key: PublicKey
    inline: bool
    """True: sign on the event loop; False: on a worker thread (thread-safe)."""

    def sign(self, digest: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``digest``."""

    def close(self) -> None: ...


class FileKeyHolder:
    """The key read from an owner-only file (or an environment variable) into the signer."""

    __slots__ = ("_key", "inline", "public_key")

    def __init__(self, key: SecretKey) -> None:
        self._key = key
        self.public_key = key.public_key
        self.inline = True

    def sign(self, digest: bytes) -> bytes:
        return self._key.sign(digest)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"FileKeyHolder(public_key={self.public_key.to_text()!r})"
