"""Exact amount arithmetic shared by strategies (DESIGN "The quote path", protocol-notes 2).

Strategies may think in floats, but the amounts they return are u128 ints and token decimals go
up to 24, where float64 (53-bit mantissa) is no longer exact. Everything here works on ints and
``fractions.Fraction`` so a conversion such as "10**24 units of wNEAR at $3.2 into USDC" loses
nothing until the single, deliberate rounding at the end:

- amount_out is rounded DOWN, amount_in UP: the last unit always goes to the solver;
- the protocol fee is charged on the solver's negative delta (the asset it gives) as
  ``ceil(|delta| * fee_pips / 1e6)`` on top of the delta, so the solver's real outflow of
  ``asset_out`` is ``amount_out + fee``. Every built-in prices that in and checks it against
  free inventory.

These helpers are public so a third-party strategy can follow the same rules.
"""

from __future__ import annotations

import math
from fractions import Fraction

from solver.core.market import MAX_DECIMALS, MarketView, QuoteRequest, decimals_ok
from solver.protocol.amounts import U128_MAX

__all__ = [
    "BPS",
    "PIPS",
    "U128_MAX",
    "as_quote",
    "ceil_int",
    "conversion_rate",
    "convert",
    "fee_on",
    "floor_int",
    "fresh_price",
    "gross_outflow",
    "max_out_for_budget",
    "request_ok",
    "scale",
    "token_decimals",
    "usd_value",
]

BPS = 10_000
"""Basis points per unit (1 bp = 0.01 %)."""
PIPS = 1_000_000
"""Pips per unit: the protocol fee is expressed in pips (protocol-notes 2)."""
_INF = math.inf


def scale(decimals: int) -> int:
    """Smallest units per whole unit: ``10**decimals`` as an int."""
    return int(10**decimals)


def floor_int(x: Fraction) -> int:
    """The largest int not above ``x`` (exact, no float round-trip)."""
    return x.numerator // x.denominator


