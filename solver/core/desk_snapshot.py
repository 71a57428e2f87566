"""A desk's state as a JSON-able document, and back (DESIGN "Persistence": snapshots keep a
restart fast: it applies only the journal's facts after the latest snapshot).

Everything the journal's facts build is here: open quotes with their claims, reservations,
confirmed balances and the settlements a snapshot may lack, the reconciliation (with a gap
held, the accepted baseline's doubts, the quotes closed without a nonce check: optional keys,
absent from older snapshots), the PnL references and sums, every pause, and the rebalances not
finished yet (a snapshot written before they were desk facts has none: its version stays 1, the
key is optional). Not kept, on purpose: market inputs (fetched at start), markouts still due at
the moment of the snapshot (they are dropped, as a markout whose price is missing is), and the
request counters of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solver.core.inventory import Reservation
from solver.core.lifecycle import Claim, Quote, QuoteState
from solver.core.pauses import GLOBAL, Pause
from solver.core.rebalance_record import record_doc, record_from_doc
from solver.core.recent_lost import LostRow, lost_row
from solver.core.reconciliation import Doubt

if TYPE_CHECKING:
    from solver.core.desk import Desk

VERSION = 1


def _d(value: int | None) -> int | None:
    """A time read back: µs, as it was written (:mod:`solver.core.clock`)."""
    return None if value is None else int(value)


def _ints(values: dict[str, int] | None) -> dict[str, str] | None:
    return None if values is None else {k: str(v) for k, v in values.items()}


def _from_ints(values: dict[str, str] | None) -> dict[str, int] | None:
    return None if values is None else {k: int(v) for k, v in values.items()}


def _reservation(r: Reservation) -> list[Any]:
    return [r.quote_id, r.asset_out, str(r.amount_out), r.asset_in, str(r.amount_in),
            r.deadline]  # fmt: skip


def _from_reservation(v: list[Any]) -> Reservation:
    return Reservation(v[0], v[1], int(v[2]), v[3], int(v[4]), int(v[5]))


def _quote(q: Quote) -> dict[str, Any]:
    """A quote's ``quotes`` entry, at once."""
    return quote_docs([_quote_fields(q)])[0]


def _from_quote(v: dict[str, Any]) -> Quote:
    quote = Quote(
        v["id"], v["in"], v["out"], int(v["amount_in"]), int(v["amount_out"]), int(v["fee"]),
        int(v["deadline"]), quote_hash=v["hash"], nonce=bytes.fromhex(v["nonce"]),
        created_at=int(v["created"]), state=QuoteState(v["state"]), updated_at=_d(v["updated"]),
        intent_hash=v["intent"], tx_hash=v["tx"], reason=v["reason"],
    )  # fmt: skip
    for intent, tx, heard, status, ended in v["claims"]:
        quote.add_claim(Claim(intent, tx, int(heard), status, ended=ended))
    return quote


def _lost_doc(row: LostRow) -> list[Any]:
    """A recently lost quote as the snapshot writes it: its row (:data:`LostRow`), amounts as
    text, the nonce in hex. 20,000 of them as dicts held the loop ~100 ms at every snapshot
    (the soak, issue 29)."""
    i, h, a_in, a_out, amount_in, amount_out, fee, deadline, nonce, created, updated, why, at = row
    return [i, h, a_in, a_out, str(amount_in), str(amount_out), str(fee), deadline, nonce.hex(),
            created, updated, why, at]  # fmt: skip


def _from_lost(value: list[Any]) -> LostRow:
    """A ``recent_lost`` entry: a row (:func:`_lost_doc`), or ``[quote, lost_at]`` as the
    snapshots written before it have it."""
    if len(value) == 2:
        return lost_row(_from_quote(value[0]), int(value[1]))
    i, h, a_in, a_out, amount_in, amount_out, fee, deadline, nonce, created, updated, why, at = (
        value
    )
    return (str(i), str(h), str(a_in), str(a_out), int(amount_in), int(amount_out), int(fee),
            int(deadline), bytes.fromhex(nonce), int(created), _d(updated), why,
            int(at))  # fmt: skip


QuoteFields = tuple[Any, ...]
"""An open quote's fields as they were at the capture (:func:`_quote_fields`): its doc is built
from them later (:func:`quote_docs`), whatever the quote became meanwhile."""


