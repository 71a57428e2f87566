"""The project's exception hierarchy, in one place (STYLE 7).

Library errors (httpx, websockets, pydantic, nacl) are translated into these where they enter
our code, so callers catch one family and never a third-party type::

    SolverError                  (solver.protocol.errors)
    ├── ProtocolError            bad bytes or fields on the wire (spec 2, 4.7)
    │   └── SignatureError       a signature, key or digest that does not check out (spec 5.3)
    ├── ConfigError              bad YAML or CLI input, secret handling (never contains a secret)
    ├── TransportError           the network failed: connect, timeout, closed connection
    └── RemoteError              the remote answered, with an error (JSON-RPC error, FAILED status)

The first three are defined in :mod:`solver.protocol.errors`, because the protocol layer raises
them and imports nothing from above it; they are imported here so that the whole family can be
imported from this one module.
"""

from __future__ import annotations

from solver.protocol.errors import ProtocolError, SignatureError, SolverError

__all__ = [
    "ConfigError",
    "ProtocolError",
    "RemoteError",
    "SignatureError",
    "SolverError",
    "TransportError",
]


class ConfigError(SolverError):
    """Configuration or command-line input that cannot be used."""


class TransportError(SolverError):
    """The connection to a remote service failed before an answer arrived."""


class RemoteError(SolverError):
    """A remote service answered with an error.

    ``reason`` carries the remote's own text (for example the verifier's ``invalid salt``) so
    callers can react to specific, documented reasons.
    """

    def __init__(self, reason: str, *, code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
