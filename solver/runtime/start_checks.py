"""What the live bot checks before it answers anything (issue 24).

A valid signing key that the account does not hold passes every local check, and then every
answer is refused by the relay (``public key … doesn't exist``) while the bot looks healthy.
The ledger knows (``has_public_key``, spec 2.13), so the start asks it once.

Decision: **the start fails** (exit code 2, like any configuration error) rather than running
paused. Waiting cannot fix a wrong ``account.id`` or key, and a bot that runs without quoting
looks alive on every dashboard. The alert (``key_not_registered``) is delivered before the
process exits; a service manager that restarts it sends no new message while the incident is
open (the alert spool keeps it), and the first start that finds the key resolves it.
"""

from __future__ import annotations

import logging

from solver.errors import SolverError
from solver.io.ledger_client import LedgerClient

__all__ = ["KEY_NOT_REGISTERED", "signing_key_problem"]

log = logging.getLogger("solver.bot")
KEY_NOT_REGISTERED = "key_not_registered"


async def signing_key_problem(ledger: LedgerClient, account: str, public_key: str) -> str | None:
    """Why ``account`` cannot sign with ``public_key`` (only the public part is ever named),
    or None. A ledger that cannot be asked is said and not held against the start: the salt
    and the balances will stay stale and say so."""
    try:
        held = await ledger.has_public_key(account, public_key)
    except SolverError as exc:
        log.warning("cannot check that %s holds the signing key %s: %s", account, public_key, exc)
        return None
    if held:
        return None
    return (
        f"account {account} does not hold the signing key {public_key} on the verifier "
        f"{ledger.verifier_contract}: the relay would refuse every answer. Add the key to the "
        "account (solver keys add) or fix account.id / the key's variable or file"
    )