def _quote_fields(q: Quote) -> QuoteFields:
    claims = q.claims
    return (
        q.quote_id, q.quote_hash, q.asset_in, q.asset_out, q.amount_in, q.amount_out, q.fee,
        q.deadline, q.nonce, q.created_at, q.state.value, q.updated_at, q.intent_hash,
        q.tx_hash, q.reason,
        [[c.intent_hash, c.tx_hash, c.heard_at, c.status, c.ended] for c in claims.values()]
        if claims else [],
    )  # fmt: skip


def quote_docs(quotes: list[QuoteFields]) -> list[dict[str, Any]]:
    """The ``quotes`` entries of captured quotes (what :func:`_from_quote` reads)."""
    return [
        {
            "id": i, "hash": h, "in": a_in, "out": a_out, "amount_in": str(amount_in),
            "amount_out": str(amount_out), "fee": str(fee), "deadline": deadline,
            "nonce": nonce.hex(), "created": created, "state": state, "updated": updated,
            "intent": intent, "tx": tx, "reason": reason, "claims": claims,
        }
        for (i, h, a_in, a_out, amount_in, amount_out, fee, deadline, nonce, created, state,
             updated, intent, tx, reason, claims) in quotes
    ]  # fmt: skip


def reservation_docs(reservations: list[Reservation]) -> list[list[Any]]:
    """The ``inventory.reservations`` entries (reservations are values: never changed)."""
    return [_reservation(r) for r in reservations]


def lost_docs(rows: list[LostRow]) -> list[list[Any]]:
    """The ``balances.recent_lost`` entries (rows are tuples: never changed)."""
    return [_lost_doc(row) for row in rows]


@dataclass(frozen=True, slots=True)
class Captured:
    """A desk's snapshot taken at one moment, its three long lists not yet made documents:
    the rest is the document (:data:`LONG_PARTS` hold None) and the long parts are copies
    that later changes of the desk do not reach — the open quotes' fields, the reservations
    and the recently lost rows (values and tuples). Capturing the soak's book (3,000 open
    quotes, 20,000 recently lost) takes ~1 ms; making the documents of it ~45 ms and their
    text ~16 ms more, which a driver may spread over several turns of its loop (issue 29)."""

    rest: dict[str, Any]
    quotes: list[QuoteFields]
    reservations: list[Reservation]
    lost: list[LostRow]


LONG_PARTS = (("quotes",), ("inventory", "reservations"), ("balances", "recent_lost"))
"""Where :class:`Captured`'s long lists go in the document, in the order of its fields."""


def capture(desk: Desk) -> Captured:
    """The desk's state now, for :func:`snapshot` or for a driver that builds the document in
    slices (:class:`~solver.runtime.snapshot_slices.SnapshotInSlices`)."""
    inv, bal, pnl, rec = desk.inventory, desk.balances, desk.pnl, desk.balances.reconciler
    rest = {
        "version": VERSION,
        "quotes": None,
        "inventory": {
            "confirmed": _ints(inv.confirmed),
            "confirmed_at": inv.confirmed_at,
            "reservations": None,
            "unconfirmed": [
                [_reservation(r), at] for r, at in inv.unconfirmed_settlements.values()
            ],
        },
        "balances": {
            "expected": _ints(rec.expected),
            "gaps": _ints(rec.last),
            "snapshot_at": bal.snapshot_at,
            "last": _ints(bal.last),
            "found": _ints(bal.found),
            "own_settling": bal.own_settling,
            "unresolved": _ints(bal.unresolved),
            "unconfirmed": [[_reservation(r), at] for r, at in bal.unconfirmed.values()],
            "report": bal.report,
            # Since issue 24 (absent from older snapshots: nothing held, no doubts).
            "held": _ints(bal.held),
            "held_at": bal.held_at,
            "baseline_at": bal.baseline_at,
            "accepted_at": bal.accepted_at,
            "doubts": [[d.key, _ints(dict(d.diff)), d.heard_at] for d in bal.doubts.values()],
            "recent_lost": None,
        },
        "pnl": {
            "start_equity": pnl.start_equity,
            "peak": pnl.peak_pnl,
            "day": pnl.day,
            "day_start": pnl.day_start_pnl,
            "realized": pnl.realized_usd,
            "fills": pnl.fills,
            "markout_sum": {str(h): v for h, v in pnl.markout_sum.items()},
            "markout_n": {str(h): v for h, v in pnl.markout_n.items()},
            "recorded_at": desk.pnl_marks.recorded_at,
            "recorded_day": desk.pnl_marks.recorded_day,
        },
        "pauses": [
            [p.scope, p.kind, p.reason, p.at] for p in desk.pauses if p.kind != "shutting_down"
        ],
        "rebalances": [record_doc(r) for r in desk.rebalancing.open.values()],
    }
    return Captured(
        rest,
        [_quote_fields(q) for q in desk.book.quotes.values()],
        list(inv.reservations.values()),
        list(desk.gaps.recent_lost.rows.values()),
    )


