"""Deadlines by bucket: what a heap of ``(deadline, key)`` entries gives the inventory and the
quote book, for less (issue 29).

Both take out, at a snapshot or a tick, every entry due before a time, oldest first. A heap of
every open quote (thousands) cost each quote a push and a pop of ~12 levels of tuple compares.
Here an entry is appended to its bucket (``deadline >> BUCKET_BITS``, ~16 ms), the buckets' keys
are a small heap, and the entries due are sorted once when taken, mostly in order already. The
entries taken, and their order, are those the heap popped.
"""

from __future__ import annotations

import heapq
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
apart) take ~60 buckets each: a pop of a small heap's key per bucket."""

Entry = tuple[Micros, str]


class DeadlineBuckets:
    __slots__ = ("buckets", "order")

    def __init__(self) -> None:
        self.buckets: dict[int, list[Entry]] = {}
        self.order: list[int] = []  # the buckets' keys, a heap

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self.buckets.values())

    def file(self, deadline: Micros, key: str) -> None:
        """Add the entry ``(deadline, key)`` (as a push on the heap)."""
        bucket = self.buckets.get(deadline >> BUCKET_BITS)
        if bucket is None:
            self.buckets[deadline >> BUCKET_BITS] = [(deadline, key)]
            heapq.heappush(self.order, deadline >> BUCKET_BITS)
        else:
            bucket.append((deadline, key))

    def take_before(self, at: Micros, *, ordered: bool = True) -> list[Entry]:
        """Take out every entry whose deadline is before ``at``, oldest first (as popping the
        heap while its head is before ``at``). ``ordered`` False: the same entries in no
        particular order, for a caller that drops most of them before it sorts the rest."""
        order, buckets = self.order, self.buckets
        last = at >> BUCKET_BITS
        if not order or order[0] > last:
            return []
        heappop = heapq.heappop
        due: list[Entry] = []
        while order and order[0] < last:  # every deadline in it is before ``at``
            due += buckets.pop(heappop(order))
        if order and order[0] == last:  # the bucket of ``at``: what is before it
            bucket = buckets[last]
            if ordered:
                bucket.sort()  # in order since the last call but for the entries filed since
                cut = bisect_left(bucket, (at, ""))  # the first entry not before ``at``
                if cut:
                    due += bucket[:cut]
                    if cut < len(bucket):
                        del bucket[:cut]
                    else:
                        del buckets[last]
                        heappop(order)
            else:  # split in one pass each, unsorted: no sort of what is not due yet
                before = [entry for entry in bucket if entry[0] < at]
                if before:
                    due += before
                    if len(before) < len(bucket):
                        buckets[last] = [entry for entry in bucket if entry[0] >= at]
                    else:
                        del buckets[last]
                        heappop(order)
        if ordered:
            due.sort()
        return due

    def drop_head_unless_in(self, keys: Container[str]) -> None:
        """Drop the oldest entries while their key is not in ``keys`` (as popping the heap
        while its head's key is not): the oldest bucket is sorted, newest first, to see them."""
        order, buckets = self.order, self.buckets
        while order:
            bucket = buckets[order[0]]
            bucket.sort()
            cut, size = 0, len(bucket)
            while cut < size and bucket[cut][1] not in keys:
                cut += 1
            if cut < size:
                del bucket[:cut]
                return
            del buckets[heapq.heappop(order)]
