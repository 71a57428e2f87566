"""Deadlines by bucket: what a heap of ``(deadline, key)`` entries gives the inventory and the
quote book, for less (issue 29).

Both take out, at a snapshot or a tick, every entry due before a time, oldest first. A heap of
every open quote (thousands) cost each quote a push and a pop of ~12 levels of tuple compares.
Here an entry is appended to its bucket (``deadline >> BUCKET_BITS``, ~16 ms), a take walks the
buckets' keys from the last cut to its own, and the entries due are sorted once when taken,
mostly in order already. The entries taken, and their order, are those the heap popped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container

from solver.core.clock import Micros

BUCKET_BITS = 14
"""Buckets of 2**14 µs (~16 ms), under the live ticker's 20 ms: a tick takes whole buckets and
sorts only the part of one that its time cuts, so it costs about what falls due in it. With
buckets of ~1 s, the bucket cut was sorted and searched whole at every tick, twice (the
book's :meth:`DeadlineBuckets.drop_head_unless_in`, then :meth:`take_before`): at saturation,
~13,000 entries fifty times a second, ~10 µs of CPU an answer measured in-process (issue 29;
``tests/core/test_expiry_batch.py`` counts the comparisons). The replay's ticks (a second
apart) walk ~60 keys each: a dict pop per key, most of them holding an entry or two."""

Entry = tuple[Micros, str]

_NO_FLOOR = 1 << 62
"""The floor of an index that has filed nothing: above every bucket's key."""


class DeadlineBuckets:
    """Entries by bucket. The buckets' keys are not kept in order: every key is at or above
    ``floor`` (the last cut taken, or a lower key filed since), so a take walks the keys from
    the floor to its cut, a dict pop each, or, when that range is longer than the buckets
    there are, sorts the keys below its cut. A heap of the keys cost a push per bucket filed
    and a pop of ~11 levels per bucket taken: in the replay, whose answers come ~27 ms apart,
    about one of each per entry, twice a quote (issue 29)."""

    __slots__ = ("buckets", "floor")

    def __init__(self) -> None:
        self.buckets: dict[int, list[Entry]] = {}
        self.floor = _NO_FLOOR  # no bucket's key is below it

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self.buckets.values())

    def file(self, deadline: Micros, key: str) -> None:
        """Add the entry ``(deadline, key)`` (as a push on the heap)."""
        index = deadline >> BUCKET_BITS
        bucket = self.buckets.get(index)
        if bucket is None:
            self.buckets[index] = [(deadline, key)]
            # Not min(): a builtin's call cost ~0.6 % of the replay's instructions here.
            if index < self.floor:  # noqa: PLR1730
                self.floor = index
        else:
            bucket.append((deadline, key))

    def take_before(self, at: Micros, *, ordered: bool = True) -> list[Entry]:
        """Take out every entry whose deadline is before ``at``, oldest first (as popping the
        heap while its head is before ``at``). ``ordered`` False: the same entries in no
        particular order, for a caller that drops most of them before it sorts the rest."""
        buckets = self.buckets
        last = at >> BUCKET_BITS
        floor = self.floor
        if floor > last or not buckets:
            return []
        due: list[Entry] = []
        pop = buckets.pop
        if last - floor <= len(buckets):  # every deadline in them is before ``at``
            for index in range(floor, last):
                bucket = pop(index, None)
                if bucket is not None:
                    due += bucket
        else:  # a long way since the last cut (few buckets, or none filed in between)
            for index in sorted([index for index in buckets if index < last]):
                due += pop(index)
        self.floor = last
        bucket = buckets.get(last)
        if bucket is not None:  # the bucket of ``at``: what is before it
            if ordered:
                bucket.sort()  # in order since the last call but for the entries filed since
                cut = bisect_left(bucket, (at, ""))  # the first entry not before ``at``
                if cut:
                    due += bucket[:cut]
                    if cut < len(bucket):
                        del bucket[:cut]
                    else:
                        del buckets[last]
            else:  # split in one pass each, unsorted: no sort of what is not due yet
                before = [entry for entry in bucket if entry[0] < at]
                if before:
                    due += before
                    if len(before) < len(bucket):
                        buckets[last] = [entry for entry in bucket if entry[0] >= at]
                    else:
                        del buckets[last]
        if ordered:
            due.sort()
        return due

    def drop_head_unless_in(self, keys: Container[str]) -> None:
        """Drop the oldest entries while their key is not in ``keys`` (as popping the heap
        while its head's key is not): the oldest bucket is sorted, newest first, to see them."""
        buckets = self.buckets
        while buckets:
            index = self._oldest()
            bucket = buckets[index]
            bucket.sort()
            cut, size = 0, len(bucket)
            while cut < size and bucket[cut][1] not in keys:
                cut += 1
            if cut < size:
                del bucket[:cut]
                return
            del buckets[index]

    def _oldest(self) -> int:
        """The oldest bucket's key (``buckets`` is not empty), raised into the floor: the keys
        from the floor up, a lookup each, while that is no longer than a walk of them all."""
        buckets, index = self.buckets, self.floor
        end = index + len(buckets)
        while index < end:
            if index in buckets:
                break
            index += 1
        else:
            index = min(buckets)
        self.floor = index
        return index