def snapshot(desk: Desk) -> dict[str, Any]:
    """The desk's snapshot document, at once."""
    return document(capture(desk))


def document(captured: Captured) -> dict[str, Any]:
    """The snapshot document of a capture, its long parts made at once (it takes the
    capture's ``rest``: one document per capture)."""
    doc = captured.rest
    doc["quotes"] = quote_docs(captured.quotes)
    doc["inventory"]["reservations"] = reservation_docs(captured.reservations)
    doc["balances"]["recent_lost"] = lost_docs(captured.lost)
    return doc


def restore(desk: Desk, doc: dict[str, Any]) -> None:
    """Put ``doc`` (from :func:`snapshot`) into a fresh desk. Raises ValueError (naming the
    part) for a document this code cannot read."""
    if doc.get("version") != VERSION:
        raise ValueError(f"desk snapshot version {doc.get('version')!r}, expected {VERSION}")
    try:
        for value in doc["quotes"]:
            quote = _from_quote(value)
            desk.book.add(quote)
            for claim in quote.claims.values():
                if not claim.ended:
                    desk.settlement.polling[claim.intent_hash] = quote.quote_id
        inv, part = desk.inventory, doc["inventory"]
        inv.confirmed = _from_ints(part["confirmed"]) or {}
        inv.confirmed_at = _d(part["confirmed_at"])
        inv.restore(_from_reservation(r) for r in part["reservations"])
        for r, at in part["unconfirmed"]:
            res = _from_reservation(r)
            inv.unconfirmed_settlements[res.quote_id] = (res, int(at))
        bal, part = desk.balances, doc["balances"]
        bal.reconciler.expected = _from_ints(part["expected"])
        bal.reconciler.last = _from_ints(part["gaps"]) or {}
        bal.snapshot_at = _d(part["snapshot_at"])
        bal.last = _from_ints(part["last"])
        bal.found = _from_ints(part["found"]) or {}
        bal.own_settling = bool(part["own_settling"])
        bal.unresolved = _from_ints(part["unresolved"]) or {}
        for r, at in part["unconfirmed"]:
            res = _from_reservation(r)
            bal.unconfirmed[res.quote_id] = (res, int(at))
        bal.report = part["report"]
        bal.held = _from_ints(part.get("held")) or {}
        bal.held_at = _d(part.get("held_at"))
        bal.baseline_at = _d(part.get("baseline_at"))
        bal.accepted_at = _d(part.get("accepted_at"))
        for key, diff, heard in part.get("doubts", ()):
            bal.doubts[key] = Doubt(key, _from_ints(diff) or {}, int(heard))
        for value in part.get("recent_lost", ()):
            desk.gaps.recent_lost.add_row(_from_lost(value))
        pnl, part = desk.pnl, doc["pnl"]
        pnl.start_equity, pnl.peak_pnl = part["start_equity"], float(part["peak"])
        pnl.day, pnl.day_start_pnl = part["day"], float(part["day_start"])
        pnl.realized_usd, pnl.fills = float(part["realized"]), int(part["fills"])
        for h, v in part["markout_sum"].items():
            pnl.markout_sum[int(h)] = float(v)
        for h, n in part["markout_n"].items():
            pnl.markout_n[int(h)] = int(n)
        desk.pnl_marks.recorded_at = _d(part["recorded_at"])
        desk.pnl_marks.recorded_day = part["recorded_day"]
        for scope, kind, reason, at in doc["pauses"]:
            desk.pauses.add(Pause(scope, kind, reason, int(at)))
            if scope == GLOBAL and kind == "stale_data":
                desk.risk.stale_open = True  # its recovery is still to be told
        for value in doc.get("rebalances", ()):
            record = record_from_doc(value)
            desk.rebalancing.open[record.id] = record
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"desk snapshot cannot be read: {type(exc).__name__}: {exc}") from None
