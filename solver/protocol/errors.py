"""The root of the project's exception hierarchy and the wire's own errors.

They live in ``protocol`` because ``protocol`` is the bottom layer: it raises them and imports
nothing from above it. The rest of the hierarchy (configuration, transport, remote errors) is in
:mod:`solver.errors`, which re-exports these three so callers have one place to import from.
"""

from __future__ import annotations


class SolverError(Exception):
    """Base of every error this project raises on purpose."""


class ProtocolError(SolverError):
    """Input that does not follow the specification (field names it where possible)."""


class SignatureError(ProtocolError):
    """A signature, public key, secret key or payload digest that does not verify."""
