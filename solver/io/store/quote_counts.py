"""``quote_counts``: every quote counted by the minute it was created in, its direction, its
size bucket and its state now (issue 29; :mod:`solver.io.store.quote_rows` says why most lost
quotes keep no row). Totals, win rates and the status windows read these counts: exact,
however few lost quotes keep a row.

Apart from the projection of the rows because a count is its own small piece of arithmetic,
done for every quote however it ends: a key (:class:`Counted`) built once per minute, pair and
size (:class:`CountKeys`), and a batch's counts summed in memory and upserted once per key and
batch (:class:`BatchCounts`).
"""

from __future__ import annotations

from typing import Any

from solver.io.store.schema import ts_us

OPEN, LOST, SETTLED = "OPEN", "LOST", "SETTLED"
MINUTE_US = 60_000_000
KEYS_CAP = 4096
"""At most this many keys kept built (emptied when full: a key is built again when met)."""
UPSERT_COUNT = (
    "INSERT INTO quote_counts (minute, asset_in, asset_out, size_bucket, state, n) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (minute, asset_in, asset_out, size_bucket, state) "
    "DO UPDATE SET n = quote_counts.n + excluded.n"
)

Key = tuple[str, str, str, int]
"""A count's key but its state: ``(minute, asset_in, asset_out, size_bucket)``. The minute is
the minute's start, a store time; the size bucket is the number of decimal digits of
``amount_in`` in the smallest unit (bucket ``b`` holds ``[10^(b-1), 10^b)``), known from the
journal entry alone, where a USD bucket would need the prices of the moment."""


class Counted:
    """A :data:`Key` with its counts' keys for the two states most quotes pass through built
    once (a quote is counted three times: a tuple each was a tenth of its cost)."""

    __slots__ = ("key", "lost", "open")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.open = (*key, OPEN)
        self.lost = (*key, LOST)

    def of(self, state: str) -> tuple[str, str, str, int, str]:
        return (*self.key, state)


def minute_of(store_time: str) -> str:
    """The start of the minute of a store time (``quote_counts.minute``)."""
    return store_time[:16] + ":00.000000+00:00"


class CountKeys:
    """The :class:`Counted` keys met lately, by the fields they are built from: one key object
    per minute, pair and size, its store time formatted once."""

    def __init__(self) -> None:
        self.built: dict[tuple[int, str, str, int], Counted] = {}
        """The keys built, by ``(created_at's minute number, asset_in, asset_out, digits of
        amount_in)`` (the projection looks them up inline: :meth:`of` spelled out)."""

    def of(self, created_at: int, asset_in: str, asset_out: str, amount_in: str) -> Counted:
        """The count a quote opened goes under: its minute, pair and size's digits."""
        raw = (created_at // MINUTE_US, asset_in, asset_out, len(amount_in))
        return self.built.get(raw) or self.new(raw)

    def of_doc(self, doc: dict[str, Any]) -> Counted:
        """The count of a ``quote_opened`` entry, parsed."""
        amount = doc["amount_in"]
        return self.of(
            int(doc["created_at"]),
            doc["asset_in"],
            doc["asset_out"],
            amount if type(amount) is str else str(int(amount)),
        )

    def new(self, raw: tuple[int, str, str, int]) -> Counted:
        """The key of ``raw`` (:attr:`built`), built and kept."""
        if len(self.built) >= KEYS_CAP:
            self.built.clear()
        minute = ts_us(raw[0] * MINUTE_US)
        key = self.built[raw] = Counted((minute, raw[1], raw[2], raw[3]))
        return key


def row_key(row: tuple[Any, ...]) -> Counted:
    """The count key of a ``quotes`` row read as ``(state, created_at, asset_in, asset_out,
    amount_in)`` (:data:`~solver.io.store.quote_rows.SELECT_ROW`)."""
    return Counted((minute_of(row[1]), row[2], row[3], len(row[4])))


class BatchCounts:
    """One batch's changes to ``quote_counts``, summed in memory until :meth:`write`."""

    __slots__ = ("counts", "losts", "opens")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str, int, str], int] = {}
        self.opens: dict[Counted, int] = {}
        self.losts: dict[Counted, int] = {}
        """The batch's OPEN and LOST counts, by key object: hashing it is cheaper than hashing
        a 5-tuple, and most quotes are counted OPEN then LOST (:meth:`write` merges them)."""

    def add(self, counted: tuple[str, str, str, int, str], n: int) -> None:
        self.counts[counted] = self.counts.get(counted, 0) + n

    def clear(self) -> None:
        self.counts.clear()
        self.opens.clear()
        self.losts.clear()

    def write(self, cur: Any) -> None:
        """Upsert the batch's counts (those not summing to zero), and start over."""
        counts = self.counts
        for key, n in self.opens.items():
            counts[key.open] = counts.get(key.open, 0) + n
        for key, n in self.losts.items():
            counts[key.lost] = counts.get(key.lost, 0) + n
        rows = [(*key, n) for key, n in counts.items() if n]
        self.clear()
        if rows:
            cur.executemany(UPSERT_COUNT, rows)
