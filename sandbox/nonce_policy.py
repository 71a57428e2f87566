"""Which nonces the sandbox's verifier accepts (spec 5.3; protocol-notes 3).

Two policies, chosen with ``nonces`` in ``config/sandbox.yaml``:

- ``spec`` (the default): the spec's rule 5.3.4. A nonce is either the versioned V1 layout
  (magic prefix, salt, nonce deadline) or the salted one, ``salt(4) ‖ unique(28)``; in both the
  salt must be a valid salt of the contract, else ``invalid salt``.
- ``deployed``: what the deployed verifier contract accepts today. Versioned nonces are checked
  exactly as above; any other 32 bytes are a *legacy* nonce ("legacy nonces can still be used at
  this time"): no salt, only uniqueness per signer. The reference AMM solver signs with legacy
  nonces (random or a sha256 of its reserves), and so does py-near 1.2.22 (``OmniBalance``:
  32 random bytes, or the sha256 of a seed; tests/interop/test_pynear.py), so both need this
  policy.

Uniqueness (``nonce was already used``) is checked by the ledger in both policies.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, get_args

from solver.protocol.nonce import ParsedNonce

NoncePolicy = Literal["spec", "deployed"]
NONCE_POLICIES: tuple[str, ...] = get_args(NoncePolicy)

ERR_SALT = "invalid salt"
ERR_NONCE_EXPIRED = "nonce has expired"
ERR_NONCE_DEADLINE = "intent deadline is after the nonce deadline"


def nonce_problem(
    nonce: ParsedNonce,
    policy: NoncePolicy,
    salts: Collection[bytes],
    now_ns: int,
    intent_deadline_ns: int,
) -> str | None:
    """The verifier's error text for ``nonce`` under ``policy``, or None when it passes.

    Versioned: the salt must be valid, the nonce deadline not past, and the intent deadline not
    after the nonce deadline. Not versioned: under ``spec`` the first four bytes must be a valid
    salt; under ``deployed`` it is a legacy nonce and passes here.
    """
    if nonce.layout == "versioned":
        if nonce.salt not in salts:
            return ERR_SALT
        if nonce.deadline_ns is not None:
            if nonce.deadline_ns < now_ns:
                return ERR_NONCE_EXPIRED
            if intent_deadline_ns > nonce.deadline_ns:
                return ERR_NONCE_DEADLINE
        return None
    if policy == "spec" and nonce.salt not in salts:
        return ERR_SALT
    return None
