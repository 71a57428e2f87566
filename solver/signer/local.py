"""The in-process :class:`~solver.runtime.ports.MessageSigner`: the key in this process (the
default one-box setup, and the tests' and sandbox's own keys). Signing is 17 µs: inline."""

from __future__ import annotations

from solver.protocol.keys import SecretKey
from solver.protocol.signing import nep413_digest


class InProcessMessageSigner:
    __slots__ = ("_key",)

    def __init__(self, key: SecretKey) -> None:
        self._key = key

    async def sign_message(self, message: str, nonce: bytes, recipient: str) -> tuple[str, bytes]:
        digest = nep413_digest(message, nonce, recipient)
        return self._key.public_key.to_text(), self._key.sign(digest)

    async def public_key(self) -> str:
        return self._key.public_key.to_text()

    def __repr__(self) -> str:
        return f"InProcessMessageSigner({self._key!r})"