def ceil_int(x: Fraction) -> int:
    """The smallest int not below ``x`` (exact, no float round-trip)."""
    return -((-x.numerator) // x.denominator)


def fee_on(amount: int, fee_pips: int) -> int:
    """Protocol fee the verifier charges on a negative delta of ``amount`` units."""
    if fee_pips <= 0 or amount <= 0:
        return 0
    return -((-amount * fee_pips) // PIPS)


def gross_outflow(amount_out: int, fee_pips: int) -> int:
    """What the solver's balance of ``asset_out`` really loses: the amount plus the fee."""
    return amount_out + fee_on(amount_out, fee_pips)


def max_out_for_budget(budget: Fraction | int, fee_pips: int) -> int:
    """The largest ``amount_out`` whose gross outflow (amount + fee) fits in ``budget``.

    ``out + ceil(out*f/1e6) = ceil(out*(1e6+f)/1e6)`` and for an integer bound ``B``,
    ``ceil(z) <= B`` iff ``z <= B``; so the answer is ``floor(floor(budget)*1e6/(1e6+f))``.
    """
    whole = floor_int(Fraction(budget))
    if whole <= 0:
        return 0
    fee = max(fee_pips, 0)
    return (whole * PIPS) // (PIPS + fee)


def as_quote(amount: int) -> int | None:
    """``amount`` if it is a valid non-zero u128, else None (a quote of 0 is no quote)."""
    return amount if 1 <= amount <= U128_MAX else None


def request_ok(request: QuoteRequest) -> bool:
    """A request a strategy can price at all: two different assets and a u128 amount ≥ 1."""
    return (
        request.asset_in != request.asset_out
        and not isinstance(request.amount, bool)
        and isinstance(request.amount, int)
        and 1 <= request.amount <= U128_MAX
    )


def token_decimals(market: MarketView, asset: str) -> int | None:
    """Decimals of ``asset``, or None when the market does not know the token."""
    try:
        decimals = market.decimals(asset)
    except (KeyError, LookupError, ValueError):
        return None
    if isinstance(decimals, bool) or not isinstance(decimals, int):
        return None
    return decimals if 0 <= decimals <= MAX_DECIMALS else None


def fresh_price(market: MarketView, asset: str, max_age_s: float | None) -> Fraction | None:
    """The USD price of one whole unit as an exact Fraction, or None if missing or unusable.

    Unusable means non-finite, not positive, or older than ``max_age_s`` (None: no age limit).
    A stale price makes the pair skip rather than quote on old data (DESIGN "The quote path").
    """
    ref = market.price(asset)
    if ref is None or not math.isfinite(ref.usd) or ref.usd <= 0:
        return None
    if max_age_s is not None and ref.age_s(market.now) > max_age_s:
        return None
    return Fraction(ref.usd)


def usd_value(market: MarketView, asset: str, amount: int, price: Fraction) -> Fraction | None:
    """USD value of ``amount`` smallest units of ``asset`` at ``price`` per whole unit."""
    decimals = token_decimals(market, asset)
    if decimals is None:
        return None
    return Fraction(amount) * price / scale(decimals)


def convert(
    market: MarketView,
    amount: int,
    from_asset: str,
    to_asset: str,
    max_age_s: float | None,
) -> Fraction | None:
    """``amount`` of ``from_asset`` expressed in smallest units of ``to_asset`` at reference prices.

    ``amount * p_from * 10**d_to / (p_to * 10**d_from)``, exact. None when either price is
    missing or stale, or a token's decimals are unknown.
    """
    p_from = fresh_price(market, from_asset, max_age_s)
    p_to = fresh_price(market, to_asset, max_age_s)
    d_from = token_decimals(market, from_asset)
    d_to = token_decimals(market, to_asset)
    if p_from is None or p_to is None or d_from is None or d_to is None:
        return None
    # One Fraction built from integers: a single gcd instead of one per operation.
    numerator = amount * p_from.numerator * p_to.denominator * scale(d_to)
    denominator = p_from.denominator * p_to.numerator * scale(d_from)
    return Fraction(numerator, denominator)


def conversion_rate(
    market: MarketView, from_asset: str, to_asset: str, max_age_s: float | None
) -> tuple[int, int] | None:
    """:func:`convert`'s rate as an integer ``(numerator, denominator)``, not reduced:
    ``amount`` of ``from_asset`` is worth ``amount * numerator / denominator`` smallest units of
    ``to_asset``, exactly. The same checks (and calls on ``market``, in the same order) as
    :func:`convert`, without a Fraction: for hot paths that finish with one floor or ceiling.
    A view may answer it itself, the same result cheaper, with an ``exact_conversion_rate``
    method of the same arguments (optional, not part of :class:`MarketView`): the desk's own
    view does, cached per price update (``LiveMarketView.exact_conversion_rate``).
    """
    exact = getattr(market, "exact_conversion_rate", None)
    if exact is not None:
        rate: tuple[int, int] | None = exact(from_asset, to_asset, max_age_s)
        return rate
    ref_from = market.price(from_asset)
    ref_to = market.price(to_asset)
    if ref_from is None or ref_to is None:
        return None
    usd_from, usd_to = ref_from.usd, ref_to.usd
    if not (0.0 < usd_from < _INF and 0.0 < usd_to < _INF):  # finite and positive (NaN: no)
        return None
    if max_age_s is not None:
        now = market.now
        if ref_from.age_s(now) > max_age_s or ref_to.age_s(now) > max_age_s:
            return None
    try:  # token_decimals of each, inline
        d_from, d_to = market.decimals(from_asset), market.decimals(to_asset)
    except (KeyError, LookupError, ValueError):
        return None
    if not decimals_ok(d_from, d_to):
        return None
    from_n, from_d = usd_from.as_integer_ratio()
    to_n, to_d = usd_to.as_integer_ratio()
    return from_n * to_d * _scale(d_to), from_d * to_n * _scale(d_from)


def _scale(decimals: int) -> int:
    cached = _SCALES.get(decimals)
    if cached is None:
        cached = _SCALES[decimals] = int(10**decimals)
    return cached


_SCALES: dict[int, int] = {}
