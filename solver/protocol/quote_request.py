"""A quote request, parsed once into one slotted record (protocol-notes 6 ``quote`` event; DESIGN
"The quote path").

One parser for every place a request comes from: the bus websocket (a ``quote`` event's
``data``, already ``core``-prefixed) and a recorded stream's ``quote`` line (``backtest/stream``).
Both use the same rules with two settings: which asset ids are accepted (a stream: its header's
tokens; the bus: any well-formed id) and what an absent ``min_deadline_ms`` means (the bus: the
relay's default, protocol-notes 6; a stream records it, so it is required). The common,
well-formed request takes a fast path of plain type and range checks; anything else is checked
field by field, and the first problem raises :class:`BadQuoteRequest` naming the field.
The pydantic model :class:`solver.protocol.bus.QuoteRequestEvent` stays for the cold path
(schemas, the sandbox); a property test holds the two together.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any, Final, NamedTuple

from solver.protocol.amounts import U128_DIGITS, U128_MAX, decimal_u128
from solver.protocol.errors import ProtocolError
from solver.protocol.ids import validate_asset_id

MAX_QUOTE_ID_LEN: Final = 256
MAX_MIN_DEADLINE_MS: Final = 86_400_000
KNOWN_ASSETS_MAX: Final = 4096
"""Well-formed asset ids remembered for the fast path (the bus: any id; bounded)."""


class QuoteRequest(NamedTuple):
    """A quote request as the solver sees it (protocol-notes 6 ``quote`` event).

    ``amount`` is the fixed side: the input for exact-in, the output for exact-out. A strategy
    returns the other side.

    A named tuple: immutable at run time, as a type handed to user code (the strategies) must
    be, and built in 0.5 µs where a frozen dataclass takes 1.6 (it sets each field through
    ``object.__setattr__``; one request per answer, issue 29). Fields read as fast as slots.
    """

    quote_id: str
    asset_in: str
    asset_out: str
    exact_in: bool
    amount: int
    min_deadline_ms: int
    partner_id: str | None = None

    @property
    def pair(self) -> tuple[str, str]:
        return (self.asset_in, self.asset_out)


_new: Final = tuple.__new__
"""Builds a :class:`QuoteRequest` from its seven fields at C speed (0.16 µs, the class call
0.34: its generated ``__new__`` is a Python function; issue 29)."""


class BadQuoteRequest(ProtocolError):
    """A request that cannot be answered: ``field`` names what is wrong (``quote_id``,
    ``asset``, ``exact_amount`` (both or neither side given), ``amount``,
    ``min_deadline_ms``); the message says how."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class QuoteRequestParser:
    """Parses request data by one set of rules (see the module docstring).

    ``assets``: the asset ids accepted (None: any well-formed id, each checked once).
    ``default_deadline_ms``: an absent ``min_deadline_ms`` is this (None: refused).
    """

    __slots__ = ("_any_asset", "_default_deadline", "_known")

    def __init__(
        self, *, assets: Container[str] | None = None, default_deadline_ms: int | None = None
    ) -> None:
        self._any_asset = assets is None
        self._known: Container[str] = set() if assets is None else assets
        self._default_deadline = default_deadline_ms

    def parse(self, data: Mapping[str, Any], partner_id: str | None = None) -> QuoteRequest:
        """The request in ``data`` (``partner_id``: the relay's, from the event's metadata),
        or raise :class:`BadQuoteRequest`."""
        get = data.get
        quote_id = get("quote_id")
        asset_in = get("core_asset_identifier_in")
        asset_out = get("core_asset_identifier_out")
        raw_in, raw_out = get("exact_amount_in"), get("exact_amount_out")
        deadline = get("min_deadline_ms", self._default_deadline)
        raw = raw_in if raw_out is None else raw_out if raw_in is None else None
        known = self._known
        if (
            type(quote_id) is str
            and 0 < len(quote_id) <= MAX_QUOTE_ID_LEN
            and type(asset_in) is str
            and type(asset_out) is str
            and asset_in in known
            and asset_out in known
            and asset_in != asset_out
            and type(raw) is str
            and 0 < len(raw) <= U128_DIGITS
            and raw[0] != "0"
            and raw.isdigit()
            and raw.isascii()
            and type(deadline) is int
            and 0 <= deadline <= MAX_MIN_DEADLINE_MS
        ):
            amount = int(raw)
            if amount <= U128_MAX:
                return _new(  # the named tuple's own __new__ without its Python frame
                    QuoteRequest,
                    (quote_id, asset_in, asset_out, raw_in is not None, amount, deadline,
                     partner_id),
                )  # fmt: skip
        return self._checked(data, partner_id)

    def _checked(self, data: Mapping[str, Any], partner_id: str | None) -> QuoteRequest:
        """The same rules one at a time, the first failure naming its field."""
        quote_id = data.get("quote_id")
        if quote_id is None:
            raise BadQuoteRequest("quote_id", "missing quote_id")
        if type(quote_id) is not str or not 0 < len(quote_id) <= MAX_QUOTE_ID_LEN:
            raise BadQuoteRequest(
                "quote_id", f"quote_id must be a non-empty string of at most {MAX_QUOTE_ID_LEN}"
            )
        asset_in = self._asset(data, "core_asset_identifier_in")
        asset_out = self._asset(data, "core_asset_identifier_out")
        if asset_in == asset_out:
            raise BadQuoteRequest("asset", "asset in and asset out must differ")
        raw_in, raw_out = data.get("exact_amount_in"), data.get("exact_amount_out")
        if (raw_in is None) == (raw_out is None):
            raise BadQuoteRequest(
                "exact_amount", "exactly one of exact_amount_in and exact_amount_out must be given"
            )
        exact_in = raw_in is not None
        amount = _u128(raw_in if exact_in else raw_out, "exact_amount_in" if exact_in else
                       "exact_amount_out")  # fmt: skip
        if amount == 0:
            raise BadQuoteRequest("amount", "the exact amount must be positive")
        deadline = data.get("min_deadline_ms", self._default_deadline)
        if deadline is None:
            raise BadQuoteRequest("min_deadline_ms", "missing min_deadline_ms")
        if type(deadline) is not int or not 0 <= deadline <= MAX_MIN_DEADLINE_MS:
            raise BadQuoteRequest(
                "min_deadline_ms", f"min_deadline_ms must be an integer 0..{MAX_MIN_DEADLINE_MS}"
            )
        return QuoteRequest(quote_id, asset_in, asset_out, exact_in, amount, deadline, partner_id)

    def _asset(self, data: Mapping[str, Any], name: str) -> str:
        value = data.get(name)
        if value is None:
            raise BadQuoteRequest("asset", f"missing {name}")
        if type(value) is not str:
            raise BadQuoteRequest("asset", f"{name} must be a string")
        if value in self._known:
            return value
        if not self._any_asset:
            raise BadQuoteRequest(
                "asset", f"unknown asset {value[:80]} ({name} is not in the header's tokens)"
            )
        try:
            validate_asset_id(value)
        except ValueError as exc:
            raise BadQuoteRequest("asset", f"{name}: {exc}") from None
        known = self._known
        assert isinstance(known, set)
        if len(known) < KNOWN_ASSETS_MAX:
            known.add(value)
        return value


def _u128(value: Any, name: str) -> int:
    try:
        return decimal_u128(value, name)
    except ValueError as exc:
        raise BadQuoteRequest("amount", str(exc)) from None
