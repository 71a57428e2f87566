"""How the bus reads a caller's waiting time and a solver's ``quote_response`` (spec 4.7;
protocol-notes 6), kept apart from the bus's state so each rule reads on its own.

The rule of issue 23: as lenient as the real relay where real clients rely on it, exactly as
strict where the verifier is.

- Waiting time: ``wait_ms`` (the sandbox's own, from the swap API), ``max_wait_ms`` and
  ``min_wait_ms`` (the official SDK's quote options and py-near's quote request) are read.
- Answers: ``signed_data`` in every standard the verifier accepts, verified as the verifier
  verifies it (:func:`~solver.protocol.signing.verify_signed`); the signed diff must mirror the
  request with the fixed side exact; ``quote_output`` must carry the open side equal to the
  diff, and may also carry the fixed side (py-near's solver does) when that equals the request.

Where the production relay's behaviour is not known here (``min_wait_ms``'s meaning, both
amounts in ``quote_output``, ``quote_hashes: null``) the sandbox's choice is in docs/sandbox.md
and :class:`Leniency` logs a warning naming the field, once per field.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from solver.errors import ProtocolError, SignatureError
from solver.protocol import bus as wire
from solver.protocol.amounts import WIRE
from solver.protocol.encoding import b58encode
from solver.protocol.intents import TokenDiff
from solver.protocol.signing import VerifiedItem, first_error, verify_signed

log = logging.getLogger("sandbox.bus")

WAIT_FIELDS = ("wait_ms", "max_wait_ms", "min_wait_ms")


class QuoteRefused(Exception):
    """An answer or a request the bus refuses; the text is the JSON-RPC error's message."""


@dataclass
class Leniency:
    """Logs, once per field, each place where the sandbox accepts a form whose acceptance by
    the production relay is not known here, and what it chose to do with it."""

    warned: set[str] = field(default_factory=set)

    def note(self, name: str, choice: str) -> None:
        if name not in self.warned:
            self.warned.add(name)
            log.warning("lenient read of %s: %s (see docs/sandbox.md)", name, choice)


@dataclass(frozen=True, slots=True)
class QuoteWait:
    """How long a ``quote`` call waits: up to ``max_ms``, or until every solver asked has
    answered, or — once ``min_ms`` has passed — as soon as one valid answer is in."""

    min_ms: int
    max_ms: int


def quote_wait(raw_params: dict[str, Any], solver_wait_ms: int, lenient: Leniency) -> QuoteWait:
    """The caller's waiting time, bounded by the bus's own ``solver_wait_ms``.

    ``wait_ms`` and ``max_wait_ms`` both bound the wait (the smaller wins). ``min_wait_ms``
    only matters when some solver is silent: the bus returns what it has once it has passed.
    A value that is not a non-negative integer is refused by name.
    """
    given: dict[str, int] = {}
    for name in WAIT_FIELDS:
        value = raw_params.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise QuoteRefused(f"invalid params: {name}: must be a non-negative integer")
        given[name] = value
    max_ms = min([solver_wait_ms, *(given[n] for n in ("wait_ms", "max_wait_ms") if n in given)])
    if "min_wait_ms" in given:
        lenient.note(
            "min_wait_ms",
            "read as: return once it has passed and one valid answer is in, "
            "else keep waiting up to max_wait_ms",
        )
    return QuoteWait(min(given.get("min_wait_ms", max_ms), max_ms), max_ms)


async def wait_for_answers(done: asyncio.Event, answered: asyncio.Event, wait: QuoteWait) -> None:
    """Until ``done`` (every solver asked has answered) or ``wait.max_ms``; once
    ``wait.min_ms`` has passed, ``answered`` (one valid answer is in) is enough."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), wait.min_ms / 1000)
    left = wait.max_ms / 1000 - (loop.time() - started)
    if done.is_set() or left <= 0:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(answered.wait(), left)


@dataclass(frozen=True, slots=True)
class CheckedAnswer:
    """A solver's answer that passed every check but the affordability simulation."""

    quote_hash: str
    signed_data: dict[str, Any]
    verified: VerifiedItem
    amount_in: int
    amount_out: int


