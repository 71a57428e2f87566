"""The journal's spelling of the desk's facts (:mod:`solver.core.facts`): :func:`encode` and
:func:`decode` turn facts into plain JSON-able dicts and back (amounts as decimal strings,
times as microseconds since the epoch as the desk holds them (:mod:`solver.core.clock`), bytes
as hex).

Apart from the fact types because only the journals, the projection and a restart read or
write this form; the desk and the executor deal in the facts themselves (issue 29: modules by
role). The quote path's fact, ``QuoteOpened``, is spelled out both ways: one is written per
answer and read back per answer by the projection.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from solver.core.facts import (
    KINDS,
    BalancesReconciled,
    Fact,
    FillPrices,
    QuoteOpened,
    RebalanceStepped,
)
from solver.core.rebalance_record import record_doc, record_from_doc

_INT_FIELDS = frozenset({"amount_in", "amount_out", "fee", "outflow"})


class FactError(ValueError):
    """A journal entry that cannot be read back (names the kind and the field)."""


def _encode_value(name: str, value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, FillPrices):
        return [value.price_in, value.price_out, value.realized_usd]
    if isinstance(value, dict):
        return {k: str(v) for k, v in value.items()}
    if name in _INT_FIELDS:
        return str(value)
    if name == "quote_ids":
        return list(value)
    if isinstance(value, tuple):
        return [[str(x) if isinstance(x, int) else x for x in item] for item in value]
    return value


SIGNED_DATA = "signed_data"
"""The key of a ``quote_opened`` entry's body that carries the signed answer."""


def encode(fact: Fact) -> dict[str, Any]:
    """A fact as a JSON-able dict (amounts as strings: u128 does not fit a JSON number)."""
    if type(fact) is QuoteOpened:  # the quote path's fact: spelled out, 8x faster than the loop
        return {
            "quote_id": fact.quote_id,
            "quote_hash": fact.quote_hash,
            "asset_in": fact.asset_in,
            "asset_out": fact.asset_out,
            "amount_in": str(fact.amount_in),
            "amount_out": str(fact.amount_out),
            "fee": str(fact.fee),
            "deadline": fact.deadline,
            "nonce": fact.nonce.hex(),
            "created_at": fact.created_at,
            "exact_in": fact.exact_in,
            "partner_id": fact.partner_id,
            SIGNED_DATA: fact.signed_data or {},
        }
    if type(fact) is RebalanceStepped:
        return {"record": record_doc(fact.record), "detail": fact.detail, "carried": fact.carried}
    return {f.name: _encode_value(f.name, getattr(fact, f.name)) for f in dataclasses.fields(fact)}


def decode(kind: str, body: dict[str, Any]) -> Fact:
    """The fact ``encode`` wrote; :class:`FactError` names what is wrong with a bad entry."""
    cls = KINDS.get(kind)
    if cls is None:
        raise FactError(f"unknown journal entry kind {kind!r}")
    if cls is QuoteOpened:
        return _decode_opened(body)
    if cls is RebalanceStepped:
        return _decode_stepped(body)
    values: dict[str, Any] = {}
    try:
        for f in dataclasses.fields(cls):
            if f.name not in body:
                if f.default is not dataclasses.MISSING:
                    continue
                raise FactError(f"{kind}: missing field {f.name!r}")
            raw = body[f.name]
            values[f.name] = _decode_value(cls, f.name, str(f.type), raw)
        return cls(**values)  # type: ignore[no-any-return]
    except FactError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise FactError(f"{kind}: {type(exc).__name__}: {exc}") from None


def _decode_opened(body: dict[str, Any]) -> QuoteOpened:
    """The quote path's fact, spelled out as :func:`encode` writes it: the projection and a
    restart read one per answer: 4 µs instead of the generic loop's 11 µs (issue 11)."""
    try:
        return QuoteOpened(
            body["quote_id"],
            body["quote_hash"],
            body["asset_in"],
            body["asset_out"],
            int(body["amount_in"]),
            int(body["amount_out"]),
            int(body["fee"]),
            int(body["deadline"]),
            bytes.fromhex(body["nonce"]),
            int(body["created_at"]),
            body["exact_in"],
            body.get("partner_id"),
        )
    except KeyError as exc:
        raise FactError(f"quote_opened: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise FactError(f"quote_opened: {type(exc).__name__}: {exc}") from None


def _decode_stepped(body: dict[str, Any]) -> RebalanceStepped:
    try:
        record = record_from_doc(body["record"])
        return RebalanceStepped(record, body.get("detail"), bool(body.get("carried", False)))
    except KeyError as exc:
        raise FactError(f"rebalance_stepped: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise FactError(f"rebalance_stepped: {type(exc).__name__}: {exc}") from None


def _decode_value(cls: type[Any], name: str, annotation: str, raw: Any) -> Any:
    if raw is None:
        return None
    if annotation.startswith("Micros"):
        return int(raw)
    if annotation.startswith("bytes"):
        return bytes.fromhex(raw)
    if annotation.startswith("FillPrices"):
        price_in, price_out, realized = raw
        return FillPrices(float(price_in), float(price_out), float(realized))
    if annotation.startswith("dict[str, int]"):  # also "dict[str, int] | None"
        return {str(k): int(v) for k, v in raw.items()}
    if name in _INT_FIELDS:
        return int(raw)
    if name == "quote_ids":
        return tuple(str(q) for q in raw)
    if cls is BalancesReconciled and name == "own_open":
        return tuple((str(k), str(o), int(a), str(i), int(b)) for k, o, a, i, b in raw)
    if annotation in ("float",):
        return float(raw)
    return raw