def check_answer(
    param: dict[str, Any],
    request: wire.QuoteParams,
    *,
    contract_id: str,
    now: datetime,
    lenient: Leniency,
) -> CheckedAnswer:
    """Parse and check one ``quote_response`` params[0] against its request, in the bus's
    order: the shape, the signature (as the verifier checks it, any standard), the recipient,
    the deadline, the diff, then ``quote_output``. Raises :class:`QuoteRefused`."""
    try:
        answer = wire.QuoteResponseParams.model_validate(param, context=WIRE)
    except ValidationError as exc:
        raise QuoteRefused(f"invalid quote_response: {first_error(exc)}") from None
    try:
        verified = verify_signed(answer.signed_data)
    except SignatureError:
        raise QuoteRefused("invalid signature") from None
    except ProtocolError as exc:
        raise QuoteRefused(f"invalid signed_data: {exc}") from None
    if verified.recipient != contract_id:
        raise QuoteRefused("wrong verifying_contract")
    if verified.message.deadline < now + timedelta(milliseconds=request.min_deadline_ms):
        raise QuoteRefused("deadline too short: must be at least min_deadline_ms ahead")
    amount_in, amount_out = mirrored_amounts(verified, request)
    _check_output(answer.quote_output, request, amount_in, amount_out, lenient)
    return CheckedAnswer(
        b58encode(verified.intent_hash),
        answer.signed_data.model_dump(mode="json", exclude_none=True),
        verified,
        amount_in,
        amount_out,
    )


def mirrored_amounts(verified: VerifiedItem, request: wire.QuoteParams) -> tuple[int, int]:
    """The solver's diff must be exactly ``{asset_in: +amount_in, asset_out: -amount_out}``
    with the request's fixed side exact (protocol-notes 6)."""
    intents = verified.message.intents
    if len(intents) != 1 or not isinstance(intents[0], TokenDiff):
        raise QuoteRefused("quote must sign exactly one token_diff intent")
    diff = intents[0].diff
    asset_in, asset_out = request.core_asset_identifier_in, request.core_asset_identifier_out
    if set(diff) != {asset_in, asset_out}:
        raise QuoteRefused("quote does not match the request: token_diff assets differ")
    amount_in, amount_out = diff[asset_in], -diff[asset_out]
    if amount_in <= 0 or amount_out <= 0:
        raise QuoteRefused(
            "quote does not match the request: solver must receive asset_in and give asset_out"
        )
    fixed = amount_in if request.is_exact_in else amount_out
    if fixed != request.exact_amount:
        side = "amount_in" if request.is_exact_in else "amount_out"
        raise QuoteRefused(f"quote does not match the request: exact {side} differs")
    return amount_in, amount_out


def _check_output(
    output: wire.QuoteOutput,
    request: wire.QuoteParams,
    amount_in: int,
    amount_out: int,
    lenient: Leniency,
) -> None:
    """The open side must be given and equal the diff's; the fixed side, when also given (as
    py-near sends it), must equal the request's exact amount."""
    if request.is_exact_in:
        open_name, open_given, open_signed = "amount_out", output.amount_out, amount_out
        fixed_name, fixed_given = "amount_in", output.amount_in
    else:
        open_name, open_given, open_signed = "amount_in", output.amount_in, amount_in
        fixed_name, fixed_given = "amount_out", output.amount_out
    if open_given is None:
        raise QuoteRefused(
            f"quote does not match the request: quote_output needs {open_name} "
            f"(the side the request left open)"
        )
    if open_given != open_signed:
        raise QuoteRefused(
            f"quote does not match the request: quote_output.{open_name} differs from the "
            "signed token_diff"
        )
    if fixed_given is not None:
        if fixed_given != request.exact_amount:
            raise QuoteRefused(
                f"quote does not match the request: quote_output.{fixed_name} differs from "
                f"the request's exact_{fixed_name}"
            )
        lenient.note(
            "quote_output",
            "both amount_in and amount_out accepted, the fixed one equal to the request's and "
            "the open one equal to the signed diff's",
        )
